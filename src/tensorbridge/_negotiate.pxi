# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. from_dlpack's negotiation with a producer (which
# __dlpack__ call, which capsule, streams, devices, copies) and to_dlpack.

from cpython.ref cimport PyObject, PyTypeObject, Py_TYPE
from libc.string cimport strcmp
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *

from tensorbridge._errors import NO_MOVES as _NO_MOVES
from tensorbridge._errors import DeviceError, NotDLPackError, producer_error as _producer_error
from tensorbridge._devices import as_device as _as_device


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
    if mask & KW_DEVICE:
        wanted.device_type = dl_device[0]
        wanted.device_id = dl_device[1]
    if mask & KW_DEVICE and not _same_device(source, wanted) and not isinstance(
            exc, (MemoryError, RecursionError)):
        # One exception for a device that cannot be had, whoever said so and however
        # (NumPy: BufferError; PyTorch: NotImplementedError; JAX, TensorFlow:
        # RuntimeError); the producer's refusal is its cause.
        said = str(exc).strip().partition("\n")[0]  # (all of it is in the cause)
        error = DeviceError(
            f"from_dlpack(): {name} cannot export its {_dev_str(source)} data to "
            f"{_dev_str(wanted)} (it refused: {type(exc).__name__}: {said}); {_NO_MOVES}")
        error.__cause__ = exc
        return error
    return _producer_error(exc, f"from_dlpack(): {name}.{call} raised")


cdef bint _refuses_the_call(object exc):
    """Whether a TypeError from __dlpack__(max_version=...) says the call itself was
    refused (a signature without max_version), so the legacy call may work: a
    TypeError as Python, Cython, pybind11 and nanobind raise it, or one that names
    an argument (Boost.Python's ArgumentError). Another subclass is the producer's
    refusal of the data (PyArrow's ArrowTypeError for nulls), which the legacy call
    would repeat, after a DeprecationWarning of PyArrow's."""
    if type(exc) is TypeError:
        return True
    text = str(exc)
    return "argument" in text or "keyword" in text or "max_version" in text


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


cdef Tensor _from_dlpack_unqueried(object x, object copy, int flags, bint host_only=False):
    """__dlpack__(max_version=...) without asking __dlpack_device__ first (which
    costs JAX 1.7 µs): no stream is passed, which is right for host memory. A
    capsule of CUDA/ROCm memory is dropped unconsumed and the stream handshake
    follows (the second and last __dlpack__ call). A producer that refuses
    max_version is asked its device and gets the legacy call, with the stream that
    device needs (the second and last call). Not for types known to refuse
    max_version or to have exported GPU memory: the full negotiation asks those
    their device first. host_only: device memory gives None instead of the second
    call (convert's routes leave device data to the planner, which asks once, on the
    consumer's stream)."""
    cdef int mask = KW_COPY if copy is False else 0
    cdef DLDevice source
    cdef Tensor t
    cdef int kind
    cdef bint queried = False
    if flags & TI_TORCH:
        _check_torch_bits(x)
    if flags & TI_ABORTS:
        _refuse_aborting_export(x, "from_dlpack()")
    first = None
    try:
        capsule = _call_dlpack(x, mask, None, None, copy)
    except TypeError as exc:
        if mask or not _refuses_the_call(exc):
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
            capsule = _legacy_retry(x, mask, stream)
        except Exception as exc:
            exc.__context__ = first
            raise _call_error(x, mask, stream, None, None, True, exc, source)
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
            if host_only:
                return None
            return _from_producer(x, None, copy, None, True)
    if queried and not _same_device(t._device, source):
        capsule = None
        _refuse_device_mismatch(x, source, t._device)
    try:
        _own_capsule(capsule, t, kind)
    finally:
        capsule = None
    if copy is False and (t._flags & TB_FLAG_IS_COPIED):
        raise CopyNeeded(
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
                raise CopyNeeded(
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


cdef object _legacy_retry(object x, int mask, object stream):
    """The pre-2023.12 call ``__dlpack__(stream=...)`` for a producer that refused
    max_version with TypeError; a type that answers it with a capsule is remembered
    (TI_LEGACY), so later imports make the legacy call first."""
    capsule = _call_dlpack_legacy(x, mask, stream)
    if PyCapsule_CheckExact(capsule):
        _mark_legacy_type(x)
    return capsule


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
        except TypeError as exc:
            if mask & (KW_DEVICE | KW_COPY) or one_call_left or not _refuses_the_call(exc):
                raise
            # A producer older than the 2023.12 keywords: the legacy call, once.
            legacy = True
            return _legacy_retry(x, mask, stream)
    except Exception as exc:
        raise _call_error(x, mask, stream, dl_device, copy, legacy, exc, source)


cdef Tensor _from_producer(object x, object device, object copy, object stream,
                           bint one_call_left=False):
    cdef DLDevice source
    cdef bint queried = True
    if not (_type_slot(x).flags & TI_PROTOCOL):
        _raise_not_dlpack(x)
    _refuse_aborting_export(x, "from_dlpack()")
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
            raise CopyNeeded(
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
    if _needs_stream(t._device.device_type):
        _mark_stream_type(x)    # asked its device first from now on (and by routes)
    if copy is False and (t._flags & TB_FLAG_IS_COPIED):
        raise CopyNeeded(
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
            raise DeviceError(
                f"from_dlpack(): cannot move a capsule's {_dev_str(t._device)} data to "
                f"{_dev_str(target)}: a capsule carries no producer to ask for it; "
                f"{_NO_MOVES}")
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


class CopyNeeded(BufferError, ValueError):
    """copy=False was asked, but only a copy would do. A BufferError (the standard's
    `copy` text) and a ValueError (its `device` text and Raises section)."""


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
