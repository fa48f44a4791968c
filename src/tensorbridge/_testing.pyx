# SPDX-License-Identifier: Apache-2.0
# cython: language_level=3, boundscheck=False, wraparound=False
"""Private test support: craft arbitrary (also malformed) DLPack capsules.

``make_capsule`` builds a legacy or versioned capsule from explicit field
values, under any name. Its deleter counts its calls on a :class:`DeleterCounter`;
the managed struct itself belongs to the counter (freed when the counter dies),
so even a buggy second deleter call is counted instead of touching freed
memory. The capsule's own destructor knows the struct's real kind: when the
capsule dies with the name it was made with (nobody consumed it), it calls the
deleter of that kind; renamed, it does nothing. Not a public API.
"""

from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_RECORDS_RO
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.string cimport memset, strcmp

from tensorbridge._dlpack cimport *

from tensorbridge._cpython cimport *
from tensorbridge._lifetime cimport (
    tb_call_deleter, tb_capsule_destructor_versioned, tb_interpreter_gone,
)

cdef extern from "<stdlib.h>" nogil:
    int atexit(void (*func)() noexcept nogil)


cdef class DeleterCounter:
    """Counts deleter calls of one crafted capsule; owns its managed struct.

    ``nested_calls`` counts the calls made while an export deleter of tensorbridge
    was running (which must not happen: a framework calling that deleter may hold a
    lock its own deleters need)."""

    cdef public int calls
    cdef public int nested_calls
    #: deleter calls made by the capsule's own destructor (it died unconsumed)
    cdef public int capsule_frees
    cdef bint _released
    cdef void* _block
    cdef object _keepalive
    cdef bint _versioned        # the struct's real kind
    cdef bytes _name            # the name the capsule was made with (None: NULL)

    def __dealloc__(self):
        PyMem_Free(self._block)

    @property
    def released(self):
        """True once the first deleter call dropped the data's owner."""
        return self._released


cdef void _count_call(DeleterCounter counter) noexcept:
    counter.calls += 1
    try:
        from tensorbridge._core import export_release_depth
        if export_release_depth() > 0:
            counter.nested_calls += 1
    except BaseException:
        pass
    if not counter._released:
        counter._released = True
        counter._keepalive = None
        Py_DECREF(counter)          # the reference manager_ctx held; last touch


cdef void _deleter_versioned(DLManagedTensorVersioned* self) noexcept nogil:
    if tb_interpreter_gone():
        return
    with gil:
        _count_call(<DeleterCounter>self.manager_ctx)


cdef void _deleter_legacy(DLManagedTensor* self) noexcept nogil:
    if tb_interpreter_gone():
        return
    with gil:
        _count_call(<DeleterCounter>self.manager_ctx)


cdef void _release_unconsumed(PyObject* capsule, DeleterCounter counter) noexcept:
    cdef const char* name = _raw_capsule_name(capsule)
    cdef bint unchanged
    if counter._name is None:
        unchanged = name == NULL
    else:
        unchanged = name != NULL and strcmp(name, <const char*>counter._name) == 0
    if unchanged:
        counter.capsule_frees += 1
        tb_call_deleter(counter._block, counter._versioned)


cdef void _crafted_capsule_destructor(PyObject* capsule) noexcept:
    """Destructor of every crafted capsule: its context is a strong reference to the
    DeleterCounter (so the struct outlives the capsule whatever a consumer did)."""
    cdef PyObject *etype
    cdef PyObject *evalue
    cdef PyObject *etb
    PyErr_Fetch(&etype, &evalue, &etb)
    cdef void* ctx = _raw_capsule_context(capsule)
    if ctx != NULL:
        _release_unconsumed(capsule, <DeleterCounter>ctx)
        Py_DECREF(<object>ctx)
    PyErr_Clear()
    PyErr_Restore(etype, evalue, etb)


cdef dict _kept_names = {}


cdef bytes _name_bytes(name):
    b = name.encode() if isinstance(name, str) else bytes(name)
    return _kept_names.setdefault(b, b)


def set_capsule_name(capsule, name):
    """Rename any capsule (``None``: a NULL name), as a consumer does. The name's
    bytes are kept alive for the life of the process."""
    if name is None:
        PyCapsule_SetName(capsule, NULL)
        return
    cdef bytes b = _name_bytes(name)
    PyCapsule_SetName(capsule, <const char*>b)


def make_capsule(data=0, *, shape=(), strides=None, dtype=(2, 32, 1), device=(1, 0),
                 byte_offset=0, versioned=True, version=(1, 3), flags=0, ndim=None,
                 null_shape=False, deleter=True, name=None, null_name=False, owner=None):
    """Build a DLPack capsule from explicit fields.

    ``data`` is an address (int) or an object with the buffer protocol (its
    address is used and the object kept alive until the deleter runs);
    ``owner`` is any extra object to keep alive the same way. ``strides=None``
    writes NULL strides. ``ndim`` overrides ``len(shape)`` (the shape array
    always holds ``len(shape)`` entries). ``versioned`` chooses the struct;
    ``name`` (str or bytes) the capsule's name, by default the one matching the
    struct (``null_name=True``: NULL). Dropped under the name it was made with,
    the capsule calls the deleter of its real struct kind. Returns
    ``(capsule, counter)``.
    """
    cdef Py_buffer view
    cdef uintptr_t address
    keepalive = [owner]
    if isinstance(data, int):
        address = data
    else:
        PyObject_GetBuffer(data, &view, PyBUF_RECORDS_RO)
        address = <uintptr_t>view.buf
        PyBuffer_Release(&view)
        keepalive.append(data)
    shape = tuple(shape)
    if strides is not None and len(strides) != len(shape):
        raise ValueError(f"strides {strides} must have one entry per dimension of {shape}")
    cdef int n = len(shape)
    cdef int nd = n if ndim is None else ndim
    cdef size_t head = sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor)
    cdef size_t dims = (n if n > 0 else 1) * sizeof(int64_t)
    cdef char* block = <char*>PyMem_Malloc(head + 2 * dims)
    if block == NULL:
        raise MemoryError()
    memset(block, 0, head + 2 * dims)
    counter = DeleterCounter()
    (<DeleterCounter>counter)._block = block
    (<DeleterCounter>counter)._keepalive = keepalive
    (<DeleterCounter>counter)._versioned = versioned
    cdef DLManagedTensorVersioned* mv
    cdef DLManagedTensor* ml
    cdef DLTensor* dl
    cdef int64_t* shape_arr = <int64_t*>(block + head)
    cdef int64_t* strides_arr = <int64_t*>(block + head + dims)
    cdef int i
    for i in range(n):
        shape_arr[i] = shape[i]
    if strides is not None:
        for i in range(len(strides)):
            strides_arr[i] = strides[i]
    if versioned:
        mv = <DLManagedTensorVersioned*>block
        mv.version.major = version[0]
        mv.version.minor = version[1]
        mv.flags = flags
        mv.manager_ctx = <void*>counter
        mv.deleter = NULL
        if deleter:
            mv.deleter = _deleter_versioned
        dl = &mv.dl_tensor
    else:
        ml = <DLManagedTensor*>block
        ml.manager_ctx = <void*>counter
        ml.deleter = NULL
        if deleter:
            ml.deleter = _deleter_legacy
        dl = &ml.dl_tensor
    dl.data = <void*>address
    dl.device.device_type = device[0]
    dl.device.device_id = device[1]
    dl.ndim = nd
    dl.dtype.code = dtype[0]
    dl.dtype.bits = dtype[1]
    dl.dtype.lanes = dtype[2]
    dl.shape = NULL if null_shape else shape_arr
    dl.strides = NULL if strides is None else strides_arr
    dl.byte_offset = byte_offset
    if deleter:
        Py_INCREF(counter)   # manager_ctx's reference, dropped by the first deleter call
    cdef bytes name_b = None
    if not null_name:
        if name is None:
            name = "dltensor_versioned" if versioned else "dltensor"
        name_b = _name_bytes(name)
    (<DeleterCounter>counter)._name = name_b
    capsule = PyCapsule_New(block, NULL if name_b is None else <const char*>name_b,
                            _crafted_capsule_destructor)
    PyCapsule_SetContext(capsule, <void*>counter)
    Py_INCREF(counter)      # the capsule's reference, dropped by its destructor
    return capsule, counter


def capsule_name(capsule):
    """The capsule's current name."""
    cdef const char* name = PyCapsule_GetName(capsule)
    return None if name == NULL else name.decode(errors="surrogateescape")


cdef void* _take(object capsule, bint* versioned) except NULL:
    """Consume a capsule by hand: rename it and return its managed pointer."""
    cdef const char* name = PyCapsule_GetName(capsule)
    cdef bytes bname = name
    cdef void* managed
    if bname == b"dltensor_versioned":
        managed = PyCapsule_GetPointer(capsule, name)
        PyCapsule_SetName(capsule, "used_dltensor_versioned")
        versioned[0] = True
    elif bname == b"dltensor":
        managed = PyCapsule_GetPointer(capsule, name)
        PyCapsule_SetName(capsule, "used_dltensor")
        versioned[0] = False
    else:
        raise ValueError(f"not an unconsumed DLPack capsule: {bname!r}")
    return managed


def consume_and_delete_without_gil(capsule):
    """Consume a capsule, then call its deleter with the GIL released,
    as a C++ consumer on another thread would."""
    cdef bint versioned = False
    cdef void* managed = _take(capsule, &versioned)
    with nogil:
        tb_call_deleter(managed, versioned)


cdef void* _at_exit_managed = NULL
cdef bint _at_exit_versioned = False

cdef void _delete_at_exit() noexcept nogil:
    if _at_exit_managed != NULL:
        tb_call_deleter(_at_exit_managed, _at_exit_versioned)


def delete_after_interpreter_exit(capsule):
    """Consume a capsule and call its deleter from a C atexit handler, which
    runs after Py_Finalize: the deleter must then do nothing."""
    global _at_exit_managed, _at_exit_versioned
    cdef bint versioned = False
    _at_exit_managed = _take(capsule, &versioned)
    _at_exit_versioned = versioned
    atexit(_delete_at_exit)


# --------------------------------------------------------------------------
# DLPack C exchange tables: a fake producer table, and calls into any table
# --------------------------------------------------------------------------

#: How many times the fake table's managed_tensor_from_py_object_no_sync ran.
cdef int _table_calls = 0

cdef DLPackExchangeAPI _fake_api
cdef DLPackExchangeAPI _fake_api_null_fn
cdef DLPackExchangeAPIHeader _fake_v2_header
cdef DLPackExchangeAPIHeader _fake_v2_only_header


cdef int _fake_from_py(void* obj, DLManagedTensorVersioned** out) except -1:
    """Calls obj._table_capsule() (a versioned capsule from make_capsule) and steals
    its managed tensor; an exception from it is the table's refusal."""
    global _table_calls
    _table_calls += 1
    capsule = (<object>obj)._table_capsule()
    cdef void* managed = PyCapsule_GetPointer(capsule, "dltensor_versioned")
    PyCapsule_SetName(capsule, "used_dltensor_versioned")
    out[0] = <DLManagedTensorVersioned*>managed
    return 0


cdef int _fake_to_py(DLManagedTensorVersioned* managed, void** out) except -1:
    raise BufferError("the fake table makes no objects")


cdef int _fake_alloc(DLTensor* proto, DLManagedTensorVersioned** out, void* ctx,
                     void (*set_error)(void*, const char*, const char*) noexcept nogil
                     ) noexcept nogil:
    set_error(ctx, "BufferError", "the fake table allocates nothing")
    return -1


cdef int _fake_stream(DLDeviceType device_type, int32_t device_id, void** out) noexcept nogil:
    out[0] = NULL
    return 0


cdef void _fill_fake(DLPackExchangeAPI* api, bint with_from_py) noexcept:
    api.header.version.major = 1
    api.header.version.minor = 3
    api.header.prev_api = NULL
    api.managed_tensor_allocator = _fake_alloc
    api.managed_tensor_from_py_object_no_sync = \
        <DLPackManagedTensorFromPyObjectNoSync>_fake_from_py if with_from_py else NULL
    api.managed_tensor_to_py_object_no_sync = <DLPackManagedTensorToPyObjectNoSync>_fake_to_py
    api.dltensor_from_py_object_no_sync = NULL
    api.current_work_stream = _fake_stream

_fill_fake(&_fake_api, True)
_fill_fake(&_fake_api_null_fn, False)
_fake_v2_header.version.major = 2
_fake_v2_header.version.minor = 0
_fake_v2_header.prev_api = &_fake_api.header
_fake_v2_only_header.version.major = 2
_fake_v2_only_header.version.minor = 0
_fake_v2_only_header.prev_api = NULL


def table_calls():
    """How many times the fake table was asked for a tensor."""
    return _table_calls


def exchange_table(kind="capsule"):
    """A value for a type's __dlpack_c_exchange_api__ / __c_dlpack_exchange_api__
    pointing to the fake table. kind: "capsule" (1.3), "int" (1.2), "v2" (a major-2
    header whose prev_api is the major-1 table), "v2-only" (no prev_api), "null-fn"
    (managed_tensor_from_py_object_no_sync is NULL), "wrong-name"."""
    if kind == "capsule":
        return PyCapsule_New(&_fake_api, "dlpack_exchange_api", NULL)
    if kind == "int":
        return PyLong_FromVoidPtr(&_fake_api)
    if kind == "v2":
        return PyCapsule_New(&_fake_v2_header, "dlpack_exchange_api", NULL)
    if kind == "v2-only":
        return PyCapsule_New(&_fake_v2_only_header, "dlpack_exchange_api", NULL)
    if kind == "null-fn":
        return PyCapsule_New(&_fake_api_null_fn, "dlpack_exchange_api", NULL)
    if kind == "wrong-name":
        return PyCapsule_New(&_fake_api, "not_an_exchange_api", NULL)
    raise ValueError(kind)


cdef const DLPackExchangeAPI* _api_of(object obj) except NULL:
    attr = type(obj).__dlpack_c_exchange_api__
    return <const DLPackExchangeAPI*>PyCapsule_GetPointer(attr, "dlpack_exchange_api")


cdef int _failed(int rc) except -1:
    if rc != 0:
        if PyErr_Occurred() != NULL:
            return -1
        raise SystemError("a table function failed without an exception")
    return 0


def table_from_py(obj):
    """type(obj)'s managed_tensor_from_py_object_no_sync, as a C consumer calls it;
    the managed tensor comes back in a fresh versioned capsule."""
    cdef const DLPackExchangeAPI* api = _api_of(obj)
    cdef DLManagedTensorVersioned* managed = NULL
    _failed(api.managed_tensor_from_py_object_no_sync(<void*>obj, &managed))
    return PyCapsule_New(managed, "dltensor_versioned", tb_capsule_destructor_versioned)


def table_to_py(api_owner, capsule):
    """type(api_owner)'s managed_tensor_to_py_object_no_sync on the managed tensor of
    a versioned capsule (consumed: renamed first, as the table steals it)."""
    cdef const DLPackExchangeAPI* api = _api_of(api_owner)
    cdef void* managed = PyCapsule_GetPointer(capsule, "dltensor_versioned")
    PyCapsule_SetName(capsule, "used_dltensor_versioned")
    cdef void* result = NULL
    _failed(api.managed_tensor_to_py_object_no_sync(<DLManagedTensorVersioned*>managed, &result))
    obj = <object>result
    Py_DECREF(obj)
    return obj


def table_dltensor(obj):
    """type(obj)'s dltensor_from_py_object_no_sync, as a dict of the DLTensor's fields."""
    cdef const DLPackExchangeAPI* api = _api_of(obj)
    cdef DLTensor dl
    if api.dltensor_from_py_object_no_sync == NULL:
        return None
    _failed(api.dltensor_from_py_object_no_sync(<void*>obj, &dl))
    return {
        "data": <uintptr_t>dl.data, "device": (dl.device.device_type, dl.device.device_id),
        "ndim": dl.ndim, "dtype": (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes),
        "shape": tuple([dl.shape[i] for i in range(dl.ndim)]),
        "strides": tuple([dl.strides[i] for i in range(dl.ndim)]),
        "byte_offset": dl.byte_offset,
    }


cdef void _record_error(void* ctx, const char* kind, const char* message) noexcept nogil:
    with gil:
        (<list>ctx).append((kind.decode(), message.decode()))


def table_allocate(api_owner, shape, dtype=(2, 32, 1), device=(1, 0), *, ndim=None):
    """type(api_owner)'s managed_tensor_allocator for a prototype; returns a versioned
    capsule, or raises RuntimeError("kind: message") from what SetError reported."""
    cdef const DLPackExchangeAPI* api = _api_of(api_owner)
    cdef DLTensor proto
    cdef int64_t dims[64]
    cdef DLManagedTensorVersioned* managed = NULL
    cdef int i
    errors = []
    shape = tuple(shape)
    if len(shape) > 64:
        raise ValueError("at most 64 dimensions")
    for i in range(len(shape)):
        dims[i] = shape[i]
    proto.data = NULL
    proto.device.device_type = device[0]
    proto.device.device_id = device[1]
    proto.ndim = len(shape) if ndim is None else ndim
    proto.dtype.code = dtype[0]
    proto.dtype.bits = dtype[1]
    proto.dtype.lanes = dtype[2]
    proto.shape = dims
    proto.strides = NULL
    proto.byte_offset = 0
    if api.managed_tensor_allocator(&proto, &managed, <void*>errors, _record_error) != 0:
        kind, message = errors[0] if errors else ("?", "no error reported")
        raise RuntimeError(f"{kind}: {message}")
    if errors:
        raise AssertionError(f"SetError called on success: {errors}")
    return PyCapsule_New(managed, "dltensor_versioned", tb_capsule_destructor_versioned)


def table_stream(api_owner, device_type, device_id):
    """type(api_owner)'s current_work_stream, as an int (0 for NULL)."""
    cdef const DLPackExchangeAPI* api = _api_of(api_owner)
    cdef void* stream = <void*>1
    _failed(api.current_work_stream(device_type, device_id, &stream))
    return <uintptr_t>stream
