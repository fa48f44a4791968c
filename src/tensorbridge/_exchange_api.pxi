# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. The DLPack C exchange API (1.2/1.3): the per-type
# table cache and the consumer, then the producer table of Tensor.

from cpython.ref cimport PyTypeObject, Py_INCREF, Py_DECREF, Py_TYPE, Py_XDECREF
from cpython.long cimport PyLong_AsLong, PyLong_CheckExact
from sys import intern as _sys_intern
from weakref import WeakSet as _WeakSet
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.string cimport memset
from libc.stdlib cimport free, malloc
from libc.stdio cimport snprintf
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *
from tensorbridge._memory cimport *

import os as _os


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
    TI_ABORTS = 32          # its __dlpack__ aborts on some arrays (TF strings)

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
            if _export_overridden(tp, name):
                return NULL
            break
    return api


cdef bint _export_overridden(object tp, object table_name) except -1:
    """Whether tp's __dlpack__ or __dlpack_device__ is not that of the class that
    defines the exchange table: a subclass that exports its own way (a torch.Tensor
    subclass whose __dlpack__ scales, say), which its inherited table would bypass.
    Its arrays are read through the protocol, as NumPy reads them."""
    for cls in getattr(tp, "__mro__", ()):
        names = getattr(cls, "__dict__", None)
        if names is not None and table_name in names:
            return not _same_export(tp, cls)
    return False


# Producer types that have exported CUDA/ROCm memory: asked __dlpack_device__ first.
# Weak: a type that dies leaves (producers made anew on every call grew these sets
# without bound); the per-type slots above hold no reference either.
cdef object _stream_types = _WeakSet()
cdef Py_ssize_t _stream_marks = 0   # types ever put in it (none: not asked)


cdef bint _immutable_type(object cls) except -1:
    """Whether cls's arrays are immutable (_known_types; asked once per producer
    type)."""
    return _known_immutable_type(cls)


cdef inline _ApiSlot* _type_slot(object x):
    """What tensorbridge knows about type(x): its exchange table and TI_* flags
    (cached per type; read the fields before calling into Python again). The
    cached case is inlined into every caller; a miss is filled out of line."""
    cdef _TypeObj* tp = <_TypeObj*>Py_TYPE(x)
    cdef _ApiSlot* slot = &_api_slots[(<uintptr_t>tp >> 5) % API_SLOTS]
    if slot.tp == <void*>tp and slot.tag == tp.tp_version_tag and slot.tag != 0:
        return slot
    return _fill_type_slot(x, slot)


cdef _ApiSlot* _fill_type_slot(object x, _ApiSlot* slot):
    """_type_slot's miss: type(x) looked up, and written into `slot`."""
    cdef _TypeObj* tp = <_TypeObj*>Py_TYPE(x)
    cls = type(x)
    cdef const DLPackExchangeAPI* api = _exchange_api_lookup(cls)
    cdef int flags = 0
    if hasattr(cls, "__dlpack__") and hasattr(cls, "__dlpack_device__"):
        flags |= TI_PROTOCOL
    if _is_torch_type(cls) and _torch_exports(cls):
        flags |= TI_TORCH
    # (a WeakSet is asked only once a type was ever put in it: 0.24 µs a question)
    if _stream_marks and cls in _stream_types:
        flags |= TI_STREAM
    if _legacy_marks and cls in _legacy_types:
        flags |= TI_LEGACY
    if flags & TI_PROTOCOL and _immutable_type(cls):
        flags |= TI_IMMUTABLE
        # (the types whose export aborts are immutable ones: TensorFlow's)
        if _known_aborting_export_type(cls):
            flags |= TI_ABORTS
    # The lookups above gave the type a version tag if it can have one; a type
    # without one (tag 0) is looked up every time.
    slot.tp = <void*>tp
    slot.tag = tp.tp_version_tag
    slot.api = api
    slot.flags = flags
    return slot


cdef object _s_aborting_dtype = _sys_intern(_aborting_dtype_method)
# The dtype-code method of the last type asked (its unbound method descriptor: called
# on the object, it skips the instance's attribute lookup, which TensorFlow's
# __getattr__ makes cost 0.1 µs; 15 ns as it is).
cdef object _aborting_type = None
cdef object _aborting_method = None
# Its C function when it is a C method without arguments (TensorFlow's is), called
# directly (about 5 ns; 40 through the descriptor); NULL: called through the method.
cdef PyCFunction _aborting_function = NULL
# The codes as C values (there are three; room for eight).
cdef long _aborting_codes_c[8]
cdef int _n_aborting_codes = 0
for _code in sorted(_aborting_dtype_codes)[:8]:
    _aborting_codes_c[_n_aborting_codes] = _code
    _n_aborting_codes += 1


cdef bint _export_aborts(object x) except -1:
    """Whether x (of a type whose export aborts on some arrays) is such an array: its
    dtype code read through one method call (TensorFlow's _datatype_enum), or, where
    that fails, the whole question asked in Python (_known_types.export_refusal)."""
    global _aborting_type, _aborting_method, _aborting_function
    tp = type(x)
    if tp is not _aborting_type:
        _aborting_method = getattr(tp, _s_aborting_dtype, None)
        _aborting_function = NULL if _aborting_method is None else \
            _noargs_function(tp, _aborting_method)
        _aborting_type = tp
    method = _aborting_method   # (a reference of this call's own)
    if method is None:
        return _known_export_refusal(x) is not None
    cdef PyObject* args[1]
    args[0] = <PyObject*>x
    cdef PyObject* code
    if _aborting_function != NULL:
        code = _aborting_function(<PyObject*>x, NULL)
    else:
        code = _raw_vectorcall(<PyObject*>method, args, 1, NULL)
    if code == NULL:
        if not PyErr_ExceptionMatches(Exception):
            return -1
        PyErr_Clear()
        return _known_export_refusal(x) is not None
    cdef long value = -1
    cdef int i
    if PyLong_CheckExact(<object>code):
        value = PyLong_AsLong(<object>code)
    Py_XDECREF(code)
    if value == -1:
        PyErr_Clear()   # (an overflow, or not an int: the long way decides)
        return _known_export_refusal(x) is not None
    for i in range(_n_aborting_codes):
        if value == _aborting_codes_c[i]:
            return _known_export_refusal(x) is not None
    return False


cdef int _refuse_aborting_export(object x, str api) except -1:
    """Raise BufferError instead of asking x for an export that would abort the
    process (TensorFlow's string, resource and variant tensors)."""
    if _type_slot(x).flags & TI_ABORTS and _export_aborts(x):
        why = _known_export_refusal(x)
        if why is not None:
            raise BufferError(f"{api}: {why}")
    return 0


cdef inline const DLPackExchangeAPI* _exchange_api(object x):
    """type(x)'s usable exchange table, or NULL (cached per type)."""
    return _type_slot(x).api


cdef void _mark_stream_type(object x):
    global _stream_marks
    _stream_types.add(type(x))
    _stream_marks += 1
    cdef _ApiSlot* slot = _type_slot(x)
    slot.flags |= TI_STREAM


# Producer types whose __dlpack__ refused max_version with TypeError and then
# exported with the legacy call: asked the legacy way first from then on.
cdef object _legacy_types = _WeakSet()
cdef Py_ssize_t _legacy_marks = 0


cdef void _mark_legacy_type(object x):
    global _legacy_marks
    _legacy_types.add(type(x))
    _legacy_marks += 1
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
    cdef DLTensor view
    cdef Tensor t = None
    if type_flags & TI_ABORTS and _export_aborts(x):
        return None     # (__dlpack__ is not asked either: the caller refuses it)
    if type_flags & TI_TORCH and api.dltensor_from_py_object_no_sync != NULL:
        # PyTorch: its non-owning view, owned through x itself, which spares the
        # managed tensor's allocation and deleter. The same import: torch's managed
        # tensor holds x's own TensorImpl (the same lifetime) and carries no flags,
        # which a bare DLTensor could not say (sub-byte types, whose padding is a
        # flag, take the managed way).
        memset(&view, 0, sizeof(view))   # (a table that says 0 and fills nothing)
        if api.dltensor_from_py_object_no_sync(<void*>x, &view) != 0:
            _clear_refusal()
            return None
        if view.dtype.bits >= 8:
            t = _new_tensor()
            _fill(t, &view, 0)
            Py_INCREF(x)
            t._managed = <void*>x
            t._owner_kind = OWN_OBJECT
    if t is None:
        if api.managed_tensor_from_py_object_no_sync(<void*>x, &managed) != 0 \
                or managed == NULL:
            _clear_refusal()
            return None
        t = _adopt_versioned(managed, "from_dlpack()", "", x)
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


def exchange_api_info(obj):
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
        tb_free(self.dl_tensor.data)
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
    cdef int64_t count = 1, nbytes
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
    for i in range(ndim):
        mv.dl_tensor.shape[i] = proto.shape[i]
    _c_strides(ndim, proto.shape, mv.dl_tensor.strides)
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
