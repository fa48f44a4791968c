# SPDX-License-Identifier: Apache-2.0
"""array-api-strict as a bridge target: the Array API standard's reference
namespace (no float16)."""

from __future__ import annotations

from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._frameworks.base import STANDARD, Framework

__all__ = ["ArrayApiStrictFramework"]


class ArrayApiStrictFramework(Framework):
    name = "array_api_strict"
    aliases = ("xp",)
    modules = ("array_api_strict",)
    import_names = (("xp", "array_api_strict"), ("array_api_strict", "array_api_strict"))
    distribution = "array-api-strict"
    label = "xp-strict"
    host_only = True
    dtypes = STANDARD - {"float16"}
    readonly = "flag"
    own_types = ("array_api_strict._array_object.Array",)
    path = "array_api_strict.from_dlpack on a versioned DLPack capsule"
    quirks = (("array-api-strict has no float16", "convert refuses it (pass dtype=)"),)
    # Its from_dlpack is numpy.from_dlpack's array in an Array: NumPy's handoffs, where
    # the result needs no mark (hands_off).
    handoff = True

    @classmethod
    def make(cls, t: Tensor) -> Any:
        return cls.module().from_dlpack(t)

    @classmethod
    def fast_maker(cls) -> Any:
        return cls.module().from_dlpack

    @classmethod
    def importer(cls) -> Any:
        return cls.module().from_dlpack

    @classmethod
    def hands_off(cls, source: type[Framework], tp: type) -> bool:
        # A capsule that does not say read-only or writable (unmarked_export) makes a
        # handoff to NumPy mark the result as the plan says; an Array does not let
        # its array be marked.
        return cls.handoff and not source.unmarked_export(tp)
