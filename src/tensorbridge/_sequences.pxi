# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Nested sequences of Python scalars, scanned and
# filled straight into new memory (asarray's list path).

from libc.math cimport isinf
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLongLong, PyLong_AsDouble
from cpython.exc cimport PyErr_Occurred
from cpython.object cimport PyObject_IsTrue
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *
from tensorbridge._half cimport *

from tensorbridge._dtypes import DTYPES as _DTYPES


# -- nested sequences of Python scalars, filled straight into new memory ------

cdef enum:
    SEQ_BOOL = 1
    SEQ_INT = 2
    SEQ_FLOAT = 4
    SEQ_COMPLEX = 8
    SEQ_OTHER = 16    # something only the general (NumPy) path understands


cdef str _position(int64_t* index, int depth):
    return "".join([f"[{index[i]}]" for i in range(depth)])


cdef int _scan(object x, int depth, int ndim, int64_t* shape, int64_t* index) except -1:
    """Check the nesting is rectangular; return the SEQ_* kinds of the leaves."""
    cdef int kinds = 0
    cdef Py_ssize_t i, n
    cdef object item
    if type(x) is not list and type(x) is not tuple:
        return SEQ_OTHER
    n = len(x)
    if n != shape[depth]:
        raise ValueError(
            f"asarray(): ragged nested sequence: the sequence at "
            f"{_position(index, depth) or 'the top'} has length {n}, but its neighbours "
            f"have length {shape[depth]}")
    for i in range(n):
        item = x[i]
        index[depth] = i
        if depth + 1 < ndim:
            if type(item) is list or type(item) is tuple:
                kinds |= _scan(item, depth + 1, ndim, shape, index)
            elif type(item) is float or type(item) is int or type(item) is bool or \
                    type(item) is complex:
                raise ValueError(
                    f"asarray(): ragged nested sequence: the item at "
                    f"{_position(index, depth + 1)} is a number where a sequence of length "
                    f"{shape[depth + 1]} was expected")
            else:
                return SEQ_OTHER
        else:
            if type(item) is float:
                kinds |= SEQ_FLOAT
            elif type(item) is int:
                kinds |= SEQ_INT
            elif type(item) is bool:
                kinds |= SEQ_BOOL
            elif type(item) is complex:
                kinds |= SEQ_COMPLEX
            elif type(item) is list or type(item) is tuple:
                raise ValueError(
                    f"asarray(): ragged nested sequence: the item at "
                    f"{_position(index, depth + 1)} is a sequence where a number was "
                    "expected")
            else:
                return SEQ_OTHER
        if kinds & SEQ_OTHER:
            return SEQ_OTHER
    return kinds


# What a leaf becomes (_Fill.kind): one branch per kind of target.
cdef enum:
    FILL_BOOL = 0
    FILL_INT = 1        # signed, 8 to 64 bits
    FILL_UINT = 2       # unsigned, 8 to 64 bits
    FILL_F16 = 3
    FILL_BF16 = 4
    FILL_F32 = 5
    FILL_F64 = 6
    FILL_C64 = 7
    FILL_C128 = 8


cdef struct _Fill:
    int kind
    int itemsize
    int64_t low         # an integer target's range
    uint64_t high
    bint numpy_rules    # an explicit dtype: NumPy's asarray decides what it refuses


cdef int _fill_kind(DLDataType dt, _Fill* fill) noexcept:
    """The kind of fill for dt, or -1 when the fill does not write it."""
    fill.itemsize = dt.bits // 8
    if dt.lanes != 1:
        return -1
    if dt.code == kDLBool and dt.bits == 8:
        fill.kind = FILL_BOOL
    elif (dt.code == kDLInt or dt.code == kDLUInt) and dt.bits in (8, 16, 32, 64):
        fill.kind = FILL_INT if dt.code == kDLInt else FILL_UINT
        if dt.code == kDLInt:
            fill.high = (<uint64_t>1 << (dt.bits - 1)) - 1
            fill.low = -<int64_t>fill.high - 1     # (1 << 63 does not fit int64)
        else:
            fill.low = 0
            fill.high = <uint64_t>0xffffffffffffffff if dt.bits == 64 else (
                (<uint64_t>1 << dt.bits) - 1)
    elif dt.code == kDLFloat and dt.bits in (16, 32, 64):
        fill.kind = FILL_F16 if dt.bits == 16 else FILL_F32 if dt.bits == 32 else FILL_F64
    elif dt.code == kDLBfloat and dt.bits == 16:
        fill.kind = FILL_BF16
    elif dt.code == kDLComplex and dt.bits in (64, 128):
        fill.kind = FILL_C64 if dt.bits == 64 else FILL_C128
    else:
        return -1
    return fill.kind


cdef int _store(object item, const _Fill* fill, char* out, int64_t* index,
                int depth) except -1:
    """Write one exact bool, int, float or complex at out. 1: written; 0: NumPy's
    asarray must decide (a value out of the target's range, a NaN or a float too large
    for an integer, a complex number into a real type, a float that overflows its
    target: NumPy raises or warns, and its path gives exactly that)."""
    cdef double d, im = 0.0
    cdef float f
    cdef int64_t v
    cdef uint64_t u
    cdef int overflow
    cdef Py_complex z
    cdef int kind = fill.kind
    if kind == FILL_INT or kind == FILL_UINT:
        if type(item) is float:
            d = PyFloat_AS_DOUBLE(item)
            # NumPy truncates a float toward zero, then range-checks the integer.
            if not (-9223372036854775808.0 <= d < 9223372036854775808.0):
                return 0
            v = <int64_t>d
            overflow = 0
        elif type(item) is complex:
            return 0
        else:
            v = PyLong_AsLongLongAndOverflow(item, &overflow)
        if overflow > 0 and fill.high > <uint64_t>0x7fffffffffffffff:
            try:
                u = PyLong_AsUnsignedLongLong(item)     # uint64 above 2**63
            except OverflowError:
                return 0
        elif overflow != 0:
            if not fill.numpy_rules:
                raise OverflowError(
                    f"asarray(): the int at {_position(index, depth)} does not fit int64: "
                    f"{item}")
            return 0
        elif v < fill.low or (v >= 0 and <uint64_t>v > fill.high):
            return 0
        else:
            u = <uint64_t>v
        if fill.itemsize == 8:
            (<uint64_t*>out)[0] = u
        elif fill.itemsize == 4:
            (<uint32_t*>out)[0] = <uint32_t>u
        elif fill.itemsize == 2:
            (<uint16_t*>out)[0] = <uint16_t>u
        else:
            (<uint8_t*>out)[0] = <uint8_t>u
        return 1
    if kind == FILL_BOOL:
        if type(item) is float:
            (<uint8_t*>out)[0] = PyFloat_AS_DOUBLE(item) != 0.0     # NaN: True
        elif type(item) is complex:
            z = PyComplex_AsCComplex(item)
            (<uint8_t*>out)[0] = z.real != 0.0 or z.imag != 0.0
        else:
            (<uint8_t*>out)[0] = PyObject_IsTrue(item)     # an int (or bool) is nonzero
        return 1
    # Floats and complex numbers: the value as a double (ints as NumPy reads them).
    if type(item) is float:
        d = PyFloat_AS_DOUBLE(item)
    elif type(item) is complex:
        if kind != FILL_C64 and kind != FILL_C128:
            return 0
        z = PyComplex_AsCComplex(item)
        d = z.real
        im = z.imag
    else:
        if kind == FILL_BF16:
            # ml_dtypes reads an int through int64 (TypeError beyond it), and rounds it
            # to float from there (not through a double: that would round twice).
            v = PyLong_AsLongLongAndOverflow(item, &overflow)
            if overflow:
                return 0
            (<uint16_t*>out)[0] = tb_float_to_bfloat16(<float>v)
            return 1
        try:
            d = PyLong_AsDouble(item)
        except OverflowError:
            return 0    # NumPy raises its own OverflowError
    if kind == FILL_F64:
        (<double*>out)[0] = d
    elif kind == FILL_F32:
        f = <float>d
        if isinf(f) and not isinf(d):
            return 0    # NumPy warns of the overflow
        (<float*>out)[0] = f
    elif kind == FILL_F16:
        (<uint16_t*>out)[0] = tb_double_to_half(d)
        if ((<uint16_t*>out)[0] & 0x7fff) == 0x7c00 and not isinf(d):
            return 0    # NumPy warns of the overflow
    elif kind == FILL_BF16:
        (<uint16_t*>out)[0] = tb_float_to_bfloat16(<float>d)   # ml_dtypes: through float
    elif kind == FILL_C128:
        (<double*>out)[0] = d
        (<double*>out)[1] = im
    else:
        f = <float>d
        (<float*>out)[0] = f
        (<float*>out)[1] = <float>im
        if (isinf(f) and not isinf(d)) or (isinf((<float*>out)[1]) and not isinf(im)):
            return 0
    return 1


cdef char* _fill_seq(object x, int depth, int ndim, const int64_t* shape, char* out,
                     const _Fill* fill, int64_t* index) except? NULL:
    """Write the leaves of x (checked by _scan) into out, in C order; NULL (with no
    exception) when a leaf is for NumPy's path to decide (_store).

    The structure is checked again as it is read: the allocation between scan and
    fill can run Python code (a GC callback, __del__) that mutates the lists, and
    nothing but exact Python scalars is read, so no user code runs during the fill.
    """
    cdef Py_ssize_t i, n
    cdef object item
    if (type(x) is not list and type(x) is not tuple) or len(x) != shape[depth]:
        raise ValueError("asarray(): a sequence changed while it was being read")
    n = len(x)
    for i in range(n):
        item = x[i]
        index[depth] = i
        if depth + 1 < ndim:
            out = _fill_seq(item, depth + 1, ndim, shape, out, fill, index)
            if out == NULL:
                return NULL
            continue
        if type(item) is not float and type(item) is not int and type(item) is not bool \
                and type(item) is not complex:
            raise ValueError("asarray(): a sequence changed while it was being read")
        if not _store(item, fill, out, index, depth + 1):
            return NULL
        out += fill.itemsize
    return out


cdef object _default_float = _DTYPES["float32"]


def set_default_float(dtype):
    """The dtype Python floats become (tensorbridge._dtypes.set_default_dtype keeps
    the compiled fill's copy here)."""
    global _default_float
    _default_float = dtype


cdef object _sequence(object obj, object dtype):
    """A new tensor from nested lists/tuples of Python scalars, or None: the general
    path decides (other items, such as NumPy scalars or tensors; a dtype the fill
    does not write; a value NumPy's asarray refuses or warns about). dtype: a DType,
    or None for the default dtypes."""
    cdef int64_t shape[TB_MAX_NDIM]
    cdef int64_t index[TB_MAX_NDIM]
    cdef int ndim = 0
    cdef _Fill fill
    cdef DLDataType dt
    x = obj
    while type(x) is list or type(x) is tuple:
        if ndim >= TB_MAX_NDIM:
            raise ValueError(f"asarray(): nested more than {TB_MAX_NDIM} levels deep")
        shape[ndim] = len(x)
        ndim += 1
        if len(x) == 0:
            break
        x = x[0]
    cdef int kinds = _scan(obj, 0, ndim, shape, index) if ndim > 0 else SEQ_OTHER
    if kinds & SEQ_OTHER:
        return None
    fill.numpy_rules = dtype is not None
    if dtype is None:
        if kinds & SEQ_COMPLEX:
            dtype = _DTYPES["complex128" if _default_float.name == "float64" else "complex64"]
        elif kinds & SEQ_FLOAT or kinds == 0:
            dtype = _default_float      # an empty list, too (as in PyTorch)
        elif kinds & SEQ_INT:
            dtype = _DTYPES["int64"]
        else:
            dtype = _DTYPES["bool"]
    dt = _dl_dtype(dtype)
    if _fill_kind(dt, &fill) < 0:
        return None
    cdef Tensor t = _alloc_tensor(ndim, shape, dt, _cpu_device, 0)
    if t._size() > 0 and _fill_seq(obj, 0, ndim, shape, <char*>t._data, &fill, index) == NULL:
        return None
    return t


def from_sequence(obj, dtype):
    """A new tensor from nested lists/tuples of Python scalars, or None when the
    general path must decide (see _sequence). ``dtype``: a DType, or None for the
    defaults (the float default is the one set_default_float keeps)."""
    return _sequence(obj, dtype)
