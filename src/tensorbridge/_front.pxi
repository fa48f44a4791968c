# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. The compiled front doors: convert (its cached routes,
# _routes.pxi) and asarray's fast paths, which hand everything else to the Python
# fallbacks that tensorbridge/__init__.py registers (this extension never imports
# upward).

from types import ModuleType as _ModuleType

from tensorbridge._dtypes import DType as _DType

cdef extern from "_door.h":
    ctypedef PyObject* (*tb_convert2_fn)(PyObject* obj, PyObject* to)
    ctypedef int (*tb_name_error_fn)(PyObject* exc)
    tb_convert2_fn tb_door_convert2
    tb_name_error_fn tb_door_name_error
    PyObject* tb_door_options
    PyMethodDef tb_door_def
    object PyCFunction_NewEx(PyMethodDef* ml, PyObject* self, object module)


# --------------------------------------------------------------------------
# The Python fallbacks, registered by tensorbridge/__init__.py
# --------------------------------------------------------------------------
#
# What needs the Python layer (the general asarray, the convert planner, the NumPy
# operations behind the Tensor surface) is handed in from above, so this extension
# never imports a module that imports it. The loaders import on first use: NumPy
# and the planner stay out of `import tensorbridge`.

cdef dict _fallbacks = {}
cdef object _numpy_ops_mod = None
cdef object _asarray_general = None
cdef object _convert_general = None


cdef object _said_by_function = None


cdef int _said_by(object exc, str api) except -1:
    """tensorbridge._errors.said_by: exc's message begun with api, in place."""
    global _said_by_function
    if _said_by_function is None:
        from tensorbridge._errors import said_by
        _said_by_function = said_by
    _said_by_function(exc, api)
    return 0


def register_fallbacks(*, asarray, load_convert, load_numpy_ops):
    """Set the Python layer's entry points: ``asarray(obj, *, dtype, device, copy)``;
    ``load_convert()`` -> ``convert_general(obj, to, *, dtype, device, copy,
    requires_grad)``; ``load_numpy_ops()`` -> the module of NumPy operations."""
    global _asarray_general, _convert_general, _numpy_ops_mod
    _fallbacks.update(asarray=asarray, load_convert=load_convert,
                      load_numpy_ops=load_numpy_ops)
    _asarray_general = _convert_general = _numpy_ops_mod = None   # loaded afresh


cdef object _fallback(str name):
    try:
        return _fallbacks[name]
    except KeyError:
        raise RuntimeError(
            f"tensorbridge._core: no {name} fallback registered: tensorbridge is not fully "
            "imported (a circular import during `import tensorbridge`, or its __init__ "
            "failed)") from None


cdef object _numpy_ops():
    """The NumPy operations behind the Tensor surface, loaded on first use."""
    global _numpy_ops_mod
    if _numpy_ops_mod is None:
        _numpy_ops_mod = _fallback("load_numpy_ops")()
    return _numpy_ops_mod


def convert(obj, /, to, *, dtype=None, device=None, copy=None, requires_grad=None,
            readonly="share"):
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
    device : device-like, optional
        Where the data already is (or ``"cpu"`` for host-accessible memory such as
        CUDA pinned memory); tensorbridge does not move data between devices, so any
        other device is a BufferError.
    copy : bool, optional
        ``None``: copy only when the target cannot take the data as it is.
        ``True``: always a copy. ``False``: never; BufferError saying what the target
        cannot take.
    requires_grad : bool, optional
        As ``torch.asarray``. ``None``: a tensor of the target's own keeps its autograd
        state (it is returned itself); anything else becomes a tensor that does not
        require grad. ``True``: a PyTorch leaf tensor that requires grad (PaddlePaddle:
        ``stop_gradient=False``); on a tensor of the target's own it is set in place.
        ``False``: a tensor that requires grad gives a detached alias (torch.asarray
        clears a leaf's flag in place; the caller's tensor is left as it is). ValueError for
        ``True`` with targets without autograd.
    readonly : {"share", "copy"}
        Read-only data (a read-only NumPy array, JAX and Arrow arrays...) for a target
        that cannot mark its tensors read-only (PyTorch, PaddlePaddle, tvm-ffi).
        ``"share"``: shared, as the target's own ``from_dlpack`` does (the Array API's
        rule); the result is writable, and writes through it change the source.
        ``"copy"``: a private copy. Targets that can say read-only (NumPy,
        array-api-strict, tensorbridge) or whose arrays are immutable (JAX,
        TensorFlow, PyArrow) share read-only data either way.

    Returns
    -------
    object
        The target framework's array, with the source's values, shape and dtype (or
        ``dtype``). Read-only sources stay read-only where the target can say so. One
        of the target's own arrays with nothing to change is returned itself, as
        ``torch.asarray`` and ``numpy.asarray`` do.

    Examples
    --------
    >>> import numpy as np, tensorbridge as tb
    >>> a = np.arange(6.0)[::-1]
    >>> x = tb.convert(a, "torch")      # torch cannot take negative strides: a copy
    >>> tb.explain(a, "torch").shares_memory
    False
    """
    try:
        return _convert(obj, to, dtype, device, copy, requires_grad, readonly)
    except Exception as exc:
        _said_by(exc, "convert()")
        raise


cdef object _convert(obj, to, dtype, device, copy, requires_grad, readonly):
    if dtype is None and device is None and copy is None and requires_grad is None and (
            readonly == "share"):
        return _convert2(obj, to)
    return _plan(obj, to, dtype, device, copy, requires_grad, readonly, None)


cdef object _convert2(obj, to):
    """convert(obj, to) with every option at its default: the call a loop makes,
    which the C door (_door.h) brings here without parsing the options."""
    cdef FastTarget target
    cdef int mode
    if type(to) is str or type(to) is _ModuleType:
        # The route the planner cached for type(obj) and this target (_routes.pxi).
        target = _fast_target_of(to)
        if target is not None:
            mode = target._mode(obj)
            if mode > 0:
                result = target.run(mode, obj)
                if type(result) is _Read:
                    return _plan(obj, to, None, None, None, None, "share",
                                 (<_Read>result).tensor)
                if result is not None:
                    return result
    return _plan(obj, to, None, None, None, None, "share", None)


cdef object _plan(obj, to, dtype, device, copy, requires_grad, readonly, Tensor read):
    """The planner (tensorbridge._convert.convert_general), given the Tensor a route
    already read from the producer, if any (a producer is asked once)."""
    global _convert_general
    if _convert_general is None:
        _convert_general = _fallback("load_convert")()
    if read is not None:
        return _convert_general(obj, to, dtype=dtype, device=device, copy=copy,
                                requires_grad=requires_grad, readonly=readonly, _read=read)
    return _convert_general(obj, to, dtype=dtype, device=device, copy=copy,
                            requires_grad=requires_grad, readonly=readonly)


cdef int _name_convert_error(PyObject* exc) except -1:
    _said_by(<object>exc, "convert()")
    return 0


# The public convert is the C door (_door.h): it runs convert(obj, to) through
# _convert2 and passes any other call to the function above, which keeps the
# Python signature's parsing and messages. Its docstring is that function's, after
# a text signature (inspect.signature, help(), Sphinx read it).
cdef object _convert_with_options = convert
cdef bytes _door_doc = (
    "convert(obj, /, to, *, dtype=None, device=None, copy=None, "
    "requires_grad=None, readonly='share')\n--\n\n"
    + convert.__doc__.partition("\n")[2].lstrip("\n")).encode()
tb_door_convert2 = <tb_convert2_fn>_convert2
tb_door_name_error = <tb_name_error_fn>_name_convert_error
tb_door_options = <PyObject*>_convert_with_options
tb_door_def.ml_doc = _door_doc
convert = PyCFunction_NewEx(&tb_door_def, NULL, __name__)


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """Turn ``obj`` into a Tensor, sharing its memory whenever possible.

    (tensorbridge/__init__.py gives this compiled front door the Python layer's
    docstring, with the full rules; the front door answers the common calls, a
    Tensor or a NumPy array with nothing else asked, without entering that layer.)
    """
    try:
        return _asarray(obj, dtype, device, copy)
    except Exception as exc:
        _said_by(exc, "asarray()")
        raise


cdef object _asarray(obj, dtype, device, copy):
    global _asarray_general
    cdef _ApiSlot* slot
    cdef Tensor fast
    if (type(obj) is list or type(obj) is tuple) and device is None and (
            copy is None or copy is True):
        # Nested lists and tuples of Python numbers: filled here, in C (new memory, so
        # copy=True asks nothing more); anything else in them, the general path.
        result = _sequence(obj, dtype if dtype is None or type(dtype) is _DType
                           else _resolve_dtype_obj(dtype))
        if result is not None:
            return result
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
        _asarray_general = _fallback("asarray")
    return _asarray_general(obj, dtype=dtype, device=device, copy=copy)
