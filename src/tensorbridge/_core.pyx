# SPDX-License-Identifier: Apache-2.0
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: embedsignature=True, initializedcheck=False
"""The compiled DLPack core: the Tensor view, capsule import and export.

Ownership invariants (docs/design.md, "Ownership and lifetime"):

1. A Tensor either *owns* its memory (``_owner_kind != OWN_NONE``: a producer's
   managed tensor, a Py_buffer, or an allocation of ours) or is a *view* whose
   ``_base`` is the owning Tensor (never a chain of views).
2. Importing a capsule: the name says the struct kind; every field is validated
   before the capsule is touched (a refused capsule keeps its name and is freed by
   its own destructor); then the Tensor takes the pointer and the capsule is
   renamed ``used_*``, with nothing in between that can fail. Managed tensors from
   a C exchange table are owned from the start: a refused one is released by the
   Tensor that adopted it.
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
    PyObject_GetBuffer, PyObject_CheckBuffer, PyBUF_RECORDS, PyBUF_RECORDS_RO,
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
    void tb_call_deleter(void* managed, int versioned) noexcept
    int tb_export_release_depth
    void tb_copy_to_contiguous(char* dst, const char* src, int ndim, const int64_t* shape,
                               const int64_t* byte_strides, size_t itemsize) noexcept nogil
    void* tb_alloc(size_t nbytes) noexcept nogil
    bint tb_mul_overflow(int64_t a, int64_t b, int64_t* out) noexcept nogil
    bint tb_add_overflow(int64_t a, int64_t b, int64_t* out) noexcept nogil

cdef extern from "Python.h":
    unsigned long Py_TPFLAGS_HEAPTYPE
    ctypedef struct Py_complex:
        double real
        double imag
    Py_complex PyComplex_AsCComplex(object op) except *
    int PySlice_Unpack(object slice, Py_ssize_t* start, Py_ssize_t* stop,
                       Py_ssize_t* step) except -1
    Py_ssize_t PySlice_AdjustIndices(Py_ssize_t length, Py_ssize_t* start, Py_ssize_t* stop,
                                     Py_ssize_t step) noexcept

from tensorbridge._dtypes import (
    DTYPES as _DTYPES,
    as_dtype as _as_dtype,
    is_dtype_like as _is_dtype_like,
)
from tensorbridge._errors import NotDLPackError, TensorbridgeError
from tensorbridge._errors import producer_error as _producer_error
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
    OWN_ALLOC = 4         # _managed is memory from tb_alloc (free())
    OWN_OBJECT = 5        # _managed is a strong reference to a NumPy array

# Tensor's DLPack C exchange table (filled by _make_exchange_capsule).
cdef DLPackExchangeAPI _tensor_api

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

cdef inline bint _dtype_known(DLDataType dt) noexcept nogil:
    return dt.code < 18 and dt.bits <= 128 and _dtype_table[dt.code][dt.bits] != NULL

cdef inline bint _device_known(int32_t device_type) noexcept:
    return 1 <= device_type <= 18 and device_type != 5 and device_type != 6

cdef inline bint _host_accessible(int32_t device_type) noexcept:
    return (device_type == kDLCPU or device_type == kDLCUDAHost
            or device_type == kDLROCMHost or device_type == kDLCUDAManaged)

cdef inline bint _pointer_is_address(int32_t device_type) noexcept nogil:
    """True where DLTensor.data is an address that arithmetic may move (exports fold
    byte_offset into it); elsewhere (OpenCL, Vulkan, Metal, WebGPU, ...) it may be an
    opaque handle, and the offset must stay in byte_offset."""
    return (device_type == kDLCPU or device_type == kDLCUDA or device_type == kDLCUDAHost
            or device_type == kDLROCM or device_type == kDLROCMHost
            or device_type == kDLCUDAManaged or device_type == kDLOneAPI)


cdef inline size_t _itemsize(DLDataType dt) noexcept nogil:
    return (dt.bits + 7) // 8

# Cached __dlpack_device__() answers for device_id 0, per device type.
cdef dict _dlpack_device_cache = {}

cdef object _cpu_device_tuple = None
cdef DLDevice _cpu_device
_cpu_device.device_type = kDLCPU
_cpu_device.device_id = 0

cdef object _dlpack_device_tuple(DLDevice dev):
    global _cpu_device_tuple
    if dev.device_type == kDLCPU and dev.device_id == 0:
        if _cpu_device_tuple is None:
            _cpu_device_tuple = (_DLDeviceType(kDLCPU), 0)
        return _cpu_device_tuple
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
@cython.freelist(16)
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
        if self._owner_kind == OWN_VERSIONED or self._owner_kind == OWN_LEGACY:
            _release_managed(self._managed, self._owner_kind)
        elif self._owner_kind == OWN_BUFFER:
            PyBuffer_Release(&self._buffer)
        elif self._owner_kind == OWN_ALLOC:
            free(self._managed)
        elif self._owner_kind == OWN_OBJECT:
            Py_DECREF(<object>self._managed)

    # -- internal helpers ---------------------------------------------------

    cdef int _set_ndim(self, int ndim) except -1:
        cdef int64_t* block
        if ndim < 0 or ndim > TB_MAX_NDIM:
            raise ValueError(f"a tensor has 0 to {TB_MAX_NDIM} dimensions; got {ndim}")
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
            if self._shape[i] == 0:
                return 0
        for i in range(self._ndim):
            n *= self._shape[i]     # bounded by _check_layout for every tensor
        return n

    cdef int64_t _nbytes(self) noexcept:
        cdef int64_t n = self._size()
        cdef int64_t bits = self._dtype.bits
        if bits < 8 and not (self._flags & TB_FLAG_SUBBYTE_PADDED):
            return n // 8 * bits + ((n % 8) * bits + 7) // 8   # packed, without overflow
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
        # In integers: a producer's pointer may be anything, and C pointer
        # arithmetic that leaves an object is undefined.
        return <char*>(<uintptr_t>self._data + <uintptr_t>self._byte_offset)

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
        if _host_accessible(self._device.device_type):
            return _numpy_ops().format_tensor(self)
        return self._meta_repr()

    def _meta_repr(self):
        """The metadata-only repr, for memory the CPU cannot read."""
        flags = ", readonly" if self._flags & TB_FLAG_READ_ONLY else ""
        return (f"tensorbridge.Tensor(shape={self.shape}, dtype={_dtype_obj(self._dtype)}, "
                f"device={_dev_str(self._device)}{flags})")

    # -- DLPack producer ----------------------------------------------------

    #: The DLPack C exchange table (a "dlpack_exchange_api" capsule), for C-level
    #: consumers such as tvm-ffi; __c_dlpack_exchange_api__ is its DLPack 1.2 name
    #: (the table's address as an int).
    __dlpack_c_exchange_api__ = _make_exchange_capsule()
    __c_dlpack_exchange_api__ = PyLong_FromVoidPtr(&_tensor_api)

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
        ``data`` points at the first element and ``byte_offset`` is 0 wherever
        the data pointer is an address (CPU, CUDA, ROCm, oneAPI and their host
        and managed kinds); elsewhere (OpenCL, Vulkan, Metal, ...) the offset
        stays in ``byte_offset``.
        """
        cdef bint versioned = _parse_max_version(max_version)
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
        # The stream must suit the device the export is on (None, or -1, for the CPU).
        _check_export_stream(target.device_type, stream)
        cdef Tensor source = self
        cdef uint64_t extra = 0
        if copy is True:
            if target.device_type != kDLCPU:
                raise BufferError(
                    f"__dlpack__(): copy=True needs CPU-accessible memory; this tensor is on "
                    f"{_dev_str(self._device)}, which tensorbridge cannot copy")
            source = _copy_contiguous(self)
            extra = TB_FLAG_IS_COPIED
        elif copy is not None and copy is not False:
            raise TypeError(f"__dlpack__(): copy must be True, False or None; got {copy!r}")
        if not versioned and (source._flags & TB_FLAG_READ_ONLY):
            raise BufferError(
                "__dlpack__(): cannot export a read-only tensor as a legacy 'dltensor' "
                "capsule, which cannot mark it read-only; ask for a versioned capsule "
                "with __dlpack__(max_version=(1, 3))")
        return _export_capsule(source, versioned, extra, &target)

    # -- Python protocols ---------------------------------------------------

    def __len__(self):
        if self._ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __iter__(self):
        if self._ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        cdef int64_t i
        for i in range(self._shape[0]):
            yield _index_int(self, i)

    def __bool__(self):
        if self._size() != 1:
            raise ValueError(
                f"the truth value of a tensor with {self._size()} elements is ambiguous")
        return bool(self.item())

    def __int__(self):
        return int(self.item())

    def __float__(self):
        return float(self.item())

    def __complex__(self):
        return complex(self.item())

    def __index__(self):
        if self._dtype.code not in (kDLInt, kDLUInt) or self._size() != 1:
            raise TypeError("only integer tensors of one element can be used as an index")
        return int(self.item())

    # -- indexing -------------------------------------------------------------

    def __getitem__(self, key):
        if type(key) is not tuple:
            key = (key,)
        if _is_basic_key(<tuple>key):
            return _basic_index(self, <tuple>key)
        return _numpy_ops().getitem_advanced(self, key)

    def __setitem__(self, key, value):
        if self._flags & TB_FLAG_READ_ONLY:
            raise ValueError("assignment destination is read-only")
        _numpy_ops().setitem(self, key, value)

    # -- shape manipulation (metadata only: works on every device) -----------

    @property
    def T(self):
        """The tensor with its dimensions reversed (a view)."""
        return self.permute(*range(self._ndim - 1, -1, -1))

    def permute(self, *dims):
        """A view with the dimensions reordered: ``t.permute(2, 0, 1)``."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if len(dims) != self._ndim:
            raise ValueError(
                f"permute(): expected {self._ndim} dimensions; got {len(dims)}: {dims}")
        cdef list order = [_normalize_dim(d, self._ndim, "permute") for d in dims]
        if len(set(order)) != self._ndim:
            raise ValueError(f"permute(): repeated dimension in {dims}")
        cdef Tensor v = _view(self)
        cdef int i
        for i in range(self._ndim):
            v._shape[i] = self._shape[<int>order[i]]
            v._strides[i] = self._strides[<int>order[i]]
        _check_packed_view(v)
        return v

    def transpose(self, *dims):
        """``transpose()`` reverses the dimensions; ``transpose(d0, d1)`` swaps two
        (as in PyTorch); ``transpose((2, 0, 1))`` applies a permutation (as in NumPy)."""
        if len(dims) == 0:
            return self.T
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            return self.permute(*dims[0])
        if len(dims) != 2:
            raise TypeError(
                "transpose() takes no dimensions, two dimensions to swap, or one "
                f"permutation tuple; got {dims}")
        cdef int a = _normalize_dim(dims[0], self._ndim, "transpose")
        cdef int b = _normalize_dim(dims[1], self._ndim, "transpose")
        order = list(range(self._ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(*order)

    def reshape(self, *shape):
        """A tensor of the same elements with a new shape: a view whenever the
        strides allow it, otherwise a copy (CPU-accessible memory only)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        cdef list dims = _resolve_shape(shape, self._size(), _itemsize(self._dtype))
        cdef Tensor v = _reshape_view(self, dims)
        if v is not None:
            return v
        if not _host_accessible(self._device.device_type):
            raise BufferError(
                f"reshape(): the strides of this {_dev_str(self._device)} tensor do not allow "
                "a view, and tensorbridge cannot copy device memory")
        return _reshape_view(_copy_contiguous(self), dims)

    def flatten(self):
        """A 1-d tensor of the elements in C order (a view when possible, as in PyTorch)."""
        return self.reshape(-1)

    def view(self, dtype):
        """Reinterpret the bytes as another dtype (a view).

        Same itemsize: same shape. Otherwise the last dimension must be
        contiguous and its byte length divisible by the new itemsize.
        """
        return _view_dtype(self, _resolve_dtype_obj(dtype))

    # -- copies and conversions ---------------------------------------------

    def copy(self):
        """A C-contiguous copy in new (64-byte aligned) memory."""
        if not _host_accessible(self._device.device_type):
            raise BufferError(
                f"copy(): tensorbridge cannot copy {_dev_str(self._device)} memory")
        return _copy_contiguous(self)

    def contiguous(self):
        """This tensor if it is C-contiguous, else a C-contiguous copy."""
        return self if self._c_contiguous() else self.copy()

    def astype(self, dtype, *, copy=True):
        """The elements cast to ``dtype``, in new memory (``copy=False``: this
        tensor itself when the dtype already matches)."""
        target = _resolve_dtype_obj(dtype)
        if not copy and target is _dtype_obj(self._dtype):
            return self
        return _numpy_ops().cast(self, target)

    def to(self, *args, dtype=None, device=None, copy=False):
        """Change dtype and/or device, like ``torch.Tensor.to``: ``t.to("float64")``,
        ``t.to("cpu")``, ``t.to(device="cpu", dtype="int32")``. Returns this tensor
        when nothing changes and ``copy`` is False."""
        for arg in args:
            if _looks_like_device(arg):
                device = arg
            else:
                dtype = arg
        result = self
        if device is not None:
            target = _requested_device(device)
            if not _same_device(target, self._device):
                if target.device_type == kDLCPU and target.device_id == 0 and \
                        _host_accessible(self._device.device_type):
                    result = _relabel(self, target)
                else:
                    raise BufferError(
                        f"to(): cannot move {_dev_str(self._device)} memory to "
                        f"{_dev_str(target)}; tensorbridge moves no data between devices "
                        "(convert through a framework that can)")
        if dtype is not None and _resolve_dtype_obj(dtype) is not _dtype_obj(self._dtype):
            return result.astype(dtype)
        if copy:
            return result.copy()
        return result

    def numpy(self):
        """A NumPy array sharing this tensor's memory (read-only stays read-only)."""
        return _numpy_ops().to_numpy(self)

    def __array__(self, dtype=None, copy=None):
        return _numpy_ops().array_protocol(self, dtype, copy)

    def tolist(self):
        """The elements as (nested) Python lists of Python scalars."""
        return _numpy_ops().to_numpy(self, unpack=True).tolist()

    def item(self):
        """The only element, as a Python scalar."""
        if self._size() != 1:
            raise ValueError(
                f"item(): only a tensor with one element has an item; this one has "
                f"{self._size()}")
        return _numpy_ops().to_numpy(self, unpack=True).reshape(()).item()

    def __reduce_ex__(self, protocol):
        return _numpy_ops().reduce_tensor(self, protocol)

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

import os as _os
from types import ModuleType as _ModuleType
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
    elif device_type == kDLROCM:
        if stream == 1 or stream == 2:
            raise ValueError(
                f"__dlpack__(): stream={stream} is not a ROCm stream (1 and 2 are CUDA's "
                "default streams); pass 0 (the default stream), a stream handle, or -1")
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
    tb_call_deleter(managed, kind == OWN_VERSIONED)


# Producer deleters put off while one of our export deleters runs (see Tensor.__dealloc__).
cdef list _deferred_deleters = []
cdef bint _drain_scheduled = False

cdef extern from "Python.h":
    int Py_AddPendingCall(int (*func)(void*) noexcept, void* arg)


cdef int _run_deferred_deleters(void* arg) noexcept with gil:
    global _drain_scheduled
    _drain_scheduled = False
    while _deferred_deleters:
        address, kind = _deferred_deleters.pop()
        _call_deleter(<void*><uintptr_t>address, kind)
    return 0


cdef void _defer_deleter(void* managed, int kind) noexcept:
    """Call a producer's deleter soon, from the interpreter loop, not from inside
    the foreign deleter that is releasing us (which may hold a lock it needs)."""
    global _drain_scheduled
    try:
        _deferred_deleters.append((<uintptr_t>managed, kind))
        if not _drain_scheduled:
            if Py_AddPendingCall(_run_deferred_deleters, NULL) != 0:
                raise MemoryError("the pending-call queue is full")
            _drain_scheduled = True
    except BaseException:
        # Cannot defer: releasing now risks that lock, but never leaks or double-frees.
        if _deferred_deleters and _deferred_deleters[-1][0] == <uintptr_t>managed:
            _deferred_deleters.pop()
        _call_deleter(managed, kind)


cdef void _release_managed(void* managed, int kind) noexcept:
    """Call a producer's deleter now, or soon when one of our export deleters is
    running (the framework calling it may hold a lock the deleter needs)."""
    if tb_export_release_depth > 0:
        _defer_deleter(managed, kind)
    else:
        _call_deleter(managed, kind)


def _export_release_depth():
    """How many export deleters of ours are running (for tests)."""
    return tb_export_release_depth


cdef Tensor _adopt(void* managed, int kind):
    """Own a managed tensor (handed over by a C exchange table)."""
    cdef Tensor t
    try:
        t = _new_tensor()
    except BaseException:
        _call_deleter(managed, kind)
        raise
    t._managed = managed
    t._owner_kind = kind
    return t


cdef int _raise_major_version(uint32_t major, uint32_t minor, str api, str what) except -1:
    raise BufferError(
        f"{api}: {what} holds DLPack version {major}.{minor}; tensorbridge reads "
        f"major version {TB_DLPACK_MAJOR} (up to {TB_DLPACK_MAJOR}.{TB_DLPACK_MINOR})")


cdef Tensor _adopt_versioned(DLManagedTensorVersioned* managed, str api, str what,
                             object producer=None):
    """Own a versioned managed tensor that a C exchange table handed over (from
    `producer`'s table, or to ours), then check its version and description: it
    is ours from the start (no capsule can free it), so on failure the Tensor's
    __dealloc__ calls its deleter, once."""
    cdef Tensor t = _adopt(managed, OWN_VERSIONED)
    if managed.version.major != TB_DLPACK_MAJOR:
        # Only version, manager_ctx, deleter and flags may be read now.
        if producer is not None:
            what = f"{type(producer).__name__}'s exchange table gave a tensor that"
        _raise_major_version(managed.version.major, managed.version.minor, api, what)
    _fill(t, &managed.dl_tensor, managed.flags)
    return t


cdef Tensor _read_capsule(object capsule, int* kind):
    """Validate an unconsumed DLPack capsule into a new Tensor that does not own its
    struct yet (``_managed`` is set, ``_owner_kind`` is still OWN_NONE; `kind` says
    which struct it is). `_own_capsule` takes it.

    The name says which struct the capsule holds. Every field is validated before
    the capsule is touched: a refused capsule keeps its name and its deleter, so its
    own destructor frees it (tensorbridge never calls a deleter read from a struct
    it refused: a versioned struct in a "dltensor" capsule has something else where
    a legacy deleter would be). The one exception is the header's: a versioned
    struct of another major version is renamed and its deleter called (version,
    manager_ctx and deleter keep their place across majors), then refused."""
    cdef Tensor t = _new_tensor()   # first: an allocation may run Python code (GC)
    cdef const char* name = PyCapsule_GetName(capsule)
    cdef DLManagedTensorVersioned* versioned
    cdef DLManagedTensor* legacy
    cdef uint32_t major, minor
    if name != NULL and strcmp(name, TB_CAPSULE_VERSIONED) == 0:
        versioned = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, TB_CAPSULE_VERSIONED)
        if versioned.version.major != TB_DLPACK_MAJOR:
            major = versioned.version.major
            minor = versioned.version.minor
            PyCapsule_SetName(capsule, TB_CAPSULE_VERSIONED_USED)
            _release_managed(versioned, OWN_VERSIONED)    # the struct may be gone now
            _raise_major_version(major, minor, "from_dlpack()", "the capsule")
        _fill(t, &versioned.dl_tensor, versioned.flags)
        t._managed = versioned
        kind[0] = OWN_VERSIONED
        return t
    if name != NULL and strcmp(name, TB_CAPSULE_LEGACY) == 0:
        legacy = <DLManagedTensor*>PyCapsule_GetPointer(capsule, TB_CAPSULE_LEGACY)
        _fill(t, &legacy.dl_tensor, 0)   # legacy imports are writable
        t._managed = legacy
        kind[0] = OWN_LEGACY
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


cdef Tensor _own_capsule(object capsule, Tensor t, int kind):
    """Take the struct `_read_capsule` validated: rename the capsule and own it. No
    Python code runs from the name check to the rename, so no other thread can
    take the capsule in between (if one took it since it was read, BufferError)."""
    cdef const char* unconsumed = TB_CAPSULE_VERSIONED if kind == OWN_VERSIONED \
        else TB_CAPSULE_LEGACY
    cdef const char* name = PyCapsule_GetName(capsule)
    if name == NULL or strcmp(name, unconsumed) != 0 \
            or PyCapsule_GetPointer(capsule, unconsumed) != t._managed:
        raise BufferError("from_dlpack(): the capsule was consumed elsewhere while it was "
                          "being imported; a capsule can be imported only once")
    PyCapsule_SetName(capsule, TB_CAPSULE_VERSIONED_USED if kind == OWN_VERSIONED
                      else TB_CAPSULE_LEGACY_USED)
    t._owner_kind = kind
    return t


cdef Tensor _import_capsule(object capsule):
    """Consume a DLPack capsule (validate, then own) and return the owning Tensor."""
    cdef int kind
    cdef Tensor t = _read_capsule(capsule, &kind)
    return _own_capsule(capsule, t, kind)


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
        step = 1
        for i in range(t._ndim - 1, -1, -1):
            t._strides[i] = step
            step *= t._shape[i] if t._shape[i] > 0 else 1
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
    for i in range(ndim):
        t._shape[i] = dl.shape[i]
    if ndim > 0 and dl.strides == NULL:
        # Legacy and pre-1.2 producers: NULL strides mean C order (saturating, so
        # the layout check reports a shape that is too large rather than overflow).
        step = 1
        for i in range(ndim - 1, -1, -1):
            t._strides[i] = step
            if tb_mul_overflow(step, t._shape[i] if t._shape[i] > 0 else 1, &step):
                step = BYTE_LIMIT + 1
    elif ndim > 0:
        memcpy(t._strides, dl.strides, ndim * sizeof(int64_t))
    t._dtype = dt
    t._byte_offset = dl.byte_offset
    _check_layout(t, "from_dlpack()", "DLTensor")
    size = t._size()
    if size > 0 and dl.data == NULL:
        raise BufferError(
            f"from_dlpack(): DLTensor.data is NULL but the tensor has {size} elements")
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

cdef inline void _export_data(Tensor t, int32_t device_type, DLTensor* dl) noexcept:
    """data and byte_offset of an export of t: the offset folded into the pointer
    wherever it is an address (NumPy and PyTorch do the same; many consumers ignore
    byte_offset), kept where the pointer may be a handle; NULL data for empty tensors."""
    if t._size() == 0:
        dl.data = NULL          # the header's recommendation for empty tensors
        dl.byte_offset = 0
    elif _pointer_is_address(device_type):
        dl.data = t._ptr()
        dl.byte_offset = 0
    else:
        dl.data = t._data
        dl.byte_offset = t._byte_offset


cdef void* _export_managed(Tensor t, bint versioned, uint64_t extra_flags,
                           DLDevice* device) except NULL:
    """A managed tensor describing t, holding a reference to t (its deleter drops
    it). One PyMem block holds the managed struct, shape and strides."""
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
    _export_data(t, device.device_type, dl)
    Py_INCREF(t)
    return block


cdef object _export_capsule(Tensor t, bint versioned, uint64_t extra_flags, DLDevice* device):
    cdef void* block = _export_managed(t, versioned, extra_flags, device)
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

cdef Tensor _alloc_tensor(int ndim, const int64_t* shape, DLDataType dtype, DLDevice device,
                          uint64_t flags):
    """A new C-contiguous tensor backed by 64-byte aligned memory of ours.

    flags (SUBBYTE_PADDED) are set before the size is computed: they decide it."""
    cdef Tensor t = _new_tensor()
    t._set_ndim(ndim)
    cdef int64_t size = 1, step = 1, nbytes
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
    for i in range(ndim - 1, -1, -1):
        t._strides[i] = step
        step *= shape[i] if shape[i] > 0 else 1
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


# --------------------------------------------------------------------------
# Helpers behind the Tensor surface
# --------------------------------------------------------------------------

cdef object _numpy_ops_mod = None

cdef object _numpy_ops():
    """tensorbridge._numpy, imported on first use (it imports NumPy)."""
    global _numpy_ops_mod
    if _numpy_ops_mod is None:
        from tensorbridge import _numpy as module
        _numpy_ops_mod = module
    return _numpy_ops_mod


cdef object _resolve_dtype_obj(object dtype):
    return _as_dtype(dtype)


cdef DLDataType _dl_dtype(object dtype) except *:
    """The DLDataType of one of tensorbridge's own DType objects."""
    cdef DLDataType dt
    code, bits = dtype.code, dtype.bits
    if not (0 <= code < 18 and 0 < bits <= 128):
        raise TypeError(f"{dtype!r} is not a tensorbridge dtype")
    dt.code = code
    dt.bits = bits
    dt.lanes = 1
    if not _dtype_known(dt) or <PyObject*>dtype != _dtype_table[dt.code][dt.bits]:
        raise TypeError(f"{dtype!r} is not a tensorbridge dtype")
    return dt


cdef bint _looks_like_device(object arg):
    return not _is_dtype_like(arg)


cdef int _normalize_dim(object d, int ndim, str api) except -1:
    if isinstance(d, bool) or not hasattr(d, "__index__"):
        raise TypeError(f"{api}(): dimensions must be ints; got {d!r}")
    cdef Py_ssize_t i = d.__index__()
    if i < -ndim or i >= ndim:
        raise IndexError(
            f"{api}(): dimension {i} is out of range for a tensor with {ndim} dimensions")
    return i + ndim if i < 0 else i


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


cdef bint _is_numpy_integer(object k):
    """A NumPy integer scalar (found through sys.modules: never imports NumPy)."""
    numpy = _sys.modules.get("numpy")
    return numpy is not None and isinstance(k, numpy.integer)


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
    cdef Py_ssize_t start, stop, step, length
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
            if PySlice_Unpack(k, &start, &stop, &step) < 0:
                raise ValueError("invalid slice")   # not reached: Unpack raised already
            extent = t._shape[d]
            length = PySlice_AdjustIndices(extent, &start, &stop, step)
            if n >= TB_MAX_NDIM:
                raise IndexError(f"the result would have more than {TB_MAX_NDIM} dimensions")
            new_shape[n] = length
            if tb_mul_overflow(t._strides[d], step, &new_strides[n]) or \
                    new_strides[n] > BYTE_LIMIT // <int64_t>_itemsize(t._dtype) or \
                    new_strides[n] < -(BYTE_LIMIT // <int64_t>_itemsize(t._dtype)):
                raise IndexError(f"slice step {step} is too large for dimension {d}")
            if length > 0:
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


cdef list _resolve_shape(tuple shape, int64_t size, int64_t itemsize):
    cdef list dims = []
    cdef int infer = -1, i = 0
    cdef int64_t known = 1
    for s in shape:
        if isinstance(s, bool) or not hasattr(s, "__index__"):
            raise TypeError(f"reshape(): shape entries must be ints; got {s!r}")
        value = s.__index__()
        if value == -1:
            if infer >= 0:
                raise ValueError("reshape(): only one dimension can be -1")
            infer = i
        elif value < 0:
            raise ValueError(f"reshape(): invalid extent {value} in shape {shape}")
        else:
            known *= value
        dims.append(value)
        i += 1
    if len(dims) > TB_MAX_NDIM:
        raise ValueError(f"reshape(): at most {TB_MAX_NDIM} dimensions; got {len(dims)}")
    cdef int64_t nonzero = 1
    for value in dims:   # NumPy's rule: the non-zero extents must fit, even when empty
        if value > 0 and (tb_mul_overflow(nonzero, value, &nonzero)
                          or nonzero > BYTE_LIMIT // itemsize):
            raise ValueError(f"reshape(): shape {tuple(dims)} is too large")
    if infer >= 0:
        if known == 0 or size % known:
            raise ValueError(
                f"reshape(): cannot reshape a tensor of {size} elements into shape {shape}")
        dims[infer] = size // known
    elif known != size:
        raise ValueError(
            f"reshape(): cannot reshape a tensor of {size} elements into shape {tuple(dims)}")
    return dims


cdef Tensor _reshape_view(Tensor t, list dims):
    """A view of t with shape dims, or None when the strides do not allow one."""
    cdef int newnd = len(dims), oldnd = 0, i
    cdef int64_t olddims[TB_MAX_NDIM]
    cdef int64_t oldstrides[TB_MAX_NDIM]
    cdef int64_t newdims[TB_MAX_NDIM]
    cdef int64_t newstrides[TB_MAX_NDIM]
    cdef int64_t np_, op
    cdef int ni, nj, oi, oj, ok, nk
    for i in range(newnd):
        newdims[i] = dims[i]
    if t._size() == 0:
        # Any strides describe an empty tensor: use C order.
        np_ = 1
        for i in range(newnd - 1, -1, -1):
            newstrides[i] = np_
            np_ *= newdims[i] if newdims[i] > 0 else 1
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
                if oldstrides[ok] != olddims[ok + 1] * oldstrides[ok + 1]:
                    return None
            newstrides[nj - 1] = oldstrides[oj - 1]
            for nk in range(nj - 1, ni, -1):
                newstrides[nk - 1] = newstrides[nk] * newdims[nk]
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


def _empty(shape, dtype, device=None):
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


def _zero_fill(Tensor t):
    """Set every byte of a freshly allocated tensor to zero."""
    cdef int64_t nbytes = t._nbytes()
    if nbytes > 0:
        with nogil:
            memset(t._data, 0, <size_t>nbytes)
    return t


def _set_readonly(Tensor t, bint readonly):
    """A view of t with the read-only flag set or cleared (for internal use only)."""
    cdef Tensor v = _view(t)
    if readonly:
        v._flags |= TB_FLAG_READ_ONLY
    else:
        v._flags &= ~TB_FLAG_READ_ONLY
    return v


def _fold_offset(Tensor t):
    """A view with byte_offset 0 and the offset moved into the data pointer
    (for consumers that ignore or refuse byte_offset; pointer devices only)."""
    if t._byte_offset == 0:
        return t
    cdef Tensor v = _view(t)
    v._data = <void*>(<uintptr_t>t._data + <uintptr_t>t._byte_offset)
    v._byte_offset = 0
    return v


def _is_packed_tensor(Tensor t):
    return _is_packed(t)


def _is_host(Tensor t):
    return _host_accessible(t._device.device_type)


def _is_capsule(obj):
    """True for a PyCapsule (of any name)."""
    return PyCapsule_CheckExact(obj)


def _has_buffer(obj):
    """True when obj exports the buffer protocol."""
    return PyObject_CheckBuffer(obj)

class _CopyNeeded(BufferError, ValueError):
    """copy=False was asked, but only a copy would do. A BufferError (the standard's
    `copy` text) and a ValueError (its `device` text and Raises section)."""


cdef DLDataType _buffer_dtype(const char* fmt, Py_ssize_t itemsize) except *:
    """The DLPack dtype of a PEP 3118 format string with the given itemsize."""
    cdef bytes text = b"B" if fmt == NULL else <bytes>fmt
    cdef bytes body = text
    cdef DLDataType dt
    dt.lanes = 1
    dt.bits = itemsize * 8
    if body[:1] in (b"@", b"=", b"<", b">", b"!"):
        order = body[:1]
        body = body[1:]
        if itemsize > 1 and order != b"@" and order != b"=" and order != _native_prefix:
            raise BufferError(
                f"asarray(): buffer format {text.decode()!r} is not in native byte order")
    if body == b"?":
        dt.code = kDLBool
    elif body in (b"b", b"h", b"i", b"l", b"q", b"n"):
        dt.code = kDLInt
    elif body in (b"B", b"H", b"I", b"L", b"Q", b"N", b"c"):
        dt.code = kDLUInt
    elif body in (b"e", b"f", b"d"):
        dt.code = kDLFloat
    elif body in (b"Zf", b"Zd"):
        dt.code = kDLComplex
    else:
        raise BufferError(
            f"asarray(): unsupported buffer format {text.decode(errors='replace')!r} "
            f"(itemsize {itemsize})")
    if not _dtype_known(dt):
        raise BufferError(
            f"asarray(): buffer format {text.decode()!r} with itemsize {itemsize} has no "
            "DLPack equivalent")
    return dt

cdef bytes _native_prefix = b"<" if _sys.byteorder == "little" else b">"


def _import_buffer(obj, raw_dtype):
    """A Tensor sharing obj's buffer. Byte buffers (format B/b/c, 1-d, contiguous)
    are reinterpreted as raw_dtype; typed buffers keep their type and shape."""
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
    cdef bint raw = view.itemsize == 1 and (fmt == NULL or strcmp(fmt, "B") == 0 or strcmp(fmt, "b") == 0
                     or strcmp(fmt, "c") == 0) and view.ndim == 1 and (
                         view.strides == NULL or view.strides[0] == 1)
    cdef int i
    cdef int64_t item, n, step
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
        else:
            for i in range(view.ndim):
                t._shape[i] = view.shape[i]
        if view.strides == NULL:
            step = 1
            for i in range(view.ndim - 1, -1, -1):
                t._strides[i] = step
                step *= t._shape[i] if t._shape[i] > 0 else 1
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
    return t


def _as_bytes_view(Tensor t):
    """The bytes of a C-contiguous tensor as a 1-d uint8 view."""
    if not t._c_contiguous():
        raise ValueError("internal: _as_bytes_view needs a C-contiguous tensor")
    cdef Tensor v = _view(t)
    v._set_ndim(1)
    v._shape[0] = t._nbytes()
    v._strides[0] = 1
    v._dtype.code = kDLUInt
    v._dtype.bits = 8
    v._flags &= ~TB_FLAG_SUBBYTE_PADDED
    return v


def _reinterpret(Tensor raw, dtype, tuple shape, bint packed):
    """A C-contiguous view of the 1-d uint8 tensor raw with a new dtype and shape."""
    if raw._ndim != 1 or raw._dtype.code != kDLUInt or raw._dtype.bits != 8 or \
            (raw._shape[0] > 1 and raw._strides[0] != 1):
        raise ValueError("a tensor can only be rebuilt from contiguous bytes")
    cdef Tensor v = _view(raw)
    cdef int n = len(shape), i
    v._set_ndim(n)
    v._dtype = _dl_dtype(dtype)
    if v._dtype.bits < 8 and not packed:
        v._flags |= TB_FLAG_SUBBYTE_PADDED
    else:
        v._flags &= ~TB_FLAG_SUBBYTE_PADDED
    cdef int64_t step = 1
    for i in range(n):
        v._shape[i] = shape[i]
        v._strides[i] = 1
    try:
        _check_layout(v, "unpickling", "tensor")
    except BufferError as exc:
        raise ValueError(f"invalid shape {shape} for {raw._nbytes()} bytes: {exc}") from None
    for i in range(n - 1, -1, -1):
        v._strides[i] = step
        step *= v._shape[i] if v._shape[i] > 0 else 1
    if v._nbytes() != raw._nbytes():
        raise ValueError(
            f"{raw._nbytes()} bytes cannot hold a {dtype} tensor of shape {shape}")
    return v


# -- nested sequences of Python scalars, filled straight into new memory ------

cdef enum:
    SEQ_BOOL = 1
    SEQ_INT = 2
    SEQ_FLOAT = 4
    SEQ_COMPLEX = 8
    SEQ_OTHER = 16    # something only the general (NumPy) path understands


cdef str _position(int64_t* index, int depth):
    return "".join([f"[{index[i]}]" for i in range(depth)])


cdef int _scan(object x, int depth, int ndim, int64_t* shape, int64_t* index) except -1:
    """Check the nesting is rectangular; return the SEQ_* kinds of the leaves."""
    cdef int kinds = 0
    cdef Py_ssize_t i, n
    cdef object item
    if type(x) is not list and type(x) is not tuple:
        return SEQ_OTHER
    n = len(x)
    if n != shape[depth]:
        raise ValueError(
            f"asarray(): ragged nested sequence: the sequence at "
            f"{_position(index, depth) or 'the top'} has length {n}, but its neighbours "
            f"have length {shape[depth]}")
    for i in range(n):
        item = x[i]
        index[depth] = i
        if depth + 1 < ndim:
            if type(item) is list or type(item) is tuple:
                kinds |= _scan(item, depth + 1, ndim, shape, index)
            elif type(item) is float or type(item) is int or type(item) is bool or \
                    type(item) is complex:
                raise ValueError(
                    f"asarray(): ragged nested sequence: the item at "
                    f"{_position(index, depth + 1)} is a number where a sequence of length "
                    f"{shape[depth + 1]} was expected")
            else:
                return SEQ_OTHER
        else:
            if type(item) is float:
                kinds |= SEQ_FLOAT
            elif type(item) is int:
                kinds |= SEQ_INT
            elif type(item) is bool:
                kinds |= SEQ_BOOL
            elif type(item) is complex:
                kinds |= SEQ_COMPLEX
            elif type(item) is list or type(item) is tuple:
                raise ValueError(
                    f"asarray(): ragged nested sequence: the item at "
                    f"{_position(index, depth + 1)} is a sequence where a number was "
                    "expected")
            else:
                return SEQ_OTHER
        if kinds & SEQ_OTHER:
            return SEQ_OTHER
    return kinds


cdef char* _fill_seq(object x, int depth, int ndim, const int64_t* shape, char* out,
                     DLDataType dt, int64_t* index) except NULL:
    """Write the leaves of x (checked by _scan) into out, in C order.

    The structure is checked again as it is read: the allocation between scan and
    fill can run Python code (a GC callback, __del__) that mutates the lists, and
    nothing but exact Python scalars is read, so no user code runs during the fill.
    """
    cdef Py_ssize_t i, n
    cdef object item
    cdef double value
    cdef Py_complex z
    if (type(x) is not list and type(x) is not tuple) or len(x) != shape[depth]:
        raise ValueError("asarray(): a sequence changed while it was being read")
    n = len(x)
    for i in range(n):
        item = x[i]
        index[depth] = i
        if depth + 1 < ndim:
            out = _fill_seq(item, depth + 1, ndim, shape, out, dt, index)
            continue
        if type(item) is not float and type(item) is not int and type(item) is not bool \
                and type(item) is not complex:
            raise ValueError("asarray(): a sequence changed while it was being read")
        if dt.code == kDLFloat:
            value = <double>item if type(item) is not bool else (1.0 if item else 0.0)
            if dt.bits == 64:
                (<double*>out)[0] = value
            else:
                (<float*>out)[0] = <float>value
        elif dt.code == kDLInt:
            try:
                (<int64_t*>out)[0] = <int64_t>item
            except OverflowError:
                raise OverflowError(
                    f"asarray(): the int at {_position(index, depth + 1)} does not fit int64: "
                    f"{item}") from None
        elif dt.code == kDLBool:
            (<uint8_t*>out)[0] = 1 if item else 0
        else:
            z = PyComplex_AsCComplex(item)
            if dt.bits == 128:
                (<double*>out)[0] = z.real
                (<double*>out)[1] = z.imag
            else:
                (<float*>out)[0] = <float>z.real
                (<float*>out)[1] = <float>z.imag
        out += dt.bits // 8
    return out


def _from_sequence(obj, dtype, default_float, default_complex):
    """A new tensor from nested lists/tuples of Python scalars, or None when obj
    holds other items (NumPy scalars, tensors...) for the general path.

    ``dtype`` may be None (inferred), bool, int64, float32/64 or complex64/128;
    other dtypes take the general path too (None is returned)."""
    cdef int64_t shape[TB_MAX_NDIM]
    cdef int64_t index[TB_MAX_NDIM]
    cdef int ndim = 0
    x = obj
    while type(x) is list or type(x) is tuple:
        if ndim >= TB_MAX_NDIM:
            raise ValueError(f"asarray(): nested more than {TB_MAX_NDIM} levels deep")
        shape[ndim] = len(x)
        ndim += 1
        if len(x) == 0:
            break
        x = x[0]
    cdef int kinds = _scan(obj, 0, ndim, shape, index) if ndim > 0 else SEQ_OTHER
    if kinds & SEQ_OTHER:
        return None
    if dtype is None:
        if kinds & SEQ_COMPLEX:
            dtype = default_complex
        elif kinds & SEQ_FLOAT or kinds == 0:
            dtype = default_float      # an empty list, too (as in PyTorch)
        elif kinds & SEQ_INT:
            dtype = _DTYPES["int64"]
        else:
            dtype = _DTYPES["bool"]
    name = dtype.name
    if name not in ("bool", "int64", "float32", "float64", "complex64", "complex128"):
        return None
    if name == "bool" and kinds & ~SEQ_BOOL:
        return None
    if name == "int64" and kinds & (SEQ_FLOAT | SEQ_COMPLEX):
        return None
    if name in ("float32", "float64") and kinds & SEQ_COMPLEX:
        return None
    cdef Tensor t = _empty([shape[i] for i in range(ndim)], dtype)
    if t._size() > 0:
        _fill_seq(obj, 0, ndim, shape, <char*>t._data, t._dtype, index)
    return t

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


cdef str _type_name(object x):
    """The qualified name of x's type, for messages."""
    tp = type(x)
    module = tp.__module__
    return tp.__qualname__ if module == "builtins" else f"{module}.{tp.__qualname__}"


cdef str _call_text(int mask, object stream, object dl_device, object copy, bint legacy):
    """How a __dlpack__ call was made, for error messages."""
    args = [] if legacy else [f"max_version={_max_version_arg!r}"]
    if mask & KW_STREAM:
        args.append(f"stream={stream!r}")
    if not legacy and mask & KW_DEVICE:
        args.append(f"dl_device={dl_device!r}")
    if not legacy and mask & KW_COPY:
        args.append(f"copy={copy!r}")
    return f"__dlpack__({', '.join(args)})"


cdef object _call_error(object x, int mask, object stream, object dl_device, object copy,
                        bint legacy, object exc, DLDevice source):
    """The exception to raise when x.__dlpack__ (called as the arguments say) raised
    exc: a ProducerError naming the producer and the call, chained to exc."""
    call = _call_text(mask, stream, dl_device, copy, legacy)
    name = _type_name(x)
    if isinstance(exc, TypeError) and not legacy and mask & (KW_DEVICE | KW_COPY) \
            and "keyword" in str(exc):
        needs = " and ".join(k for k, bit in (("dl_device", KW_DEVICE), ("copy", KW_COPY))
                             if mask & bit)
        return _producer_error(
            exc, f"from_dlpack(): {name}.__dlpack__ does not take {needs}= (a producer "
                 f"older than the DLPack 2023.12 keywords cannot honour this request); "
                 f"{call} raised")
    cdef DLDevice wanted
    if isinstance(exc, BufferError) and mask & KW_DEVICE:
        wanted.device_type = dl_device[0]
        wanted.device_id = dl_device[1]
        return _producer_error(
            exc, f"from_dlpack(): {name} cannot export its {_dev_str(source)} data to "
                 f"{_dev_str(wanted)}: {call} raised")
    return _producer_error(exc, f"from_dlpack(): {name}.{call} raised")


cdef object _checked_capsule(object x, object capsule):
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(
            f"from_dlpack(): {_type_name(x)}.__dlpack__() returned "
            f"{_type_name(capsule)}; expected a PyCapsule")
    return capsule


cdef inline int _keep_immutable(Tensor t, int type_flags) noexcept:
    """Arrays of an immutable type are imported read-only even from a legacy capsule
    (which cannot say so), unless the producer made a private copy."""
    if type_flags & TI_IMMUTABLE and not (t._flags & TB_FLAG_IS_COPIED):
        t._flags |= TB_FLAG_READ_ONLY
    return 0


cdef DLDevice _producer_device(object x) except *:
    cdef PyObject* args[1]
    args[0] = <PyObject*>x
    cdef bint missing = False
    try:
        result = PyObject_VectorcallMethod(
            _s_dlpack_device, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)
    except AttributeError as exc:
        if hasattr(type(x), "__dlpack_device__"):
            raise _producer_error(exc, f"from_dlpack(): {_type_name(x)}.__dlpack_device__() "
                                       "raised")
        missing = True
    except Exception as exc:
        raise _producer_error(exc, f"from_dlpack(): {_type_name(x)}.__dlpack_device__() "
                                   "raised")
    if missing:
        _raise_not_dlpack(x)
    if type(result) is list:
        result = tuple(result)
    return _parse_dl_device(result, f"from_dlpack(): {_type_name(x)}.__dlpack_device__()")


cdef int _raise_not_dlpack(object x, str api="from_dlpack()") except -1:
    missing = [m for m in ("__dlpack__", "__dlpack_device__") if not hasattr(type(x), m)]
    raise NotDLPackError(
        f"{api}: expected an object with __dlpack__ and __dlpack_device__ or a "
        f"DLPack capsule; got {_type_name(x)}, which lacks "
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
cdef PyTypeObject* _not_ndarray_type = NULL   # the last other type asked about

cdef inline bint _is_ndarray(object x) noexcept:
    """Exactly numpy.ndarray (found by name, so NumPy is never imported)."""
    global _ndarray_type, _not_ndarray_type
    cdef PyTypeObject* tp = Py_TYPE(x)
    if tp == _ndarray_type:
        return True
    if _ndarray_type != NULL or tp == _not_ndarray_type:
        return False
    if strcmp(tp.tp_name, "numpy.ndarray") == 0 and \
            not (tp.tp_flags & Py_TPFLAGS_HEAPTYPE):   # NumPy's is a static type
        _ndarray_type = tp
        return True
    # A static type cannot die, so its address is never reused; heap types are
    # not remembered (another type could later take the address).
    if not (tp.tp_flags & Py_TPFLAGS_HEAPTYPE):
        _not_ndarray_type = tp
    return False


# --------------------------------------------------------------------------
# PyTorch's bit views
# --------------------------------------------------------------------------

# type -> (is_neg, is_conj) unbound methods for torch tensor types, False for others;
# the last type asked about is also kept in a one-entry cache.
cdef dict _torch_tensor_types = {}
cdef void* _torch_last_type = NULL
cdef object _torch_last_methods = None

cdef bint _is_torch_type(object cls):
    """A PyTorch tensor type (found by module, so torch is never imported)."""
    module = getattr(cls, "__module__", "") or ""
    return isinstance(module, str) and module.split(".")[0] == "torch" and \
        hasattr(cls, "is_neg")


cdef object _torch_bits(object x, bint complex_only_conj):
    """None, or "negative"/"conjugate" when x is a torch tensor whose memory does
    not hold its values (a view with the negative or conjugate bit set)."""
    global _torch_last_type, _torch_last_methods
    cdef PyObject* args[1]
    if <void*>Py_TYPE(x) == _torch_last_type:
        methods = _torch_last_methods
    else:
        tp = type(x)
        methods = _torch_tensor_types.get(tp)
        if methods is None:
            methods = (tp.is_neg, tp.is_conj) if _is_torch_type(tp) else False
            _torch_tensor_types[tp] = methods
        # The dict keeps tp alive, so the pointer cannot be reused by another type.
        _torch_last_type = <void*>tp
        _torch_last_methods = methods
    if methods is False:
        return None
    args[0] = <PyObject*>x
    if PyObject_Vectorcall((<tuple>methods)[0], args, 1, NULL):
        return "negative"
    # Only complex tensors carry the conjugate bit; skip the call when the
    # imported dtype says the tensor is real.
    if not complex_only_conj and PyObject_Vectorcall((<tuple>methods)[1], args, 1, NULL):
        return "conjugate"
    return None


cdef int _refuse_torch_bits(object what) except -1:
    raise BufferError(
        f"from_dlpack(): this torch tensor has its {what} bit set (a view such as "
        f"z.conj().imag), so its memory does not hold its values; call "
        f".resolve_{'neg' if what == 'negative' else 'conj'}() first, or use "
        "tensorbridge.asarray / convert, which copy it")


cdef int _check_torch_bits(object x) except -1:
    """PyTorch exports tensors with the negative or conjugate bit set as their raw
    memory, which holds other values than the tensor (z.conj().imag reads -imag).
    Refuse them rather than import wrong values (asarray and convert resolve them)."""
    what = _torch_bits(x, False)
    if what is not None:
        _refuse_torch_bits(what)
    return 0


# --------------------------------------------------------------------------
# The C exchange API (DLPack 1.2/1.3): consumer
# --------------------------------------------------------------------------
#
# type(x).__dlpack_c_exchange_api__ (1.3: a capsule) or __c_dlpack_exchange_api__
# (1.2: an int) points to a static DLPackExchangeAPI table. The answer is cached
# per type in a small direct-mapped cache validated by CPython's type version tag,
# which changes whenever the type or a base is modified (an addon setting the
# attribute later is seen) and is never reused by another type (a type that dies
# and a new one at the same address do not collide). No reference is kept.

cdef extern from "Python.h":
    ctypedef struct _TypeObj "PyTypeObject":
        unsigned int tp_version_tag
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf,
                               PyObject* kwnames)
    void* PyLong_AsVoidPtr(object) except? NULL
    object PyLong_FromVoidPtr(void*)
    void PyErr_Clear()
    PyObject* PyErr_Occurred()
    bint PyErr_ExceptionMatches(object exc)

cdef extern from "<stdio.h>" nogil:
    int snprintf(char* buffer, size_t size, const char* fmt, ...)

cdef extern from "<stdlib.h>" nogil:
    void* malloc(size_t size)

cdef struct _ApiSlot:
    void* tp
    unsigned int tag
    const DLPackExchangeAPI* api
    int flags               # TI_* facts about the type

cdef enum:
    API_SLOTS = 64
    TI_PROTOCOL = 1         # the type has __dlpack__ and __dlpack_device__
    TI_TORCH = 2            # a torch tensor type (bit views must be checked)
    TI_STREAM = 4           # it has exported CUDA/ROCm memory (see _stream_types)
    TI_LEGACY = 8           # its __dlpack__ refused max_version (see _legacy_types)
    TI_IMMUTABLE = 16       # its arrays are immutable (JAX, Arrow, TF eager tensors)

cdef _ApiSlot _api_slots[API_SLOTS]
memset(_api_slots, 0, sizeof(_api_slots))

# TENSORBRIDGE_NO_C_EXCHANGE_API=1 turns the consumer fast path off (for tests
# and for measuring the plain paths), like tvm-ffi's TVM_FFI_SKIP_DLPACK_C_EXCHANGE_API.
cdef bint _use_exchange_api = not _os.environ.get("TENSORBRIDGE_NO_C_EXCHANGE_API")

cdef object _s_api_13 = "__dlpack_c_exchange_api__"
cdef object _s_api_12 = "__c_dlpack_exchange_api__"


cdef const DLPackExchangeAPI* _table_of(object attr) except? NULL:
    """The major-1 table an attribute value points to, or NULL."""
    cdef const DLPackExchangeAPIHeader* header = NULL
    cdef int hops
    if PyCapsule_CheckExact(attr):
        if not PyCapsule_IsValid(attr, TB_CAPSULE_EXCHANGE_API):
            return NULL
        header = <const DLPackExchangeAPIHeader*>PyCapsule_GetPointer(
            attr, TB_CAPSULE_EXCHANGE_API)
    elif type(attr) is int and attr > 0:
        header = <const DLPackExchangeAPIHeader*>PyLong_AsVoidPtr(attr)
    # A newer major version may link older-major tables through prev_api.
    hops = 0
    while header != NULL and header.version.major != TB_DLPACK_MAJOR and hops < 16:
        header = header.prev_api
        hops += 1
    if header == NULL or header.version.major != TB_DLPACK_MAJOR:
        return NULL
    cdef const DLPackExchangeAPI* api = <const DLPackExchangeAPI*>header
    if (api.managed_tensor_from_py_object_no_sync == NULL
            or api.managed_tensor_to_py_object_no_sync == NULL
            or api.managed_tensor_allocator == NULL or api.current_work_stream == NULL):
        return NULL    # the standard says these are never NULL: do not trust the table
    return api


cdef const DLPackExchangeAPI* _exchange_api_lookup(object tp):
    cdef const DLPackExchangeAPI* api = NULL
    for name in (_s_api_13, _s_api_12):
        try:
            attr = getattr(tp, name)
        except Exception:
            continue    # absent, or a descriptor that raises: no table under this name
        try:
            api = _table_of(attr)
        except Exception:
            api = NULL
        if api != NULL:
            break
    return api


# Producer types that have exported CUDA/ROCm memory: asked __dlpack_device__ first.
cdef set _stream_types = set()


cdef object _immutable_type_fn = None


cdef bint _immutable_type(object cls) except -1:
    """Whether cls's arrays are immutable (_known_types, loaded on first use: it
    is asked once per producer type, and `import tensorbridge` stays small)."""
    global _immutable_type_fn
    if _immutable_type_fn is None:
        from tensorbridge._known_types import immutable_type
        _immutable_type_fn = immutable_type
    return _immutable_type_fn(cls)


cdef _ApiSlot* _type_slot(object x):
    """What tensorbridge knows about type(x): its exchange table and TI_* flags
    (cached per type; read the fields before calling into Python again)."""
    cdef _TypeObj* tp = <_TypeObj*>Py_TYPE(x)
    cdef _ApiSlot* slot = &_api_slots[(<uintptr_t>tp >> 5) % API_SLOTS]
    if slot.tp == <void*>tp and slot.tag == tp.tp_version_tag and slot.tag != 0:
        return slot
    cls = type(x)
    cdef const DLPackExchangeAPI* api = _exchange_api_lookup(cls)
    cdef int flags = 0
    if hasattr(cls, "__dlpack__") and hasattr(cls, "__dlpack_device__"):
        flags |= TI_PROTOCOL
    if _is_torch_type(cls):
        flags |= TI_TORCH
    if cls in _stream_types:
        flags |= TI_STREAM
    if cls in _legacy_types:
        flags |= TI_LEGACY
    if flags & TI_PROTOCOL and _immutable_type(cls):
        flags |= TI_IMMUTABLE
    # The lookups above gave the type a version tag if it can have one; a type
    # without one (tag 0) is looked up every time.
    slot.tp = <void*>tp
    slot.tag = tp.tp_version_tag
    slot.api = api
    slot.flags = flags
    return slot


cdef inline const DLPackExchangeAPI* _exchange_api(object x):
    """type(x)'s usable exchange table, or NULL (cached per type)."""
    return _type_slot(x).api


cdef void _mark_stream_type(object x):
    _stream_types.add(type(x))
    cdef _ApiSlot* slot = _type_slot(x)
    slot.flags |= TI_STREAM


# Producer types whose __dlpack__ refused max_version with TypeError and then
# exported with the legacy call: asked the legacy way first from then on.
cdef set _legacy_types = set()


cdef void _mark_legacy_type(object x):
    _legacy_types.add(type(x))
    cdef _ApiSlot* slot = _type_slot(x)
    slot.flags |= TI_LEGACY


cdef void _unmark_legacy_type(object x):
    _legacy_types.discard(type(x))
    cdef _ApiSlot* slot = _type_slot(x)
    slot.flags &= ~TI_LEGACY


cdef inline bint _needs_stream(int32_t device_type) noexcept:
    return device_type == kDLCUDA or device_type == kDLCUDAManaged or device_type == kDLROCM


cdef int _clear_refusal() except -1:
    """Drop a table's refusal, but not an interrupt or an out-of-memory error."""
    if PyErr_Occurred() != NULL and (PyErr_ExceptionMatches(KeyboardInterrupt)
                                     or PyErr_ExceptionMatches(MemoryError)):
        return -1
    PyErr_Clear()
    return 0


cdef Tensor _from_exchange_api(object x, const DLPackExchangeAPI* api, object stream,
                               bint resolve_bits, int type_flags):
    """Import x through its type's C table, or None to use __dlpack__ instead.

    None when the table refuses (its error is dropped; __dlpack__ gives its own),
    when the data is CUDA/ROCm memory and the caller did not pass stream=-1 (the
    table does not synchronise: only __dlpack__(stream=...) orders the producer's
    work before ours), and, with resolve_bits, for torch bit views."""
    cdef DLManagedTensorVersioned* managed = NULL
    if api.managed_tensor_from_py_object_no_sync(<void*>x, &managed) != 0 or managed == NULL:
        _clear_refusal()
        return None
    cdef Tensor t = _adopt_versioned(managed, "from_dlpack()", "", x)
    if _needs_stream(t._device.device_type) and not (stream is not None and stream == -1):
        _mark_stream_type(x)  # the handshake comes next, and first from now on
        return None     # t releases the managed tensor
    what = _torch_bits(x, t._dtype.code != kDLComplex)
    if what is not None:
        if resolve_bits:
            return None
        _refuse_torch_bits(what)
    _keep_immutable(t, type_flags)
    return t


def _exchange_api_info(obj):
    """(version, has dltensor view) of type(obj)'s usable table, or None (tests, tools)."""
    cdef const DLPackExchangeAPI* api = _exchange_api(obj)
    if api == NULL:
        return None
    return ((api.header.version.major, api.header.version.minor),
            api.dltensor_from_py_object_no_sync != NULL)


def _to_py_via_api(target_type, Tensor t):
    """target_type's object for t, made by its table's managed_tensor_to_py_object_no_sync
    from a versioned export of t; None when target_type has no usable table."""
    cdef const DLPackExchangeAPI* api = _exchange_api_lookup(target_type)
    if api == NULL:
        return None
    return _to_py(api, t)


cdef int _raise_if_failed(int rc, str what) except -1:
    """Propagate the exception a C table function set (or raise one if it did not)."""
    if rc == 0:
        return 0
    if PyErr_Occurred() != NULL:
        return -1
    raise BufferError(what)


cdef object _to_py(const DLPackExchangeAPI* api, Tensor t):
    cdef void* managed = _export_managed(t, True, 0, &t._device)
    cdef void* result = NULL
    # The table steals the managed tensor, whether it succeeds or not.
    _raise_if_failed(
        api.managed_tensor_to_py_object_no_sync(<DLManagedTensorVersioned*>managed, &result),
        "the target's managed_tensor_to_py_object_no_sync failed")
    if result == NULL:
        raise BufferError("the target's managed_tensor_to_py_object_no_sync returned NULL")
    obj = <object>result
    Py_DECREF(obj)      # <object> took a new reference; the table's is ours
    return obj


# --------------------------------------------------------------------------
# The C exchange API: producer (Tensor.__dlpack_c_exchange_api__)
# --------------------------------------------------------------------------

cdef void _free_allocated(DLManagedTensorVersioned* self) noexcept nogil:
    if self != NULL:
        free(self.dl_tensor.data)
        free(self)


cdef void _no_set_error(void* ctx, const char* kind, const char* message) noexcept nogil:
    pass


cdef int _api_allocate(DLTensor* proto, DLManagedTensorVersioned** out, void* error_ctx,
                       void (*set_error)(void*, const char*, const char*) noexcept nogil
                       ) noexcept nogil:
    """A new C-contiguous tensor shaped like proto (dtype, ndim, shape, device).
    Pure C, so it may be called without the GIL. CPU memory only. A caller that
    passes no SetError (tvm-ffi's tests do) learns of a failure from -1 alone."""
    if set_error == NULL:
        set_error = _no_set_error
    cdef char message[200]
    cdef int ndim, i
    cdef int64_t count = 1, nbytes, step
    cdef size_t dims
    cdef char* block
    cdef DLManagedTensorVersioned* mv
    if out == NULL or proto == NULL:
        set_error(error_ctx, "ValueError", "tensorbridge allocator: NULL prototype or output")
        return -1
    out[0] = NULL
    ndim = proto.ndim
    if proto.device.device_type != kDLCPU:
        snprintf(message, sizeof(message), "tensorbridge allocates CPU memory only; the "
                 "prototype asks for device type %d", <int>proto.device.device_type)
        set_error(error_ctx, "BufferError", message)
        return -1
    if ndim < 0 or ndim > TB_MAX_NDIM or (ndim > 0 and proto.shape == NULL):
        snprintf(message, sizeof(message), "tensorbridge allocator: prototype ndim %d "
                 "(expected 0 to 64, with a shape)", ndim)
        set_error(error_ctx, "BufferError", message)
        return -1
    if proto.dtype.lanes != 1 or not _dtype_known(proto.dtype):
        snprintf(message, sizeof(message), "tensorbridge allocator: unknown dtype code %d "
                 "bits %d lanes %d", <int>proto.dtype.code, <int>proto.dtype.bits,
                 <int>proto.dtype.lanes)
        set_error(error_ctx, "BufferError", message)
        return -1
    if proto.device.device_id < 0:
        set_error(error_ctx, "BufferError", "tensorbridge allocator: negative device_id")
        return -1
    # As _check_layout: the product of the non-zero extents stays within 2**62
    # bytes, whatever zero extents there are (so no stride below can overflow).
    cdef int64_t nonzero = 1
    cdef bint empty = False
    for i in range(ndim):
        if proto.shape[i] < 0:
            set_error(error_ctx, "BufferError",
                      "tensorbridge allocator: prototype shape is negative or too large")
            return -1
        if proto.shape[i] == 0:
            empty = True
        elif tb_mul_overflow(nonzero, proto.shape[i], &nonzero) or \
                nonzero > BYTE_LIMIT // <int64_t>_itemsize(proto.dtype):
            set_error(error_ctx, "BufferError",
                      "tensorbridge allocator: prototype shape is negative or too large")
            return -1
    count = 0 if empty else nonzero
    nbytes = count * <int64_t>_itemsize(proto.dtype)
    dims = (ndim if ndim > 0 else 1) * sizeof(int64_t)
    block = <char*>malloc(sizeof(DLManagedTensorVersioned) + 2 * dims)
    if block == NULL:
        set_error(error_ctx, "MemoryError", "tensorbridge allocator: out of memory")
        return -1
    mv = <DLManagedTensorVersioned*>block
    mv.dl_tensor.data = tb_alloc(<size_t>(nbytes if nbytes > 0 else 1))
    if mv.dl_tensor.data == NULL:
        free(block)
        set_error(error_ctx, "MemoryError", "tensorbridge allocator: out of memory")
        return -1
    mv.version.major = TB_DLPACK_MAJOR
    mv.version.minor = TB_DLPACK_MINOR
    mv.manager_ctx = NULL
    mv.deleter = _free_allocated
    # Sub-byte types get one element per byte, as every tensorbridge tensor does.
    mv.flags = TB_FLAG_SUBBYTE_PADDED if proto.dtype.bits < 8 else 0
    mv.dl_tensor.device = proto.device
    mv.dl_tensor.ndim = ndim
    mv.dl_tensor.dtype = proto.dtype
    mv.dl_tensor.byte_offset = 0
    mv.dl_tensor.shape = <int64_t*>(block + sizeof(DLManagedTensorVersioned))
    mv.dl_tensor.strides = <int64_t*>(block + sizeof(DLManagedTensorVersioned) + dims)
    step = 1
    for i in range(ndim - 1, -1, -1):
        mv.dl_tensor.shape[i] = proto.shape[i]
        mv.dl_tensor.strides[i] = step
        step *= proto.shape[i] if proto.shape[i] > 0 else 1
    if ndim == 0:
        mv.dl_tensor.shape[0] = 0
        mv.dl_tensor.strides[0] = 0
    out[0] = mv
    return 0


cdef int _api_from_py(void* obj, DLManagedTensorVersioned** out) except -1:
    if Py_TYPE(<object>obj) != <PyTypeObject*>Tensor:
        raise TypeError(
            f"tensorbridge exchange table: expected a tensorbridge.Tensor; got "
            f"{type(<object>obj).__name__}")
    cdef Tensor t = <Tensor>obj
    out[0] = <DLManagedTensorVersioned*>_export_managed(t, True, 0, &t._device)
    return 0


cdef int _api_to_py(DLManagedTensorVersioned* managed, void** out) except -1:
    """Steals managed: on failure it has been released."""
    if managed == NULL:
        raise BufferError("tensorbridge exchange table: NULL managed tensor")
    cdef Tensor t = _adopt_versioned(
        managed, "tensorbridge exchange table", "the managed tensor")
    Py_INCREF(t)
    out[0] = <void*>t
    return 0


cdef int _api_dltensor(void* obj, DLTensor* out) except -1:
    """A non-owning view of a Tensor, valid while the Tensor lives. A DLTensor has
    no flags, so read-only and one-per-byte sub-byte tensors are refused (the
    managed form carries the flags)."""
    if Py_TYPE(<object>obj) != <PyTypeObject*>Tensor:
        raise TypeError(
            f"tensorbridge exchange table: expected a tensorbridge.Tensor; got "
            f"{type(<object>obj).__name__}")
    cdef Tensor t = <Tensor>obj
    if t._flags & TB_FLAG_READ_ONLY:
        raise BufferError("a read-only tensor cannot be described by a bare DLTensor, "
                          "which cannot say read-only; use the managed form")
    if t._flags & TB_FLAG_SUBBYTE_PADDED:
        raise BufferError("a one-element-per-byte sub-byte tensor cannot be described by "
                          "a bare DLTensor, which cannot say so; use the managed form")
    _export_data(t, t._device.device_type, out)
    out.device = t._device
    out.ndim = t._ndim
    out.dtype = t._dtype
    out.shape = t._shape
    out.strides = t._strides
    return 0


cdef int _api_stream(DLDeviceType device_type, int32_t device_id, void** out) noexcept:
    # tensorbridge runs no kernels and has no streams: NULL, the default stream.
    if out != NULL:
        out[0] = NULL
    return 0


cdef object _make_exchange_capsule():
    _tensor_api.header.version.major = TB_DLPACK_MAJOR
    _tensor_api.header.version.minor = TB_DLPACK_MINOR
    _tensor_api.header.prev_api = NULL
    _tensor_api.managed_tensor_allocator = <DLPackManagedTensorAllocator>_api_allocate
    _tensor_api.managed_tensor_from_py_object_no_sync = \
        <DLPackManagedTensorFromPyObjectNoSync>_api_from_py
    _tensor_api.managed_tensor_to_py_object_no_sync = \
        <DLPackManagedTensorToPyObjectNoSync>_api_to_py
    _tensor_api.dltensor_from_py_object_no_sync = <DLPackDLTensorFromPyObjectNoSync>_api_dltensor
    _tensor_api.current_work_stream = <DLPackCurrentWorkStream>_api_stream
    return PyCapsule_New(&_tensor_api, TB_CAPSULE_EXCHANGE_API, NULL)


cdef Tensor _from_dlpack_unqueried(object x, object copy, int flags):
    """__dlpack__(max_version=...) without asking __dlpack_device__ first (which
    costs JAX 1.7 µs): no stream is passed, which is right for host memory. A
    capsule of CUDA/ROCm memory is dropped unconsumed and the stream handshake
    follows (the second and last __dlpack__ call). A producer that refuses
    max_version is asked its device and gets the legacy call, with the stream that
    device needs (the second and last call). Not for types known to refuse
    max_version or to have exported GPU memory: the full negotiation asks those
    their device first."""
    cdef int mask = KW_COPY if copy is False else 0
    cdef DLDevice source
    cdef Tensor t
    cdef int kind
    cdef bint queried = False
    if flags & TI_TORCH:
        _check_torch_bits(x)
    first = None
    try:
        capsule = _call_dlpack(x, mask, None, None, copy)
    except TypeError as exc:
        if mask:
            raise _call_error(x, mask, None, None, copy, False, exc, _cpu_device)
        first = exc
    except Exception as exc:
        raise _call_error(x, mask, None, None, copy, False, exc, _cpu_device)
    if first is not None:
        # A producer older than the 2023.12 keywords: the legacy call, once, with
        # the stream its device needs.
        source = _producer_device(x)
        queried = True
        stream = 0 if source.device_type == kDLROCM else \
            1 if _needs_stream(source.device_type) else None
        mask = KW_STREAM if stream is not None else 0
        try:
            capsule = _call_dlpack_legacy(x, mask, stream)
        except Exception as exc:
            exc.__context__ = first
            raise _call_error(x, mask, stream, None, None, True, exc, source)
        if PyCapsule_CheckExact(capsule):
            _mark_legacy_type(x)
    # The capsule is dropped before any error propagates, so a capsule destructor
    # written in Python (pydlpack's, ctypes') runs with no exception pending.
    try:
        _checked_capsule(x, capsule)
        t = _read_capsule(capsule, &kind)
    except BaseException:
        capsule = None
        raise
    if _needs_stream(t._device.device_type):
        _mark_stream_type(x)   # this type has GPU data: the handshake first from now on
        if not queried:
            # Asked for without a stream: not consumed (its destructor frees it, or a
            # producer that hands out one capsule gives it again), and asked again
            # with the stream: the second and last call.
            capsule = None
            return _from_producer(x, None, copy, None, True)
    if queried and not _same_device(t._device, source):
        capsule = None
        _refuse_device_mismatch(x, source, t._device)
    try:
        _own_capsule(capsule, t, kind)
    finally:
        capsule = None
    if copy is False and (t._flags & TB_FLAG_IS_COPIED):
        raise _CopyNeeded(
            f"from_dlpack(): copy=False, but {_type_name(x)} could only export a copy")
    _keep_immutable(t, flags)
    return t


cdef int _refuse_device_mismatch(object x, DLDevice reported, DLDevice exported) except -1:
    raise BufferError(
        f"from_dlpack(): {_type_name(x)}.__dlpack_device__() says {_dev_str(reported)}, "
        f"but its __dlpack__() exported {_dev_str(exported)} data; refused, as the "
        "memory is not where its producer says")


cdef Tensor _from_producer_fast(object x, object copy, object stream):
    """The exchanges that need no device query (no device= request): NumPy arrays
    read in C, exchange tables, and producer types that only exported host memory.
    None: the full negotiation (_from_producer) decides."""
    cdef const DLPackExchangeAPI* api
    cdef Tensor fast
    cdef _ApiSlot* slot
    cdef int flags
    if _is_ndarray(x):
        # NumPy's array struct says what its __dlpack__ would (checked once
        # against its buffer), at a fraction of the cost.
        fast = _import_ndarray(x)
        if fast is not None:
            return _copy_contiguous(fast) if copy is True else fast
        return None
    slot = _type_slot(x)
    api = slot.api
    flags = slot.flags
    if _use_exchange_api and api != NULL and (
            not (flags & TI_STREAM) or (stream is not None and stream == -1)):
        fast = _from_exchange_api(x, api, stream, False, flags)
        if fast is not None:
            if copy is False and (fast._flags & TB_FLAG_IS_COPIED):
                raise _CopyNeeded(
                    f"from_dlpack(): copy=False, but {_type_name(x)}'s exchange table "
                    "gave a copy")
            if copy is not True:
                return fast
            if fast._device.device_type == kDLCPU:
                return _copy_contiguous(fast)
            # copy=True of other memory: the producer must copy (__dlpack__).
        flags = _type_slot(x).flags   # the table may have found GPU memory
    if stream is None and copy is not True and \
            (flags & (TI_PROTOCOL | TI_STREAM | TI_LEGACY)) == TI_PROTOCOL:
        # (a type without the protocol goes on, to the precise TypeError)
        return _from_dlpack_unqueried(x, copy, flags)
    return None


cdef object _ask_producer(object x, int mask, object stream, object dl_device, object copy,
                          DLDevice source, bint one_call_left):
    """x's capsule for the request: __dlpack__(max_version=(1, 3), ...), or the
    legacy call for a producer that refuses max_version (first, for a type known to
    refuse it); __dlpack__ is called at most twice. What the producer raises comes
    back as a ProducerError naming it and the call. `one_call_left`: one call was
    spent already (on the fast path), so no legacy retry."""
    cdef bint legacy = False
    cdef bint legacy_first = (not (mask & (KW_DEVICE | KW_COPY)) and not one_call_left
                              and (_type_slot(x).flags & TI_LEGACY))
    try:
        if legacy_first:
            legacy = True
            try:
                return _call_dlpack_legacy(x, mask, stream)
            except (TypeError, BufferError):
                # This object of the type takes max_version after all (a wrapper
                # type, say): forget the memo, and ask the versioned way (the second call).
                _unmark_legacy_type(x)
                legacy = False
                return _call_dlpack(x, mask, stream, dl_device, copy)
        try:
            return _call_dlpack(x, mask, stream, dl_device, copy)
        except TypeError:
            if mask & (KW_DEVICE | KW_COPY) or one_call_left:
                raise
            # A producer older than the 2023.12 keywords: the legacy call, once.
            legacy = True
            capsule = _call_dlpack_legacy(x, mask, stream)
        if PyCapsule_CheckExact(capsule):
            _mark_legacy_type(x)
        return capsule
    except Exception as exc:
        raise _call_error(x, mask, stream, dl_device, copy, legacy, exc, source)


cdef Tensor _from_producer(object x, object device, object copy, object stream,
                           bint one_call_left=False):
    cdef DLDevice source
    cdef bint queried = True
    if not (_type_slot(x).flags & TI_PROTOCOL):
        _raise_not_dlpack(x)
    if device is None and _is_ndarray(x):
        # NumPy memory is host memory and NumPy takes no stream, so there is
        # nothing __dlpack_device__() could change: the capsule says the rest.
        source.device_type = kDLCPU
        source.device_id = 0
        queried = False
    else:
        _check_torch_bits(x)
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
    elif source.device_type == kDLROCM:
        mask |= KW_STREAM
        stream_arg = 0 if stream is None else stream   # 0: the default stream on ROCm
    if not _same_device(source, target):
        mask |= KW_DEVICE
        dl_device = (target.device_type, target.device_id)
        if target.device_type == kDLCPU:
            # "For kDLCPU, stream must be None": the producer synchronises fully.
            mask &= ~KW_STREAM
            stream_arg = None
    if mask & KW_STREAM and source.device_type == kDLROCM:
        if stream_arg == 1 or stream_arg == 2:
            raise ValueError(
                f"from_dlpack(): stream={stream_arg} is not a ROCm stream (1 and 2 are "
                "CUDA's default streams); pass 0 (the default stream), a stream handle, "
                "or -1 for no synchronisation")
    elif mask & KW_STREAM and stream_arg == 0:
        raise ValueError(
            "from_dlpack(): stream=0 is ambiguous for CUDA; pass 1 (legacy default), "
            "2 (per-thread default), a stream handle, or -1 for no synchronisation")
    if mask & KW_DEVICE:
        if copy is False and not (target.device_type == kDLCPU and target.device_id == 0
                                  and _host_accessible(source.device_type)):
            raise _CopyNeeded(
                f"from_dlpack(): copy=False, but moving {_type_name(x)}'s "
                f"{_dev_str(source)} data to {_dev_str(target)} needs a copy")
    if copy is True:
        if target.device_type == kDLCPU or (device is None
                                            and _host_accessible(target.device_type)
                                            and not _needs_stream(target.device_type)):
            # Memory the CPU reads: imported without asking for a copy (TensorFlow
            # and tvm-ffi refuse copy=True, PyTorch does not flag its copies), then
            # copied here, into plain host memory, unless the export was a copy.
            self_copy = True
        else:
            mask |= KW_COPY
    elif copy is False:
        mask |= KW_COPY

    capsule = _ask_producer(x, mask, stream_arg, dl_device, copy, source, one_call_left)
    cdef Tensor t
    # The capsule is dropped before any error propagates, so a capsule destructor
    # written in Python (pydlpack's, ctypes') runs with no exception pending.
    try:
        _checked_capsule(x, capsule)
        t = _import_capsule(capsule)
    finally:
        capsule = None
    if (mask & KW_DEVICE) and not _same_device(t._device, target):
        raise BufferError(
            f"from_dlpack(): {_type_name(x)}.__dlpack__(dl_device={dl_device}) returned "
            f"{_dev_str(t._device)} data instead of {_dev_str(target)}")
    if queried and not (mask & KW_DEVICE) and not _same_device(t._device, source):
        _refuse_device_mismatch(x, source, t._device)
    if copy is False and (t._flags & TB_FLAG_IS_COPIED):
        raise _CopyNeeded(
            f"from_dlpack(): copy=False, but {_type_name(x)} could only export a copy")
    if copy is True and not (t._flags & TB_FLAG_IS_COPIED):
        if self_copy:
            return _copy_contiguous(t)
        if _host_accessible(t._device.device_type):
            # Asked for a copy on this device, the producer did not say it made one:
            # it may share, and a copy made here would not be that kind of memory.
            raise BufferError(
                f"from_dlpack(): copy=True on {_dev_str(target)}, but {_type_name(x)} did "
                f"not mark its export as a copy (IS_COPIED), and tensorbridge cannot "
                f"allocate {_dev_str(target)} memory; ask for device='cpu' to get a copy "
                "in host memory")
        # Device memory, which tensorbridge cannot read: the producer's word is all
        # there is (PyTorch copies without setting IS_COPIED).
    _keep_immutable(t, _type_slot(x).flags)
    return t


cdef Tensor _from_capsule_arg(object capsule, object device, object copy, object stream):
    """A raw capsule: validated, the request checked against it, and only then
    consumed, so a capsule refused for any reason is left as it was."""
    cdef int kind
    cdef Tensor t
    try:
        t = _read_capsule(capsule, &kind)
    except BaseException:
        capsule = None
        raise
    cdef DLDevice target = t._device
    cdef bint relabel = False
    if device is not None:
        target = _requested_device(device)
    if stream is not None and stream != -1 and not _host_accessible(t._device.device_type):
        raise BufferError(
            f"from_dlpack(): a raw capsule cannot be synchronised with stream={stream}; "
            "pass the producer object instead of its capsule")
    if not _same_device(t._device, target):
        if not (target.device_type == kDLCPU and target.device_id == 0
                and _host_accessible(t._device.device_type)):
            raise BufferError(
                f"from_dlpack(): cannot move a capsule's {_dev_str(t._device)} data to "
                f"{_dev_str(target)}; a capsule carries no producer to ask for a copy")
        relabel = True
    if copy is True and not (t._flags & TB_FLAG_IS_COPIED) and not (
            _host_accessible(t._device.device_type)
            and (device is None or target.device_type == kDLCPU)):
        raise BufferError(
            f"from_dlpack(): copy=True of a capsule's {_dev_str(t._device)} data to "
            f"{_dev_str(target)} needs the producer (tensorbridge copies into host memory "
            "only); pass the producer object instead of its capsule")
    _own_capsule(capsule, t, kind)
    if relabel:
        t = _relabel(t, target)
    if copy is True and not (t._flags & TB_FLAG_IS_COPIED):
        return _copy_contiguous(t)
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
        a consumed capsule, ``copy=False`` impossible, a capsule on another
        device than the producer reported). A refused capsule is left as it
        was (not renamed, its deleter not called).
    NotDLPackError
        ``x`` has no ``__dlpack__``/``__dlpack_device__`` and is not a capsule
        (an ``AttributeError`` and a ``TypeError``).
    ProducerError
        ``x.__dlpack__`` or ``x.__dlpack_device__`` raised; the exception's class
        also derives from the producer's exception type, which is its
        ``__cause__``.
    TypeError
        A capsule with a foreign name, a producer returning something else than
        a capsule, or an argument of the wrong type.

    Notes
    -----
    Arrays of immutable types (JAX, Arrow, TensorFlow eager tensors) are
    imported read-only even from legacy capsules. ``copy=True`` always gives
    private memory where the CPU can read it, whatever the producer did.

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
    cdef Tensor t
    if device is None:
        t = _from_producer_fast(x, copy, stream)
        if t is not None:
            return t
    return _from_producer(x, device, copy, stream)


# --------------------------------------------------------------------------
# NumPy arrays through the buffer protocol (asarray and convert)
# --------------------------------------------------------------------------

cdef extern from "Python.h":
    int _get_buffer_or_error "PyObject_GetBuffer"(object obj, Py_buffer* view, int flags)


cdef inline int _format_code(const char* fmt) noexcept:
    """The DLPack type code of a one-item native buffer format, or -1."""
    if fmt == NULL:
        return kDLUInt
    if fmt[0] == b'@' or fmt[0] == b'=' or fmt[0] == _native_order_char:
        fmt += 1
    cdef char c = fmt[0]
    if c == 0:
        return -1
    if fmt[1] != 0:
        if c == b'Z' and (fmt[1] == b'f' or fmt[1] == b'd') and fmt[2] == 0:
            return kDLComplex
        return -1
    if c == b'?':
        return kDLBool
    if c == b'b' or c == b'h' or c == b'i' or c == b'l' or c == b'q':
        return kDLInt
    if c == b'B' or c == b'H' or c == b'I' or c == b'L' or c == b'Q':
        return kDLUInt
    if c == b'e' or c == b'f' or c == b'd':
        return kDLFloat
    return -1

cdef char _native_order_char = b'<' if _sys.byteorder == "little" else b'>'


cdef extern from "_runtime.h":
    ctypedef struct tb_npy_descr:
        char byteorder
        int type_num
    ctypedef struct tb_npy_array:
        char* data
        int nd
        Py_ssize_t* dimensions
        Py_ssize_t* strides
        tb_npy_descr* descr
        int flags
    int TB_NPY_WRITEABLE
    bint tb_npy_dtype(int type_num, uint8_t* code, uint8_t* bits) noexcept

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
            descr.byteorder != _native_order_char:
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


# --------------------------------------------------------------------------
# convert's fast path: sources we read in C, targets with an exchange table
# --------------------------------------------------------------------------

# Types whose tensors convert may read through their exchange table without the
# Python-level source reading (mutable frameworks: torch, paddle); _convert.py adds them.
cdef set _fast_sources = set()

def _register_fast_source(tp):
    _fast_sources.add(tp)


@cython.final
cdef class _FastTarget:
    """What a target framework's importer takes as it is (the fast subset of
    Framework.precopy_reasons), and its exchange table."""
    cdef const DLPackExchangeAPI* api
    cdef bint accept[18][129]
    cdef bint negative_strides, noncompact, permuted, offset_ok, readonly_ok
    cdef int64_t alignment
    cdef object maker       # None: the table; "identity": the Tensor; else maker(t)

    def __init__(self, target_type, dtypes, bint negative_strides, bint noncompact,
                 bint permuted, bint offset_ok, bint readonly_ok, int64_t alignment,
                 maker=None):
        self.maker = maker
        self.api = NULL
        if maker is None:
            self.api = _exchange_api_lookup(target_type)
            if self.api == NULL:
                raise TypeError(f"{target_type!r} has no usable DLPack exchange table")
        memset(self.accept, 0, sizeof(self.accept))
        for d in dtypes:
            self.accept[<int>d.code][<int>d.bits] = True
        self.negative_strides = negative_strides
        self.noncompact = noncompact
        self.permuted = permuted
        self.offset_ok = offset_ok
        self.readonly_ok = readonly_ok
        self.alignment = alignment

    def __call__(self, Tensor t):
        """The target's object for t (no checks)."""
        return self.make(t)

    cdef object make(self, Tensor t):
        if self.maker is None:
            return _to_py(self.api, t)
        if self.maker == "identity":
            return t
        return self.maker(t)

    cdef bint takes(self, Tensor t):
        cdef int i
        cdef bint negative = False, contiguous
        if t._device.device_type != kDLCPU or not self.accept[t._dtype.code][t._dtype.bits]:
            return False
        if t._dtype.bits < 8 and not (t._flags & TB_FLAG_SUBBYTE_PADDED):
            return False
        if (t._flags & TB_FLAG_READ_ONLY) and not self.readonly_ok:
            return False
        if t._byte_offset != 0 and not self.offset_ok:
            return False
        if self.alignment and t._size() and (<uintptr_t>t._ptr()) % self.alignment:
            return False
        if t._size() <= 1 or t._c_contiguous():
            return True
        if not (self.noncompact and self.permuted):
            return False   # leave the finer layout rules to the planner
        for i in range(t._ndim):
            if t._shape[i] > 1 and t._strides[i] < 0:
                negative = True
        return self.negative_strides or not negative


def _fast_convert(_FastTarget target, obj):
    """convert(obj, target) when nothing needs planning: obj is a Tensor, a NumPy
    array or a registered source type, and target takes it as it is. None otherwise
    (the planner decides)."""
    cdef Tensor t
    cdef _ApiSlot* slot
    if type(obj) is Tensor:
        t = <Tensor>obj
    elif _is_ndarray(obj):
        t = _import_ndarray(obj)
        if t is None:
            return None
    elif _use_exchange_api and type(obj) in _fast_sources:
        slot = _type_slot(obj)
        if slot.api == NULL:
            return None
        t = _from_exchange_api(obj, slot.api, None, True, slot.flags)
        if t is None:
            return None
    else:
        return None
    if not target.takes(t):
        return None
    return target.make(t)


# target (a name or module) -> _FastTarget, set by _convert._convert once it has
# converted to that target; see _fast_convert.
cdef dict _fast_targets = {}
cdef object _convert_general = None


def _set_fast_target(to, _FastTarget target):
    _fast_targets[to] = target


def convert(obj, to, /, *, dtype=None, device=None, copy=None, requires_grad=False):
    """Convert ``obj`` into framework ``to``, sharing memory whenever the target can.

    Parameters
    ----------
    obj : object
        Anything :func:`asarray` accepts, and the frameworks' own types (TensorFlow
        tensors and variables, PyArrow arrays and chunked arrays, JAX arrays...).
    to : str or module
        ``"numpy"``, ``"torch"``, ``"jax"``, ``"paddle"``, ``"tensorflow"``, ``"mlx"``,
        ``"cupy"``, ``"pyarrow"``, ``"array_api_strict"``, ``"tvm_ffi"``,
        ``"tensorbridge"``, or that framework's module.
    dtype : dtype-like, optional
        The result's dtype (a cast, so a copy); by default the source's.
    copy : bool, optional
        ``None``: copy only when the target cannot take the data as it is.
        ``True``: always a copy. ``False``: never; BufferError saying what the target
        cannot take.
    requires_grad : bool
        A PyTorch leaf tensor that requires grad (PaddlePaddle: ``stop_gradient=False``);
        ValueError for targets without autograd.

    Returns
    -------
    The target framework's array, with the source's values, shape and dtype (or
    ``dtype``). Read-only sources stay read-only where the target can say so and are
    copied where it cannot.

    Examples
    --------
    >>> import numpy as np, tensorbridge as tb
    >>> a = np.arange(6.0)[::-1]
    >>> x = tb.convert(a, "torch")      # torch cannot take negative strides: a copy
    >>> tb.explain(a, "torch").shares_memory
    False
    """
    global _convert_general
    cdef _FastTarget target
    if dtype is None and device is None and copy is None and requires_grad is False and (
            type(to) is str or type(to) is _ModuleType):
        target = _fast_targets.get(to)
        if target is not None:
            result = _fast_convert(target, obj)
            if result is not None:
                return result
    if _convert_general is None:
        from tensorbridge._convert import _convert as general
        _convert_general = general
    return _convert_general(obj, to, dtype=dtype, device=device, copy=copy,
                            requires_grad=requires_grad)


cdef object _asarray_general = None


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """Turn ``obj`` into a Tensor, sharing its memory whenever possible.

    See :func:`tensorbridge._creation.asarray` for the full rules; this compiled
    front door answers the common calls (a Tensor, a NumPy array, nothing else
    asked) without entering the Python layer.
    """
    global _asarray_general
    cdef _ApiSlot* slot
    cdef Tensor fast
    if dtype is None and device is None and copy is None:
        if type(obj) is Tensor:
            return obj
        if _is_ndarray(obj):
            fast = _import_ndarray(obj)
            if fast is not None:
                return fast
            try:
                return _from_producer(obj, None, None, None)
            except BufferError:
                pass  # e.g. ml_dtypes arrays, which NumPy cannot export: the general path
        elif _use_exchange_api:
            slot = _type_slot(obj)
            if slot.api != NULL:
                # Torch bit views: None here, resolved (copied) by the general path.
                fast = _from_exchange_api(obj, slot.api, None, True, slot.flags)
                if fast is not None:
                    return fast
    if _asarray_general is None:
        from tensorbridge._creation import asarray as general
        _asarray_general = general
    return _asarray_general(obj, dtype=dtype, device=device, copy=copy)


def to_dlpack(tensor, /):
    """The legacy ``"dltensor"`` capsule of a Tensor or of any DLPack object.

    Prefer ``tensor.__dlpack__(max_version=(1, 3))``: legacy capsules cannot
    mark memory read-only, so a read-only tensor raises BufferError here.
    """
    cdef Tensor t
    if type(tensor) is Tensor:
        t = <Tensor>tensor
    elif PyCapsule_CheckExact(tensor) or (hasattr(type(tensor), "__dlpack__")
                                          and hasattr(type(tensor), "__dlpack_device__")):
        t = from_dlpack(tensor)
    else:
        _raise_not_dlpack(tensor, "to_dlpack()")
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
