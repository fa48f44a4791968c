# SPDX-License-Identifier: Apache-2.0
"""Optional frameworks in the tests: a test runs where they are installed and skips
cleanly, naming what is missing, where they are not.

- ``needs("torch", ...)`` is a mark: on a test (``@needs("jax", "paddle")``), on a
  module (``pytestmark = needs("torch")``) or on one parameter
  (``pytest.param(name, marks=needs(name))``). Before the test is set up,
  ``conftest.py`` imports every name it needs (``check_marks``); a missing one
  skips the test.
- ``framework("torch")`` imports the module and returns it, or skips: for code that
  needs the module object outside a marked test (module level, where it skips the
  whole file at collection; helpers; parametrized tests whose framework is a
  parameter).

A name is a bridge target of the registry (``tensorbridge._frameworks.FRAMEWORKS``,
whose module is imported: ``"mlx"`` is ``mlx.core``), a module of one
(``"jax.numpy"``, ``"torch.utils.dlpack"``), or one of the optional test packages in
``OPTIONAL``. Any other name is an error at collection, so a typo cannot skip a test
forever.

Only a module that is not there (``ModuleNotFoundError``) skips, as with
``pytest.importorskip``: an installed framework that fails to import fails the test.
PaddlePaddle crashes the process when it is imported after TensorFlow, so
``conftest.py`` imports it first (``import_paddle_first``), and ``framework`` refuses
to import it after TensorFlow rather than crash.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

import pytest

from tensorbridge._frameworks import FRAMEWORKS, MODULE_NAMES

__all__ = ["OPTIONAL", "check_marks", "framework", "import_paddle_first", "module_name", "needs"]

#: Optional packages the tests use that are not bridge targets (``dlpack``: pydlpack).
OPTIONAL = frozenset({"ml_dtypes", "dlpack", "dask", "distributed", "pandas", "polars", "ray"})

#: Top-level module names a name may start with.
_ROOTS = frozenset(m for f in FRAMEWORKS.values() for m in f.modules) | OPTIONAL


def module_name(name: str) -> str:
    """The module imported for ``name``: a registry name's module, or ``name`` itself."""
    if name in MODULE_NAMES:
        return MODULE_NAMES[name]
    if name.partition(".")[0] not in _ROOTS:
        raise ValueError(
            f"needs({name!r}): neither a framework of tensorbridge._frameworks "
            f"({', '.join(FRAMEWORKS)}), a module of one, nor one of {sorted(OPTIONAL)}"
        )
    return name


def needs(*names: str) -> pytest.MarkDecorator:
    """Mark: run only where every one of ``names`` imports; skip naming it otherwise."""
    if not names:
        raise TypeError("needs() takes at least one framework name")
    for name in names:
        module_name(name)  # a typo fails here, at collection
    return pytest.mark.needs(*names)


def framework(name: str) -> ModuleType:
    """Import ``name`` and return the module, or skip (the test, or at module level the
    whole file) when it is not installed."""
    module = module_name(name)
    if (
        module.partition(".")[0] == "paddle"
        and "paddle" not in sys.modules
        and "tensorflow" in sys.modules
    ):
        pytest.fail(
            "paddle cannot be imported after tensorflow (it crashes the process); "
            "conftest.py imports it first: was tensorflow imported before the tests ran?",
            pytrace=False,
        )
    reason = None
    with warnings.catch_warnings():
        # Import-time chatter must not fail the test (filterwarnings = error), as with
        # pytest.importorskip; no skip is raised inside this block.
        warnings.simplefilter("ignore")
        try:
            imported = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            reason = f"needs {name}: {exc}"
    if reason is not None:
        pytest.skip(reason, allow_module_level=True)
    return imported


def check_marks(item: Any) -> None:
    """Skip a test item unless every framework its ``needs`` marks name imports
    (conftest.py calls this before the item's fixtures are set up)."""
    for mark in item.iter_markers(name="needs"):
        for name in mark.args:
            framework(name)


def import_paddle_first() -> None:
    """Import PaddlePaddle now when TensorFlow is installed too.

    The whole suite runs in one process, in whatever order the tests come, and
    PaddlePaddle crashes the process when it is imported after TensorFlow.
    """
    if importlib.util.find_spec("paddle") and importlib.util.find_spec("tensorflow"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its import-time chatter (no ccache, ...)
            import paddle  # noqa: F401
