# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. convert's routes: how a source type reaches a target,
# decided once by the planner and then run here, in C, from a cache.

cimport cython
from cpython.ref cimport PyObject, PyTypeObject, Py_REFCNT, Py_TYPE, Py_XDECREF
from libc.stdint cimport int64_t, uint64_t, uintptr_t, UINTPTR_MAX
from libc.string cimport memset, strcmp
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *
from tensorbridge._host cimport *
from tensorbridge._memory cimport tb_add_overflow, tb_mul_overflow

from tensorbridge._dtypes import DTYPES as _DTYPES

cdef extern from "Python.h":
    PyObject* PyImport_GetModuleDict()      # borrowed
    Py_ssize_t _dict_size "PyDict_Size"(PyObject* d)


# --------------------------------------------------------------------------
# Route modes
# --------------------------------------------------------------------------
#
# A route says how the source is read (in C) and how the target's object is made.
# The planner decides it on the first conversion of a (source type, target) it
# can vouch for (tensorbridge._convert._remember_route); every later call with no
# option runs it here. A route never decides alone: every object still passes the
# target's checks (FastTarget.takes), and anything a route cannot do as it is goes
# back to the planner, which copies, folds or refuses, and says why.

cdef enum:
    ROUTE_READ_MASK = 7
    ROUTE_TENSOR = 1        # the Tensor itself
    ROUTE_NDARRAY = 2       # NumPy's array struct (_import_ndarray)
    ROUTE_TABLE = 3         # the source type's C exchange table
    ROUTE_PROTOCOL = 4      # __dlpack__, as from_dlpack asks it
    ROUTE_HANDOFF = 8       # hand the source object to the target's own importer
    ROUTE_MARK_READONLY = 16  # handoff: mark the (NumPy) result read-only
    ROUTE_TORCH_BITS = 32   # handoff: refuse torch bit views (back to the planner)
    ROUTE_WRITABLE_ONLY = 64  # handoff: only writable NumPy arrays (else read and make)
    ROUTE_CHECK_DTYPE = 128   # handoff: only dtypes the target holds (else read and make)
    ROUTE_MARK_WRITABLE = 256  # handoff: mark the (NumPy) result writable (mutable source)
    # protocol read: the target's importer asks the source through a _Carrier,
    # which checks the capsule before passing it on
    ROUTE_CARRY = 512
    ROUTE_SAME = 1024       # the target's own array: returned as it is (no read)
    # the source's managed tensor, once it is checked (dtype and layout seen on the
    # struct): a table source's, to the target's importer of tables in a _Handed (a
    # handoff: device memory goes as the source object), or a protocol source's
    # __dlpack__(), asked as the target's importer of objects asks it, to its
    # importer of capsules
    ROUTE_CAPSULE = 2048
    # handoff: only objects whose null_count is 0 (PyArrow arrays, whose __dlpack__
    # raises a TypeError for nulls, after which NumPy's importer asks the legacy
    # way, which PyArrow answers with a DeprecationWarning); others are planned
    ROUTE_NO_NULLS = 4096
    # handoff: the importer is called with copy=False (NumPy 2.1+): NumPy then never
    # asks the legacy way, whatever the source raises (it does so only when neither
    # device nor copy is given); about 40 ns where reading null_count costs 75
    ROUTE_COPY_FALSE = 8192
    # any read but of a Tensor or NumPy's struct: a source whose export aborts the
    # process on some of its arrays (TensorFlow's strings) is asked which first
    ROUTE_CHECK_EXPORT = 16384


cdef object _s_null_count = "null_count"
cdef object _zero = 0      # CPython's one 0 (small ints are cached): what PyArrow returns


cdef inline bint _no_nulls(object obj) except -1:
    """obj.null_count is 0. Compared by identity with the cached 0, which is what a
    count of 0 is in CPython (any other object, or an error, counts as nulls: the
    planner then decides, and says what is wrong): about 20 ns less than comparing
    values."""
    cdef PyObject* count = _raw_getattr(<PyObject*>obj, <PyObject*>_s_null_count)
    if count == NULL:
        _answer_or_none(NULL)   # (an ordinary error is cleared; others propagate)
        return False
    cdef bint zero = count == <PyObject*>_zero
    Py_XDECREF(count)
    return zero


def _route_constants():
    """The mode bits, for the planner (tensorbridge._convert)."""
    return dict(TENSOR=ROUTE_TENSOR, NDARRAY=ROUTE_NDARRAY, TABLE=ROUTE_TABLE,
                PROTOCOL=ROUTE_PROTOCOL, HANDOFF=ROUTE_HANDOFF,
                MARK_READONLY=ROUTE_MARK_READONLY, TORCH_BITS=ROUTE_TORCH_BITS,
                WRITABLE_ONLY=ROUTE_WRITABLE_ONLY, CHECK_DTYPE=ROUTE_CHECK_DTYPE,
                MARK_WRITABLE=ROUTE_MARK_WRITABLE, CARRY=ROUTE_CARRY, SAME=ROUTE_SAME,
                CAPSULE=ROUTE_CAPSULE, NO_NULLS=ROUTE_NO_NULLS, COPY_FALSE=ROUTE_COPY_FALSE,
                CHECK_EXPORT=ROUTE_CHECK_EXPORT)


# The cache: per target, a small two-way table of source types. A slot holds the
# type's address and its CPython version tag (a new tag whenever the type or a base
# changes, e.g. gains or loses an exchange table, and never reused by another type),
# so no reference to the type is kept and a type that dies cannot be mistaken for a
# new one at the same address. A slot is also stale when the process imported or
# dropped a module since it was written (a framework imported later may change what
# the planner would decide), or after clear_routes().

cdef struct _RouteSlot:
    void* tp
    unsigned int tag
    Py_ssize_t modules
    unsigned int epoch
    int mode
    bint uncarried          # a carrier was refused for this type: read here instead

cdef enum:
    ROUTE_SLOTS = 32        # per target, two ways: 16 sets
    TAKES_NO = 0
    TAKES_YES = 1
    TAKES_COPY = 2
    MAKE_TABLE = 0
    MAKE_IDENTITY = 1
    MAKE_CALL = 2
    MAKE_BY_NDIM = 3        # maker is (for 1-d tensors, for the others)
    MAKE_NDARRAY = 4        # through NumPy's C API table (else the importer)

cdef unsigned int _route_epoch = 1


def clear_routes():
    """Forget every cached route (tests, and callers that changed a framework's
    configuration in a way a module import does not show)."""
    global _route_epoch
    _route_epoch += 1


cdef inline bint _is_ndarray_type(object tp) noexcept:
    """Exactly numpy.ndarray (once an array was seen: _is_ndarray)."""
    return _ndarray_type != NULL and <PyTypeObject*><PyObject*>tp == _ndarray_type


cdef inline Py_ssize_t _module_count() noexcept:
    return _dict_size(PyImport_GetModuleDict())


# --------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------

@cython.final
@cython.auto_pickle(False)
cdef class _Read:
    """A route's answer when it read the source through __dlpack__ and then left it
    to the planner: the Tensor it read, which the planner uses instead of asking the
    producer again."""
    cdef Tensor tensor

    def __cinit__(self, Tensor tensor):
        self.tensor = tensor


# kwnames tuples for forwarded __dlpack__ calls, indexed by the keywords given
# (1: stream, 2: max_version, 4: dl_device, 8: copy).
cdef list _forward_kwnames = [
    tuple(name for bit, name in ((1, "stream"), (2, "max_version"), (4, "dl_device"),
                                 (8, "copy")) if mask & bit)
    for mask in range(16)]


cdef object _forward_dlpack(object x, object stream, object max_version, object dl_device,
                            object copy):
    """x.__dlpack__ with the keywords that are not None (the same request: the
    standard reads an absent keyword as None)."""
    cdef PyObject* args[5]
    cdef Py_ssize_t n = 1
    cdef int mask = 0
    args[0] = <PyObject*>x
    if stream is not None:
        args[n] = <PyObject*>stream
        n += 1
        mask |= 1
    if max_version is not None:
        args[n] = <PyObject*>max_version
        n += 1
        mask |= 2
    if dl_device is not None:
        args[n] = <PyObject*>dl_device
        n += 1
        mask |= 4
    if copy is not None:
        args[n] = <PyObject*>copy
        n += 1
        mask |= 8
    return PyObject_VectorcallMethod(
        _s_dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
        <PyObject*>_forward_kwnames[mask] if mask else NULL)


cdef object _answer_or_none(PyObject* r):
    """The new reference r of an unchecked call as an object, or None when the call
    raised an ordinary error (the planner then decides, and says what is wrong);
    MemoryError, RecursionError and what is not an Exception (KeyboardInterrupt...)
    propagate. Routes call without a try block, which costs about 40 instructions a
    call."""
    if r != NULL:
        result = <object>r
        Py_DECREF(result)   # the call's reference; `result` holds its own
        return result
    if PyErr_ExceptionMatches(Exception) and not (
            PyErr_ExceptionMatches(MemoryError) or PyErr_ExceptionMatches(RecursionError)):
        PyErr_Clear()
        return None
    _propagate_error()


cdef object _kw_copy = ("copy",)
cdef object _false = False  # (the object: <PyObject*>False would be the C constant 0)


cdef inline object _call_copy_false_or_none(object f, object arg):
    """f(arg, copy=False), or None on an ordinary error (_answer_or_none)."""
    cdef PyObject* args[2]
    args[0] = <PyObject*>arg
    args[1] = <PyObject*>_false
    return _answer_or_none(_raw_vectorcall(<PyObject*>f, args, 1, <PyObject*>_kw_copy))


cdef inline object _call_or_none(object f, object arg):
    """f(arg), or None on an ordinary error (_answer_or_none)."""
    cdef PyObject* args[1]
    args[0] = <PyObject*>arg
    return _answer_or_none(_raw_vectorcall(<PyObject*>f, args, 1, NULL))


cdef inline object _dlpack_or_none(object obj):
    """obj.__dlpack__() with no keywords (a legacy capsule), or None on an ordinary
    error (_answer_or_none)."""
    cdef PyObject* args[1]
    args[0] = <PyObject*>obj
    return _answer_or_none(_raw_vectorcall_method(
        <PyObject*>_s_dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL))


class _NotTaken(BufferError):
    """A _Carrier's refusal (the route then reads the source itself)."""


@cython.final
@cython.auto_pickle(False)
cdef class _Carrier:
    """The source object as a target's importer sees it on a carried route: each of
    the importer's own calls goes to the source as it is made (so the importer asks
    for the capsule kind and stream it wants, as if it had been handed the source),
    and the capsule is checked against the target (FastTarget.takes) before it is
    passed on. One it does not take is kept, unconsumed, for the route, which then
    reads it itself instead of asking the source again; the importer gets a
    BufferError. Device memory is never passed on: the planner asks for it, once,
    on the consumer's stream."""
    cdef FastTarget target
    cdef object source
    cdef object capsule     # a capsule the target did not take, kept for the route
    cdef Tensor tensor      # its validated, not yet owning Tensor (_read_capsule)
    cdef int kind
    cdef bint used          # the source was asked (once is all a carrier asks)
    cdef bint refused       # the carrier refused: the importer's answer is not used
    cdef object fatal       # an exception the importer must not swallow (re-raised)

    def __cinit__(self, FastTarget target, source):
        self.target = target
        self.source = source

    cdef int _refuse(self, str why) except -1:
        self.refused = True
        raise _NotTaken(why)

    def __dlpack_device__(self):
        if self.refused:
            self._refuse("a carried source is asked once")
        try:
            device = self.source.__dlpack_device__()
        except BaseException as exc:
            self._keep_fatal(exc)
            self.refused = True
            raise
        if not (type(device) is tuple and len(device) == 2 and device[0] == kDLCPU):
            if type(device) is tuple and len(device) == 2 and type(device[0]) is int \
                    and _needs_stream(device[0]):
                _mark_stream_type(self.source)
            self._refuse("the source is not in host memory")
        return device

    cdef void _keep_fatal(self, object exc) noexcept:
        # Some importers turn any exception from __dlpack__ into their own (MLX's
        # nanobind: a TypeError, even for KeyboardInterrupt): kept, and re-raised.
        if not isinstance(exc, Exception) or isinstance(exc, (MemoryError, RecursionError)):
            self.fatal = exc

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        cdef Tensor t
        cdef int kind
        if self.used or self.refused:
            self._refuse("a carried source is asked once")
        self.used = True
        try:
            capsule = _forward_dlpack(self.source, stream, max_version, dl_device, copy)
        except BaseException as exc:
            self._keep_fatal(exc)
            self.refused = True
            raise
        if not PyCapsule_CheckExact(capsule):
            capsule = None
            self._refuse("the source's __dlpack__ did not return a capsule")
        if self.target.plainly_takes(capsule):
            return capsule      # the common case, checked without making a Tensor
        # A capsule is dropped before an error propagates, so a destructor written in
        # Python (pydlpack's, ctypes') runs with no exception pending.
        try:
            t = _read_capsule(capsule, &kind)
        except BaseException:
            capsule = None
            self.refused = True
            raise
        if _needs_stream(t._device.device_type):
            capsule = None
            _mark_stream_type(self.source)
            self._refuse("the source is not in host memory")
        if self.target.takes(t) != TAKES_YES or not self.target.carries_ndim(t._ndim):
            if kind == OWN_LEGACY and t._dtype.bits < 8:
                # A legacy capsule cannot say whether sub-byte data is padded: not
                # read here, the planner asks for a versioned one.
                capsule = None
            else:
                self.capsule = capsule
                self.tensor = t
                self.kind = kind
            self._refuse("the target does not take the data as it is")
        return capsule


# A table source's managed tensor goes to a target whose importer reads exchange
# tables (tvm_ffi.from_dlpack) in a _Handed, an object whose type's table gives it
# away: the importer takes it as it takes any table source's, and no capsule is
# made, checked, renamed and freed on the way (about 150 instructions a call).
cdef DLPackExchangeAPI _handing_api


cdef int _hand_over(void* obj, DLManagedTensorVersioned** out) except -1:
    """managed_tensor_from_py_object_no_sync of _Handed: its managed tensor, once."""
    if Py_TYPE(<object>obj) != <PyTypeObject*>_Handed:
        raise TypeError(f"tensorbridge: the table of handed managed tensors was asked for "
                        f"a {type(<object>obj).__name__}")
    cdef _Handed handed = <_Handed>obj
    if handed.managed == NULL:
        raise BufferError("tensorbridge: this managed tensor was handed over already")
    out[0] = handed.managed
    handed.managed = NULL
    return 0


cdef int _hold_handed(DLManagedTensorVersioned* managed, void** out) except -1:
    """managed_tensor_to_py_object_no_sync of _Handed: a _Handed holding managed
    (stolen: released if no _Handed can be made)."""
    if managed == NULL:
        raise BufferError("tensorbridge: NULL managed tensor")
    try:
        handed = _Handed()
    except BaseException:
        _call_deleter(managed, OWN_VERSIONED)
        raise
    (<_Handed>handed).managed = managed
    Py_INCREF(handed)
    out[0] = <void*>handed
    return 0


cdef object _handing_capsule():
    """_Handed's table (complete, as the standard asks: its allocator and stream are
    the Tensor table's)."""
    _handing_api.header.version.major = TB_DLPACK_MAJOR
    _handing_api.header.version.minor = TB_DLPACK_MINOR
    _handing_api.header.prev_api = NULL
    _handing_api.managed_tensor_allocator = <DLPackManagedTensorAllocator>_api_allocate
    _handing_api.managed_tensor_from_py_object_no_sync = \
        <DLPackManagedTensorFromPyObjectNoSync>_hand_over
    _handing_api.managed_tensor_to_py_object_no_sync = \
        <DLPackManagedTensorToPyObjectNoSync>_hold_handed
    _handing_api.dltensor_from_py_object_no_sync = NULL
    _handing_api.current_work_stream = <DLPackCurrentWorkStream>_api_stream
    return PyCapsule_New(&_handing_api, TB_CAPSULE_EXCHANGE_API, NULL)


@cython.final
@cython.auto_pickle(False)
cdef class _Handed:
    """A producer's managed tensor on its way to a target's importer of exchange
    tables (FastTarget._pass_table_managed), which takes it once, through this
    type's table. One nobody took is released (its deleter called) by release() or
    when the object dies."""
    cdef DLManagedTensorVersioned* managed

    __dlpack_c_exchange_api__ = _handing_capsule()

    cdef void release(self) noexcept:
        cdef DLManagedTensorVersioned* managed = self.managed
        if managed != NULL:
            self.managed = NULL
            # (put off while an export deleter of ours runs, as a Tensor's is)
            _release_managed(managed, OWN_VERSIONED)

    def __dealloc__(self):
        self.release()

    def __dlpack__(self, **kwargs):
        # A consumer that does not read the table (tvm-ffi before 0.1.5 reads only
        # __c_dlpack_exchange_api__) learns why, and the route then reads here.
        if self.managed == NULL:
            raise BufferError("tensorbridge: this managed tensor was handed over already")
        raise BufferError("tensorbridge: a _Handed gives its managed tensor through its "
                          "type's C exchange table (__dlpack_c_exchange_api__) only")

    def __dlpack_device__(self):
        if self.managed == NULL:
            raise BufferError("tensorbridge: this managed tensor was handed over already")
        return (self.managed.dl_tensor.device.device_type,
                self.managed.dl_tensor.device.device_id)


cdef _Handed _new_handed(DLManagedTensorVersioned* managed):
    """A new _Handed for a table route's call; if none can be made, `managed` is
    released (no one else holds it) and the error propagates."""
    try:
        return _Handed()
    except BaseException:
        _call_deleter(managed, OWN_VERSIONED)
        raise


@cython.final
@cython.auto_pickle(False)
cdef class FastTarget:
    """A target framework as routes see it: what its importer takes as it is (the
    fast subset of Framework.precopy_reasons), how its object is made from a Tensor
    (its exchange table, the Tensor itself, ``maker(t)``, or with a pair of makers
    the first for 1-d tensors and the second for the others), its own importer for
    handoffs, and the routes of the source types converted to it so far.

    ``readonly_ok``: the target is given read-only Tensors as they are (it keeps
    them read-only, or its arrays are immutable and it reads versioned capsules);
    otherwise a writable-flagged view is handed over, as convert's default
    ``readonly="share"`` does (routes run only with that default). ``guard64``: for
    targets whose 64-bit types depend on run-time configuration (JAX's x64 switch), a
    callable asked before 64-bit data takes the route."""
    cdef const DLPackExchangeAPI* api
    cdef bint accept[18][129]
    cdef bint negative_strides, noncompact, permuted, offset_ok, readonly_ok
    cdef bint any_layout    # negative_strides, noncompact and permuted: no layout check
    # The Tensor itself, whatever host data it holds (tensorbridge): a route's read
    # is the answer, with no takes() and no make().
    cdef bint takes_any_host
    cdef int64_t alignment
    # None: the table; "identity": the Tensor; "ndarray": NumPy's C API; (1-d, n-d);
    # else maker(t)
    cdef object maker
    cdef int make_kind      # MAKE_*, from maker
    cdef object importer    # its own from_dlpack, for handoffs and _Handed (or None)
    cdef object carrier_importer  # what carried routes call with a _Carrier (or None)
    cdef object capsule_importer  # what protocol-capsule routes call with a capsule (or None)
    cdef object guard64
    cdef _Carrier spare     # a used carrier no one kept, for the next carried call
    cdef _Handed spare_handed   # an emptied _Handed no one kept, for the next call
    cdef _RouteSlot routes[ROUTE_SLOTS]

    def __init__(self, *, target_type, dtypes, bint negative_strides, bint noncompact,
                 bint permuted, bint offset_ok, bint readonly_ok, int64_t alignment,
                 maker=None, importer=None, carrier_importer=None, capsule_importer=None,
                 guard64=None):
        self.maker = maker
        self.carrier_importer = carrier_importer
        self.capsule_importer = capsule_importer
        self.make_kind = (MAKE_TABLE if maker is None else
                          MAKE_IDENTITY if isinstance(maker, str) and maker == "identity" else
                          MAKE_NDARRAY if isinstance(maker, str) and maker == "ndarray" else
                          MAKE_BY_NDIM if type(maker) is tuple else
                          MAKE_CALL)
        if self.make_kind == MAKE_BY_NDIM and not (
                len(maker) == 2 and callable(maker[0]) and callable(maker[1])):
            raise TypeError(f"a maker tuple is (for 1-d tensors, for the others); got {maker!r}")
        if self.make_kind == MAKE_NDARRAY and not callable(importer):
            raise TypeError("the maker 'ndarray' needs an importer (numpy.from_dlpack) where "
                            "NumPy's C API does not make the array")
        if self.make_kind == MAKE_CALL and not callable(maker):
            raise TypeError(f"a maker is None, 'identity', 'ndarray', a pair of callables or "
                            f"a callable; got {maker!r}")
        self.importer = importer
        self.guard64 = guard64
        self.api = NULL
        if maker is None:
            self.api = _exchange_api_lookup(target_type)
            if self.api == NULL:
                raise TypeError(f"{target_type!r} has no usable DLPack exchange table")
        memset(self.accept, 0, sizeof(self.accept))
        memset(self.routes, 0, sizeof(self.routes))
        for d in dtypes:
            self.accept[<int>d.code][<int>d.bits] = True
        self.negative_strides = negative_strides
        self.noncompact = noncompact
        self.permuted = permuted
        self.offset_ok = offset_ok
        self.readonly_ok = readonly_ok
        self.any_layout = negative_strides and noncompact and permuted
        self.alignment = alignment
        self.takes_any_host = (
            self.make_kind == MAKE_IDENTITY and self.any_layout and offset_ok and readonly_ok
            and alignment == 0 and guard64 is None
            and all(self.accept[<int>d.code][<int>d.bits] for d in _DTYPES.values()))

    def __call__(self, Tensor t):
        """The target's object for t (no checks)."""
        return self.make(t)

    # -- the cache ------------------------------------------------------------

    def remember(self, tp, int mode):
        """Route objects of type tp with `mode` from now on (0: ask the planner)."""
        cdef _TypeObj* ctp
        cdef int read = mode & ROUTE_READ_MASK
        if not isinstance(tp, type):
            raise TypeError(f"remember(): expected a type, got {tp!r}")
        # Each read trusts the object's layout in C: the type must be that kind.
        if mode == ROUTE_SAME:
            pass
        elif (read == ROUTE_TENSOR and tp is not Tensor) or (
                read == ROUTE_NDARRAY and not _is_ndarray_type(tp)) or (
                read == ROUTE_TABLE and _exchange_api_lookup(tp) == NULL) or \
                read > ROUTE_PROTOCOL or (mode & ROUTE_CARRY and (
                    read != ROUTE_PROTOCOL or self.carrier_importer is None)) or (
                mode & ROUTE_CAPSULE and not (
                    (read == ROUTE_TABLE and self.importer is not None)
                    or (read == ROUTE_PROTOCOL and self.capsule_importer is not None))):
            raise ValueError(f"remember(): mode {mode} cannot read {tp!r}")
        getattr(tp, "__dlpack__", None)   # a type lookup gives the type a version tag
        ctp = <_TypeObj*><PyObject*>tp
        if ctp.tp_version_tag == 0:
            return      # a type without a tag cannot be cached safely
        cdef _RouteSlot* slot = self._slot(<void*>ctp, True)
        if (slot.tp == <void*>ctp and slot.tag == ctp.tp_version_tag and slot.uncarried
                and slot.epoch == _route_epoch and (
                    read == ROUTE_PROTOCOL or read == ROUTE_TABLE)):
            # A carrier, a capsule asked as the importer asks, or a _Handed was
            # refused for this type: it stays read here.
            mode &= ~(ROUTE_CARRY | ROUTE_CAPSULE)
            if read == ROUTE_TABLE:
                mode &= ~ROUTE_HANDOFF
        else:
            slot.uncarried = False
        slot.tp = <void*>ctp
        slot.tag = ctp.tp_version_tag
        slot.modules = _module_count()
        slot.epoch = _route_epoch
        slot.mode = mode

    def route_of(self, obj):
        """The cached mode for type(obj), or -1 (tests and explain)."""
        return self._mode(obj)

    def verdict(self, Tensor t):
        """What a route does with t once read (explain): 0, the planner decides;
        1, the target takes it as it is; 2, a copy in C first."""
        return self.takes(t)

    def capsule_verdicts(self, capsule):
        """(plainly_takes, the full verdict) for an unconsumed capsule (tests): the
        full verdict is takes() of what _read_capsule reads, or None when it refuses
        the capsule. The capsule stays unconsumed, except one of another major
        version, which _read_capsule renames and releases."""
        cdef int kind
        plain = self.plainly_takes(capsule)
        try:
            t = _read_capsule(capsule, &kind)
        except (BufferError, TypeError):
            return plain, None
        return plain, self.takes(t)

    def asks_device_first(self, obj):
        """True when type(obj) has exported device memory: its __dlpack__ route leaves
        it to the planner (explain)."""
        return bool(_type_slot(obj).flags & TI_STREAM)

    cdef _RouteSlot* _slot(self, void* tp, bint for_writing) noexcept:
        """tp's slot (its set's first way when it has none and not for_writing)."""
        cdef Py_ssize_t base = ((<uintptr_t>tp >> 5) % (ROUTE_SLOTS // 2)) * 2
        cdef _RouteSlot* first = &self.routes[base]
        cdef _RouteSlot* second = &self.routes[base + 1]
        if first.tp == tp or not for_writing and second.tp != tp:
            return first
        if second.tp == tp or second.tp == NULL:
            return second
        # A new type evicts the set's older entry (first); the newer moves there.
        first[0] = second[0]
        return second

    cdef inline int _mode(self, object obj) noexcept:
        cdef _TypeObj* tp = <_TypeObj*>Py_TYPE(obj)
        cdef _RouteSlot* slot = self._slot(<void*>tp, False)
        if (slot.tp != <void*>tp or slot.tag != tp.tp_version_tag or slot.tag == 0
                or slot.epoch != _route_epoch or slot.modules != _module_count()):
            return -1
        return slot.mode

    # -- running a route -------------------------------------------------------

    cdef object run(self, int mode, object obj):
        """The target's object for obj along `mode`, or None: the planner decides."""
        if mode == ROUTE_SAME:
            return obj
        if mode == ROUTE_NDARRAY and self.takes_any_host:
            return _import_ndarray(obj)     # (host memory of 8-bit or wider types)
        if mode & ROUTE_CHECK_EXPORT and _export_aborts(obj):
            return None     # never asked, nor handed to an importer: the planner refuses
        if mode & ROUTE_CAPSULE:
            if mode & ROUTE_READ_MASK == ROUTE_TABLE:
                return self._pass_table_managed(mode, obj)
            return self._pass_protocol_capsule(obj)
        if mode & ROUTE_HANDOFF:
            return self._hand_off(mode, obj)
        if mode & ROUTE_CARRY:
            return self._carry(obj)
        if mode == ROUTE_TENSOR:
            return self._make_read(<Tensor>obj, False)  # (the Tensor is the read)
        return self._read_and_make(mode & ROUTE_READ_MASK, obj)

    cdef void _uncarry(self, object obj) noexcept:
        """Objects of type(obj) read through __dlpack__, or through their table after
        the importer would not take a _Handed, are read here from now on."""
        cdef _TypeObj* tp = <_TypeObj*>Py_TYPE(obj)
        cdef _RouteSlot* slot = self._slot(<void*>tp, False)
        if slot.tp == <void*>tp and slot.tag == tp.tp_version_tag:
            if slot.mode & ROUTE_READ_MASK == ROUTE_TABLE:
                slot.mode &= ~ROUTE_HANDOFF     # (no dtype check: read and made)
            slot.mode &= ~(ROUTE_CARRY | ROUTE_CAPSULE)
            slot.uncarried = True

    def uncarried(self, obj):
        """True when a carrier, a capsule asked as the importer asks, or a _Handed
        was refused for type(obj): its route reads here (explain)."""
        cdef _TypeObj* tp = <_TypeObj*>Py_TYPE(obj)
        cdef _RouteSlot* slot = self._slot(<void*>tp, False)
        return bool(slot.tp == <void*>tp and slot.tag == tp.tp_version_tag and slot.uncarried)

    cdef object _carry(self, object obj):
        """The target's importer, given obj through a _Carrier; a capsule the
        carrier refused is read here (a copy in C when it is only misaligned, else
        the planner gets it), so the source is asked once either way. After a
        refusal, objects of this type are read here (the slot's `uncarried`)."""
        cdef PyObject* args[1]
        cdef _Carrier carrier
        cdef Tensor t
        cdef int verdict
        cdef int type_flags = _type_slot(obj).flags    # (the slot may be reused below)
        if type_flags & TI_STREAM:
            return None     # device memory: the planner asks, on the consumer's stream
        if self.spare is not None:
            carrier = self.spare
            self.spare = None
            carrier.source = obj
        else:
            carrier = _Carrier(self, obj)
        args[0] = <PyObject*>carrier
        result = None
        try:
            result = PyObject_Vectorcall(self.carrier_importer, args, 1, NULL)
        except BaseException as exc:
            if carrier.fatal is not None:
                raise carrier.fatal
            if not isinstance(exc, Exception) or isinstance(exc, (MemoryError, RecursionError)):
                raise
            if not carrier.refused:
                return None     # the importer refused: the planner says what is wrong
        if carrier.fatal is not None:
            raise carrier.fatal
        if not carrier.refused:
            if Py_REFCNT(carrier) == 1 and carrier.capsule is None:
                # Nobody kept it (the importer, a capsule's deleter): the next call's.
                carrier.source = None
                carrier.used = False
                self.spare = carrier
            return result
        result = None       # (an importer that answered anyway is not believed)
        self._uncarry(obj)
        if carrier.capsule is None:
            return None     # the planner decides, and says what is wrong
        capsule = carrier.capsule
        t = carrier.tensor
        carrier.capsule = None
        carrier.tensor = None   # (the importer may keep the carrier)
        try:
            t = _own_capsule(capsule, t, carrier.kind)
        except BufferError:
            return None
        finally:
            capsule = None
        _keep_immutable(t, type_flags)
        return self._make_read(t, True)

    cdef object _pass_table_managed(self, int mode, object obj):
        """What a handoff to an importer that reads exchange tables does (the
        source's managed tensor, from its table, to the target), with the managed
        tensor checked on the way instead of the source being asked its dtype
        first: in host memory, it goes in a _Handed to the target's importer when
        the target takes it as it is (plainly_takes), else it is read here (a copy
        in C when only misaligned; anything else, the planner). Device memory goes
        as the source object to the target's own importer, as a plain handoff
        does. PyTorch's bit views go to the planner."""
        cdef DLManagedTensorVersioned* managed = NULL
        cdef _ApiSlot* slot
        cdef int type_flags
        cdef _Handed handed
        if not _use_exchange_api:
            return None
        slot = _type_slot(obj)
        if slot.api == NULL:
            return None
        type_flags = slot.flags     # (read before torch runs: the slot may be reused)
        if slot.api.managed_tensor_from_py_object_no_sync(<void*>obj, &managed) != 0 \
                or managed == NULL:
            _clear_refusal()
            return None
        handed = self.spare_handed
        if handed is None:
            handed = _new_handed(managed)
        else:
            self.spare_handed = None
        handed.managed = managed    # (released if no one takes it)
        # (Only complex tensors carry the conjugate bit.)
        if mode & ROUTE_TORCH_BITS and _torch_bits(
                obj, managed.dl_tensor.dtype.code != kDLComplex) is not None:
            self._keep_spare(handed)
            return None
        if not (managed.version.major == TB_DLPACK_MAJOR
                and self._plainly_takes_dl(&managed.dl_tensor)):
            return self._table_managed_otherwise(mode, obj, handed, type_flags)
        result = _call_or_none(self.importer, handed)   # None: the planner
        if result is None and handed.managed != NULL:
            # It did not take the tensor (an importer that does not read this
            # table, or that refused before reading it): objects of this type
            # are read here from now on.
            self._uncarry(obj)
        if Py_REFCNT(handed) == 1:
            self._keep_spare(handed)    # (no one kept it)
        return result

    cdef object _table_managed_otherwise(self, int mode, object obj, _Handed handed,
                                         int type_flags):
        """_pass_table_managed's tensors that the target does not take as they are
        (kept out of its common path): device memory goes as the source object to
        the target's own importer; host memory is read here."""
        cdef DLManagedTensorVersioned* managed = handed.managed
        cdef DLDataType dt = managed.dl_tensor.dtype
        cdef int kind
        cdef Tensor t
        if managed.dl_tensor.device.device_type != kDLCPU:
            self._keep_spare(handed)
            if dt.lanes == 1 and dt.code < 18 and 8 <= dt.bits and dt.bits <= 128 \
                    and self.accept[dt.code][dt.bits]:
                return self._hand_off(
                    mode & ~(ROUTE_CAPSULE | ROUTE_CHECK_DTYPE | ROUTE_TORCH_BITS), obj)
            return None
        handed.managed = NULL
        self.spare_handed = handed
        capsule = _foreign_capsule(managed)
        try:
            t = _read_capsule(capsule, &kind)
            t = _own_capsule(capsule, t, kind)
        except Exception as exc:
            if isinstance(exc, (MemoryError, RecursionError)):
                raise
            return None     # the planner reads the source again, and says what is wrong
        finally:
            capsule = None
        _keep_immutable(t, type_flags)
        return self._make_read(t, False)

    cdef inline void _keep_spare(self, _Handed handed) noexcept:
        """handed, for the next table route's call: a tensor it still holds (the
        importer refused it) is released now."""
        handed.release()
        self.spare_handed = handed

    cdef object _pass_protocol_capsule(self, object obj):
        """A carried route without the carrier, for targets whose importer of
        capsules imports a capsule as their importer of objects imports the object
        (MLX, tvm-ffi, TensorFlow): the source is asked here as that importer asks it
        (__dlpack__() with no keywords), and the capsule goes to the importer of
        capsules when the target takes it as it is (plainly_takes). Any other is read
        here: a copy in C when it is only misaligned, else the planner gets the
        Tensor (the source is asked once). Device memory is never passed on: the type
        is marked, and the planner asks for it on the consumer's stream."""
        cdef Tensor t
        cdef int kind
        cdef int type_flags = _type_slot(obj).flags
        if type_flags & TI_STREAM:
            return None
        capsule = _dlpack_or_none(obj)
        if capsule is None:
            # Refused when asked as the importer asks (NumPy refuses read-only arrays a
            # legacy capsule, which cannot say read-only): read here, as from_dlpack
            # asks, and so are the objects of this type from now on (a refusal costs
            # an exception a call).
            self._uncarry(obj)
            return self._read_and_make(ROUTE_PROTOCOL, obj)
        if not PyCapsule_CheckExact(capsule):
            return None     # the planner asks again, and says what is wrong
        if self.plainly_takes(capsule):
            return _call_or_none(self.capsule_importer, capsule)    # None: the planner
        # A capsule is dropped before an error propagates, so a destructor written in
        # Python (pydlpack's, ctypes') runs with no exception pending.
        try:
            t = _read_capsule(capsule, &kind)
        except BaseException as exc:
            capsule = None
            if not isinstance(exc, Exception) or isinstance(exc, (MemoryError, RecursionError)):
                raise
            return None     # the planner asks again, and says what is wrong
        if _needs_stream(t._device.device_type):
            capsule = None
            _mark_stream_type(obj)
            return None
        if kind == OWN_LEGACY and t._dtype.bits < 8:
            # A legacy capsule cannot say whether sub-byte data is padded: the planner
            # asks for a versioned one.
            return None
        try:
            t = _own_capsule(capsule, t, kind)
        except BufferError:
            return None
        finally:
            capsule = None
        _keep_immutable(t, type_flags)
        return self._make_read(t, True)

    cdef object _read_and_make(self, int read, object obj):
        cdef Tensor t
        cdef _ApiSlot* slot
        cdef int verdict
        if read == ROUTE_TENSOR:
            t = <Tensor>obj
        elif read == ROUTE_NDARRAY:
            t = _import_ndarray(obj)
        elif read == ROUTE_TABLE:
            if not _use_exchange_api:
                return None
            slot = _type_slot(obj)
            if slot.api == NULL:
                return None
            # Torch bit views come back None: the planner resolves them (a copy).
            t = _from_exchange_api(obj, slot.api, None, True, slot.flags)
        elif read == ROUTE_PROTOCOL:
            slot = _type_slot(obj)
            if slot.flags & TI_STREAM:
                # It has exported device memory: the planner asks it, once, on the
                # consumer's stream.
                return None
            # As from_dlpack(obj) reads it, except that device memory is not asked
            # for again (the capsule is dropped unconsumed: the planner asks).
            try:
                if (slot.flags & (TI_PROTOCOL | TI_LEGACY)) == TI_PROTOCOL:
                    t = _from_dlpack_unqueried(obj, None, slot.flags, True)
                else:
                    t = _from_producer(obj, None, None, -1)
            except Exception as exc:
                if isinstance(exc, (MemoryError, RecursionError)):
                    raise
                return None     # the planner reads it again, and says what is wrong
            if t is None:
                return None
            if _needs_stream(t._device.device_type):
                # Device memory read without the consumer's stream: not for the
                # planner (it asks on that stream); the type is asked first from now on.
                _mark_stream_type(obj)
                return None
        else:
            return None
        if t is None:
            return None
        if self.takes_any_host and t._device.device_type == kDLCPU and (
                t._dtype.bits >= 8 or t._flags & TB_FLAG_SUBBYTE_PADDED):
            return t    # what takes() and make() would say, without asking them
        return self._make_read(t, read == ROUTE_PROTOCOL)

    cdef object _make_read(self, Tensor t, bint from_producer):
        """The target's object for t, read by a route: made as it is, or from a
        C-contiguous copy when it is only misaligned; else the planner decides, and
        gets t when it came from a producer (which may hand out one capsule, and
        asking twice costs twice)."""
        cdef int verdict = self.takes(t)
        if verdict == TAKES_NO:
            return _Read(t) if from_producer else None
        if verdict == TAKES_COPY:
            t = _copy_contiguous(t)     # what the planner copies: same memory kind
        return self.make(t)

    cdef object _hand_off(self, int mode, object obj):
        """The target's own importer, given the source object: the call a user would
        make (on GPUs, producer and consumer then make their stream handshake). Any
        refusal goes to the planner, which fixes or explains it."""
        cdef tb_npy_array* arr
        cdef int code = -1
        if self.importer is None:
            return self._read_and_make(mode & ROUTE_READ_MASK, obj)
        if mode & ROUTE_WRITABLE_ONLY and not (
                _npy_struct_state == 1 and
                (<tb_npy_array*><PyObject*>obj).flags & TB_NPY_WRITEABLE):
            return self._read_and_make(mode & ROUTE_READ_MASK, obj)
        if mode & ROUTE_CHECK_DTYPE:
            code = self._held_dtype_code(mode & ROUTE_READ_MASK, obj)
            if code < 0:
                return self._read_and_make(mode & ROUTE_READ_MASK, obj)
        if mode & ROUTE_NO_NULLS and not _no_nulls(obj):
            return None     # the planner refuses nulls, and names the fix
        # (Only complex tensors carry the conjugate bit: not asked when the dtype
        # read above says real.)
        if mode & ROUTE_TORCH_BITS and _torch_bits(obj, code >= 0 and code != kDLComplex) \
                is not None:
            return None
        if mode & ROUTE_COPY_FALSE:
            result = _call_copy_false_or_none(self.importer, obj)
        else:
            result = _call_or_none(self.importer, obj)
        if result is None:
            return None     # the planner decides, and says what is wrong
        if mode & ROUTE_MARK_READONLY:
            if _npy_struct_state == 1 and _is_ndarray(result):
                arr = <tb_npy_array*><PyObject*>result
                arr.flags &= ~TB_NPY_WRITEABLE
            else:
                result.flags.writeable = False
        elif mode & ROUTE_MARK_WRITABLE:
            # A legacy capsule cannot say writable, so NumPy imports it read-only;
            # the source's arrays are mutable (the plan gives a writable view).
            if not _is_ndarray(result):
                return None
            if _npy_struct_state == 0:
                _import_ndarray(result)     # checks the struct against the buffer, once
            if _npy_struct_state != 1:
                return None                 # the planner makes a writable view
            arr = <tb_npy_array*><PyObject*>result
            arr.flags |= TB_NPY_WRITEABLE
        return result

    cdef int _held_dtype_code(self, int read, object obj) except -2:
        """obj's DLPack type code when its dtype is one the target holds, else -1;
        read without importing obj: from NumPy's array struct, or the source table's
        non-owning DLTensor view."""
        cdef tb_npy_descr* descr
        cdef DLDataType dt
        cdef DLTensor view
        cdef _ApiSlot* slot
        if read == ROUTE_NDARRAY:
            if _npy_struct_state != 1:
                return -1
            descr = (<tb_npy_array*><PyObject*>obj).descr
            if descr == NULL or not tb_npy_dtype(descr.type_num, &dt.code, &dt.bits):
                return -1
            return dt.code if self.accept[dt.code][dt.bits] else -1
        if read == ROUTE_TABLE and _use_exchange_api:
            slot = _type_slot(obj)
            if slot.api == NULL or slot.api.dltensor_from_py_object_no_sync == NULL:
                return -1
            view.dtype.lanes = 0   # (a table that says 0 and fills nothing: refused)
            if slot.api.dltensor_from_py_object_no_sync(<void*>obj, &view) != 0:
                _clear_refusal()
                return -1
            # (A bare DLTensor has no flags: sub-byte types, packed or not, are refused.)
            if (view.dtype.lanes == 1 and view.dtype.code < 18 and 8 <= view.dtype.bits
                    and view.dtype.bits <= 128 and self.accept[view.dtype.code][view.dtype.bits]):
                return view.dtype.code
        return -1

    cdef object make(self, Tensor t):
        if (t._flags & TB_FLAG_READ_ONLY) and not self.readonly_ok:
            t = _view(t)
            t._flags &= ~TB_FLAG_READ_ONLY
        cdef PyObject* args[1]
        if self.make_kind == MAKE_TABLE:
            return _to_py(self.api, t)
        if self.make_kind == MAKE_IDENTITY:
            return t
        args[0] = <PyObject*>t
        if self.make_kind == MAKE_NDARRAY:
            result = _ndarray_of(t)
            if result is not None:
                return result
            return PyObject_Vectorcall(self.importer, args, 1, NULL)
        if self.make_kind == MAKE_BY_NDIM:
            return PyObject_Vectorcall((<tuple>self.maker)[0 if t._ndim == 1 else 1], args, 1, NULL)
        return PyObject_Vectorcall(self.maker, args, 1, NULL)

    cdef int takes(self, Tensor t) except -1:
        """TAKES_YES: the target takes t as it is; TAKES_COPY: it takes a C-contiguous
        copy (the data is only misaligned, which the planner copies too); TAKES_NO:
        the planner decides."""
        cdef int i
        if t._device.device_type != kDLCPU or not self.accept[t._dtype.code][t._dtype.bits]:
            return TAKES_NO
        if t._dtype.bits < 8 and not (t._flags & TB_FLAG_SUBBYTE_PADDED):
            return TAKES_NO
        if self.guard64 is not None and (t._dtype.bits == 128 or (
                t._dtype.bits == 64 and t._dtype.code != kDLComplex)) and not self.guard64():
            return TAKES_NO
        if t._byte_offset != 0 and not self.offset_ok:
            return TAKES_NO
        if self.any_layout or t._size() <= 1 or t._c_contiguous():
            pass
        elif not (self.noncompact and self.permuted):
            return TAKES_NO    # leave the finer layout rules to the planner
        elif not self.negative_strides:
            for i in range(t._ndim):
                if t._shape[i] > 1 and t._strides[i] < 0:
                    return TAKES_NO
        if self.alignment and t._size() and (<uintptr_t>t._ptr()) % self.alignment:
            return TAKES_COPY
        return TAKES_YES

    cdef inline bint carries_ndim(self, int ndim) noexcept:
        """Whether the carrier's importer takes tensors of ndim dimensions: with a
        maker pair (PyArrow), the importer of objects is the 1-d maker."""
        return self.make_kind != MAKE_BY_NDIM or ndim == 1

    cdef bint plainly_takes(self, object capsule) noexcept:
        """True when the (unconsumed) capsule holds a tensor that from_dlpack reads
        without complaint and that the target takes as it is (TAKES_YES): the common
        case of a carried route, checked on the struct without making a Tensor. False
        when anything is out of the ordinary (another major version, sub-byte or
        64-bit types under guard64, empty tensors, a layout other than C order for
        targets with layout rules, misaligned data): the capsule is then read in
        full (_read_capsule, then takes), which refuses or copies, and says why."""
        cdef const char* name = PyCapsule_GetName(capsule)
        cdef DLManagedTensorVersioned* versioned
        cdef DLManagedTensor* legacy
        cdef DLTensor* dl
        if name == NULL:
            PyErr_Clear()
            return False
        if strcmp(name, TB_CAPSULE_VERSIONED) == 0:
            versioned = <DLManagedTensorVersioned*>PyCapsule_GetPointer(
                capsule, TB_CAPSULE_VERSIONED)
            if versioned == NULL or versioned.version.major != TB_DLPACK_MAJOR:
                PyErr_Clear()
                return False
            dl = &versioned.dl_tensor
        elif strcmp(name, TB_CAPSULE_LEGACY) == 0:
            legacy = <DLManagedTensor*>PyCapsule_GetPointer(capsule, TB_CAPSULE_LEGACY)
            if legacy == NULL:
                PyErr_Clear()
                return False
            dl = &legacy.dl_tensor
        else:
            return False
        return self._plainly_takes_dl(dl)

    cdef inline bint _plainly_takes_dl(self, const DLTensor* dl) noexcept:
        """plainly_takes for the tensor of a managed tensor of this major version."""
        cdef DLDataType dt = dl.dtype
        cdef int i
        cdef int64_t item, elements, extent, stride, count = 1, later, span = 0, step
        cdef bint c_order = True
        if not self.carries_ndim(dl.ndim):
            return False
        if (dl.ndim < 0 or dl.ndim > TB_MAX_NDIM or dt.lanes != 1 or dt.code >= 18
                or dt.bits < 8 or dt.bits > 128 or not self.accept[dt.code][dt.bits]):
            return False
        if dl.device.device_type != kDLCPU or dl.device.device_id < 0:
            return False
        if self.guard64 is not None and (dt.bits == 128 or (
                dt.bits == 64 and dt.code != kDLComplex)):
            return False    # (asks Python: the full read)
        if dl.byte_offset != 0 and (not self.offset_ok or dl.byte_offset > <uint64_t>BYTE_LIMIT):
            return False
        if dl.ndim > 0 and dl.shape == NULL:
            return False
        # _check_layout's bounds and _c_contiguous, in one pass from the last dimension
        # (the element count first, so (extent - 1) * item below cannot overflow).
        # The bound on counts and strides is BYTE_LIMIT over the widest item (16
        # bytes; bits <= 128 above), a shift where BYTE_LIMIT // item would be a
        # 64-bit division on every call: at most as large, so a tensor it refuses
        # (more than 2**58 elements, or a stride beyond 2**58 elements either way)
        # is only read in full.
        item = _itemsize(dt)
        elements = BYTE_LIMIT >> 4
        for i in range(dl.ndim - 1, -1, -1):
            extent = dl.shape[i]
            if extent <= 0:
                return False    # empty (or invalid): the full read
            later = count       # the C-order stride of this dimension
            if tb_mul_overflow(count, extent, &count) or count > elements:
                return False
            if dl.strides != NULL:
                stride = dl.strides[i]
                if stride > elements or stride < -elements:
                    return False
                if extent > 1:
                    if stride != later:
                        c_order = False
                    if (tb_mul_overflow(stride if stride >= 0 else -stride,
                                        (extent - 1) * item, &step)
                            or tb_add_overflow(span, step, &span) or span > BYTE_LIMIT):
                        return False
        if not c_order and not self.any_layout:
            return False
        if dl.data == NULL or <uintptr_t>dl.data > UINTPTR_MAX - <uintptr_t>dl.byte_offset:
            return False
        if self.alignment and (<uintptr_t>dl.data + <uintptr_t>dl.byte_offset) % self.alignment:
            return False
        return True


# target (a name or module) -> FastTarget, set by the planner (set_fast_target) once
# it has converted to that target.
cdef dict _fast_targets = {}
# The last target found there, by identity (most programs convert to one target in
# a loop, and a name written in the source is one interned string).
cdef object _last_to = None
cdef FastTarget _last_target = None


def set_fast_target(to, FastTarget target):
    global _last_to
    _fast_targets[to] = target
    _last_to = None


cdef inline FastTarget _fast_target_of(object to):
    """The FastTarget for `to` (a str or a module), or None."""
    global _last_to, _last_target
    if to is _last_to:
        return _last_target
    target = _fast_targets.get(to)
    if target is None:
        return None
    # (dropping the old name or module may run Python code: the pair is never mixed)
    _last_to = None
    _last_target = <FastTarget>target
    _last_to = to
    return _last_target


def _fast_convert(FastTarget target, obj):
    """convert(obj, target) along obj's cached route, or None (the planner decides);
    for tests."""
    cdef int mode = target._mode(obj)
    result = None if mode <= 0 else target.run(mode, obj)
    return None if type(result) is _Read else result
