# SPDX-License-Identifier: Apache-2.0
"""CPU kernels through NumPy: views, casts, advanced indexing, assignment, printing, pickling.

This module imports NumPy (and ml_dtypes for bfloat16/float8/float6/float4 values, when
installed); it is loaded only when one of these operations runs, through the loader
``tensorbridge/__init__.py`` registers with the compiled core.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from tensorbridge import _core
from tensorbridge._core import Tensor
from tensorbridge._dtypes import DTYPES, DType, as_dtype

__all__ = [
    "array_protocol",
    "cast_operands",
    "copy_into",
    "format_tensor",
    "from_numpy_copy",
    "getitem_advanced",
    "numpy_dtype",
    "reduce_tensor",
    "setitem",
    "to_numpy",
]

#: dtypes NumPy has natively; the others come from ml_dtypes.
_NATIVE = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
}
#: Unsigned carriers of the same size, to view ml_dtypes data through NumPy.
_CARRIER = {1: DTYPES["uint8"], 2: DTYPES["uint16"]}


def _ml_dtypes(dtype: DType) -> Any:
    try:
        import ml_dtypes
    except ImportError:
        raise ImportError(
            f"{dtype.name} values need the ml_dtypes package (pip install ml-dtypes)"
        ) from None
    return ml_dtypes


def numpy_dtype(dtype: DType) -> np.dtype:
    """The NumPy dtype of a DType (ml_dtypes for the non-native ones)."""
    if dtype.name in _NATIVE:
        return np.dtype(dtype.name)
    found: np.dtype = np.dtype(getattr(_ml_dtypes(dtype), dtype.name))
    return found


def dtype_of(array: np.ndarray) -> DType:
    """The DType of a NumPy array, or TypeError if DLPack has none."""
    return as_dtype(array.dtype)


def _require_host(t: Tensor, what: str) -> None:
    if not _core.is_host(t):
        raise BufferError(f"{what} needs CPU-accessible memory; this tensor is on {t.device}")


def to_numpy(t: Tensor, *, unpack: bool = False) -> np.ndarray:
    """A NumPy view of t's memory (read-only stays read-only).

    Bit-packed float6/float4 data cannot be viewed element by element: with
    ``unpack=True`` it is unpacked into a new (read-only) array, else BufferError.
    """
    _require_host(t, "a NumPy view")
    name = t.dtype.name
    if name in _NATIVE:
        return np.asarray(t)
    np_dtype = numpy_dtype(t.dtype)
    if _core.is_packed(t):
        if not unpack:
            raise BufferError(
                f"bit-packed {name} data has no NumPy view (NumPy stores one element per "
                "byte); use .astype() or .tolist() to unpack it"
            )
        out = _unpack_subbyte(np.asarray(_core.as_bytes_view(t)), t.dtype.bits, t.size)
        out = out.view(np_dtype).reshape(t.shape)
        out.flags.writeable = False
        return out
    return np.asarray(t.view(_CARRIER[t.itemsize])).view(np_dtype)


def _unpack_subbyte(raw: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Little-bit-endian packed elements of `bits` bits -> one uint8 per element."""
    stream = np.unpackbits(raw, bitorder="little")[: count * bits]
    return np.packbits(stream.reshape(count, bits), axis=1, bitorder="little").reshape(count)


def _pack_subbyte(values: np.ndarray, bits: int) -> np.ndarray:
    """One uint8 per element -> little-bit-endian packed bytes."""
    stream = np.unpackbits(values.reshape(-1, 1), axis=1, bitorder="little")[:, :bits]
    return np.packbits(stream.reshape(-1), bitorder="little")


def array_protocol(t: Tensor, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    """``Tensor.__array__``: NumPy 2 semantics for ``copy``."""
    packed = _core.is_packed(t)
    wanted = None if dtype is None else np.dtype(dtype)
    if copy is False:
        if packed:
            raise ValueError(
                f"copy=False, but bit-packed {t.dtype.name} data must be unpacked (copied)"
            )
        if wanted is not None and wanted != numpy_dtype(t.dtype):
            raise ValueError(f"copy=False, but casting {t.dtype.name} to {wanted} needs a copy")
    array = to_numpy(t, unpack=True)
    fresh = packed
    if wanted is not None and wanted != array.dtype:
        array = array.astype(wanted)
        fresh = True
    if copy and not fresh:
        array = array.copy()
    return array


def from_numpy_copy(array: np.ndarray, dtype: DType | None = None) -> Tensor:
    """A new 64-byte aligned tensor holding array's values (cast to dtype if given)."""
    target = dtype_of(array) if dtype is None else dtype
    out = _core.empty_tensor(array.shape, target)
    copy_into(out, array)
    return out


def copy_into(out: Tensor, values: Any) -> None:
    """Write values (broadcast and cast unsafely) into the fresh tensor `out`."""
    if out.size == 0:
        return
    destination = to_numpy(out)
    try:
        np.copyto(destination, values, casting="unsafe")
    except TypeError:
        # ml_dtypes has no direct cast between some pairs (float8_e8m0fnu): go via float32.
        np.copyto(destination, np.asarray(values).astype(np.float32), casting="unsafe")


def cast_operands(t: Tensor, dtype: DType) -> tuple[Tensor, Any, Any]:
    """For NumPy's cast of t to dtype (unsafe casting): the new tensor, a NumPy view of
    it to write (None when it is empty) and t's values as a NumPy array. The compiled
    Tensor.astype calls np.copyto itself, so that a warning of the cast names the
    user's line, as NumPy's astype's does, and not a line of this module (which
    Python's default filter would then show once per process)."""
    _require_host(t, f"casting to {dtype.name}")
    out = _core.empty_tensor(t.shape, dtype)
    return out, (to_numpy(out) if out.size else None), to_numpy(t, unpack=True)


def _index_to_numpy(key: Any) -> Any:
    """Index objects NumPy understands: tensors and DLPack objects become arrays."""
    if type(key) is tuple:
        return tuple(_index_to_numpy(k) for k in key)
    if type(key) is Tensor:
        return to_numpy(key, unpack=True)
    if hasattr(type(key), "__dlpack__") and not isinstance(key, np.ndarray):
        return to_numpy(_core.from_dlpack(key), unpack=True)
    return key


def getitem_advanced(t: Tensor, key: Any) -> Tensor:
    """Indexing with integer/boolean arrays: a copy, as in NumPy."""
    _require_host(t, "advanced indexing")
    result = to_numpy(t, unpack=True)[_index_to_numpy(key)]
    return from_numpy_copy(np.asarray(result), t.dtype)


def _value_to_numpy(value: Any) -> Any:
    if type(value) is Tensor:
        return to_numpy(value, unpack=True)
    if isinstance(value, np.ndarray):
        return value
    if hasattr(type(value), "__dlpack__"):
        return to_numpy(_core.from_dlpack(value), unpack=True)
    return value


def setitem(t: Tensor, key: Any, value: Any) -> None:
    """``t[key] = value`` in place, with NumPy broadcasting and casting."""
    _require_host(t, "assignment")
    if _core.is_packed(t):
        raise TypeError(f"cannot assign into bit-packed {t.dtype.name} data; unpack it first")
    destination = to_numpy(t)
    np_key = _index_to_numpy(key)
    values = _value_to_numpy(value)
    try:
        destination[np_key] = values
    except TypeError:
        if t.dtype.name in _NATIVE:
            raise
        destination[np_key] = np.asarray(values).astype(np.float32)


def format_tensor(t: Tensor) -> str:
    """PyTorch-style repr: ``tensorbridge.tensor([1, 2], dtype=int64)``."""
    try:
        array = to_numpy(t, unpack=True)
    except ImportError:
        return _core.meta_repr(t)
    prefix = "tensorbridge.tensor("
    options: dict[str, Any] = {}
    if array.dtype.kind in "fc" or t.dtype.name not in _NATIVE:
        # As PyTorch prints: 4 decimals unless every value is integral.
        wide = np.complex128 if array.dtype.kind == "c" else np.float64
        shown = _printed_elements(array).astype(wide)
        finite = shown[np.isfinite(shown)]
        if finite.size and not np.all(finite == np.round(finite)):
            options = {"floatmode": "fixed", "precision": 4}
        if t.dtype.name not in _NATIVE:
            array = array.astype(np.float32)  # ml_dtypes values print as plain floats
    body = np.array2string(
        array,
        separator=", ",
        prefix=prefix,
        threshold=1000,
        edgeitems=3,
        max_line_width=88,
        **options,
    )
    extras = []
    if t.size == 0 and t.ndim != 1:
        extras.append(f"size={t.shape}")
    extras.append(f"dtype={t.dtype.name}")
    if t.device != "cpu":
        extras.append(f"device={t.device}")
    if t.readonly:
        extras.append("readonly=True")
    return f"{prefix}{body}, {', '.join(extras)})"


def _printed_elements(array: np.ndarray) -> np.ndarray:
    """The elements a summarised printout shows (3 at each edge of long dimensions)."""
    if array.size <= 1000:
        return array
    picks = [np.r_[0:3, n - 3 : n] if n > 6 else np.arange(n) for n in array.shape]
    shown: np.ndarray = array[np.ix_(*picks)]
    return shown


# --------------------------------------------------------------------------
# Pickling: out-of-band buffers with protocol 5
# --------------------------------------------------------------------------


def reduce_tensor(t: Tensor, protocol: int) -> tuple[Any, tuple[Any, ...]]:
    if not _core.is_host(t):
        raise TypeError(f"cannot pickle a tensor on {t.device}: its memory is not CPU-accessible")
    source = t if t.is_contiguous() else t.copy()
    raw = _core.as_bytes_view(source)
    packed = _core.is_packed(t)
    if protocol >= 5:
        data: Any = pickle.PickleBuffer(raw)
    else:
        data = bytes(memoryview(raw))
    return (_rebuild, (data, t.shape, t.dtype.name, packed))


def _rebuild(data: Any, shape: tuple[int, ...], dtype_name: str, packed: bool) -> Tensor:
    if isinstance(data, bytes):
        # Protocols before 5 (and in-band copies of read-only buffers) give bytes;
        # rebuild into writable memory of our own.
        raw = _core.empty_tensor((len(data),), DTYPES["uint8"])
        memoryview(raw)[:] = data
    else:
        raw = _core.import_buffer(data, DTYPES["uint8"])
    return _core.reinterpret(raw, DTYPES[dtype_name], tuple(shape), packed)
