# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Producer quirks that need C speed: PyTorch's lazy
# conjugate and negative bit views, which its DLPack export would drop.

from cpython.ref cimport PyObject, Py_TYPE, Py_DECREF
from tensorbridge._cpython cimport *

cdef extern from "_torch.h":
    void* tb_loaded_symbol(const char* library, const char* name) nogil
    void* tb_torch_impl(PyObject* tensor) nogil
    int tb_torch_bit(void* reader, PyObject* tensor) nogil


# --------------------------------------------------------------------------
# PyTorch's bit views
# --------------------------------------------------------------------------

# type -> (is_neg, is_conj, direct) for torch tensor types (the unbound methods, and
# whether the bits are read with torch's C++ readers), False for others; the last
# type asked about is also kept in a one-entry cache, with the C functions of its
# two methods (NULL: the method is called as an object).
cdef dict _torch_tensor_types = {}
cdef void* _torch_last_type = NULL
cdef object _torch_last_methods = None
cdef PyCFunction _torch_last_neg = NULL
cdef PyCFunction _torch_last_conj = NULL
cdef bint _torch_last_direct = False

# torch's C++ readers of the two bits (at::native::is_neg and is_conj), called on
# the at::Tensor inside a tensor's Python object: a few nanoseconds, where the
# methods take about 0.1 µs (they release and retake the GIL). Found once, in the
# libraries torch._C links, and used only after _find_bit_readers has checked both
# them and that layout against the methods; NULL: the methods are called.
cdef bint _bit_readers_looked = False
cdef void* _neg_reader = NULL
cdef void* _conj_reader = NULL
cdef object _torch_tensor_base = None           # torch._C.TensorBase
cdef object _torch_default_functions = ()       # __torch_function__s that only call

# (Itanium C++ names: at::native::is_neg(at::Tensor const&), and is_conj.)
cdef bytes _NEG_SYMBOL = b"_ZN2at6native6is_negERKNS_6TensorE"
cdef bytes _CONJ_SYMBOL = b"_ZN2at6native7is_conjERKNS_6TensorE"


cdef int _find_bit_readers() except -1:
    """Look for torch's C++ bit readers once torch is imported, and keep them only
    if, on tensors with each combination of the bits (views and not, a subclass),
    the at::Tensor after the object head is the one Tensor._cdata names and both
    readers agree with is_neg() and is_conj(). A torch built otherwise (Windows,
    another layout, the symbols gone) keeps the methods."""
    global _bit_readers_looked, _neg_reader, _conj_reader, _torch_tensor_base
    global _torch_default_functions
    torch = _sys.modules.get("torch")
    if _bit_readers_looked or torch is None or not hasattr(torch, "nn"):
        return 0    # (torch half imported: asked again with the next type)
    _bit_readers_looked = True
    try:
        base = torch._C.TensorBase
        library = _os.fsencode(torch._C.__file__)
        neg = tb_loaded_symbol(library, _NEG_SYMBOL)
        conj = tb_loaded_symbol(library, _CONJ_SYMBOL)
        if neg == NULL or conj == NULL \
                or base.__basicsize__ < <Py_ssize_t>(sizeof(PyObject) + sizeof(void*)):
            return 0
        # (Made with the user's torch function and dispatch modes off: a FakeTensor
        # mode would make other tensors than the ones asked for.)
        with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
            z = torch.zeros(2, dtype=torch.complex64)
            samples = (torch.zeros(2), z, z.conj(), z.conj().imag, z.conj().imag.detach(),
                       z.conj().detach(), torch.nn.Parameter(torch.zeros(2)))
        for t in samples:
            if not isinstance(t, base) \
                    or <size_t>tb_torch_impl(<PyObject*>t) != <size_t>t._cdata:
                return 0
            if tb_torch_bit(neg, <PyObject*>t) != bool(t.is_neg()) \
                    or tb_torch_bit(conj, <PyObject*>t) != bool(t.is_conj()):
                return 0
        functions = (torch._C._disabled_torch_function_impl,
                     torch.Tensor.__torch_function__.__func__)
    except Exception:
        return 0
    _torch_tensor_base = base
    _torch_default_functions = functions
    _neg_reader = neg
    _conj_reader = conj
    return 0


cdef bint _reads_bits_directly(object tp, PyCFunction is_neg, PyCFunction is_conj) except -1:
    """Whether tp's bits may be read with torch's C++ readers: its is_neg and
    is_conj are torch's own C methods, and its __torch_function__ is torch's
    default (which calls the method) or disabled, so the methods would read the
    same bit of the same at::Tensor. A subclass with a __torch_function__ of its
    own keeps the methods, and its __torch_function__ sees them called."""
    if is_neg == NULL or is_conj == NULL:
        return False
    _find_bit_readers()
    if _neg_reader == NULL or not issubclass(tp, _torch_tensor_base):
        return False
    function = getattr(tp, "__torch_function__", None)
    function = getattr(function, "__func__", function)
    return function is None or function in _torch_default_functions

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

    Read with torch's C++ readers where _reads_bits_directly allows (a few ns),
    else with torch.Tensor.is_neg and is_conj (about 0.1 µs each: torch releases the
    GIL around them). Every tensor is asked: the exchange table exports such tensors
    with no flag; any dtype can carry the negative bit (z.conj().imag is a float
    view, _neg_view and _set_neg take any dtype); .detach(), .data and pickling keep
    it on tensors that are not views."""
    global _torch_last_type, _torch_last_methods, _torch_last_neg, _torch_last_conj
    global _torch_last_direct
    cdef PyCFunction is_neg, is_conj
    if <void*>Py_TYPE(x) == _torch_last_type:
        methods = _torch_last_methods
    else:
        tp = type(x)
        methods = _torch_tensor_types.get(tp)
        is_neg = is_conj = NULL
        if methods is None and _is_torch_type(tp):
            is_neg = _noargs_function(tp, tp.is_neg)
            is_conj = _noargs_function(tp, tp.is_conj)
            methods = (tp.is_neg, tp.is_conj, _reads_bits_directly(tp, is_neg, is_conj))
        elif methods is None:
            methods = False
        _torch_tensor_types[tp] = methods
        # The dict keeps tp alive, so the pointer cannot be reused by another type.
        _torch_last_type = NULL
        if methods is not False:
            # (issubclass may run Python code that asks about another type: the
            # cache is written only once both are known.)
            is_neg = _noargs_function(tp, (<tuple>methods)[0])
            is_conj = _noargs_function(tp, (<tuple>methods)[1])
        _torch_last_neg = is_neg
        _torch_last_conj = is_conj
        _torch_last_direct = methods is not False and (<tuple>methods)[2]
        _torch_last_type = <void*>tp
        _torch_last_methods = methods
    if methods is False:
        return None
    if _torch_last_direct:
        if tb_torch_bit(_neg_reader, <PyObject*>x):
            return "negative"
        if not complex_only_conj and tb_torch_bit(_conj_reader, <PyObject*>x):
            return "conjugate"
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


def _torch_bit_readers(str what):
    """Tests: "off" forgets torch's C++ bit readers, so the methods are called from
    now on; "find" looks for them again. Both clear the caches of types. Whether
    the readers are in use."""
    global _bit_readers_looked, _neg_reader, _conj_reader, _torch_last_type
    if what not in ("off", "find"):
        raise ValueError(f"_torch_bit_readers(): 'off' or 'find', not {what!r}")
    _torch_last_type = NULL
    _torch_tensor_types.clear()
    _neg_reader = _conj_reader = NULL
    _bit_readers_looked = what == "off"
    if what == "find":
        _find_bit_readers()
    return _neg_reader != NULL


def torch_bits_read_directly(tp):
    """Whether the bits of tp's tensors are read with torch's C++ readers rather
    than its methods; None when tp is no torch tensor type or not seen yet (tests)."""
    methods = _torch_tensor_types.get(tp)
    return None if not methods else bool((<tuple>methods)[2])
