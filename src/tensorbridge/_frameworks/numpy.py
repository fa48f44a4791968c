# SPDX-License-Identifier: Apache-2.0
"""NumPy as a bridge target and a source: a NumPy view of the memory, made through
NumPy's C API (the buffer protocol for the ml_dtypes types bfloat16 and float8), or
numpy.from_dlpack given the source object."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._frameworks.base import ML_DTYPES, STANDARD, Framework, TensorInfo, is_packed
from tensorbridge._known_types import loaded

__all__ = ["NumpyFramework"]


class NumpyFramework(Framework):
    name = "numpy"
    aliases = ("np",)
    modules = ("numpy",)
    import_names = (("numpy", "numpy"), ("np", "numpy"))
    distribution = "numpy"
    label = "numpy"
    host_only = True
    readonly = "flag"
    own_types = ("numpy.ndarray",)
    path = (
        "numpy.from_dlpack, or the same view made through NumPy's C API where "
        "tensorbridge hands the memory over itself (the buffer protocol for ml_dtypes types)"
    )
    quirks = (
        (
            "numpy.from_dlpack cannot import bfloat16 or float8 (NumPy 2.4 has no DLPack "
            "mapping for ml_dtypes types)",
            "tensorbridge makes the NumPy view itself, with the ml_dtypes dtype",
        ),
        (
            "NumPy refuses to export read-only arrays as legacy capsules",
            "tensorbridge asks for versioned capsules and keeps READ_ONLY",
        ),
    )
    # Without the planner only NumPy's own dtypes (ml_dtypes ones need its checks).
    fast_dtypes = STANDARD
    handoff = True

    @classmethod
    def prepare_source(cls, obj: Any, must_copy: Callable[[str], None], notes: list[str]) -> Any:
        numpy = loaded("numpy")
        if numpy is not None and isinstance(obj, numpy.generic):
            must_copy(f"a {type(obj).__name__} is a value, not memory to share")
        return obj

    @classmethod
    def reads_in_c(cls, tp: type) -> bool:
        numpy = loaded("numpy")
        return numpy is None or not issubclass(tp, numpy.generic)

    @classmethod
    def unsupported_dtype(cls, dtype_name: str) -> str | None:
        if dtype_name in ML_DTYPES and "ml_dtypes" not in sys.modules:
            try:
                importlib.import_module("ml_dtypes")
            except ImportError:
                return f"numpy needs the ml_dtypes package for {dtype_name}"
        return None

    @classmethod
    def layout_problem(cls, t: TensorInfo) -> str | None:
        if is_packed(t):
            return f"numpy stores {t.dtype.name} one element per byte (unpacking copies)"
        return None

    @classmethod
    def fast_maker(cls) -> Any:
        # NumPy's C API table (with numpy.from_dlpack, the importer, where it is
        # unusable): the array numpy.from_dlpack makes, without the capsule between.
        return "ndarray"

    @classmethod
    def make(cls, t: Tensor) -> Any:
        if t.dtype.name in STANDARD:
            return cls.fast_target()(t)  # as routes make it
        return t.numpy()  # ml_dtypes types, which numpy.from_dlpack cannot import

    @classmethod
    def importer(cls) -> Any:
        return cls.module().from_dlpack

    @classmethod
    def importer_takes_copy_false(cls) -> bool:
        # NumPy 2.1 added copy= (and device=); with either given it makes no legacy
        # call after a TypeError.
        return bool(cls.module().lib.NumpyVersion(cls.module().__version__) >= "2.1.0")

    @classmethod
    def owns(cls, obj: Any) -> bool:
        # Exactly ndarray: numpy.asarray gives subclasses (matrix, masked arrays) a
        # base-class view, and so does convert.
        numpy = loaded("numpy")
        return numpy is not None and type(obj) is numpy.ndarray
