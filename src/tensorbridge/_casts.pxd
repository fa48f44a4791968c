# SPDX-License-Identifier: Apache-2.0
# Interface of _casts.h: float32 to and from float16 and bfloat16, over contiguous memory.

from libc.stdint cimport uint16_t

cdef extern from "_casts.h" nogil:
    int TB_CAST_OVERFLOW
    int TB_CAST_INVALID
    const char* tb_f16_cast_kind() noexcept
    int tb_cast_f32_to_f16(const float* src, uint16_t* dst, size_t n, int portable) noexcept
    int tb_cast_f16_to_f32(const uint16_t* src, float* dst, size_t n, int portable) noexcept
    int tb_cast_f32_to_bf16(const float* src, uint16_t* dst, size_t n, int portable) noexcept
    int tb_cast_bf16_to_f32(const uint16_t* src, float* dst, size_t n, int portable) noexcept
