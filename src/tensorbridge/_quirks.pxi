# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Producer quirks that need C speed: PyTorch's lazy
# conjugate and negative bit views, which its DLPack export would drop.

from cpython.ref cimport PyObject, Py_TYPE
from tensorbridge._cpython cimport *


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
