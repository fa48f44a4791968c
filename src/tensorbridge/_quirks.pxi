# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Producer quirks that need C speed: PyTorch's lazy
# conjugate and negative bit views, which its DLPack export would drop.

from cpython.ref cimport PyObject, Py_TYPE, Py_DECREF
from tensorbridge._cpython cimport *


# --------------------------------------------------------------------------
# PyTorch's bit views
# --------------------------------------------------------------------------

# type -> (is_neg, is_conj) unbound methods for torch tensor types, False for others;
# the last type asked about is also kept in a one-entry cache, with the C functions
# of its two methods (NULL: the method is called as an object).
cdef dict _torch_tensor_types = {}
cdef void* _torch_last_type = NULL
cdef object _torch_last_methods = None
cdef PyCFunction _torch_last_neg = NULL
cdef PyCFunction _torch_last_conj = NULL

cdef bint _is_torch_type(object cls):
    """A PyTorch tensor type, or a subclass of one defined anywhere (found by the
    modules of its bases, so torch is never imported)."""
    if not hasattr(cls, "is_neg"):
        return False
    for base in getattr(cls, "__mro__", ()):
        module = getattr(base, "__module__", "") or ""
        if isinstance(module, str) and module.split(".")[0] == "torch":
            return True
    return False


cdef PyCFunction _noargs_function(object tp, object method):
    """The C function of `method` when it is a C method without arguments of a base
    of tp (torch's is_neg and is_conj), to be called directly; else NULL (a Python
    override, say)."""
    cdef PyMethodDef* d
    if Py_TYPE(method) != &PyMethodDescr_Type or \
            not issubclass(tp, <object>PyDescr_TYPE(method)):
        return NULL
    d = (<PyMethodDescrObject*><PyObject*>method).d_method
    if d == NULL or (d.ml_flags & ~METH_COEXIST) != METH_NOARGS:
        return NULL
    return d.ml_meth


cdef int _call_bit(PyCFunction function, object method, object x) except -1:
    """bool(method(x)), through its C function when there is one: what the method
    descriptor's own vectorcall would do, without its checks (about 10 ns)."""
    cdef PyObject* args[1]
    cdef PyObject* r
    if function == NULL:
        args[0] = <PyObject*>x
        return 1 if PyObject_Vectorcall(method, args, 1, NULL) else 0
    r = function(<PyObject*>x, NULL)
    if r == NULL:
        return -1
    result = <object>r
    Py_DECREF(result)   # the function's reference; `result` holds its own
    return 1 if result else 0


cdef object _torch_bits(object x, bint complex_only_conj):
    """None, or "negative"/"conjugate" when x is a torch tensor whose memory does
    not hold its values (a view with the negative or conjugate bit set).

    torch.Tensor.is_neg is the one reader of the bit (about 0.1 µs: torch releases
    the GIL around it). Nothing cheaper decides it: the exchange table exports such
    tensors with no flag; any dtype can carry the negative bit (z.conj().imag is a
    float view, _neg_view and _set_neg take any dtype); .detach(), .data and
    pickling keep it on tensors that are not views."""
    global _torch_last_type, _torch_last_methods, _torch_last_neg, _torch_last_conj
    cdef PyCFunction is_neg, is_conj
    if <void*>Py_TYPE(x) == _torch_last_type:
        methods = _torch_last_methods
    else:
        tp = type(x)
        methods = _torch_tensor_types.get(tp)
        if methods is None:
            methods = (tp.is_neg, tp.is_conj) if _is_torch_type(tp) else False
            _torch_tensor_types[tp] = methods
        # The dict keeps tp alive, so the pointer cannot be reused by another type.
        _torch_last_type = NULL
        is_neg = is_conj = NULL
        if methods is not False:
            # (issubclass may run Python code that asks about another type: the
            # cache is written only once both are known.)
            is_neg = _noargs_function(tp, (<tuple>methods)[0])
            is_conj = _noargs_function(tp, (<tuple>methods)[1])
        _torch_last_neg = is_neg
        _torch_last_conj = is_conj
        _torch_last_type = <void*>tp
        _torch_last_methods = methods
    if methods is False:
        return None
    # Locals: the calls may run Python code (a __torch_function__) that imports
    # a tensor of another type, which replaces the cache entry.
    is_neg = _torch_last_neg
    is_conj = _torch_last_conj
    if _call_bit(is_neg, (<tuple>methods)[0], x):
        return "negative"
    # Only complex tensors carry the conjugate bit; skip the call when the
    # imported dtype says the tensor is real.
    if not complex_only_conj and _call_bit(is_conj, (<tuple>methods)[1], x):
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
