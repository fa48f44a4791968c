# SPDX-License-Identifier: Apache-2.0
"""Sphinx configuration: the user guide and API reference (built by .ci/docs with
``-W --keep-going``, so every warning fails the build).

The pages are Markdown (MyST); the API reference is autodoc on the installed package
(the compiled core included: Cython embeds its signatures and docstrings), read by
numpydoc. Nothing is fetched at build time: CI has no network beyond the package
registries, so there is no intersphinx.
"""

from __future__ import annotations

import tensorbridge

project = "tensorbridge"
author = "the tensorbridge authors"
copyright = "the tensorbridge authors"
release = tensorbridge.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
]

root_doc = "index"
exclude_patterns = ["_build"]

# Every reference must resolve: with -W an unknown function, class or page fails the
# build (Python's builtins resolve without intersphinx).
nitpicky = True

# MyST: anchors for headings down to ###, so that links such as
# [routes](design.md#routes-convert-without-the-planner) resolve (and are checked).
myst_heading_anchors = 3

# autodoc: members in source order, as each module presents them.
autodoc_member_order = "bysource"
# No annotations in signatures: those of the Python layer are strings naming private
# types, the compiled core has none, and numpydoc's Parameters sections give the types.
autodoc_typehints = "none"

# numpydoc: no autosummary tables of members (autodoc's :members: lists them), and no
# cross-reference guessing of the types written in Parameters sections.
numpydoc_show_class_members = False
numpydoc_show_inherited_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

html_theme = "furo"
html_title = f"tensorbridge {release}"

# Classes users never construct (a Tensor comes from asarray/from_dlpack, a DType is
# one of the module's constants, a Plan comes from explain): no constructor signature,
# which would show Cython's (*args, **kwargs) or the dataclass's private fields.
_NO_SIGNATURE = {"tensorbridge.Tensor", "tensorbridge.DType", "tensorbridge.Plan"}


def _drop_signature(app, what, name, obj, options, signature, return_annotation):
    if what == "class" and name in _NO_SIGNATURE:
        return "", None
    return None


def setup(app):
    # (before numpydoc's handler, which would read the signature line Cython embeds)
    app.connect("autodoc-process-signature", _drop_signature, priority=400)
