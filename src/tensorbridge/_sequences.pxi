# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Nested sequences of Python scalars, scanned and
# filled straight into new memory (asarray's list path).

from libc.stdint cimport int64_t, uint8_t
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *

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


cdef char* _fill_seq(object x, int depth, int ndim, const int64_t* shape, char* out,
                     DLDataType dt, int64_t* index) except NULL:
    """Write the leaves of x (checked by _scan) into out, in C order.

    The structure is checked again as it is read: the allocation between scan and
    fill can run Python code (a GC callback, __del__) that mutates the lists, and
    nothing but exact Python scalars is read, so no user code runs during the fill.
    """
    cdef Py_ssize_t i, n
    cdef object item
    cdef double value
    cdef Py_complex z
    if (type(x) is not list and type(x) is not tuple) or len(x) != shape[depth]:
        raise ValueError("asarray(): a sequence changed while it was being read")
    n = len(x)
    for i in range(n):
        item = x[i]
        index[depth] = i
        if depth + 1 < ndim:
            out = _fill_seq(item, depth + 1, ndim, shape, out, dt, index)
            continue
        if type(item) is not float and type(item) is not int and type(item) is not bool \
                and type(item) is not complex:
            raise ValueError("asarray(): a sequence changed while it was being read")
        if dt.code == kDLFloat:
            value = <double>item if type(item) is not bool else (1.0 if item else 0.0)
            if dt.bits == 64:
                (<double*>out)[0] = value
            else:
                (<float*>out)[0] = <float>value
        elif dt.code == kDLInt:
            try:
                (<int64_t*>out)[0] = <int64_t>item
            except OverflowError:
                raise OverflowError(
                    f"asarray(): the int at {_position(index, depth + 1)} does not fit int64: "
                    f"{item}") from None
        elif dt.code == kDLBool:
            (<uint8_t*>out)[0] = 1 if item else 0
        else:
            z = PyComplex_AsCComplex(item)
            if dt.bits == 128:
                (<double*>out)[0] = z.real
                (<double*>out)[1] = z.imag
            else:
                (<float*>out)[0] = <float>z.real
                (<float*>out)[1] = <float>z.imag
        out += dt.bits // 8
    return out


def from_sequence(obj, dtype, default_float, default_complex):
    """A new tensor from nested lists/tuples of Python scalars, or None when obj
    holds other items (NumPy scalars, tensors...) for the general path.

    ``dtype`` may be None (inferred), bool, int64, float32/64 or complex64/128;
    other dtypes take the general path too (None is returned)."""
    cdef int64_t shape[TB_MAX_NDIM]
    cdef int64_t index[TB_MAX_NDIM]
    cdef int ndim = 0
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
    if dtype is None:
        if kinds & SEQ_COMPLEX:
            dtype = default_complex
        elif kinds & SEQ_FLOAT or kinds == 0:
            dtype = default_float      # an empty list, too (as in PyTorch)
        elif kinds & SEQ_INT:
            dtype = _DTYPES["int64"]
        else:
            dtype = _DTYPES["bool"]
    name = dtype.name
    if name not in ("bool", "int64", "float32", "float64", "complex64", "complex128"):
        return None
    if name == "bool" and kinds & ~SEQ_BOOL:
        return None
    if name == "int64" and kinds & (SEQ_FLOAT | SEQ_COMPLEX):
        return None
    if name in ("float32", "float64") and kinds & SEQ_COMPLEX:
        return None
    cdef Tensor t = empty_tensor([shape[i] for i in range(ndim)], dtype)
    if t._size() > 0:
        _fill_seq(obj, 0, ndim, shape, <char*>t._data, t._dtype, index)
    return t
