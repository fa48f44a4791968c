# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Basic indexing (integers, slices, None, Ellipsis)
# as views, and the byte arithmetic of packed sub-byte views.

from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libc.string cimport memcpy
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *
from tensorbridge._memory cimport *


cdef inline bint _is_packed(Tensor t) noexcept:
    return t._dtype.bits < 8 and not (t._flags & TB_FLAG_SUBBYTE_PADDED)


cdef int _check_packed_view(Tensor v) except -1:
    if _is_packed(v) and not v._c_contiguous():
        raise TypeError(
            f"bit-packed {_dtype_obj(v._dtype)} tensors only support contiguous views; "
            "unpack first with .astype()")
    return 0


cdef int _apply_offset(Tensor v, int64_t elements) except -1:
    """Move v's start by a number of elements (the result may lie before data)."""
    cdef int64_t delta = elements * <int64_t>_itemsize(v._dtype)
    if _is_packed(v):
        if (elements * v._dtype.bits) % 8:
            raise TypeError(
                f"cannot take a view of bit-packed {_dtype_obj(v._dtype)} data that starts "
                "inside a byte; unpack first with .astype()")
        delta = elements * v._dtype.bits // 8
    if delta >= 0 or <uint64_t>(-delta) <= v._byte_offset:
        v._byte_offset = <uint64_t>(<int64_t>v._byte_offset + delta)
    else:
        # A negative offset cannot be a byte_offset: fold it into the pointer.
        v._data = <void*>(<uintptr_t>v._data + <uintptr_t>(<int64_t>v._byte_offset + delta))
        v._byte_offset = 0
    return 0


cdef object _numpy_integer = None     # numpy.integer, once NumPy is loaded


cdef bint _is_numpy_integer(object k):
    """A NumPy integer scalar (NumPy found once loaded: never imports it)."""
    global _numpy_integer
    if _numpy_integer is None:
        numpy = _loaded("numpy")
        if numpy is None:
            return False
        _numpy_integer = numpy.integer
    return isinstance(k, _numpy_integer)


cdef bint _is_basic_key(tuple key):
    """True when every entry indexes "basically" (a view), as NumPy defines it:
    ints (and NumPy integer scalars, and 0-d integer Tensors), slices, Ellipsis and
    None. Booleans, sequences and arrays make the key advanced (a copy)."""
    for k in key:
        if k is None or k is Ellipsis or type(k) is slice or type(k) is int:
            continue
        if type(k) is Tensor:
            if (<Tensor>k)._ndim == 0 and (<Tensor>k)._dtype.code in (kDLInt, kDLUInt):
                continue
            return False
        if type(k) is bool or isinstance(k, (list, tuple)):
            return False
        if _is_numpy_integer(k):
            continue
        if hasattr(k, "__array_interface__") or hasattr(k, "__dlpack__") \
                or hasattr(k, "__array__"):
            return False
        if not hasattr(k, "__index__"):
            raise IndexError(
                "only integers, slices (`:`), ellipsis (`...`), None and integer or "
                f"boolean tensors are valid indices; got {type(k).__name__} {k!r}")
    return True


cdef Tensor _index_int(Tensor t, int64_t i):
    cdef Tensor v = _view(t)
    if t._size() > 0:
        _apply_offset(v, i * t._strides[0])
    v._set_ndim(t._ndim - 1)
    memcpy(v._shape, t._shape + 1, (t._ndim - 1) * sizeof(int64_t))
    memcpy(v._strides, t._strides + 1, (t._ndim - 1) * sizeof(int64_t))
    _check_packed_view(v)
    return v


cdef int _slice_dim(Tensor t, int d, object key, Py_ssize_t* start, int64_t* length,
                    int64_t* stride) except -1:
    """Dimension d of t sliced by key: its first index, extent and stride."""
    cdef Py_ssize_t stop, step
    if PySlice_Unpack(key, start, &stop, &step) < 0:
        raise ValueError("invalid slice")   # not reached: Unpack raised already
    length[0] = PySlice_AdjustIndices(t._shape[d], start, &stop, step)
    if tb_mul_overflow(t._strides[d], step, stride) or \
            stride[0] > BYTE_LIMIT // <int64_t>_itemsize(t._dtype) or \
            stride[0] < -(BYTE_LIMIT // <int64_t>_itemsize(t._dtype)):
        if length[0] <= 1:
            # One element or none: the step is never taken (NumPy takes any step).
            stride[0] = t._strides[d]
            return 0
        raise IndexError(f"slice step {step} is too large for dimension {d}")
    return 0


cdef Tensor _index_slice(Tensor t, object key):
    """t[key] for one slice (the first dimension's), as _basic_index reads it."""
    cdef Py_ssize_t start
    cdef int64_t length, stride
    _slice_dim(t, 0, key, &start, &length, &stride)
    cdef Tensor v = _view(t)
    v._shape[0] = length
    v._strides[0] = stride
    if length > 0 and v._size() > 0:
        _apply_offset(v, start * t._strides[0])   # within the tensor: cannot overflow
    _check_packed_view(v)
    return v


cdef Tensor _basic_index(Tensor t, tuple key):
    cdef int consumed = 0, ellipses = 0
    for k in key:
        if k is Ellipsis:
            ellipses += 1
        elif k is not None:
            consumed += 1
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if consumed > t._ndim:
        raise IndexError(
            f"too many indices for a tensor of dimension {t._ndim}: {consumed} were given")
    cdef int64_t new_shape[TB_MAX_NDIM]
    cdef int64_t new_strides[TB_MAX_NDIM]
    cdef int n = 0, d = 0, j
    cdef int64_t offset = 0, extent, index, term
    cdef bint overflow = False
    cdef Py_ssize_t start
    for k in key:
        if k is None:
            if n >= TB_MAX_NDIM:
                raise IndexError(f"the result would have more than {TB_MAX_NDIM} dimensions")
            new_shape[n] = 1
            new_strides[n] = 0
            n += 1
        elif k is Ellipsis:
            for j in range(t._ndim - consumed):
                if n >= TB_MAX_NDIM:
                    raise IndexError(
                        f"the result would have more than {TB_MAX_NDIM} dimensions")
                new_shape[n] = t._shape[d]
                new_strides[n] = t._strides[d]
                n += 1
                d += 1
        elif type(k) is slice:
            if n >= TB_MAX_NDIM:
                raise IndexError(f"the result would have more than {TB_MAX_NDIM} dimensions")
            _slice_dim(t, d, k, &start, &new_shape[n], &new_strides[n])
            if new_shape[n] > 0:
                overflow |= tb_mul_overflow(start, t._strides[d], &term) or \
                    tb_add_overflow(offset, term, &offset)
            n += 1
            d += 1
        else:
            index = k.__index__()
            extent = t._shape[d]
            if index < -extent or index >= extent:
                raise IndexError(
                    f"index {index} is out of bounds for dimension {d} with size {extent}")
            if index < 0:
                index += extent
            overflow |= tb_mul_overflow(index, t._strides[d], &term) or \
                tb_add_overflow(offset, term, &offset)
            d += 1
    while d < t._ndim:
        if n >= TB_MAX_NDIM:
            raise IndexError(f"the result would have more than {TB_MAX_NDIM} dimensions")
        new_shape[n] = t._shape[d]
        new_strides[n] = t._strides[d]
        n += 1
        d += 1
    cdef Tensor v = _view(t)
    v._set_ndim(n)
    memcpy(v._shape, new_shape, n * sizeof(int64_t))
    memcpy(v._strides, new_strides, n * sizeof(int64_t))
    if v._size() > 0:
        if overflow:   # impossible for a tensor that passed _check_layout
            raise IndexError("index arithmetic overflowed")
        _apply_offset(v, offset)
    _check_packed_view(v)
    return v
