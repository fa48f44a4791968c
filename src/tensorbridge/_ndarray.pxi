# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. NumPy arrays out: a NumPy view of a host Tensor, made
# through NumPy's C API table as numpy.from_dlpack makes it, without a capsule in
# between (Tensor.numpy(), and convert into NumPy). The table is loaded and checked
# on the first call; where it is unusable, callers fall back to numpy.from_dlpack.

from cpython.ref cimport PyObject, Py_INCREF
from libc.stdint cimport int64_t
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *
from tensorbridge._host cimport *

# 1: NumPy's C API table is loaded and made probe arrays as the buffer protocol
# describes them; -1: unusable here (not found, another ABI, or a disagreement),
# or turned off; 0: not loaded yet (threads making their first arrays together
# may each load it: loading is idempotent).
cdef int _npy_api_state = 0
cdef void** _npy_api = NULL
cdef int _npy_maxdims = 0               # the NumPy running's dimension limit
cdef object _npy_api_capsule = None     # the table's owner (NumPy's module keeps it too)


cdef object _ndarray_of(Tensor t):
    """A numpy.ndarray of t's memory whose base is t (read-only stays read-only), or
    None where NumPy's C API does not make it here: memory that is not the CPU's, a
    dtype NumPy lacks (ml_dtypes types, sub-byte data), more dimensions than the NumPy
    running holds, no data pointer, or an unusable table."""
    if _npy_api_state != 1 and not _load_npy_api():
        return None
    return _ndarray_view(t)


cdef object _ndarray_view(Tensor t):
    cdef int type_num = tb_npy_type_num(t._dtype.code, t._dtype.bits, t._dtype.lanes)
    cdef Py_ssize_t dims[TB_MAX_NDIM]
    cdef Py_ssize_t strides[TB_MAX_NDIM]
    cdef Py_ssize_t item = t._dtype.bits // 8
    cdef char* data = t._ptr()
    cdef int i
    if type_num < 0 or t._device.device_type != kDLCPU or t._ndim > _npy_maxdims \
            or data == NULL:
        return None
    for i in range(t._ndim):
        dims[i] = <Py_ssize_t>t._shape[i]
        strides[i] = <Py_ssize_t>(t._strides[i] * item)
    Py_INCREF(t)    # the array's base: tb_npy_view steals this reference
    return tb_npy_view(_npy_api, type_num, t._ndim, dims, strides, data,
                       not (t._flags & TB_FLAG_READ_ONLY), <PyObject*>t)


cdef bint _load_npy_api() except -1:
    """Loads NumPy's C API table once (importing NumPy); True when it is usable.
    (The state is written last: another thread that asks meanwhile loads it too.)"""
    global _npy_api_state
    if _npy_api_state != 0:
        return _npy_api_state == 1
    if not _npy_api_usable():
        _npy_api_state = -1
        return False
    _npy_api_state = 1
    return True


cdef bint _npy_api_usable() except -1:
    global _npy_api, _npy_maxdims, _npy_api_capsule
    cdef void** api
    cdef unsigned int abi
    try:
        import numpy
        try:
            from numpy._core import _multiarray_umath as umath
        except ImportError:     # NumPy 1.x
            from numpy.core import _multiarray_umath as umath
        capsule = umath._ARRAY_API
    except (ImportError, AttributeError):
        return False
    if not PyCapsule_CheckExact(capsule):
        return False
    try:
        api = <void**>PyCapsule_GetPointer(capsule, NULL)     # (NumPy names it NULL)
    except ValueError:
        return False
    abi = tb_npy_abi_version(api)      # (0: a slot used here is empty)
    if (abi != TB_NPY_ABI_1 and abi != TB_NPY_ABI_2) or \
            not tb_npy_is_ndarray_type(api, <PyObject*>numpy.ndarray):
        return False
    _npy_api_capsule = capsule
    _npy_api = api
    _npy_maxdims = TB_NPY_MAXDIMS_1 if abi == TB_NPY_ABI_1 else TB_NPY_MAXDIMS_2
    return _npy_probes_agree(numpy.ndarray)


cdef bint _npy_probes_agree(object ndarray):
    """Whether arrays made through the table are what NumPy's buffer protocol says
    they are: a strided float32 view, writable and read-only, of memory of ours."""
    cdef int64_t shape[2]
    cdef DLDataType dt
    cdef DLDevice cpu
    cdef Tensor probe, view, seen
    shape[0] = 2
    shape[1] = 3
    dt.code = kDLFloat
    dt.bits = 32
    dt.lanes = 1
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    probe = _alloc_tensor(2, shape, dt, cpu, 0)
    for flags in (0, TB_FLAG_READ_ONLY):
        view = _view(probe)     # transposed: strides (1, 3)
        view._shape[0] = 3
        view._shape[1] = 2
        view._strides[0] = 1
        view._strides[1] = 3
        view._flags = flags
        try:
            array = _ndarray_view(view)
            seen = _import_ndarray_buffer(array)
        except MemoryError:
            raise       # not NumPy's answer: the next call loads it again
        except Exception:
            return False
        if type(array) is not ndarray or array.base is not view or \
                not _same_description(view, seen):
            return False
    return True


def use_numpy_api(bint use):
    """Make NumPy arrays through NumPy's C API table (True: loaded and checked again
    on the next call) or never (False: numpy.from_dlpack and the buffer protocol, as
    where the table is unusable; tests check both); the previous setting (False
    also when the table was found unusable)."""
    global _npy_api_state
    previous = _npy_api_state != -1
    _npy_api_state = 0 if use else -1
    return previous
