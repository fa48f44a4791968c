# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Allocation and copies: new tensors in memory of
# ours (_memory.h), strided copies into C order, views sharing an owner.

from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy, memset
from tensorbridge._dlpack cimport *
from tensorbridge._memory cimport *


# --------------------------------------------------------------------------
# Copies and views
# --------------------------------------------------------------------------

cdef Tensor _alloc_tensor(int ndim, const int64_t* shape, DLDataType dtype, DLDevice device,
                          uint64_t flags):
    """A new C-contiguous tensor backed by 64-byte aligned memory of ours.

    flags (SUBBYTE_PADDED) are set before the size is computed: they decide it."""
    cdef Tensor t = _new_tensor()
    t._set_ndim(ndim)
    cdef int64_t size = 1, nbytes
    cdef bint overflow = False
    cdef int i
    for i in range(ndim):
        if shape[i] < 0:
            raise ValueError(f"negative extent {shape[i]} in a shape")
        t._shape[i] = shape[i]
        if shape[i] != 0:   # NumPy's rule: the non-zero extents must fit too
            overflow |= tb_mul_overflow(size, shape[i], &size)
    t._dtype = dtype
    t._device = device
    t._flags = flags
    if overflow or tb_mul_overflow(size, <int64_t>_itemsize(dtype), &nbytes) \
            or nbytes > BYTE_LIMIT:
        raise ValueError(
            f"a tensor of shape {t.shape} and dtype {_dtype_obj(dtype)} does not fit a 64-bit "
            "address space")
    _c_strides(ndim, t._shape, t._strides)
    nbytes = t._nbytes()
    cdef void* memory = NULL
    if nbytes > 0:
        memory = tb_alloc(<size_t>nbytes)
        if memory == NULL:
            raise MemoryError(f"cannot allocate {nbytes} bytes")
        t._managed = memory
        t._owner_kind = OWN_ALLOC
    t._data = memory
    return t


cdef Tensor _copy_contiguous(Tensor src):
    """A private C-contiguous copy of host-accessible memory, in memory of ours:
    plain host memory, so labelled cpu whatever the source was (pinned or managed
    memory copied into pageable memory is not pinned or managed; PyTorch's clone of
    a pinned tensor is not pinned either)."""
    if not _host_accessible(src._device.device_type):
        raise BufferError(
            f"cannot copy {_dev_str(src._device)} memory: the CPU cannot read it")
    cdef Tensor out = _alloc_tensor(src._ndim, src._shape, src._dtype, _cpu_device,
                                    src._flags & TB_FLAG_SUBBYTE_PADDED)
    cdef int64_t nbytes = src._nbytes()
    cdef int64_t byte_strides[64]
    cdef size_t item = _itemsize(src._dtype)
    cdef int i
    if nbytes == 0:
        return out
    if src._c_contiguous():
        with nogil:
            memcpy(out._data, src._ptr(), <size_t>nbytes)
        return out
    for i in range(src._ndim):
        byte_strides[i] = src._strides[i] * <int64_t>item
    with nogil:
        tb_copy_to_contiguous(<char*>out._data, src._ptr(), src._ndim, src._shape,
                              byte_strides, item)
    return out


cdef Tensor _view(Tensor src):
    """A new Tensor describing the same memory as src (and keeping it alive)."""
    cdef Tensor v = _new_tensor()
    v._set_ndim(src._ndim)
    memcpy(v._shape, src._shape, src._ndim * sizeof(int64_t))
    memcpy(v._strides, src._strides, src._ndim * sizeof(int64_t))
    v._data = src._data
    v._byte_offset = src._byte_offset
    v._device = src._device
    v._dtype = src._dtype
    v._flags = src._flags & (TB_FLAG_READ_ONLY | TB_FLAG_SUBBYTE_PADDED)
    v._base = src._owner()
    return v


def empty_tensor(shape, dtype, device=None):
    """A new C-contiguous CPU tensor (64-byte aligned, uninitialised)."""
    cdef int64_t dims[TB_MAX_NDIM]
    cdef int n = len(shape), i
    if n > TB_MAX_NDIM:
        raise ValueError(f"at most {TB_MAX_NDIM} dimensions; got {n}")
    for i in range(n):
        dims[i] = shape[i]
        if dims[i] < 0:
            raise ValueError(f"negative extent {dims[i]} in shape {tuple(shape)}")
    cdef DLDevice dev
    dev.device_type = kDLCPU
    dev.device_id = 0
    cdef DLDataType dt = _dl_dtype(dtype)
    # Sub-byte types: one element per byte in memory of ours.
    return _alloc_tensor(n, dims, dt, dev, TB_FLAG_SUBBYTE_PADDED if dt.bits < 8 else 0)


def zero_fill(Tensor t):
    """Set every byte of a freshly allocated tensor to zero."""
    cdef int64_t nbytes = t._nbytes()
    if nbytes > 0:
        with nogil:
            memset(t._data, 0, <size_t>nbytes)
    return t
