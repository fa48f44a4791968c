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

# type -> (methods, direct, tag): for a torch tensor type, methods is its (is_neg,
# is_conj) and direct whether its bits are read with torch's C++ readers; for any
# other type, methods is False. tag is the type's version tag when this was decided:
# an entry whose type (or a base) changed since, say a __torch_function__ assigned
# later, is decided again. The last type asked about is also kept in a one-entry
# cache, with the C functions of its two methods (NULL: called as objects).
cdef dict _torch_tensor_types = {}
cdef Py_ssize_t _TORCH_TYPES_KEPT = 256
cdef void* _torch_last_type = NULL
cdef unsigned int _torch_last_tag = 0
cdef object _torch_last_methods = None
cdef PyCFunction _torch_last_neg = NULL
cdef PyCFunction _torch_last_conj = NULL
cdef bint _torch_last_direct = False

# torch's C++ readers of the two bits (at::native::is_neg and is_conj), called on
# the at::Tensor inside a tensor's Python object: a few nanoseconds, where the
# methods take about 0.1 µs (they release and retake the GIL). Found once, in the
# libraries torch._C links, and used only after _find_bit_readers has checked both
# them and that layout against the methods; NULL: the methods are called.
cdef bint _bit_readers_decided = False  # looked for, and kept or not, for good
cdef bint _bit_readers_looking = False
cdef void* _neg_reader = NULL
cdef void* _conj_reader = NULL
cdef PyCFunction _base_neg = NULL               # TensorBase.is_neg's C function
cdef PyCFunction _base_conj = NULL
cdef object _torch_tensor_base = None           # torch._C.TensorBase
cdef object _torch_default_functions = ()       # the __torch_function__s that only call

# (Itanium C++ names: at::native::is_neg(at::Tensor const&), and is_conj.)
cdef bytes _NEG_SYMBOL = b"_ZN2at6native6is_negERKNS_6TensorE"
cdef bytes _CONJ_SYMBOL = b"_ZN2at6native7is_conjERKNS_6TensorE"


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


cdef bint _same_export(object tp, object owner) except -1:
    """tp exports as owner does: the same __dlpack__ and __dlpack_device__ objects
    (a subclass that sets them to its base's own functions overrides nothing)."""
    return getattr(tp, "__dlpack__", None) is getattr(owner, "__dlpack__", None) and \
        getattr(tp, "__dlpack_device__", None) is getattr(owner, "__dlpack_device__", None)


cdef bint _torch_exports(object cls) except -1:
    """Whether cls exports as PyTorch's own tensor class does (not through a
    subclass's override, whose export is its own business: no bit view is checked,
    no table used)."""
    for base in getattr(cls, "__mro__", ()):
        names = getattr(base, "__dict__", None)
        module = getattr(base, "__module__", "") or ""
        if names is not None and "__dlpack__" in names and isinstance(module, str) \
                and module.split(".")[0] == "torch":
            return _same_export(cls, base)
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


cdef int _find_bit_readers(bytes neg_symbol, bytes conj_symbol) except -1:
    """Look for torch's C++ bit readers once torch is imported, and keep them only
    if, on tensors with each combination of the bits (views and not, a subclass),
    the at::Tensor after the object head is the one Tensor._cdata names and both
    readers agree with is_neg() and is_conj(). A torch built otherwise (Windows,
    another layout, the symbols gone) keeps the methods. Decided for good only when
    the look ends (an interrupt, or torch half imported, leaves it to the next
    type); a look already under way (the tensors made here release the GIL) is not
    begun again."""
    global _bit_readers_decided, _bit_readers_looking
    torch = _sys.modules.get("torch")
    if _bit_readers_decided or _bit_readers_looking or torch is None \
            or not hasattr(torch, "nn"):
        return 0
    _bit_readers_looking = True
    try:
        _keep_bit_readers_if_right(torch, neg_symbol, conj_symbol)
        _bit_readers_decided = True
    finally:
        _bit_readers_looking = False
    return 0


cdef int _keep_bit_readers_if_right(object torch, bytes neg_symbol, bytes conj_symbol) \
        except -1:
    global _neg_reader, _conj_reader, _base_neg, _base_conj, _torch_tensor_base
    global _torch_default_functions
    cdef PyCFunction base_neg, base_conj
    try:
        base = torch._C.TensorBase
        library = _os.fsencode(torch._C.__file__)
        neg = tb_loaded_symbol(library, neg_symbol)
        conj = tb_loaded_symbol(library, conj_symbol)
        base_neg = _noargs_function(base, base.__dict__["is_neg"])
        base_conj = _noargs_function(base, base.__dict__["is_conj"])
        if neg == NULL or conj == NULL or base_neg == NULL or base_conj == NULL \
                or base.__basicsize__ < <Py_ssize_t>(sizeof(PyObject) + sizeof(void*)):
            return 0
        # (With the user's torch function and dispatch modes off: a FakeTensor mode
        # would make other tensors than the ones asked for, a mode that refuses
        # calls would leave the process on the methods.)
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
    _base_neg = base_neg
    _base_conj = base_conj
    _conj_reader = conj
    _neg_reader = neg
    return 0


cdef int _reads_bits_directly(object tp, PyCFunction is_neg, PyCFunction is_conj) except -2:
    """1 when tp's bits may be read with torch's C++ readers: its is_neg and is_conj
    are TensorBase's own C methods, and its __torch_function__ is torch's default
    (which calls the method) or disabled, so the methods would read the same bit of
    the same at::Tensor. A subclass with a __torch_function__ of its own keeps the
    methods, and its __torch_function__ sees them called. 0 when not; -1 while the
    readers are not decided yet (not to be kept)."""
    _find_bit_readers(_NEG_SYMBOL, _CONJ_SYMBOL)
    if not _bit_readers_decided:
        return -1
    if _neg_reader == NULL or _conj_reader == NULL or is_neg != _base_neg \
            or is_conj != _base_conj or not issubclass(tp, _torch_tensor_base):
        return 0
    function = getattr(tp, "__torch_function__", None)
    function = getattr(function, "__func__", function)
    for default in _torch_default_functions:
        if function is default:
            return 1
    return 0


cdef bint _learn_torch_type(object tp) except -1:
    """Fill the one-entry cache for tp: False when it is no torch tensor type."""
    global _torch_last_type, _torch_last_tag, _torch_last_methods, _torch_last_neg
    global _torch_last_conj, _torch_last_direct
    cdef PyCFunction is_neg = NULL, is_conj = NULL
    cdef int direct = 0
    cdef bint known = False
    cdef unsigned int tag
    entry = _torch_tensor_types.get(tp)
    if entry is not None and (<tuple>entry)[2] != 0 and \
            (<tuple>entry)[2] == (<_TypeObj*><PyObject*>tp).tp_version_tag:
        methods = (<tuple>entry)[0]
        direct = (<tuple>entry)[1]
        known = True
    elif _is_torch_type(tp):
        methods = (tp.is_neg, tp.is_conj)
    else:
        methods = False
    if methods is not False:
        # (issubclass may run Python code that asks about another type: the cache is
        # written only once both are known.)
        is_neg = _noargs_function(tp, (<tuple>methods)[0])
        is_conj = _noargs_function(tp, (<tuple>methods)[1])
        if not known:
            direct = _reads_bits_directly(tp, is_neg, is_conj)
    # (Read after the lookups above, which give tp a tag if it had none.)
    tag = (<_TypeObj*><PyObject*>tp).tp_version_tag
    known = direct >= 0 and tag != 0    # else decided again on the next call
    if known:
        # The dict keeps tp alive, so the pointer cannot be reused by another type;
        # bounded (types made anew on every call would grow it forever): the oldest
        # entry goes, and is learnt again if its type comes back.
        while len(_torch_tensor_types) >= _TORCH_TYPES_KEPT:
            _torch_tensor_types.pop(next(iter(_torch_tensor_types)), None)
        _torch_tensor_types[tp] = (methods, direct, tag)
    _torch_last_type = NULL
    _torch_last_neg = is_neg
    _torch_last_conj = is_conj
    _torch_last_direct = direct == 1
    _torch_last_methods = methods
    _torch_last_tag = tag
    if known:
        _torch_last_type = <void*>tp
    return methods is not False


cdef inline object _torch_bits(object x, bint complex_only_conj):
    """None, or "negative"/"conjugate" when x is a torch tensor whose memory does
    not hold its values (a view with the negative or conjugate bit set). The
    common case, a tensor of the last type seen whose bits torch's C++ readers
    read, is inlined into every caller; anything else is _torch_bits_asked."""
    cdef _TypeObj* tp = <_TypeObj*>Py_TYPE(x)
    if (<void*>tp == _torch_last_type and tp.tp_version_tag == _torch_last_tag
            and _torch_last_direct):
        return _read_torch_bits(x, complex_only_conj)
    return _torch_bits_asked(x, complex_only_conj)


cdef inline object _read_torch_bits(object x, bint complex_only_conj):
    """_torch_bits's answer read with torch's C++ readers (found and checked)."""
    if tb_torch_bit(_neg_reader, <PyObject*>x):
        return "negative"
    if not complex_only_conj and tb_torch_bit(_conj_reader, <PyObject*>x):
        return "conjugate"
    return None


cdef object _torch_bits_asked(object x, bint complex_only_conj):
    """_torch_bits, for any type: learnt (or taken from the last-type cache), then
    read with the readers or asked of the methods.

    Read with torch's C++ readers where _reads_bits_directly allows (a few ns),
    else with torch.Tensor.is_neg and is_conj (about 0.1 µs each: torch releases the
    GIL around them). Every tensor is asked: the exchange table exports such tensors
    with no flag; any dtype can carry the negative bit (z.conj().imag is a float
    view, _neg_view and _set_neg take any dtype); .detach(), .data and pickling keep
    it on tensors that are not views."""
    cdef _TypeObj* tp = <_TypeObj*>Py_TYPE(x)
    cdef PyCFunction is_neg, is_conj
    if <void*>tp != _torch_last_type or tp.tp_version_tag != _torch_last_tag:
        if not _learn_torch_type(type(x)):
            return None
    elif _torch_last_methods is False:
        return None
    if _torch_last_direct:
        return _read_torch_bits(x, complex_only_conj)
    # Locals: the calls may run Python code (a __torch_function__) that imports
    # a tensor of another type, which replaces the cache entry.
    methods = _torch_last_methods
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


def _torch_bit_readers(str what, bytes neg_symbol=_NEG_SYMBOL, bytes conj_symbol=_CONJ_SYMBOL):
    """Tests: "off" forgets torch's C++ bit readers, so the methods are called from
    now on; "find" looks for them again, under the given C++ names. Both clear the
    caches of types. Whether the readers are in use."""
    global _bit_readers_decided, _neg_reader, _conj_reader, _torch_last_type
    if what not in ("off", "find"):
        raise ValueError(f"_torch_bit_readers(): 'off' or 'find', not {what!r}")
    _torch_last_type = NULL
    _torch_tensor_types.clear()
    _neg_reader = _conj_reader = NULL
    _bit_readers_decided = what == "off"
    if what == "find":
        _find_bit_readers(neg_symbol, conj_symbol)
    return _neg_reader != NULL


def torch_bits_read_directly(tp):
    """Whether the bits of tp's tensors are read with torch's C++ readers rather
    than its methods; None when tp is no torch tensor type, or its answer is not
    kept (tests)."""
    entry = _torch_tensor_types.get(tp)
    if entry is None or (<tuple>entry)[0] is False:
        return None
    return bool((<tuple>entry)[1])
