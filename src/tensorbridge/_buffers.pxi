# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Host memory in: the buffer protocol and its PEP 3118
# formats (one table, both ways, in _host.h), NumPy arrays read through their
# struct, and NumPy's __array_interface__ type strings.

from cpython.ref cimport PyObject, Py_INCREF
from cpython.buffer cimport (
    PyObject_GetBuffer, PyObject_CheckBuffer, PyBUF_RECORDS, PyBUF_RECORDS_RO,
)
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport strcmp
from operator import index as _operator_index
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *
from tensorbridge._host cimport *


# --------------------------------------------------------------------------
# dtype spellings for NumPy and the buffer protocol
# --------------------------------------------------------------------------

cdef str _native_order = chr(TB_NATIVE_ORDER)
cdef str _typestr_kinds = "iuf??cb"   # NumPy's kind by DLPack type code 0-6


cdef object _typestr(DLDataType dt, uint64_t flags):
    """NumPy's __array_interface__ type string of a dtype, or None."""
    if tb_format_of(dt.code, dt.bits) == NULL:
        return None   # the types NumPy has are exactly those the buffer protocol has
    kind = _typestr_kinds[dt.code]
    size = dt.bits // 8
    return f"{'|' if size == 1 else _native_order}{kind}{size}"


cdef inline const char* _buffer_format(DLDataType dt, uint64_t flags) noexcept:
    """The PEP 3118 format of a dtype, or NULL when the buffer protocol has none."""
    return tb_format_of(dt.code, dt.bits)


cdef inline bint _is_native_order(char c) noexcept:
    return c == b'@' or c == b'=' or c == TB_NATIVE_ORDER


cdef inline int _format_code(const char* fmt) noexcept:
    """The DLPack type code of a native buffer format (fast path), or -1."""
    if fmt == NULL:
        return kDLUInt
    if _is_native_order(fmt[0]):
        fmt += 1
    if fmt[0] == b'c' or fmt[0] == b'n' or fmt[0] == b'N':
        return -1   # valid, but never NumPy's: the general reading takes them
    return tb_format_code(fmt)


def has_buffer(obj):
    """True when obj exports the buffer protocol."""
    return PyObject_CheckBuffer(obj)


cdef DLDataType _buffer_dtype(const char* fmt, Py_ssize_t itemsize) except *:
    """The DLPack dtype of a PEP 3118 format string with the given itemsize."""
    cdef bytes text = b"B" if fmt == NULL else <bytes>fmt
    cdef const char* body = text
    cdef DLDataType dt
    dt.lanes = 1
    dt.bits = itemsize * 8
    if body[0] == b'<' or body[0] == b'>' or body[0] == b'!' or _is_native_order(body[0]):
        if itemsize > 1 and not _is_native_order(body[0]):
            raise BufferError(
                f"asarray(): buffer format {text.decode()!r} is not in native byte order")
        body += 1
    cdef int code = tb_format_code(body)
    if code < 0:
        raise BufferError(
            f"asarray(): unsupported buffer format {text.decode(errors='replace')!r} "
            f"(itemsize {itemsize})")
    dt.code = code
    if not _dtype_known(dt):
        raise BufferError(
            f"asarray(): buffer format {text.decode()!r} with itemsize {itemsize} has no "
            "DLPack equivalent")
    return dt


def import_buffer(obj, raw_dtype):
    """A Tensor sharing obj's buffer. With a raw_dtype, byte buffers (format B/b/c,
    1-d, contiguous) are reinterpreted as raw_dtype; typed buffers, and every buffer
    when raw_dtype is None, keep their type and shape."""
    cdef Tensor t = _new_tensor()
    cdef bint readonly = False
    try:
        PyObject_GetBuffer(obj, &t._buffer, PyBUF_RECORDS)
    except (BufferError, TypeError, ValueError):
        PyObject_GetBuffer(obj, &t._buffer, PyBUF_RECORDS_RO)
        readonly = True
    t._owner_kind = OWN_BUFFER
    cdef Py_buffer* view = &t._buffer
    readonly = readonly or view.readonly
    if view.suboffsets != NULL:
        raise BufferError("asarray(): buffers with suboffsets (PIL-style) are not supported")
    if view.ndim > TB_MAX_NDIM:
        raise BufferError(f"asarray(): the buffer has {view.ndim} dimensions; at most 64")
    if view.itemsize < 1 or view.itemsize > 16:
        raise BufferError(f"asarray(): unsupported buffer itemsize {view.itemsize}")
    cdef const char* fmt = view.format
    cdef bint raw = raw_dtype is not None and view.itemsize == 1 and (
        fmt == NULL or strcmp(fmt, "B") == 0 or strcmp(fmt, "b") == 0 or strcmp(fmt, "c") == 0
    ) and view.ndim == 1 and (view.strides == NULL or view.strides[0] == 1)
    cdef int i
    cdef int64_t item, n
    if raw:
        t._dtype = _dl_dtype(raw_dtype)
        item = _itemsize(t._dtype)
        if view.len % item:
            raise ValueError(
                f"asarray(): a buffer of {view.len} bytes is not a whole number of "
                f"{raw_dtype} elements ({item} bytes each)")
        t._set_ndim(1)
        t._shape[0] = view.len // item
        t._strides[0] = 1
        if t._dtype.bits < 8:
            t._flags |= TB_FLAG_SUBBYTE_PADDED
    else:
        t._dtype = _buffer_dtype(fmt, view.itemsize)
        item = view.itemsize
        t._set_ndim(view.ndim)
        if view.ndim == 1 and view.shape == NULL:
            t._shape[0] = view.len // item
        elif view.ndim > 1 and view.shape == NULL:
            raise BufferError(
                f"asarray(): the buffer has {view.ndim} dimensions but no shape (a "
                "malformed exporter)")
        else:
            for i in range(view.ndim):
                t._shape[i] = view.shape[i]
        if view.strides == NULL:
            _c_strides(view.ndim, t._shape, t._strides)
        else:
            for i in range(view.ndim):
                if view.strides[i] % item:
                    raise BufferError(
                        f"asarray(): buffer stride {view.strides[i]} of dimension {i} is not "
                        f"a multiple of the itemsize {item}")
                t._strides[i] = view.strides[i] // item
    t._data = view.buf
    t._device.device_type = kDLCPU
    t._device.device_id = 0
    if readonly:
        t._flags |= TB_FLAG_READ_ONLY
    _check_layout(t, "asarray()", "buffer")
    _check_buffer_extent(t, view, raw)
    return t


cdef int _check_buffer_extent(Tensor t, Py_buffer* view, bint raw) except -1:
    """The exporter's len agrees with its shape and itemsize (PEP 3118: len is their
    product), and its memory is there: one of them lied otherwise, and the reads
    would go where the other says. (_check_layout bounded the product; raw bytes
    take their shape from len.)"""
    cdef int64_t nbytes = t._size() * view.itemsize if not raw else view.len
    if view.len != nbytes:
        raise BufferError(
            f"asarray(): the buffer says it holds {view.len} bytes, but its shape "
            f"{t.shape} and itemsize {view.itemsize} say {nbytes} (a malformed exporter)")
    if view.buf == NULL and nbytes > 0:
        raise BufferError(
            f"asarray(): the buffer of {nbytes} bytes has a NULL data pointer (a "
            "malformed exporter)")
    return 0


def as_bytes_view(Tensor t):
    """The bytes of a C-contiguous tensor as a 1-d uint8 view."""
    if not t._c_contiguous():
        raise ValueError("internal: as_bytes_view needs a C-contiguous tensor")
    cdef Tensor v = _view(t)
    v._set_ndim(1)
    v._shape[0] = t._nbytes()
    v._strides[0] = 1
    v._dtype.code = kDLUInt
    v._dtype.bits = 8
    v._flags &= ~TB_FLAG_SUBBYTE_PADDED
    return v


def reinterpret(Tensor raw, dtype, tuple shape, bint packed):
    """A C-contiguous view of the 1-d uint8 tensor raw with a new dtype and shape."""
    if raw._ndim != 1 or raw._dtype.code != kDLUInt or raw._dtype.bits != 8 or \
            (raw._shape[0] > 1 and raw._strides[0] != 1):
        raise ValueError("a tensor can only be rebuilt from contiguous bytes")
    cdef Py_ssize_t n = len(shape), i
    if n > TB_MAX_NDIM:
        raise ValueError(f"invalid shape of {n} dimensions (a tensor has 0 to 64 dimensions)")
    cdef int64_t extents[TB_MAX_NDIM]
    for i in range(n):
        if type(shape[i]) is bool:   # (NumPy refuses it too)
            raise ValueError(f"invalid shape {shape}: {shape[i]!r} is not an extent")
        try:
            extents[i] = _operator_index(shape[i])   # (a float is no extent)
        except TypeError:
            raise ValueError(f"invalid shape {shape}: {shape[i]!r} is not an integer") from None
        except OverflowError:
            raise ValueError(f"invalid shape {shape}: {shape[i]} is out of range") from None
    cdef Tensor v = _view(raw)
    v._set_ndim(<int>n)
    v._dtype = _dl_dtype(dtype)
    if v._dtype.bits < 8 and not packed:
        v._flags |= TB_FLAG_SUBBYTE_PADDED
    else:
        v._flags &= ~TB_FLAG_SUBBYTE_PADDED
    for i in range(n):
        v._shape[i] = extents[i]
        v._strides[i] = 1
    try:
        _check_layout(v, "unpickling", "tensor")
    except BufferError as exc:
        raise ValueError(f"invalid shape {shape} for {raw._nbytes()} bytes: {exc}") from None
    _c_strides(n, v._shape, v._strides)
    if v._nbytes() != raw._nbytes():
        raise ValueError(
            f"{raw._nbytes()} bytes cannot hold a {dtype} tensor of shape {shape}")
    return v


# --------------------------------------------------------------------------
# NumPy arrays through the buffer protocol (asarray and convert)
# --------------------------------------------------------------------------

# 1: reading NumPy's struct agreed with its buffer; -1: it did not (never read
# it again); 0: not checked yet.
cdef int _npy_struct_state = 0


cdef Tensor _import_ndarray(object obj):
    """A zero-copy Tensor of a NumPy array (the same memory, shape, strides, dtype
    and read-only flag its __dlpack__ would give, much faster), or None when DLPack
    must be asked instead (ml_dtypes, byte-swapped or unaligned data...)."""
    global _npy_struct_state
    cdef Tensor t
    if _npy_struct_state < 0:
        return _import_ndarray_buffer(obj)
    t = _import_ndarray_struct(obj)
    if _npy_struct_state == 0 and t is not None:
        _npy_struct_state = 1 if _same_description(t, _import_ndarray_buffer(obj)) else -1
        if _npy_struct_state < 0:
            return _import_ndarray_buffer(obj)
    return t


cdef bint _same_description(Tensor a, Tensor b):
    cdef int i
    if b is None or a._ndim != b._ndim or a._ptr() != b._ptr() or \
            a._dtype.code != b._dtype.code or a._dtype.bits != b._dtype.bits or \
            a._flags != b._flags:
        return False
    for i in range(a._ndim):
        if a._shape[i] != b._shape[i] or (a._shape[i] > 1 and a._strides[i] != b._strides[i]):
            return False
    return True


cdef Tensor _import_ndarray_struct(object obj):
    cdef tb_npy_array* arr = <tb_npy_array*><PyObject*>obj
    cdef tb_npy_descr* descr = arr.descr
    cdef DLDataType dt
    cdef int i, nd = arr.nd
    cdef int64_t item
    dt.lanes = 1
    if descr == NULL or not tb_npy_dtype(descr.type_num, &dt.code, &dt.bits):
        return None
    if descr.byteorder != b'=' and descr.byteorder != b'|' and \
            descr.byteorder != TB_NATIVE_ORDER:
        return None
    if nd < 0 or nd > TB_MAX_NDIM or (nd > 0 and (arr.dimensions == NULL or arr.strides == NULL)):
        return None
    item = dt.bits // 8
    for i in range(nd):
        if arr.strides[i] % item:
            return None
    cdef Tensor t = _new_tensor()
    if nd <= TB_INLINE_NDIM:
        t._ndim = nd            # a fresh Tensor's shape and strides are inline
    else:
        t._set_ndim(nd)
    for i in range(nd):
        t._shape[i] = arr.dimensions[i]
        t._strides[i] = arr.strides[i] // item
    t._dtype = dt
    t._data = arr.data
    t._device.device_type = kDLCPU
    t._device.device_id = 0
    if not (arr.flags & TB_NPY_WRITEABLE):
        t._flags = TB_FLAG_READ_ONLY
    _check_layout(t, "asarray()", "numpy.ndarray")
    Py_INCREF(obj)
    t._managed = <void*>obj
    t._owner_kind = OWN_OBJECT
    return t


cdef Tensor _import_ndarray_buffer(object obj):
    cdef Tensor t = _new_tensor()
    cdef Py_buffer* view = &t._buffer
    if _get_buffer_or_error(obj, view, PyBUF_RECORDS_RO) != 0:
        PyErr_Clear()
        return None
    t._owner_kind = OWN_BUFFER
    cdef int code = _format_code(view.format)
    cdef int i
    cdef Py_ssize_t item = view.itemsize
    if code < 0 or item < 1 or item > 16 or view.ndim > TB_MAX_NDIM or \
            view.suboffsets != NULL or (view.ndim > 0 and view.shape == NULL):
        return None
    t._dtype.code = <uint8_t>code
    t._dtype.bits = <uint8_t>(item * 8)
    t._dtype.lanes = 1
    if not _dtype_known(t._dtype):
        return None
    t._set_ndim(view.ndim)
    for i in range(view.ndim):
        t._shape[i] = view.shape[i]
        if view.strides == NULL or view.strides[i] % item:
            return None
        t._strides[i] = view.strides[i] // item
    t._data = view.buf
    t._device.device_type = kDLCPU
    t._device.device_id = 0
    if view.readonly:
        t._flags = TB_FLAG_READ_ONLY
    _check_layout(t, "asarray()", "buffer")
    return t


def _ndarray_struct_state():
    """1 when asarray reads NumPy's array struct, -1 when it fell back (for tests)."""
    return _npy_struct_state
