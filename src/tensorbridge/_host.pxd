# SPDX-License-Identifier: Apache-2.0
# Interface of _host.h: the PEP 3118 format table and the head of NumPy's array.

from libc.stdint cimport uint8_t

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
