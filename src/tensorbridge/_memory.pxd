# SPDX-License-Identifier: Apache-2.0
# Interface of _memory.h: aligned allocation, checked arithmetic, strided copies and reads.

from libc.stdint cimport int64_t

cdef extern from "_memory.h" nogil:
    void* tb_alloc(size_t nbytes) noexcept
    void tb_free(void* memory) noexcept
    int tb_huge_pages
    bint tb_mul_overflow(int64_t a, int64_t b, int64_t* out) noexcept
    bint tb_add_overflow(int64_t a, int64_t b, int64_t* out) noexcept
    void tb_copy_to_contiguous(char* dst, const char* src, int ndim, const int64_t* shape,
                               const int64_t* byte_strides, size_t itemsize) noexcept
    ctypedef struct tb_reader:
        int ndim
    void tb_reader_init(tb_reader* r, const char* src, int ndim, const int64_t* shape,
                        const int64_t* byte_strides, size_t itemsize) noexcept
