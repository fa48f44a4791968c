# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Capsules: the arguments of __dlpack__, reading and
# owning a capsule (validate, then own), filling a Tensor from a DLTensor,
# exporting a Tensor as a capsule, and inspecting one without consuming it.

from cpython.ref cimport Py_INCREF, Py_DECREF
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uintptr_t, UINTPTR_MAX
from libc.string cimport memcpy, strcmp
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *
from tensorbridge._lifetime cimport *


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


cdef int _fill(Tensor t, DLTensor* dl, uint64_t flags) except -1:
    """Validate a producer's DLTensor and copy its description into t."""
    cdef int ndim = dl.ndim
    cdef int i
    cdef int64_t extent, size = 1, span = 0, stride
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
        # Legacy and pre-1.2 producers: NULL strides mean C order.
        _c_strides(ndim, t._shape, t._strides)
    elif ndim > 0:
        memcpy(t._strides, dl.strides, ndim * sizeof(int64_t))
    t._dtype = dt
    t._byte_offset = dl.byte_offset
    _check_layout(t, "from_dlpack()", "DLTensor")
    size = t._size()
    if size > 0 and dl.data == NULL:
        raise BufferError(
            f"from_dlpack(): DLTensor.data is NULL but the tensor has {size} elements")
    if (size > 0 and _pointer_is_address(dl.device.device_type)
            and <uintptr_t>dl.data > UINTPTR_MAX - <uintptr_t>dl.byte_offset):
        # (the first element's address would wrap around: not memory of any process)
        raise BufferError(
            f"from_dlpack(): DLTensor.data ({<uintptr_t>dl.data:#x}) + byte_offset "
            f"({dl.byte_offset}) is past the end of the address space")
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


cdef int _propagate_error() except -1:
    """Propagates the exception already set (after an unchecked call)."""
    return -1


cdef object _foreign_capsule(DLManagedTensorVersioned* managed):
    """An unconsumed versioned capsule owning a producer's managed tensor (from an
    exchange table): its deleter runs when the capsule dies unconsumed, or here if
    no capsule can be made."""
    cdef PyObject* capsule = _raw_capsule_new(managed, TB_CAPSULE_VERSIONED,
                                              tb_capsule_destructor_versioned)
    cdef PyObject* exc_type
    cdef PyObject* exc_value
    cdef PyObject* exc_tb
    if capsule == NULL:
        # (with the error put aside: a deleter may run Python code)
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb)
        _call_deleter(managed, OWN_VERSIONED)
        PyErr_Restore(exc_type, exc_value, exc_tb)
        _propagate_error()
    result = <object>capsule
    Py_DECREF(result)   # PyCapsule_New's reference; `result` holds its own
    return result


def is_capsule(obj):
    """True for a PyCapsule (of any name)."""
    return PyCapsule_CheckExact(obj)


# --------------------------------------------------------------------------
# Inspection without consuming
# --------------------------------------------------------------------------

def inspect_capsule(capsule):
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
