/* SPDX-License-Identifier: Apache-2.0
 *
 * Casts between float32 and the 16-bit floats over contiguous memory, bit for bit
 * what NumPy (float16) and ml_dtypes (bfloat16) give (_half.h says how each rounds).
 *
 * float32 <-> float16 uses the CPU's conversion instructions (x86 F16C, eight values
 * at a time) when the CPU has them, asked at run time, so the package still builds
 * and runs everywhere: elsewhere, and for any block of eight holding a NaN (F16C
 * quiets NaNs, NumPy keeps their payload as it is), the portable functions of
 * _half.h. The bfloat16 loops are plain integer arithmetic the compiler vectorises.
 *
 * Each cast returns the floating-point conditions NumPy reports for it, as
 * TB_CAST_OVERFLOW / TB_CAST_INVALID bits: the caller warns as NumPy does.
 */
#ifndef TENSORBRIDGE_CASTS_H_
#define TENSORBRIDGE_CASTS_H_

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "_half.h"

#define TB_CAST_OVERFLOW 1 /* a finite value became infinite */
#define TB_CAST_INVALID 2  /* a signalling NaN was cast to bfloat16 (ml_dtypes reports it) */

/* __builtin_cpu_supports("f16c"): Clang, and GCC from 11. */
#if (defined(__x86_64__) || defined(__i386__)) && \
    (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 11))
#include <immintrin.h>
#define TB_F16C_DISPATCH 1
#endif

/* |x| >= 65520 rounds to float16 infinity (65504 is the largest finite; ties go to
 * the even significand, which is infinity's). */
#define TB_HALF_OVERFLOW_AT 65520.0f

static int tb_f32_to_f16_portable(const float *src, uint16_t *dst, size_t n) {
  int flags = 0;
  for (size_t i = 0; i < n; i++) {
    float a = src[i] < 0 ? -src[i] : src[i];
    dst[i] = tb_float_to_half(src[i]);
    if (a >= TB_HALF_OVERFLOW_AT && a != (float)INFINITY) flags |= TB_CAST_OVERFLOW;
  }
  return flags;
}

static void tb_f16_to_f32_portable(const uint16_t *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = tb_half_to_float(src[i]);
}

#ifdef TB_F16C_DISPATCH
__attribute__((target("avx,f16c"))) static int tb_f32_to_f16_f16c(const float *src,
                                                                    uint16_t *dst,
                                                                    size_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 limit = _mm256_set1_ps(TB_HALF_OVERFLOW_AT);
  const __m256 inf = _mm256_set1_ps((float)INFINITY);
  int flags = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
      flags |= tb_f32_to_f16_portable(src + i, dst + i, 8);
      continue;
    }
    __m256 a = _mm256_andnot_ps(sign, v);
    __m256 big = _mm256_and_ps(_mm256_cmp_ps(a, limit, _CMP_GE_OQ),
                               _mm256_cmp_ps(a, inf, _CMP_NEQ_OQ));
    if (_mm256_movemask_ps(big)) flags |= TB_CAST_OVERFLOW;
    _mm_storeu_si128((__m128i *)(dst + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return flags | tb_f32_to_f16_portable(src + i, dst + i, n - i);
}

__attribute__((target("avx,f16c"))) static void tb_f16_to_f32_f16c(const uint16_t *src,
                                                                    float *dst, size_t n) {
  const __m128i magnitude = _mm_set1_epi16(0x7fff);
  const __m128i infinity = _mm_set1_epi16(0x7c00);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
    /* A NaN's magnitude is above infinity's (as 16-bit signed ints: both positive). */
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), infinity))) {
      tb_f16_to_f32_portable(src + i, dst + i, 8);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  tb_f16_to_f32_portable(src + i, dst + i, n - i);
}

static int tb_has_f16c(void) {
  static int known = -1;
  if (known < 0) {
    __builtin_cpu_init();
    known = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  }
  return known;
}
#endif

/* Which implementation the float16 casts use here: "f16c" or "portable". */
static const char *tb_f16_cast_kind(void) {
#ifdef TB_F16C_DISPATCH
  if (tb_has_f16c()) return "f16c";
#endif
  return "portable";
}

static int tb_cast_f32_to_f16(const float *src, uint16_t *dst, size_t n, int portable) {
#ifdef TB_F16C_DISPATCH
  if (!portable && tb_has_f16c()) return tb_f32_to_f16_f16c(src, dst, n);
#endif
  (void)portable;
  return tb_f32_to_f16_portable(src, dst, n);
}

static int tb_cast_f16_to_f32(const uint16_t *src, float *dst, size_t n, int portable) {
#ifdef TB_F16C_DISPATCH
  if (!portable && tb_has_f16c()) {
    tb_f16_to_f32_f16c(src, dst, n);
    return 0;
  }
#endif
  (void)portable;
  tb_f16_to_f32_portable(src, dst, n);
  return 0;
}

/* The bfloat16 loops, compiled twice where GCC can pick the copy at load time (an ifunc:
 * glibc on Linux; musl has none): for AVX2 and for the baseline. */
#if defined(__linux__) && defined(__GLIBC__) && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define TB_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TB_CLONES
#endif

TB_CLONES static int tb_cast_f32_to_bf16(const float *src, uint16_t *dst, size_t n,
                                         int portable) {
  (void)portable;
  uint32_t signalling = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u = tb_float_bits(src[i]);
    dst[i] = tb_float_to_bfloat16(src[i]);
    /* a NaN without the quiet bit */
    signalling |= ((u & 0x7fffffff) > 0x7f800000) & ((u >> 22) ^ 1);
  }
  return signalling ? TB_CAST_INVALID : 0;
}

TB_CLONES static int tb_cast_bf16_to_f32(const uint16_t *src, float *dst, size_t n,
                                         int portable) {
  (void)portable;
  for (size_t i = 0; i < n; i++) dst[i] = tb_bfloat16_to_float(src[i]);
  return 0;
}

#endif /* TENSORBRIDGE_CASTS_H_ */
