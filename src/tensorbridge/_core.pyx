# SPDX-License-Identifier: Apache-2.0
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: embedsignature=True, initializedcheck=False
"""The compiled DLPack core: the Tensor view, capsule import and export.

Ownership invariants (docs/design.md, "Ownership and lifetime"):

1. A Tensor either *owns* its memory (``_owner_kind != OWN_NONE``: a producer's
   managed tensor, a Py_buffer, or an allocation of ours) or is a *view* whose
   ``_base`` is the owning Tensor (never a chain of views).
2. Importing a capsule: check the name, read the pointer, rename the capsule to
   ``used_*`` and only then wrap the pointer in a Tensor; from that moment the
   Tensor owns it, so every later failure frees it through ``__dealloc__``.
3. ``__dealloc__`` of an owner calls the producer's deleter once (if not NULL).
   Views keep the owner alive, so the deleter runs when the last view dies.
4. Exported managed tensors hold a strong reference to the exporting Tensor
   in ``manager_ctx``; see _runtime.h for the deleters and destructors.
5. Shape and strides are always copied into the Tensor: nothing points into a
   producer's arrays after the import returns.
"""

cimport cython
from cpython.ref cimport PyObject, PyTypeObject, Py_INCREF, Py_DECREF, Py_TYPE
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.buffer cimport (
    PyBuffer_Release, PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES,
    PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS,
)
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset, strcmp
from libc.stdlib cimport free

from tensorbridge._dlpack cimport *

cdef extern from "Python.h":
    ctypedef void (*PyCapsule_Destructor)(PyObject*) noexcept
    object PyCapsule_New(void* pointer, const char* name, PyCapsule_Destructor destructor)
    void* PyCapsule_GetPointer(object capsule, const char* name) except? NULL
    const char* PyCapsule_GetName(object capsule) except? NULL
    int PyCapsule_SetName(object capsule, const char* name) except -1
    bint PyCapsule_IsValid(object capsule, const char* name)
    bint PyCapsule_CheckExact(object o)
    object PyObject_VectorcallMethod(object name, PyObject** args, size_t nargsf,
                                     PyObject* kwnames)
    size_t PY_VECTORCALL_ARGUMENTS_OFFSET

cdef extern from "_runtime.h":
    void tb_export_deleter_versioned(DLManagedTensorVersioned*) noexcept nogil
    void tb_export_deleter_legacy(DLManagedTensor*) noexcept nogil
    void tb_capsule_destructor_versioned(PyObject*) noexcept
    void tb_capsule_destructor_legacy(PyObject*) noexcept
    void tb_copy_to_contiguous(char* dst, const char* src, int ndim, const int64_t* shape,
                               const int64_t* byte_strides, size_t itemsize) noexcept nogil
    bint tb_mul_overflow(int64_t a, int64_t b, int64_t* out) noexcept nogil
    bint tb_add_overflow(int64_t a, int64_t b, int64_t* out) noexcept nogil

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** memptr, size_t alignment, size_t size)

from tensorbridge._dtypes import DTYPES as _DTYPES
from tensorbridge._devices import (
    DLDeviceType as _DLDeviceType,
    _make as _make_device,
    as_device as _as_device,
    device_name as _device_name,
)

# --------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------

#: The DLPack version tensorbridge implements, as (major, minor).
DLPACK_VERSION = (TB_DLPACK_MAJOR, TB_DLPACK_MINOR)
#: The ``flags`` bits of DLManagedTensorVersioned.
FLAG_READ_ONLY = TB_FLAG_READ_ONLY
FLAG_IS_COPIED = TB_FLAG_IS_COPIED
FLAG_SUBBYTE_PADDED = TB_FLAG_SUBBYTE_PADDED
#: The largest ndim an import accepts (NumPy's limit).
MAX_NDIM = 64
#: Alignment of every buffer tensorbridge allocates (what XLA and TF ask for).
ALIGNMENT = 64

cdef enum:
    TB_MAX_NDIM = 64
    TB_INLINE_NDIM = 8
    OWN_NONE = 0          # a view: _base owns the memory
    OWN_LEGACY = 1        # _managed is a producer's DLManagedTensor*
    OWN_VERSIONED = 2     # _managed is a producer's DLManagedTensorVersioned*
    OWN_BUFFER = 3        # _buffer holds a Py_buffer to release
    OWN_ALLOC = 4         # _managed is memory from posix_memalign

cdef uint64_t KNOWN_FLAGS = TB_FLAG_READ_ONLY | TB_FLAG_IS_COPIED | TB_FLAG_SUBBYTE_PADDED
# Keep byte arithmetic far from int64 overflow.
cdef int64_t BYTE_LIMIT = (<int64_t>1) << 62

# --------------------------------------------------------------------------
# dtype and device tables
# --------------------------------------------------------------------------

cdef list _dtype_keepalive = list(_DTYPES.values())
cdef PyObject* _dtype_table[18][129]
memset(_dtype_table, 0, sizeof(_dtype_table))
for _d in _dtype_keepalive:
    _dtype_table[<int>_d.code][<int>_d.bits] = <PyObject*>_d
del _d

cdef inline object _dtype_obj(DLDataType dt):
    return <object>_dtype_table[dt.code][dt.bits]

cdef inline bint _dtype_known(DLDataType dt) noexcept:
    return dt.code < 18 and dt.bits <= 128 and _dtype_table[dt.code][dt.bits] != NULL

cdef inline bint _device_known(int32_t device_type) noexcept:
    return 1 <= device_type <= 18 and device_type != 5 and device_type != 6

cdef inline bint _host_accessible(int32_t device_type) noexcept:
    return (device_type == kDLCPU or device_type == kDLCUDAHost
            or device_type == kDLROCMHost or device_type == kDLCUDAManaged)

cdef inline size_t _itemsize(DLDataType dt) noexcept:
    return (dt.bits + 7) // 8

# Cached __dlpack_device__() answers for device_id 0, per device type.
cdef dict _dlpack_device_cache = {}

cdef object _dlpack_device_tuple(DLDevice dev):
    key = (<int64_t>dev.device_type << 32) | <uint32_t>dev.device_id
    result = _dlpack_device_cache.get(key)
    if result is None:
        result = (_DLDeviceType(dev.device_type), dev.device_id)
        _dlpack_device_cache[key] = result
    return result

cdef str _dev_str(DLDevice dev):
    return str(_make_device(dev.device_type, dev.device_id)) if _device_known(dev.device_type) \
        else f"device_type={dev.device_type}:{dev.device_id}"

# A valid address for zero-size buffers whose data pointer is NULL.
cdef char _empty_byte = 0

# Interned names and keyword tuples for calling producers.
cdef object _s_dlpack = "__dlpack__"
cdef object _s_dlpack_device = "__dlpack_device__"
cdef object _max_version_arg = (TB_DLPACK_MAJOR, TB_DLPACK_MINOR)

# --------------------------------------------------------------------------
# Tensor
# --------------------------------------------------------------------------

@cython.final
cdef class Tensor:
    """A strided, typed view of memory shared through DLPack.

    Not constructible directly: use :func:`tensorbridge.from_dlpack` or
    :func:`tensorbridge.asarray`. ``strides`` are in elements.
    """

    cdef void* _data                 # DLTensor.data (may be an opaque handle)
    cdef uint64_t _byte_offset       # bytes from _data to element 0
    cdef DLDevice _device
    cdef DLDataType _dtype
    cdef int _ndim
    cdef int64_t* _shape
    cdef int64_t* _strides
    cdef int64_t _dims[2 * TB_INLINE_NDIM]
    cdef uint64_t _flags             # READ_ONLY / IS_COPIED / SUBBYTE_PADDED
    cdef int _owner_kind
    cdef void* _managed
    cdef Py_buffer _buffer
    cdef object _base                # the owning Tensor, for views
    cdef object _shape_tuple
    cdef object _strides_tuple
    cdef object __weakref__

    def __cinit__(self):
        # A blank Tensor is a safe, empty 1-d float32 CPU tensor.
        self._shape = self._dims
        self._strides = self._dims + TB_INLINE_NDIM
        self._ndim = 1
        self._shape[0] = 0
        self._strides[0] = 1
        self._dtype.code = kDLFloat
        self._dtype.bits = 32
        self._dtype.lanes = 1
        self._device.device_type = kDLCPU
        self._device.device_id = 0
        self._owner_kind = OWN_NONE

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "tensorbridge.Tensor cannot be constructed directly; use "
            "tensorbridge.from_dlpack(obj) or tensorbridge.asarray(obj)"
        )

    def __dealloc__(self):
        if self._shape != self._dims:
            PyMem_Free(self._shape)
        cdef DLManagedTensor* legacy
        cdef DLManagedTensorVersioned* versioned
        if self._owner_kind == OWN_VERSIONED:
            versioned = <DLManagedTensorVersioned*>self._managed
            if versioned.deleter != NULL:
                versioned.deleter(versioned)
        elif self._owner_kind == OWN_LEGACY:
            legacy = <DLManagedTensor*>self._managed
            if legacy.deleter != NULL:
                legacy.deleter(legacy)
        elif self._owner_kind == OWN_BUFFER:
            PyBuffer_Release(&self._buffer)
        elif self._owner_kind == OWN_ALLOC:
            free(self._managed)

    # -- internal helpers ---------------------------------------------------

    cdef int _set_ndim(self, int ndim) except -1:
        cdef int64_t* block
        if ndim > TB_INLINE_NDIM:
            block = <int64_t*>PyMem_Malloc(2 * ndim * sizeof(int64_t))
            if block == NULL:
                raise MemoryError()
            if self._shape != self._dims:
                PyMem_Free(self._shape)
            self._shape = block
            self._strides = block + ndim
        elif self._shape != self._dims:
            PyMem_Free(self._shape)
            self._shape = self._dims
            self._strides = self._dims + TB_INLINE_NDIM
        self._ndim = ndim
        self._shape_tuple = None
        self._strides_tuple = None
        return 0

    cdef inline object _owner(self):
        return self if self._owner_kind != OWN_NONE else self._base

    cdef int64_t _size(self) noexcept:
        cdef int64_t n = 1
        cdef int i
        for i in range(self._ndim):
            n *= self._shape[i]
        return n

    cdef int64_t _nbytes(self) noexcept:
        cdef int64_t n = self._size()
        if self._dtype.bits < 8 and not (self._flags & TB_FLAG_SUBBYTE_PADDED):
            return (n * self._dtype.bits + 7) // 8
        return n * <int64_t>_itemsize(self._dtype)

    cdef bint _c_contiguous(self) noexcept:
        cdef int64_t expected = 1
        cdef int i
        if self._size() == 0:
            return True
        for i in range(self._ndim - 1, -1, -1):
            if self._shape[i] != 1:
                if self._strides[i] != expected:
                    return False
                expected *= self._shape[i]
        return True

    cdef bint _f_contiguous(self) noexcept:
        cdef int64_t expected = 1
        cdef int i
        if self._size() == 0:
            return True
        for i in range(self._ndim):
            if self._shape[i] != 1:
                if self._strides[i] != expected:
                    return False
                expected *= self._shape[i]
        return True

    cdef inline char* _ptr(self) noexcept nogil:
        return <char*>self._data + self._byte_offset

    # -- public metadata ----------------------------------------------------

    @property
    def shape(self):
        """The extent of each dimension, as a tuple of ints."""
        if self._shape_tuple is None:
            self._shape_tuple = tuple([self._shape[i] for i in range(self._ndim)])
        return self._shape_tuple

    @property
    def strides(self):
        """The step of each dimension in elements (not bytes), as a tuple of ints."""
        if self._strides_tuple is None:
            self._strides_tuple = tuple([self._strides[i] for i in range(self._ndim)])
        return self._strides_tuple

    @property
    def ndim(self):
        """The number of dimensions."""
        return self._ndim

    @property
    def size(self):
        """The number of elements."""
        return self._size()

    @property
    def dtype(self):
        """The element type, a :class:`tensorbridge.DType`."""
        return _dtype_obj(self._dtype)

    @property
    def device(self):
        """Where the memory lives, a :class:`tensorbridge.Device`."""
        return _make_device(self._device.device_type, self._device.device_id)

    @property
    def itemsize(self):
        """Bytes per element (1 for the sub-byte float6/float4 types)."""
        return _itemsize(self._dtype)

    @property
    def nbytes(self):
        """Bytes the elements occupy (bit-packed float6/float4 count their packed size)."""
        return self._nbytes()

    @property
    def readonly(self):
        """True when the memory must not be written through this tensor."""
        return bool(self._flags & TB_FLAG_READ_ONLY)

    def data_ptr(self):
        """The address of element 0 (``data + byte_offset``) as an int."""
        return <uintptr_t>self._data + <uintptr_t>self._byte_offset

    def is_contiguous(self):
        """True for C-contiguous (row-major) layout; size-1 and empty dims are ignored."""
        return self._c_contiguous()

    def __repr__(self):
        flags = ", readonly" if self._flags & TB_FLAG_READ_ONLY else ""
        return (f"tensorbridge.Tensor(shape={self.shape}, dtype={_dtype_obj(self._dtype)}, "
                f"device={_dev_str(self._device)}{flags})")

    # -- DLPack producer ----------------------------------------------------

    def __dlpack_device__(self):
        """``(DLDeviceType, device_id)`` of the memory."""
        return _dlpack_device_tuple(self._device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule.

        ``max_version`` None or major < 1 gives a legacy ``dltensor`` capsule,
        otherwise a ``dltensor_versioned`` one stamped with version 1.3.
        ``dl_device`` may be the tensor's own device, or ``(kDLCPU, 0)`` for
        host-accessible memory; ``copy=True`` exports a private copy (CPU data
        only) flagged ``IS_COPIED``. Anything impossible raises BufferError.
        """
        cdef bint versioned = _parse_max_version(max_version)
        _check_export_stream(self._device.device_type, stream)
        cdef DLDevice target = self._device
        if dl_device is not None:
            target = _parse_dl_device(dl_device, "__dlpack__(): dl_device")
            if target.device_type != self._device.device_type or \
                    target.device_id != self._device.device_id:
                if not (target.device_type == kDLCPU and target.device_id == 0
                        and _host_accessible(self._device.device_type)):
                    raise BufferError(
                        f"__dlpack__(): cannot export {_dev_str(self._device)} memory to "
                        f"dl_device={_dev_str(target)}; tensorbridge exports on the tensor's "
                        "own device, or to (kDLCPU, 0) for host-accessible memory")
        cdef Tensor source = self
        cdef uint64_t extra = 0
        if copy is True:
            if target.device_type != kDLCPU:
                raise BufferError(
                    f"__dlpack__(): copy=True needs CPU-accessible memory; this tensor is on "
                    f"{_dev_str(self._device)}, which tensorbridge cannot copy")
            source = _copy_contiguous(self, target)
            extra = TB_FLAG_IS_COPIED
        elif copy is not None and copy is not False:
            raise TypeError(f"__dlpack__(): copy must be True, False or None; got {copy!r}")
        if not versioned and (source._flags & TB_FLAG_READ_ONLY):
            raise BufferError(
                "__dlpack__(): cannot export a read-only tensor as a legacy 'dltensor' "
                "capsule, which cannot mark it read-only; ask for a versioned capsule "
                "with __dlpack__(max_version=(1, 3))")
        return _export_capsule(source, versioned, extra, &target)

    # -- NumPy array interface and the buffer protocol ------------------------

    @property
    def __array_interface__(self):
        if not _host_accessible(self._device.device_type):
            raise AttributeError(
                f"__array_interface__ is only available for CPU-accessible memory; "
                f"this tensor is on {_dev_str(self._device)}")
        typestr = _typestr(self._dtype, self._flags)
        if typestr is None:
            raise AttributeError(
                f"__array_interface__: NumPy has no built-in type for "
                f"{_dtype_obj(self._dtype)}")
        cdef size_t item = _itemsize(self._dtype)
        strides = None if self._c_contiguous() else tuple(
            [self._strides[i] * <int64_t>item for i in range(self._ndim)])
        return {
            "shape": self.shape,
            "typestr": typestr,
            "data": (<uintptr_t>self._ptr(), bool(self._flags & TB_FLAG_READ_ONLY)),
            "strides": strides,
            "version": 3,
        }

    def __getbuffer__(self, Py_buffer* view, int flags):
        if not _host_accessible(self._device.device_type):
            raise BufferError(
                f"the buffer protocol needs CPU-accessible memory; this tensor is on "
                f"{_dev_str(self._device)}")
        cdef const char* fmt = _buffer_format(self._dtype, self._flags)
        if fmt == NULL:
            raise BufferError(
                f"{_dtype_obj(self._dtype)} has no buffer-protocol format; "
                "use numpy.asarray(tensor) or DLPack instead")
        if (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE and (self._flags & TB_FLAG_READ_ONLY):
            raise BufferError("cannot export a read-only tensor as a writable buffer")
        if (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS and not self._c_contiguous():
            raise BufferError("the tensor is not C-contiguous")
        if (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS and not self._f_contiguous():
            raise BufferError("the tensor is not Fortran-contiguous")
        if (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS and not (
                self._c_contiguous() or self._f_contiguous()):
            raise BufferError("the tensor is not contiguous")
        if (flags & PyBUF_STRIDES) != PyBUF_STRIDES and not self._c_contiguous():
            raise BufferError("the tensor is not C-contiguous; request strides")
        cdef size_t item = _itemsize(self._dtype)
        cdef Py_ssize_t* dims = <Py_ssize_t*>PyMem_Malloc((2 * self._ndim + 1) * sizeof(Py_ssize_t))
        if dims == NULL:
            raise MemoryError()
        cdef int i
        for i in range(self._ndim):
            dims[i] = self._shape[i]
            dims[self._ndim + i] = self._strides[i] * <Py_ssize_t>item
        view.buf = self._ptr() if self._data != NULL else <void*>&_empty_byte
        view.obj = self
        view.len = self._nbytes()
        view.readonly = 1 if self._flags & TB_FLAG_READ_ONLY else 0
        view.itemsize = item
        view.format = <char*>fmt if (flags & PyBUF_FORMAT) == PyBUF_FORMAT else NULL
        view.ndim = self._ndim
        view.shape = dims if (flags & PyBUF_ND) == PyBUF_ND else NULL
        view.strides = dims + self._ndim if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = dims

    def __releasebuffer__(self, Py_buffer* view):
        PyMem_Free(view.internal)


cdef inline Tensor _new_tensor():
    return Tensor.__new__(Tensor)


# --------------------------------------------------------------------------
# dtype spellings for NumPy and the buffer protocol
# --------------------------------------------------------------------------

import sys as _sys
cdef str _endian = "<" if _sys.byteorder == "little" else ">"
cdef dict _typestrs = {
    (kDLBool, 8): "|b1",
    (kDLInt, 8): "|i1", (kDLInt, 16): _endian + "i2", (kDLInt, 32): _endian + "i4",
    (kDLInt, 64): _endian + "i8",
    (kDLUInt, 8): "|u1", (kDLUInt, 16): _endian + "u2", (kDLUInt, 32): _endian + "u4",
    (kDLUInt, 64): _endian + "u8",
    (kDLFloat, 16): _endian + "f2", (kDLFloat, 32): _endian + "f4",
    (kDLFloat, 64): _endian + "f8",
    (kDLComplex, 64): _endian + "c8", (kDLComplex, 128): _endian + "c16",
}

cdef object _typestr(DLDataType dt, uint64_t flags):
    return _typestrs.get((dt.code, dt.bits))

cdef const char* _buffer_format(DLDataType dt, uint64_t flags) noexcept:
    if dt.code == kDLBool:
        return "?"
    if dt.code == kDLInt:
        if dt.bits == 8: return "b"
        if dt.bits == 16: return "h"
        if dt.bits == 32: return "i"
        if dt.bits == 64: return "q"
    if dt.code == kDLUInt:
        if dt.bits == 8: return "B"
        if dt.bits == 16: return "H"
        if dt.bits == 32: return "I"
        if dt.bits == 64: return "Q"
    if dt.code == kDLFloat:
        if dt.bits == 16: return "e"
        if dt.bits == 32: return "f"
        if dt.bits == 64: return "d"
    if dt.code == kDLComplex:
        if dt.bits == 64: return "Zf"
        if dt.bits == 128: return "Zd"
    return NULL


# --------------------------------------------------------------------------
# Argument parsing shared by the producer and the consumer
# --------------------------------------------------------------------------

cdef bint _parse_max_version(object max_version) except -1:
    """True when the consumer can read versioned capsules."""
    if max_version is None:
        return False
    if type(max_version) is not tuple or len(<tuple>max_version) != 2:
        raise TypeError(
            f"__dlpack__(): max_version must be None or a (major, minor) tuple; "
            f"got {max_version!r}")
    major = (<tuple>max_version)[0]
    minor = (<tuple>max_version)[1]
    if not isinstance(major, int) or not isinstance(minor, int):
        raise TypeError(
            f"__dlpack__(): max_version must hold two ints; got {max_version!r}")
    return major >= 1


cdef int _check_export_stream(int32_t device_type, object stream) except -1:
    if stream is None:
        return 0
    if type(stream) is bool or not isinstance(stream, int):
        raise TypeError(f"__dlpack__(): stream must be None or an int; got {stream!r}")
    if stream < -1:
        raise ValueError(f"__dlpack__(): stream must be -1 or a stream handle; got {stream}")
    if device_type == kDLCPU:
        if stream != -1:
            raise BufferError(
                f"__dlpack__(): stream={stream} is not valid for CPU memory; CPU "
                "exports take stream=None")
    elif device_type == kDLCUDA or device_type == kDLCUDAManaged:
        if stream == 0:
            raise ValueError(
                "__dlpack__(): stream=0 is ambiguous for CUDA; pass 1 (legacy default), "
                "2 (per-thread default), a stream handle, or -1 for no synchronisation")
    # tensorbridge never enqueues device work, so no stream ever holds pending
    # writes of ours: every valid stream is already safe to read on.
    return 0


cdef DLDevice _parse_dl_device(object value, str what) except *:
    cdef DLDevice dev
    if type(value) is not tuple or len(<tuple>value) != 2:
        raise TypeError(f"{what} must be a (device_type, device_id) tuple; got {value!r}")
    device_type = (<tuple>value)[0]
    device_id = (<tuple>value)[1]
    if device_id is None:   # PaddlePaddle reports (kDLCPU, None)
        device_id = 0
    if not isinstance(device_type, int) or not isinstance(device_id, int) or \
            isinstance(device_type, bool) or isinstance(device_id, bool):
        raise TypeError(f"{what} must hold two ints; got {value!r}")
    if not (-2**31 <= device_type < 2**31 and -2**31 <= device_id < 2**31):
        raise BufferError(f"{what} is out of range; got {value!r}")
    dev.device_type = device_type
    dev.device_id = device_id
    return dev


# --------------------------------------------------------------------------
# Import: capsule -> Tensor
# --------------------------------------------------------------------------

cdef inline void _call_deleter(void* managed, int kind) noexcept:
    cdef DLManagedTensorVersioned* versioned
    cdef DLManagedTensor* legacy
    if kind == OWN_VERSIONED:
        versioned = <DLManagedTensorVersioned*>managed
        if versioned.deleter != NULL:
            versioned.deleter(versioned)
    else:
        legacy = <DLManagedTensor*>managed
        if legacy.deleter != NULL:
            legacy.deleter(legacy)


cdef Tensor _adopt(void* managed, int kind):
    """Wrap a managed tensor whose capsule was already renamed (so we own it)."""
    cdef Tensor t
    try:
        t = _new_tensor()
    except BaseException:
        _call_deleter(managed, kind)
        raise
    t._managed = managed
    t._owner_kind = kind
    return t


cdef Tensor _import_capsule(object capsule):
    """Consume a DLPack capsule (renaming it first) and return the owning Tensor."""
    cdef const char* name = PyCapsule_GetName(capsule)
    cdef DLManagedTensorVersioned* versioned
    cdef DLManagedTensor* legacy
    cdef Tensor t
    if name != NULL and strcmp(name, TB_CAPSULE_VERSIONED) == 0:
        versioned = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, TB_CAPSULE_VERSIONED)
        PyCapsule_SetName(capsule, TB_CAPSULE_VERSIONED_USED)
        t = _adopt(versioned, OWN_VERSIONED)
        if versioned.version.major != TB_DLPACK_MAJOR:
            # Only version, manager_ctx, deleter and flags may be read now;
            # the Tensor's __dealloc__ calls the deleter.
            raise BufferError(
                f"from_dlpack(): the capsule holds DLPack version "
                f"{versioned.version.major}.{versioned.version.minor}; tensorbridge reads "
                f"major version {TB_DLPACK_MAJOR} (up to {TB_DLPACK_MAJOR}.{TB_DLPACK_MINOR})")
        _fill(t, &versioned.dl_tensor, versioned.flags)
        return t
    if name != NULL and strcmp(name, TB_CAPSULE_LEGACY) == 0:
        legacy = <DLManagedTensor*>PyCapsule_GetPointer(capsule, TB_CAPSULE_LEGACY)
        PyCapsule_SetName(capsule, TB_CAPSULE_LEGACY_USED)
        t = _adopt(legacy, OWN_LEGACY)
        _fill(t, &legacy.dl_tensor, 0)   # legacy imports are writable
        return t
    if name != NULL and (strcmp(name, TB_CAPSULE_VERSIONED_USED) == 0
                         or strcmp(name, TB_CAPSULE_LEGACY_USED) == 0):
        raise BufferError(
            f"from_dlpack(): this DLPack capsule was already consumed (it is named "
            f"{name.decode()!r}); a capsule can be imported only once")
    shown = "NULL" if name == NULL else repr(name.decode(errors="replace"))
    raise TypeError(
        f"from_dlpack(): expected a capsule named 'dltensor' or 'dltensor_versioned'; "
        f"got a capsule named {shown}")


cdef str _dtype_error(DLDataType dt):
    if dt.code == kDLOpaqueHandle:
        return (f"from_dlpack(): DLTensor.dtype code 3 (kDLOpaqueHandle, bits={dt.bits}) "
                "cannot be interpreted without an out-of-band agreement; not supported")
    known = sorted({(d.code, d.bits) for d in _dtype_keepalive})
    if dt.code < 18 and dt.code != kDLOpaqueHandle:
        bits = [b for c, b in known if c == dt.code]
        return (f"from_dlpack(): DLTensor.dtype has code {dt.code} with bits={dt.bits}; "
                f"that code allows bits in {bits}")
    return (f"from_dlpack(): unknown DLTensor.dtype code {dt.code} (bits={dt.bits}); "
            "DLPack 1.3 defines codes 0 to 17")


cdef int _fill(Tensor t, DLTensor* dl, uint64_t flags) except -1:
    """Validate a producer's DLTensor and copy its description into t."""
    cdef int ndim = dl.ndim
    cdef int i
    cdef int64_t extent, size = 1, span = 0, stride, step
    cdef DLDataType dt = dl.dtype
    if ndim < 0 or ndim > TB_MAX_NDIM:
        raise BufferError(
            f"from_dlpack(): DLTensor.ndim is {ndim}; expected 0 to {TB_MAX_NDIM}")
    if dt.lanes != 1:
        raise BufferError(
            f"from_dlpack(): DLTensor.dtype.lanes is {dt.lanes}; tensorbridge imports "
            "scalar element types only (lanes == 1)")
    if not _dtype_known(dt):
        raise BufferError(_dtype_error(dt))
    if not _device_known(dl.device.device_type):
        raise BufferError(
            f"from_dlpack(): unknown DLTensor.device.device_type {dl.device.device_type}; "
            "DLPack 1.3 defines 1-4 and 7-18")
    if dl.device.device_id < 0:
        raise BufferError(
            f"from_dlpack(): DLTensor.device.device_id is {dl.device.device_id}; "
            "expected a non-negative index")
    if ndim > 0 and dl.shape == NULL:
        raise BufferError(f"from_dlpack(): DLTensor.shape is NULL but ndim is {ndim}")
    t._set_ndim(ndim)
    cdef bint overflow = False
    for i in range(ndim):
        extent = dl.shape[i]
        if extent < 0:
            raise BufferError(
                f"from_dlpack(): DLTensor.shape[{i}] is {extent}; extents must be >= 0")
        t._shape[i] = extent
        overflow |= tb_mul_overflow(size, extent, &size)
    if ndim > 0 and dl.strides == NULL:
        # Legacy and pre-1.2 producers: NULL strides mean C order.
        step = 1
        for i in range(ndim - 1, -1, -1):
            t._strides[i] = step
            step *= t._shape[i] if t._shape[i] > 0 else 1
    else:
        memcpy(t._strides, dl.strides, ndim * sizeof(int64_t))
    cdef int64_t item = _itemsize(dt)
    for i in range(ndim):
        if t._shape[i] == 0:   # empty, however large the other extents
            size = 0
            overflow = False
    if size != 0 or overflow:
        if overflow or tb_mul_overflow(size, item, &extent) or extent > BYTE_LIMIT:
            raise BufferError(
                f"from_dlpack(): DLTensor.shape {t.shape} has too many elements "
                f"for a 64-bit address space")
        if dl.data == NULL:
            raise BufferError(
                f"from_dlpack(): DLTensor.data is NULL but the tensor has {size} elements")
        # The bytes between the lowest and the highest element must fit too.
        for i in range(ndim):
            stride = t._strides[i]
            if stride < 0:
                stride = BYTE_LIMIT + 1 if stride < -BYTE_LIMIT else -stride
            if (tb_mul_overflow(stride, (t._shape[i] - 1) * item, &step)
                    or tb_add_overflow(span, step, &span) or span > BYTE_LIMIT):
                raise BufferError(
                    f"from_dlpack(): DLTensor.strides {t.strides} with shape {t.shape} "
                    "span more memory than a 64-bit address space")
    t._data = dl.data
    t._byte_offset = dl.byte_offset
    t._device = dl.device
    t._dtype = dt
    t._flags = flags & KNOWN_FLAGS
    if dt.bits < 8 and not (flags & TB_FLAG_SUBBYTE_PADDED) and not t._c_contiguous():
        raise BufferError(
            f"from_dlpack(): bit-packed {_dtype_obj(dt)} data must be C-contiguous; "
            f"got strides {t.strides} for shape {t.shape}")
    return 0


# --------------------------------------------------------------------------
# Export: Tensor -> capsule
# --------------------------------------------------------------------------

cdef object _export_capsule(Tensor t, bint versioned, uint64_t extra_flags, DLDevice* device):
    """One PyMem block holds the managed struct, shape and strides."""
    cdef int ndim = t._ndim
    cdef size_t head = sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor)
    cdef size_t dims = (ndim if ndim > 0 else 1) * sizeof(int64_t)
    cdef char* block = <char*>PyMem_Malloc(head + 2 * dims)
    if block == NULL:
        raise MemoryError()
    cdef DLTensor* dl
    cdef DLManagedTensorVersioned* mv
    cdef DLManagedTensor* ml
    if versioned:
        mv = <DLManagedTensorVersioned*>block
        mv.version.major = TB_DLPACK_MAJOR
        mv.version.minor = TB_DLPACK_MINOR
        mv.manager_ctx = <void*>t
        mv.deleter = tb_export_deleter_versioned
        mv.flags = (t._flags & (TB_FLAG_READ_ONLY | TB_FLAG_SUBBYTE_PADDED)) | extra_flags
        dl = &mv.dl_tensor
    else:
        ml = <DLManagedTensor*>block
        ml.manager_ctx = <void*>t
        ml.deleter = tb_export_deleter_legacy
        dl = &ml.dl_tensor
    dl.shape = <int64_t*>(block + head)
    dl.strides = <int64_t*>(block + head + dims)
    dl.ndim = ndim
    dl.dtype = t._dtype
    dl.device = device[0]
    if ndim > 0:
        memcpy(dl.shape, t._shape, ndim * sizeof(int64_t))
        memcpy(dl.strides, t._strides, ndim * sizeof(int64_t))
    else:
        dl.shape[0] = 0
        dl.strides[0] = 0
    if t._size() == 0:
        dl.data = NULL          # the header's recommendation for empty tensors
        dl.byte_offset = 0
    else:
        dl.data = t._data
        dl.byte_offset = t._byte_offset
    Py_INCREF(t)
    try:
        if versioned:
            return PyCapsule_New(block, TB_CAPSULE_VERSIONED, tb_capsule_destructor_versioned)
        return PyCapsule_New(block, TB_CAPSULE_LEGACY, tb_capsule_destructor_legacy)
    except BaseException:
        PyMem_Free(block)
        Py_DECREF(t)
        raise


# --------------------------------------------------------------------------
# Copies and views
# --------------------------------------------------------------------------

cdef Tensor _alloc_tensor(int ndim, const int64_t* shape, DLDataType dtype, DLDevice device):
    """A new C-contiguous tensor backed by 64-byte aligned memory of ours."""
    cdef Tensor t = _new_tensor()
    t._set_ndim(ndim)
    cdef int64_t size = 1, step = 1
    cdef int i
    for i in range(ndim):
        t._shape[i] = shape[i]
        size *= shape[i]
    for i in range(ndim - 1, -1, -1):
        t._strides[i] = step
        step *= shape[i] if shape[i] > 0 else 1
    t._dtype = dtype
    t._device = device
    cdef int64_t nbytes = t._nbytes()
    cdef void* memory = NULL
    if nbytes > 0:
        if posix_memalign(&memory, ALIGNMENT, <size_t>nbytes) != 0:
            raise MemoryError(f"cannot allocate {nbytes} bytes")
        t._managed = memory
        t._owner_kind = OWN_ALLOC
    t._data = memory
    return t


cdef Tensor _copy_contiguous(Tensor src, DLDevice device):
    """A private C-contiguous copy of host-accessible memory."""
    cdef Tensor out = _alloc_tensor(src._ndim, src._shape, src._dtype, device)
    out._flags = src._flags & TB_FLAG_SUBBYTE_PADDED
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


# --------------------------------------------------------------------------
# Consumer: from_dlpack
# --------------------------------------------------------------------------

cdef enum:
    KW_STREAM = 1
    KW_DEVICE = 2
    KW_COPY = 4

# kwnames tuples for __dlpack__ calls, indexed by the KW_* bits present.
cdef list _kwnames = []
for _mask in range(8):
    _names = ["max_version"]
    if _mask & KW_STREAM:
        _names.append("stream")
    if _mask & KW_DEVICE:
        _names.append("dl_device")
    if _mask & KW_COPY:
        _names.append("copy")
    _kwnames.append(tuple(_names))
del _mask, _names
cdef object _kw_stream_only = ("stream",)


cdef object _call_dlpack(object x, int mask, object stream, object dl_device, object copy):
    """x.__dlpack__(max_version=(1, 3), [stream=], [dl_device=], [copy=])."""
    cdef PyObject* args[5]
    cdef int n = 2
    args[0] = <PyObject*>x
    args[1] = <PyObject*>_max_version_arg
    if mask & KW_STREAM:
        args[n] = <PyObject*>stream
        n += 1
    if mask & KW_DEVICE:
        args[n] = <PyObject*>dl_device
        n += 1
    if mask & KW_COPY:
        args[n] = <PyObject*>copy
        n += 1
    return PyObject_VectorcallMethod(_s_dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                     <PyObject*>_kwnames[mask])


cdef object _call_dlpack_legacy(object x, int mask, object stream):
    """The pre-2023.12 call: x.__dlpack__() or x.__dlpack__(stream=...)."""
    cdef PyObject* args[2]
    args[0] = <PyObject*>x
    if mask & KW_STREAM:
        args[1] = <PyObject*>stream
        return PyObject_VectorcallMethod(_s_dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                         <PyObject*>_kw_stream_only)
    return PyObject_VectorcallMethod(_s_dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)


cdef DLDevice _producer_device(object x) except *:
    cdef PyObject* args[1]
    args[0] = <PyObject*>x
    cdef bint missing = False
    try:
        result = PyObject_VectorcallMethod(
            _s_dlpack_device, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)
    except AttributeError:
        if hasattr(type(x), "__dlpack_device__"):
            raise
        missing = True
    if missing:
        _raise_not_dlpack(x)
    if type(result) is list:
        result = tuple(result)
    return _parse_dl_device(result, f"from_dlpack(): {type(x).__name__}.__dlpack_device__()")


cdef int _raise_not_dlpack(object x) except -1:
    missing = [m for m in ("__dlpack__", "__dlpack_device__") if not hasattr(type(x), m)]
    raise TypeError(
        f"from_dlpack(): expected an object with __dlpack__ and __dlpack_device__ or a "
        f"DLPack capsule; got {type(x).__module__}.{type(x).__qualname__}, which lacks "
        f"{' and '.join(missing)}")


cdef int _check_stream_arg(object stream) except -1:
    if stream is None:
        return 0
    if type(stream) is bool or not isinstance(stream, int):
        raise TypeError(f"from_dlpack(): stream must be None or an int; got {stream!r}")
    if stream < -1:
        raise ValueError(f"from_dlpack(): stream must be -1 or a stream handle; got {stream}")
    return 0


cdef inline bint _same_device(DLDevice a, DLDevice b) noexcept:
    return a.device_type == b.device_type and a.device_id == b.device_id


cdef DLDevice _requested_device(object device) except *:
    cdef DLDevice dev
    d = _as_device(device)
    dev.device_type = int(d.device_type)
    dev.device_id = d.index
    return dev


cdef PyTypeObject* _ndarray_type = NULL

cdef inline bint _is_ndarray(object x) noexcept:
    """Exactly numpy.ndarray (found by name, so NumPy is never imported)."""
    global _ndarray_type
    cdef PyTypeObject* tp = Py_TYPE(x)
    if tp == _ndarray_type:
        return True
    if _ndarray_type == NULL and strcmp(tp.tp_name, "numpy.ndarray") == 0:
        _ndarray_type = tp
        return True
    return False


cdef Tensor _from_producer(object x, object device, object copy, object stream):
    cdef DLDevice source
    if device is None and _is_ndarray(x):
        # NumPy memory is host memory and NumPy takes no stream, so there is
        # nothing __dlpack_device__() could change: the capsule says the rest.
        source.device_type = kDLCPU
        source.device_id = 0
    else:
        source = _producer_device(x)
    cdef DLDevice target = source
    cdef int mask = 0
    cdef bint self_copy = False
    stream_arg = None
    dl_device = None
    if device is not None:
        target = _requested_device(device)
    if source.device_type == kDLCUDA or source.device_type == kDLCUDAManaged:
        mask |= KW_STREAM
        stream_arg = 1 if stream is None else stream   # 1: the legacy default stream
        if stream_arg == 0:
            raise ValueError(
                "from_dlpack(): stream=0 is ambiguous for CUDA; pass 1 (legacy default), "
                "2 (per-thread default), a stream handle, or -1 for no synchronisation")
    elif source.device_type == kDLROCM:
        mask |= KW_STREAM
        stream_arg = 0 if stream is None else stream   # 0: the default stream on ROCm
    if not _same_device(source, target):
        mask |= KW_DEVICE
        dl_device = (target.device_type, target.device_id)
    if copy is True:
        if target.device_type == kDLCPU:
            self_copy = True      # import without a copy, then copy here if needed
        else:
            mask |= KW_COPY
    elif copy is False:
        mask |= KW_COPY

    try:
        capsule = _call_dlpack(x, mask, stream_arg, dl_device, copy)
    except TypeError as exc:
        if mask & (KW_DEVICE | KW_COPY):
            raise
        # A producer older than the 2023.12 keywords: the legacy call, once.
        try:
            capsule = _call_dlpack_legacy(x, mask, stream_arg)
        except TypeError as exc2:
            raise exc2 from exc
    except BufferError as exc:
        if mask & KW_DEVICE:
            raise BufferError(
                f"from_dlpack(): {type(x).__name__} cannot export its "
                f"{_dev_str(source)} data to {_dev_str(target)}: {exc}") from exc
        raise
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(
            f"from_dlpack(): {type(x).__name__}.__dlpack__() returned "
            f"{type(capsule).__name__}; expected a PyCapsule")
    cdef Tensor t = _import_capsule(capsule)
    if (mask & KW_DEVICE) and not _same_device(t._device, target):
        raise BufferError(
            f"from_dlpack(): {type(x).__name__}.__dlpack__(dl_device={dl_device}) returned "
            f"{_dev_str(t._device)} data instead of {_dev_str(target)}")
    if copy is False and (t._flags & TB_FLAG_IS_COPIED):
        raise BufferError(
            f"from_dlpack(): copy=False, but {type(x).__name__} could only export a copy")
    if self_copy and not (t._flags & TB_FLAG_IS_COPIED):
        return _copy_contiguous(t, t._device)
    return t


cdef Tensor _from_capsule_arg(object capsule, object device, object copy, object stream):
    cdef Tensor t = _import_capsule(capsule)
    cdef DLDevice target = t._device
    if device is not None:
        target = _requested_device(device)
    if stream is not None and stream != -1 and not _host_accessible(t._device.device_type):
        raise BufferError(
            f"from_dlpack(): a raw capsule cannot be synchronised with stream={stream}; "
            "pass the producer object instead of its capsule")
    if not _same_device(t._device, target):
        if target.device_type == kDLCPU and target.device_id == 0 and \
                _host_accessible(t._device.device_type):
            t = _relabel(t, target)
        else:
            raise BufferError(
                f"from_dlpack(): cannot move a capsule's {_dev_str(t._device)} data to "
                f"{_dev_str(target)}; a capsule carries no producer to ask for a copy")
    if copy is True:
        if t._flags & TB_FLAG_IS_COPIED:
            return t
        if t._device.device_type != kDLCPU:
            raise BufferError(
                f"from_dlpack(): copy=True of a capsule's {_dev_str(t._device)} data needs "
                "the producer; pass the producer object instead of its capsule")
        return _copy_contiguous(t, t._device)
    return t


cdef Tensor _relabel(Tensor t, DLDevice device):
    cdef Tensor v = _view(t)
    v._device = device
    return v


def from_dlpack(x, /, *, device=None, copy=None, stream=None):
    """Import a DLPack tensor, sharing its memory.

    Parameters
    ----------
    x : object
        Anything with ``__dlpack__`` and ``__dlpack_device__``, or a DLPack
        capsule (``"dltensor"`` or ``"dltensor_versioned"``), which is consumed.
    device : Device-like, optional
        The device the result must be on. When it differs from ``x``'s, the
        producer is asked to export there (``dl_device``).
    copy : bool, optional
        ``True``: the result has private memory. ``False``: never copy
        (BufferError when sharing is impossible). ``None``: copy only if needed.
    stream : int, optional
        For CUDA/ROCm producers, the stream the caller will use (``-1``: no
        synchronisation). ``None`` asks CUDA producers to order their work before
        the legacy default stream (``1``), ROCm producers before stream ``0``.
        Never passed to CPU producers.

    Returns
    -------
    Tensor

    Raises
    ------
    BufferError
        The tensor cannot be exchanged as asked (device, dtype, layout,
        a consumed capsule, ``copy=False`` impossible).
    TypeError
        ``x`` is not a DLPack object or capsule, or an argument has the wrong type.

    Examples
    --------
    >>> import numpy as np, tensorbridge as tb
    >>> a = np.arange(4.0)
    >>> t = tb.from_dlpack(a)
    >>> t.data_ptr() == a.ctypes.data
    True
    """
    if copy is not None and copy is not True and copy is not False:
        raise TypeError(f"from_dlpack(): copy must be True, False or None; got {copy!r}")
    _check_stream_arg(stream)
    if type(x) is Tensor and device is None and copy is not True:
        return _view(<Tensor>x)
    if PyCapsule_CheckExact(x):
        return _from_capsule_arg(x, device, copy, stream)
    return _from_producer(x, device, copy, stream)


def to_dlpack(tensor, /):
    """The legacy ``"dltensor"`` capsule of a Tensor or of any DLPack object.

    Prefer ``tensor.__dlpack__(max_version=(1, 3))``: legacy capsules cannot
    mark memory read-only, so a read-only tensor raises BufferError here.
    """
    cdef Tensor t
    if type(tensor) is Tensor:
        t = <Tensor>tensor
    else:
        t = from_dlpack(tensor)
    if t._flags & TB_FLAG_READ_ONLY:
        raise BufferError(
            "to_dlpack(): cannot export a read-only tensor as a legacy 'dltensor' capsule, "
            "which cannot mark it read-only; use tensor.__dlpack__(max_version=(1, 3)) "
            "for a versioned capsule")
    return _export_capsule(t, False, 0, &t._device)


# --------------------------------------------------------------------------
# Inspection without consuming
# --------------------------------------------------------------------------

def _inspect_capsule(capsule):
    """Describe a DLPack capsule without consuming it (for tools and tests)."""
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(f"expected a PyCapsule; got {type(capsule).__name__}")
    cdef const char* name = PyCapsule_GetName(capsule)
    if name == NULL:
        raise TypeError("the capsule has no name")
    cdef bytes bname = name
    cdef DLManagedTensorVersioned* mv
    cdef DLManagedTensor* ml
    cdef DLTensor* dl
    info = {"name": bname.decode()}
    if bname == b"dltensor_versioned":
        mv = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, name)
        info["version"] = (mv.version.major, mv.version.minor)
        info["flags"] = mv.flags
        info["deleter"] = mv.deleter != NULL
        if mv.version.major != TB_DLPACK_MAJOR:
            return info
        dl = &mv.dl_tensor
    elif bname == b"dltensor":
        ml = <DLManagedTensor*>PyCapsule_GetPointer(capsule, name)
        info["version"] = None
        info["flags"] = None
        info["deleter"] = ml.deleter != NULL
        dl = &ml.dl_tensor
    else:
        return info
    cdef int ndim = dl.ndim
    info["data"] = <uintptr_t>dl.data
    info["device"] = (dl.device.device_type, dl.device.device_id)
    info["ndim"] = ndim
    info["dtype"] = (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes)
    info["byte_offset"] = dl.byte_offset
    if 0 <= ndim <= TB_MAX_NDIM:
        info["shape"] = None if dl.shape == NULL else tuple([dl.shape[i] for i in range(ndim)])
        info["strides"] = None if dl.strides == NULL else tuple(
            [dl.strides[i] for i in range(ndim)])
    return info
