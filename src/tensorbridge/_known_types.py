# SPDX-License-Identifier: Apache-2.0
"""Facts about other frameworks that tensorbridge needs before it touches them,
read from type and module names (no framework is imported): which producer types
are immutable (computed once per type and cached by the compiled core), which Arrow
streams can be asked again, which import orders crash the process, and which modules
are loaded (completely)."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # (as in _dtypes: annotations are strings)
if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "ABORTING_DTYPE_CODES",
    "ABORTING_DTYPE_METHOD",
    "aborting_export_type",
    "check_import_order",
    "export_refusal",
    "immutable_type",
    "loaded",
    "repeatable_arrow_stream",
]


#: Modules seen completely imported (an import never becomes unfinished again; a
#: module imported anew is another object, checked again).
_complete: dict[str, ModuleType] = {}


def loaded(name: str) -> ModuleType | None:
    """The module ``name`` once it is completely imported, else None; never imports.

    A module another thread is still importing is already in ``sys.modules``, before
    its attributes exist (``numpy.ndarray`` would raise AttributeError). It counts as
    not loaded here, as before its import began: callers take their "not loaded"
    branch, and the planner, which imports the target it needs, waits for that
    thread. (CPython's ``__spec__._initializing``, which its own imports read.)"""
    module = sys.modules.get(name)
    if module is None:
        return None
    if _complete.get(name) is module:
        return module
    if getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    _complete[name] = module
    return module


#: Top-level modules whose every DLPack-exporting type is immutable: JAX arrays
#: (JAX exports legacy capsules without READ_ONLY, yet writing through one changes
#: an array JAX treats as a value) and Arrow arrays and tensors.
_IMMUTABLE_MODULES = frozenset({"jax", "jaxlib", "pyarrow"})
#: Immutable types in modules whose other types may be mutable: TensorFlow's
#: eager tensors (its variables are mutable and export nothing).
_IMMUTABLE_NAMES = frozenset({("tensorflow", "EagerTensor"), ("tensorflow", "_EagerTensorBase")})


def immutable_type(cls: type) -> bool:
    """True when arrays of ``cls`` must never be written through an import."""
    for klass in cls.__mro__:
        top = (getattr(klass, "__module__", None) or "").partition(".")[0]
        if top in _IMMUTABLE_MODULES or (top, klass.__name__) in _IMMUTABLE_NAMES:
            return True
    return False


#: TensorFlow's dtypes whose DLPack export aborts the process (``Check failed:
#: DataTypeCanUseMemcpy`` in TFE_HandleToDLPack) instead of raising: TensorFlow's own
#: bug, which ``numpy.from_dlpack`` meets too. Its quantized types raise, as they should.
_TF_ABORTING_DTYPES = frozenset({"string", "resource", "variant"})
#: The same by TensorFlow's DataType enum (DT_STRING, DT_RESOURCE, DT_VARIANT), which an
#: eager tensor's ``_datatype_enum()`` gives in a fifth of the time of ``.dtype.name``
#: (0.1 against 0.6 µs; TensorFlow's own export takes 0.75): routes read this one.
ABORTING_DTYPE_METHOD = "_datatype_enum"
ABORTING_DTYPE_CODES = frozenset({7, 20, 21})


def aborting_export_type(cls: type) -> bool:
    """True when ``cls.__dlpack__`` aborts the process on some of its arrays (so each
    array is asked `export_refusal` first): TensorFlow's eager tensors."""
    for klass in cls.__mro__:
        top = (getattr(klass, "__module__", None) or "").partition(".")[0]
        if (top, klass.__name__) in _IMMUTABLE_NAMES:
            return True
    return False


def export_refusal(obj: object) -> str | None:
    """Why ``obj.__dlpack__`` must not be called (it would abort the process), with the
    fix; None when it may be. Only asked for `aborting_export_type` types."""
    read = getattr(obj, ABORTING_DTYPE_METHOD, None)
    try:
        code = read() if read is not None else None
    except Exception:
        code = None
    if code is not None and code not in ABORTING_DTYPE_CODES:
        return None  # (the quick answer; else the dtype's name says which)
    name = getattr(getattr(obj, "dtype", None), "name", None)
    if name in _TF_ABORTING_DTYPES:
        fix = (
            "strings have no tensor form: encode them as numbers first (e.g. "
            "tf.strings.to_number, or tf.io.decode_raw for bytes)"
            if name == "string"
            else "it holds no numbers"
        )
        return (
            f"a TensorFlow {name} tensor has no DLPack form, and TensorFlow's export aborts "
            f"the process on it instead of raising, so it is not asked; {fix}"
        )
    return None


#: Types whose ``__arrow_c_stream__`` makes a new stream over the same data at every
#: call. Any other stream may be a one-shot reader (``pyarrow.RecordBatchReader``,
#: nanoarrow's ``ArrayStream``): asking it consumes it.
_REPEATABLE_STREAMS = frozenset(
    {
        ("pyarrow", "ChunkedArray"),
        ("pyarrow", "Table"),
        ("pyarrow", "RecordBatch"),
        ("polars", "Series"),
        ("polars", "DataFrame"),
    }
)


def repeatable_arrow_stream(cls: type) -> bool:
    """True when ``cls.__arrow_c_stream__`` can be called again without consuming
    the object (a one-shot stream can be read only once)."""
    top = (getattr(cls, "__module__", None) or "").partition(".")[0]
    return (top, cls.__name__) in _REPEATABLE_STREAMS


def check_import_order(module_name: str) -> None:
    """Raise ImportOrderError instead of importing a framework that would crash the
    process: PaddlePaddle segfaults when it is imported after TensorFlow."""
    import sys

    top = module_name.partition(".")[0]
    if top == "paddle" and "paddle" not in sys.modules and "tensorflow" in sys.modules:
        from tensorbridge._errors import ImportOrderError

        raise ImportOrderError(
            "tensorbridge: paddle cannot be imported into this process because tensorflow "
            "is already loaded (PaddlePaddle crashes the process when it is imported after "
            "TensorFlow); import paddle before tensorflow, or convert in another process"
        )
