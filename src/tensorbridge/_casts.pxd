# SPDX-License-Identifier: Apache-2.0
# Interface of _casts.h: casts among the integer and float types, contiguous or strided.

from libc.stdint cimport uint16_t
from tensorbridge._memory cimport tb_reader

cdef extern from "_casts.h" nogil:
    int TB_CAST_OVERFLOW
    int TB_CAST_INVALID
    const char* tb_f16_cast_kind() noexcept
    int tb_cast_f32_to_f16(const float* src, uint16_t* dst, size_t n, int portable) noexcept
    int tb_cast_f16_to_f32(const uint16_t* src, float* dst, size_t n, int portable) noexcept
    int tb_cast_f32_to_bf16(const float* src, uint16_t* dst, size_t n, int portable) noexcept
    int tb_cast_bf16_to_f32(const uint16_t* src, float* dst, size_t n, int portable) noexcept
    int TB_CAST_UNDECIDED
    int TB_CAST_UNDERFLOW
    int TB_F64
    int TB_F16
    int TB_F32
    int tb_cast_kind(int code, int bits) noexcept
    bint tb_casts(int from_kind, int to_kind) noexcept
    int tb_cast(int from_kind, int to_kind, const void* src, void* dst, size_t n,
                int portable) noexcept
    int tb_cast_strided(int from_kind, int to_kind, tb_reader* r, char* dst, size_t out_item,
                        int portable) noexcept
