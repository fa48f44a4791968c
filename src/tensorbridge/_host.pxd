# SPDX-License-Identifier: Apache-2.0
# Interface of _host.h: the PEP 3118 format table, the head of NumPy's array, and
# the slots of NumPy's C API table that make an array.

from cpython.ref cimport PyObject
from libc.stdint cimport uint8_t, uint16_t

cdef extern from "_host.h" nogil:
    char TB_NATIVE_ORDER
    int tb_format_code(const char* body) noexcept
    const char* tb_format_of(uint8_t code, uint8_t bits) noexcept

    ctypedef struct tb_npy_descr:
        char byteorder
        int type_num
    ctypedef struct tb_npy_array:
        char* data
        int nd
        Py_ssize_t* dimensions
        Py_ssize_t* strides
        tb_npy_descr* descr
        int flags
    int TB_NPY_WRITEABLE
    bint tb_npy_dtype(int type_num, uint8_t* code, uint8_t* bits) noexcept
    int tb_npy_type_num(uint8_t code, uint8_t bits, uint16_t lanes) noexcept
    unsigned int TB_NPY_ABI_1, TB_NPY_ABI_2
    int TB_NPY_MAXDIMS_1, TB_NPY_MAXDIMS_2
    unsigned int tb_npy_abi_version(void** api) noexcept
    bint tb_npy_is_ndarray_type(void** api, PyObject* tp) noexcept

cdef extern from "_host.h":
    object tb_npy_view(void** api, int type_num, int nd, const Py_ssize_t* dims,
                       const Py_ssize_t* strides, void* data, bint writable,
                       PyObject* base)  # (steals base)
