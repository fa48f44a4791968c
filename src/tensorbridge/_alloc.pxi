# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Allocation and copies: new tensors in memory of
# ours (_memory.h), strided copies into C order, views sharing an owner.

from libc.stdint cimport int64_t, uint16_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset
from tensorbridge._dlpack cimport *
from tensorbridge._memory cimport *
from tensorbridge._casts cimport *

import sys as _sys
import warnings as _warnings


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


def use_huge_pages(bint advise):
    """Align blocks of 32 MiB or more to 2 MiB and advise them into transparent huge
    pages (the default), or not (to measure the difference); the previous setting."""
    global tb_huge_pages
    previous = bool(tb_huge_pages)
    tb_huge_pages = advise
    return previous


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


# --------------------------------------------------------------------------
# Casts between float32 and the 16-bit floats (_casts.h)
# --------------------------------------------------------------------------

cdef bint _portable_casts = False


def use_portable_casts(bint portable):
    """Cast float16 with the portable C code even where the CPU has conversion
    instructions (tests check both give the same bits); the previous setting."""
    global _portable_casts
    previous = _portable_casts
    _portable_casts = portable
    return previous


def f16_cast_kind():
    """Which float16 casts run here: "f16c" (the CPU's instructions) or "portable"."""
    return tb_f16_cast_kind().decode()


cdef bint _default_float_errors() except -1:
    """NumPy's floating-point error handling is its default (overflow and invalid
    warn, underflow ignored), or NumPy is not loaded: the C casts report as NumPy then
    would."""
    numpy = _loaded("numpy")
    if numpy is None:
        return True
    errors = numpy.geterr()
    return (errors["over"] == "warn" and errors["invalid"] == "warn"
            and errors["under"] == "ignore")


cdef object _numpy_cast(Tensor t, object target):
    """NumPy's cast of t (unsafe casting), with np.copyto called from here: no Python
    frame of ours is then on the stack, and a warning names the caller's line, as
    NumPy's own astype's does."""
    out, destination, values = _numpy_ops().cast_operands(t, target)
    if destination is None:
        return out
    numpy = _sys.modules["numpy"]
    try:
        numpy.copyto(destination, values, casting="unsafe")
    except TypeError:
        # ml_dtypes has no direct cast between some pairs (float8_e8m0fnu): via float32.
        numpy.copyto(destination, numpy.asarray(values).astype(numpy.float32),
                     casting="unsafe")
    return out


# Strided sources of the numeric pairs are cast here up to this many elements, where
# NumPy's call costs more than the cast (64 floats: 1.2 against 5.0 µs); beyond it,
# NumPy's strided loops, which read the source once where ours gathers it into a
# buffer first (262,144 elements of float32[::2] -> float64: 130 against 100 µs).
# The 16-bit casts of strided sources stay here at any size (NumPy's float16 cast is
# 5x slower).
cdef enum:
    _STRIDED_CAST_MAX = 8192


cdef object _cast_in_c(Tensor t, object target):
    """t cast to target in C, when both are among the integer types, float32 and
    float64, or the pair is float32 to or from float16 or bfloat16, and t is CPU
    memory with aligned elements (strided sources of the numeric pairs up to
    _STRIDED_CAST_MAX elements): NumPy's values (ml_dtypes' for bfloat16) and its
    warnings. None otherwise, and for what C would not decide as NumPy does (a float
    out of an integer type's range, NaN or infinite), or casts between floats that
    raise a floating-point condition under an np.errstate other than NumPy's
    default: NumPy's cast then decides."""
    cdef DLDataType to = _dl_dtype(target)
    cdef DLDataType src = t._dtype
    cdef int from_kind = tb_cast_kind(src.code, src.bits) if src.lanes == 1 else -1
    cdef int to_kind = tb_cast_kind(to.code, to.bits) if to.lanes == 1 else -1
    cdef int flags = 0, i
    cdef bint portable = _portable_casts
    cdef size_t item = src.bits // 8
    cdef int64_t byte_strides[64]
    cdef tb_reader reader
    if not tb_casts(from_kind, to_kind) or t._device.device_type != kDLCPU or (
            <uintptr_t>t._ptr()) % item:
        return None     # (misaligned elements: NumPy's cast reads them safely)
    # Between floats the CPU may flag overflow, underflow or invalid values: under an
    # np.errstate other than NumPy's default, NumPy's cast decides. float32 <->
    # float64 report all three from the values (asked afterwards, only when one
    # happened); the 16-bit casts do not report underflow (asked first).
    cdef bint wide_pair = from_kind >= TB_F32 and to_kind >= TB_F32 and \
        from_kind <= TB_F64 and to_kind <= TB_F64
    if from_kind >= TB_F32 and to_kind >= TB_F32 and from_kind != to_kind and \
            not wide_pair and not _default_float_errors():
        return None
    cdef bint contiguous = t._c_contiguous()
    if not contiguous and from_kind < TB_F16 and to_kind < TB_F16 and \
            t._size() > _STRIDED_CAST_MAX:
        return None     # NumPy's strided loops are faster from there (_STRIDED_CAST_MAX)
    cdef Tensor out = _alloc_tensor(t._ndim, t._shape, to, _cpu_device, 0)
    cdef size_t n = <size_t>t._size()
    cdef const char* data = t._ptr()
    if n == 0:
        return out
    if contiguous:
        with nogil:
            flags = tb_cast(from_kind, to_kind, data, out._data, n, portable)
    else:
        for i in range(t._ndim):
            byte_strides[i] = t._strides[i] * <int64_t>item
        tb_reader_init(&reader, data, t._ndim, t._shape, byte_strides, item)
        with nogil:
            flags = tb_cast_strided(from_kind, to_kind, &reader, <char*>out._data,
                                    to.bits // 8, portable)
    if flags & TB_CAST_UNDECIDED:
        return None
    if wide_pair and flags and not _default_float_errors():
        return None
    if flags & TB_CAST_OVERFLOW:
        _warnings.warn("overflow encountered in cast", RuntimeWarning)
    if flags & TB_CAST_INVALID:
        _warnings.warn("invalid value encountered in cast", RuntimeWarning)
    return out
