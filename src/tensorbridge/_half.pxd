# SPDX-License-Identifier: Apache-2.0
# Interface of _half.h: float16 and bfloat16 to and from float and double.

from libc.stdint cimport uint16_t

cdef extern from "_half.h" nogil:
    uint16_t tb_double_to_half(double d) noexcept
    uint16_t tb_float_to_half(float f) noexcept
    float tb_half_to_float(uint16_t h) noexcept
    uint16_t tb_float_to_bfloat16(float f) noexcept
    float tb_bfloat16_to_float(uint16_t b) noexcept
