# SPDX-License-Identifier: Apache-2.0
"""Element types: one `DType` per DLPack (code, bits) pair, named as in ml_dtypes."""

from __future__ import annotations

import sys

from tensorbridge._known_types import loaded

TYPE_CHECKING = False  # typing costs ~10 ms of import time; annotations are strings
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "DTYPES",
    "DType",
    "as_dtype",
    "dtype_from_code",
    "get_default_dtype",
    "is_dtype_like",
    "set_default_dtype",
]


class DType:
    """A DLPack element type (``lanes == 1``).

    Instances are singletons: ``tensorbridge.float32`` is the only float32.
    A DType compares equal to itself, to its name (``t.dtype == "float32"``) and to
    the same type spelt by NumPy or a framework (``np.float32``,
    ``np.dtype("float32")``, ``torch.float32``); it hashes like its name (so, as with
    NumPy's dtypes, only equal names are guaranteed one dict key). ``np.dtype(tb.float32)``
    is NumPy's float32 (see `dtype`).

    Attributes
    ----------
    name : str
        The ml_dtypes / NumPy style name, e.g. ``"float8_e4m3fn"``.
    code, bits, lanes : int
        The DLPack ``DLDataType`` fields.
    itemsize : int
        Bytes one element occupies when stored one per byte or more
        (1 for the sub-byte float6/float4 types).
    kind : str
        ``"bool"``, ``"int"``, ``"uint"``, ``"float"`` or ``"complex"``.
    """

    __slots__ = ("bits", "code", "itemsize", "kind", "lanes", "name")

    name: str
    code: int
    bits: int
    lanes: int
    itemsize: int
    kind: str

    def __init__(self, name: str, code: int, bits: int, kind: str) -> None:
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "code", code)
        set_(self, "bits", bits)
        set_(self, "lanes", 1)
        set_(self, "itemsize", (bits + 7) // 8)
        set_(self, "kind", kind)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"DType is immutable; cannot set {key!r}")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return self is other
        if isinstance(other, str):
            return other == self.name
        if not _is_dtype_like(other):
            return NotImplemented  # arrays, values, None...: not a type
        # The same type spelt by NumPy or a framework: np.float32, np.dtype("float32"),
        # torch.float32, float (float64, as NumPy reads it)...
        try:
            return as_dtype(other) is self
        except Exception:
            return NotImplemented

    @property
    def dtype(self) -> Any:
        """This type as a NumPy dtype (ml_dtypes' for bfloat16 and the float8/6/4
        types), so that ``np.dtype(tb.float32)`` and libraries that read a ``dtype``
        attribute (Dask) understand tensorbridge dtypes. Imports NumPy."""
        try:
            from tensorbridge._numpy import numpy_dtype

            return numpy_dtype(self)
        except ImportError as exc:
            # (an AttributeError too: duck-typing probes see "no such attribute")
            raise _NoNumpyDType(
                f"{self.name} has no NumPy dtype here: {exc}; pip install numpy ml-dtypes"
            ) from exc

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"tensorbridge.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (_dtype_by_name, (self.name,))

    @property
    def is_subbyte(self) -> bool:
        """True for the float6/float4 types, which DLPack packs below one byte."""
        return self.bits < 8


_SPECS = [
    # name, code, bits, kind
    ("bool", 6, 8, "bool"),
    ("int8", 0, 8, "int"),
    ("int16", 0, 16, "int"),
    ("int32", 0, 32, "int"),
    ("int64", 0, 64, "int"),
    ("uint8", 1, 8, "uint"),
    ("uint16", 1, 16, "uint"),
    ("uint32", 1, 32, "uint"),
    ("uint64", 1, 64, "uint"),
    ("float16", 2, 16, "float"),
    ("float32", 2, 32, "float"),
    ("float64", 2, 64, "float"),
    ("bfloat16", 4, 16, "float"),
    ("complex64", 5, 64, "complex"),
    ("complex128", 5, 128, "complex"),
    ("float8_e3m4", 7, 8, "float"),
    ("float8_e4m3", 8, 8, "float"),
    ("float8_e4m3b11fnuz", 9, 8, "float"),
    ("float8_e4m3fn", 10, 8, "float"),
    ("float8_e4m3fnuz", 11, 8, "float"),
    ("float8_e5m2", 12, 8, "float"),
    ("float8_e5m2fnuz", 13, 8, "float"),
    ("float8_e8m0fnu", 14, 8, "float"),
    ("float6_e2m3fn", 15, 6, "float"),
    ("float6_e3m2fn", 16, 6, "float"),
    ("float4_e2m1fn", 17, 4, "float"),
]

#: Every DType, by name, in the order above.
DTYPES: dict[str, DType] = {spec[0]: DType(*spec) for spec in _SPECS}
_BY_CODE: dict[tuple[int, int], DType] = {(d.code, d.bits): d for d in DTYPES.values()}


def dtype_from_code(code: int, bits: int) -> DType | None:
    """The DType for a DLPack (code, bits) pair, or None if the pair is not a DLPack type."""
    return _BY_CODE.get((code, bits))


def _dtype_by_name(name: str) -> DType:
    return DTYPES[name]


# --------------------------------------------------------------------------
# The default float dtype (what Python floats become)
# --------------------------------------------------------------------------

_default_float: DType = DTYPES["float32"]


def get_default_dtype() -> DType:
    """The dtype Python floats become (``float32`` unless changed)."""
    return _default_float


def set_default_dtype(dtype: Any) -> None:
    """Set the dtype Python floats become: float16, bfloat16, float32 or float64.

    Python complex numbers follow it: complex128 for float64, else complex64.
    """
    global _default_float
    resolved = as_dtype(dtype)
    if resolved.name not in ("float16", "bfloat16", "float32", "float64"):
        raise TypeError(
            f"set_default_dtype(): the default must be float16, bfloat16, float32 or "
            f"float64; got {resolved.name}"
        )
    _default_float = resolved
    from tensorbridge import _core  # (it imports this module: not at the top)

    _core.set_default_float(resolved)  # what the compiled list fill reads


def default_complex() -> DType:
    """The dtype Python complex numbers become."""
    return DTYPES["complex128" if _default_float.name == "float64" else "complex64"]


# --------------------------------------------------------------------------
# Turning user dtype arguments into DTypes
# --------------------------------------------------------------------------

_FRAMEWORK_MODULES = ("torch", "paddle", "mlx", "tensorflow", "jax", "jaxlib")


class _NoNumpyDType(AttributeError, TypeError):
    """DType.dtype without NumPy (or ml_dtypes for its types)."""


def _is_dtype_like(obj: Any) -> bool:
    """Whether obj is a type's spelling (a class such as np.float32 or float, a NumPy
    dtype, a framework's dtype object), not an array or a value that has a dtype."""
    if obj is None or isinstance(obj, (str, bytes)):
        return False
    if isinstance(obj, type):
        return True
    if hasattr(obj, "shape"):
        return False  # an array (np.dtype(array) would read its .dtype)
    numpy = loaded("numpy")
    if numpy is not None and isinstance(obj, numpy.dtype):
        return True
    module = getattr(type(obj), "__module__", "") or ""
    return module.split(".")[0] in _FRAMEWORK_MODULES


def as_dtype(obj: Any) -> DType:
    """Resolve a dtype argument: a DType, its name, a Python type (as NumPy and
    PyTorch read them: ``bool``, ``int`` int64, ``float`` float64, ``complex``
    complex128; the default float dtype is only for values without a dtype), a NumPy or
    ml_dtypes dtype or type, or a framework dtype such as ``torch.float32``."""
    if type(obj) is DType:
        if DTYPES.get(obj.name) is not obj:
            raise TypeError(f"{obj!r} is not one of tensorbridge's dtypes")
        return obj
    if isinstance(obj, str):
        found = DTYPES.get(obj)
        if found is not None:
            return found
    elif obj is bool:
        return DTYPES["bool"]
    elif obj is int:
        return DTYPES["int64"]
    elif obj is float:
        return DTYPES["float64"]
    elif obj is complex:
        return DTYPES["complex128"]
    else:
        module = getattr(type(obj), "__module__", "") or ""
        if module.split(".")[0] in _FRAMEWORK_MODULES:
            # torch.float32 -> "torch.float32"; tf.float32.name -> "float32".
            name = getattr(obj, "name", None)
            if not isinstance(name, str):
                name = str(obj).rsplit(".", 1)[-1]
            # (Paddle's names are upper case: paddle.float32.name == "FLOAT32")
            found = DTYPES.get(name) or DTYPES.get(name.lower())
            if found is not None:
                return found
            raise TypeError(f"dtype {obj!r} has no DLPack equivalent")
    numpy = loaded("numpy")
    if numpy is not None:
        try:
            np_dtype = numpy.dtype(obj)
        except (TypeError, ValueError):
            pass
        else:
            found = DTYPES.get(np_dtype.name)
            if found is not None and np_dtype.byteorder in "=|" + _native_order():
                return found
            raise TypeError(f"dtype {obj!r} ({np_dtype}) has no DLPack equivalent")
    raise TypeError(
        f"dtype must be a tensorbridge DType, a dtype name such as 'float32', a Python "
        f"type, or a NumPy/framework dtype; got {type(obj).__name__} {obj!r}"
    )


def is_dtype_like(obj: Any) -> bool:
    """True when `as_dtype` accepts obj."""
    try:
        as_dtype(obj)
    except TypeError:
        return False
    return True


def _native_order() -> str:
    return "<" if sys.byteorder == "little" else ">"
