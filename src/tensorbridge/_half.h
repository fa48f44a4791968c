/* SPDX-License-Identifier: Apache-2.0
 *
 * 16-bit floats: IEEE binary16 (float16) and bfloat16, to and from float and double,
 * rounding to nearest, ties to even, in portable C (no intrinsics). What each function
 * returns is what NumPy and ml_dtypes return for the same value, bit for bit (checked
 * over every 16-bit pattern and sampled 32- and 64-bit ones by tests/core/test_half.py):
 *
 *   double -> float16   rounded once, from the double (NumPy's astype and asarray)
 *   float  -> float16   rounded once, from the float
 *   float  -> bfloat16  rounded once; a NaN becomes the quiet NaN of its sign (ml_dtypes)
 *   double -> bfloat16  through float (ml_dtypes converts a double to float first)
 *   float16/bfloat16 -> float   exact
 *
 * A NaN keeps its sign and the top bits of its payload where the format has room, and
 * stays a NaN (NumPy's rule for float16).
 */
#ifndef TENSORBRIDGE_HALF_H_
#define TENSORBRIDGE_HALF_H_

#include <stdint.h>
#include <string.h>

static inline uint32_t tb_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float tb_bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Round the significand `sig` (with an implicit leading one already set) right by
 * `shift` bits, ties to even. shift >= 1. */
static inline uint64_t tb_round_shift(uint64_t sig, int shift) {
  if (shift >= 64) return 0; /* below half of the smallest step: rounds to zero */
  uint64_t kept = sig >> shift;
  uint64_t rest = sig & ((UINT64_C(1) << shift) - 1);
  uint64_t half = UINT64_C(1) << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1)));
}

/* float16 bits of a value with sign bit `sign` (0x8000 or 0), unbiased binary exponent
 * `e` and a significand `sig` of `frac` fraction bits below its leading one. */
static inline uint16_t tb_to_half(uint16_t sign, int e, uint64_t sig, int frac) {
  if (e > 15) return sign | 0x7c00; /* beyond the largest finite: infinity */
  if (e >= -14) {
    /* Normal: 10 fraction bits; a carry out of them moves to the next binade. */
    uint64_t r = tb_round_shift(sig, frac - 10);
    uint32_t bits = ((uint32_t)(e + 14) << 10) + (uint32_t)r;
    return sign | (uint16_t)(bits >= 0x7c00 ? 0x7c00 : bits);
  }
  /* Subnormal: steps of 2**-24; rounding up to 1024 steps gives the smallest normal. */
  return sign | (uint16_t)tb_round_shift(sig, frac - 10 + (-14 - e));
}

static inline uint16_t tb_double_to_half(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
  int biased = (int)((u >> 52) & 0x7ff);
  uint64_t man = u & ((UINT64_C(1) << 52) - 1);
  if (biased == 0x7ff) {
    if (man == 0) return sign | 0x7c00;
    uint16_t payload = (uint16_t)(man >> 42);
    return sign | 0x7c00 | (payload ? payload : 1);
  }
  if (biased == 0) return sign; /* zero, or a double subnormal: far below float16's */
  return tb_to_half(sign, biased - 1023, man | (UINT64_C(1) << 52), 52);
}

static inline uint16_t tb_float_to_half(float f) {
  uint32_t u = tb_float_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  int biased = (int)((u >> 23) & 0xff);
  uint32_t man = u & 0x7fffff;
  if (biased == 0xff) {
    if (man == 0) return sign | 0x7c00;
    uint16_t payload = (uint16_t)(man >> 13);
    return sign | 0x7c00 | (payload ? payload : 1);
  }
  if (biased == 0) return sign; /* zero, or a float subnormal: below float16's */
  return tb_to_half(sign, biased - 127, man | (UINT32_C(1) << 23), 23);
}

static inline float tb_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t biased = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (biased == 0x1f) return tb_bits_float(sign | 0x7f800000 | (man << 13));
  if (biased != 0) return tb_bits_float(sign | ((biased + 112) << 23) | (man << 13));
  if (man == 0) return tb_bits_float(sign);
  /* Subnormal: man * 2**-24, exact in float. */
  float f = (float)man * (1.0f / 16777216.0f);
  return sign ? -f : f;
}

/* Branch-free, so that the loops of _casts.h that call it vectorise. */
static inline uint16_t tb_float_to_bfloat16(float f) {
  uint32_t u = tb_float_bits(f);
  uint32_t nan = (u & 0x7fffffff) > 0x7f800000;
  /* ties to even; a carry moves to the next binade */
  uint16_t rounded = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  uint16_t quiet = (uint16_t)(((u >> 16) & 0x8000) | 0x7fc0);
  return nan ? quiet : rounded;
}

static inline float tb_bfloat16_to_float(uint16_t b) {
  return tb_bits_float((uint32_t)b << 16);
}

#endif /* TENSORBRIDGE_HALF_H_ */
