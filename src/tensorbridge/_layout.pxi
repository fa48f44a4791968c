# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Layout: C-order strides, the bounds every tensor's
# layout must keep, reshape's strides, and dtype views.

from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy
from tensorbridge._dlpack cimport *
from tensorbridge._memory cimport *


cdef inline void _c_strides(int ndim, const int64_t* shape, int64_t* strides) noexcept nogil:
    """C-order element strides for shape (an extent of 0 counts as 1). Saturates
    past BYTE_LIMIT, so a layout check reports a shape too large, not an overflow."""
    cdef int64_t step = 1
    cdef int i
    for i in range(ndim - 1, -1, -1):
        strides[i] = step
        if tb_mul_overflow(step, shape[i] if shape[i] > 0 else 1, &step):
            step = BYTE_LIMIT + 1


cdef int _check_layout(Tensor t, str api, str field) except -1:
    """Bound what a tensor describes, whatever made it (an import, a buffer, a
    pickle): extents >= 0; the non-zero extents times the itemsize within 2**62
    bytes (NumPy's rule, so even empty tensors have bounded extents); every stride
    times the itemsize within it; the span between the first and last element within
    it; byte_offset within it. Empty tensors get C-order strides (theirs mean
    nothing). After this no index, offset or stride arithmetic can overflow."""
    cdef int i
    cdef int64_t item = _itemsize(t._dtype), count = 1, span = 0, step, stride
    cdef bint empty = False
    for i in range(t._ndim):
        if t._shape[i] < 0:
            raise BufferError(
                f"{api}: {field}.shape[{i}] is {t._shape[i]}; extents must be >= 0")
        if t._shape[i] == 0:
            empty = True
        elif tb_mul_overflow(count, t._shape[i], &count) or count > BYTE_LIMIT // item:
            raise BufferError(
                f"{api}: {field}.shape {t.shape} has too many elements for a 64-bit "
                "address space")
    if t._byte_offset > <uint64_t>BYTE_LIMIT:
        raise BufferError(f"{api}: {field}.byte_offset {t._byte_offset} is out of range")
    if empty:
        _c_strides(t._ndim, t._shape, t._strides)
        t._strides_tuple = None
        return 0
    for i in range(t._ndim):
        stride = t._strides[i]
        if stride > BYTE_LIMIT // item or stride < -(BYTE_LIMIT // item):
            raise BufferError(f"{api}: {field}.strides[{i}] is {stride}; out of range")
        if t._shape[i] > 1:
            if (tb_mul_overflow(stride if stride >= 0 else -stride, (t._shape[i] - 1) * item,
                                &step)
                    or tb_add_overflow(span, step, &span) or span > BYTE_LIMIT):
                raise BufferError(
                    f"{api}: {field}.strides {t.strides} with shape {t.shape} span more "
                    "memory than a 64-bit address space")
    return 0


cdef int _resolve_shape(tuple shape, int64_t size, int64_t itemsize,
                        int64_t* dims) except -1:
    """reshape's shape as extents in dims (one -1 inferred from size); their number."""
    cdef int infer = -1, i, n = len(shape)
    cdef int64_t known = 1, value, nonzero = 1
    if n > TB_MAX_NDIM:
        raise ValueError(f"reshape(): at most {TB_MAX_NDIM} dimensions; got {n}")
    for i in range(n):
        s = shape[i]
        if type(s) is not int and (isinstance(s, bool) or not hasattr(s, "__index__")):
            raise TypeError(f"reshape(): shape entries must be ints; got {s!r}")
        value = s if type(s) is int else s.__index__()
        if value == -1:
            if infer >= 0:
                raise ValueError("reshape(): only one dimension can be -1")
            infer = i
        elif value < 0:
            raise ValueError(f"reshape(): invalid extent {value} in shape {shape}")
        # NumPy's rule: the non-zero extents must fit, even when the tensor is empty.
        elif value > 0 and (tb_mul_overflow(nonzero, value, &nonzero)
                            or nonzero > BYTE_LIMIT // itemsize):
            raise ValueError(f"reshape(): shape {shape} is too large")
        else:
            known *= value
        dims[i] = value
    if infer >= 0:
        if known == 0 or size % known:
            raise ValueError(
                f"reshape(): cannot reshape a tensor of {size} elements into shape {shape}")
        dims[infer] = size // known
    elif known != size:
        raise ValueError(
            f"reshape(): cannot reshape a tensor of {size} elements into shape "
            f"{tuple([dims[i] for i in range(n)])}")
    return n


cdef Tensor _reshape_view(Tensor t, int newnd, const int64_t* newdims):
    """A view of t with shape newdims, or None when the strides do not allow one."""
    cdef int oldnd = 0, i
    cdef int64_t olddims[TB_MAX_NDIM]
    cdef int64_t oldstrides[TB_MAX_NDIM]
    cdef int64_t newstrides[TB_MAX_NDIM]
    cdef int64_t np_, op, merged, limit = BYTE_LIMIT // <int64_t>_itemsize(t._dtype)
    cdef int ni, nj, oi, oj, ok, nk
    if t._size() == 0:
        # Any strides describe an empty tensor: use C order.
        _c_strides(newnd, newdims, newstrides)
    else:
        for i in range(t._ndim):
            if t._shape[i] != 1:
                olddims[oldnd] = t._shape[i]
                oldstrides[oldnd] = t._strides[i]
                oldnd += 1
        ni = 0
        nj = 1
        oi = 0
        oj = 1
        while ni < newnd and oi < oldnd:
            np_ = newdims[ni]
            op = olddims[oi]
            while np_ != op:
                if np_ < op:
                    np_ *= newdims[nj]
                    nj += 1
                else:
                    op *= olddims[oj]
                    oj += 1
            for ok in range(oi, oj - 1):
                # (an extent times a stride may reach 2**63 at the layout's bound:
                # such dimensions cannot be merged)
                if tb_mul_overflow(olddims[ok + 1], oldstrides[ok + 1], &merged) or \
                        oldstrides[ok] != merged:
                    return None
            newstrides[nj - 1] = oldstrides[oj - 1]
            for nk in range(nj - 1, ni, -1):
                if tb_mul_overflow(newstrides[nk], newdims[nk], &newstrides[nk - 1]) \
                        or newstrides[nk - 1] > limit or newstrides[nk - 1] < -limit:
                    # Only for an extent of 1 (any other's stride times its extent
                    # less one is within the layout's bound), which any stride
                    # serves: its neighbour's, so views keep _check_layout's rule.
                    newstrides[nk - 1] = newstrides[nk]
            ni = nj
            nj += 1
            oi = oj
            oj += 1
        # Trailing size-1 dimensions: any stride works.
        for i in range(ni, newnd):
            newstrides[i] = 1
    cdef Tensor v = _view(t)
    v._set_ndim(newnd)
    memcpy(v._shape, newdims, newnd * sizeof(int64_t))
    memcpy(v._strides, newstrides, newnd * sizeof(int64_t))
    _check_packed_view(v)
    return v


cdef Tensor _view_empty_dtype(Tensor t, Tensor v, int64_t old_item, int64_t new_item):
    """_view_dtype of a tensor without elements: only the last dimension's bytes must
    divide (as NumPy asks); its strides address nothing, so they become C strides
    (they may not be whole numbers of the new itemsize)."""
    cdef int last = t._ndim - 1
    cdef int64_t row_bytes = t._shape[last] * old_item
    if row_bytes % new_item:
        raise ValueError(
            f"view(): the last dimension holds {row_bytes} bytes, not a multiple of the "
            f"new itemsize {new_item}")
    v._shape[last] = row_bytes // new_item
    _c_strides(t._ndim, v._shape, v._strides)
    v._shape_tuple = None
    v._strides_tuple = None
    return v


cdef Tensor _view_dtype(Tensor t, object dtype):
    cdef DLDataType dt = _dl_dtype(dtype)
    cdef int64_t old_item = _itemsize(t._dtype), new_item = _itemsize(dt)
    if _is_packed(t) and dt.bits != t._dtype.bits:
        raise TypeError(
            f"view(): bit-packed {_dtype_obj(t._dtype)} data can only be viewed as another "
            f"{t._dtype.bits}-bit type; got {dtype}")
    cdef Tensor v = _view(t)
    v._dtype = dt
    if dt.bits < 8 and not _is_packed(t):
        v._flags |= TB_FLAG_SUBBYTE_PADDED   # one element per byte
    elif dt.bits >= 8:
        v._flags &= ~TB_FLAG_SUBBYTE_PADDED
    if old_item == new_item:
        return v
    if t._ndim == 0:
        raise ValueError(
            f"view(): a 0-d tensor cannot change itemsize ({old_item} -> {new_item} bytes)")
    cdef int last = t._ndim - 1, i
    if t._size() == 0:
        return _view_empty_dtype(t, v, old_item, new_item)
    if t._shape[last] != 1 and t._strides[last] != 1:
        raise ValueError(
            f"view(): the last dimension must be contiguous to change itemsize; "
            f"its stride is {t._strides[last]}")
    cdef int64_t row_bytes = t._shape[last] * old_item
    if row_bytes % new_item:
        raise ValueError(
            f"view(): the last dimension holds {row_bytes} bytes, not a multiple of the "
            f"new itemsize {new_item}")
    for i in range(last):
        if (t._strides[i] * old_item) % new_item:
            raise ValueError(
                f"view(): stride {t._strides[i]} of dimension {i} is not a whole number of "
                f"{dtype} elements")
        v._strides[i] = t._strides[i] * old_item // new_item
    v._shape[last] = row_bytes // new_item
    v._strides[last] = 1
    v._shape_tuple = None
    v._strides_tuple = None
    return v
