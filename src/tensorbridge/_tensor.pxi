# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. The Tensor view: fields, the Python protocols
# (__dlpack__, buffer, __array_interface__, indexing, reshape, astype...) and the
# small helpers behind its surface that the Python layer calls.

cimport cython
from cpython.ref cimport PyObject, Py_DECREF
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.buffer cimport (
    PyBuffer_Release, PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES,
    PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS,
)
from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libc.stdlib cimport free
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *

from tensorbridge._dtypes import as_dtype as _as_dtype, is_dtype_like as _is_dtype_like
from tensorbridge._devices import cached_device as _make_device


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
            tb_free(self._managed)
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
        return meta_repr(self)

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
                    raise DeviceError(
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
        cdef Py_ssize_t i
        if type(key) is int and self._ndim > 0:
            if not -2**62 <= key < 2**62:
                i = -self._shape[0] - 1     # out of bounds, as any index this large
            else:
                i = key
            if i < -self._shape[0] or i >= self._shape[0]:
                raise IndexError(
                    f"index {key} is out of bounds for dimension 0 with size {self._shape[0]}")
            return _index_int(self, i + self._shape[0] if i < 0 else i)
        if type(key) is slice and self._ndim > 0:
            return _index_slice(self, key)
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
        cdef int order[TB_MAX_NDIM]
        cdef int i
        for i in range(self._ndim):
            order[i] = self._ndim - 1 - i
        return _permuted(self, order)

    def permute(self, *dims):
        """A view with the dimensions reordered: ``t.permute(2, 0, 1)``."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return _permute(self, dims, "permute")

    def transpose(self, *dims):
        """``transpose()`` reverses the dimensions; ``transpose(d0, d1)`` swaps two
        (as in PyTorch); ``transpose((2, 0, 1))`` applies a permutation (as in NumPy)."""
        cdef int order[TB_MAX_NDIM]
        cdef int i, a, b
        if len(dims) == 0:
            return self.T
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            return _permute(self, tuple(dims[0]), "transpose")
        if len(dims) != 2:
            raise TypeError(
                "transpose() takes no dimensions, two dimensions to swap, or one "
                f"permutation tuple; got {dims}")
        a = _normalize_dim(dims[0], self._ndim, "transpose")
        b = _normalize_dim(dims[1], self._ndim, "transpose")
        for i in range(self._ndim):
            order[i] = i
        order[a] = b
        order[b] = a
        return _permuted(self, order)

    def reshape(self, *shape):
        """A tensor of the same elements with a new shape: a view whenever the
        strides allow it, otherwise a copy (CPU-accessible memory only)."""
        cdef int64_t dims[TB_MAX_NDIM]
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        cdef int ndim = _resolve_shape(shape, self._size(), _itemsize(self._dtype), dims)
        return _reshaped(self, ndim, dims)

    def flatten(self):
        """A 1-d tensor of the elements in C order (a view when possible, as in PyTorch)."""
        cdef int64_t size = self._size()
        return _reshaped(self, 1, &size)

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
        result = _cast_in_c(self, target)
        if result is not None:
            return result
        return _numpy_cast(self, target)

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
            try:
                target = _requested_device(device)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"to(): {exc}") from None
            if not _same_device(target, self._device):
                if target.device_type == kDLCPU and target.device_id == 0 and \
                        _host_accessible(self._device.device_type):
                    result = _relabel(self, target)
                else:
                    raise DeviceError(
                        f"to(): cannot move {_dev_str(self._device)} memory to "
                        f"{_dev_str(target)}; {_NO_MOVES}")
        if dtype is not None and _resolve_dtype_obj(dtype) is not _dtype_obj(self._dtype):
            return result.astype(dtype)
        if copy:
            return result.copy()
        return result

    def numpy(self):
        """A NumPy array sharing this tensor's memory (read-only stays read-only).
        Its ``base`` is this tensor where NumPy's C API makes it (CPU memory of
        NumPy's own dtypes); else the buffer protocol's view."""
        result = _ndarray_of(self)      # NumPy's C API (None: ml_dtypes types...)
        if result is not None:
            return result
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
        if self._data == NULL and self._nbytes() > 0:
            PyMem_Free(dims)
            raise BufferError("the tensor's data pointer is NULL")   # (never made so)
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


def meta_repr(Tensor t):
    """The metadata-only repr, for memory the CPU cannot read (and dtypes NumPy cannot
    show without ml_dtypes)."""
    flags = ", readonly" if t._flags & TB_FLAG_READ_ONLY else ""
    return (f"tensorbridge.Tensor(shape={t.shape}, dtype={_dtype_obj(t._dtype)}, "
            f"device={_dev_str(t._device)}{flags})")


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
    cdef Py_ssize_t i
    if type(d) is int:
        i = d
    elif isinstance(d, bool) or not hasattr(d, "__index__"):
        raise TypeError(f"{api}(): dimensions must be ints; got {d!r}")
    else:
        i = d.__index__()
    if i < -ndim or i >= ndim:
        raise IndexError(
            f"{api}(): dimension {i} is out of range for a tensor with {ndim} dimensions")
    return i + ndim if i < 0 else i


cdef Tensor _permute(Tensor t, tuple dims, str api):
    """t.permute(*dims), the dimensions checked and normalised in C."""
    cdef int order[TB_MAX_NDIM]
    cdef uint64_t seen = 0
    cdef int i
    if len(dims) != t._ndim:
        raise ValueError(f"{api}(): expected {t._ndim} dimensions; got {len(dims)}: {dims}")
    for i in range(t._ndim):
        order[i] = _normalize_dim(dims[i], t._ndim, api)
        if (seen >> order[i]) & 1:
            raise ValueError(f"{api}(): repeated dimension in {dims}")
        seen |= (<uint64_t>1) << order[i]
    return _permuted(t, order)


cdef Tensor _permuted(Tensor t, const int* order):
    """A view of t whose dimension i is t's dimension order[i] (a permutation)."""
    cdef Tensor v = _view(t)
    cdef int i
    for i in range(t._ndim):
        v._shape[i] = t._shape[order[i]]
        v._strides[i] = t._strides[order[i]]
    _check_packed_view(v)
    return v


cdef Tensor _reshaped(Tensor t, int ndim, const int64_t* dims):
    """t with shape dims (whose product is t's size): a view when the strides allow
    one, else a C-contiguous copy."""
    cdef Tensor v = _reshape_view(t, ndim, dims)
    if v is not None:
        return v
    if not _host_accessible(t._device.device_type):
        raise BufferError(
            f"reshape(): the strides of this {_dev_str(t._device)} tensor do not allow "
            "a view, and tensorbridge cannot copy device memory")
    return _reshape_view(_copy_contiguous(t), ndim, dims)


def set_readonly(Tensor t, bint readonly):
    """A view of t with the read-only flag set or cleared (for internal use only)."""
    cdef Tensor v = _view(t)
    if readonly:
        v._flags |= TB_FLAG_READ_ONLY
    else:
        v._flags &= ~TB_FLAG_READ_ONLY
    return v


def fold_offset(Tensor t):
    """A view with byte_offset 0 and the offset moved into the data pointer
    (for consumers that ignore or refuse byte_offset; pointer devices only)."""
    if t._byte_offset == 0:
        return t
    cdef Tensor v = _view(t)
    v._data = <void*>(<uintptr_t>t._data + <uintptr_t>t._byte_offset)
    v._byte_offset = 0
    return v


def is_packed(Tensor t):
    return _is_packed(t)


def is_host(Tensor t):
    return _host_accessible(t._device.device_type)
