/* SPDX-License-Identifier: Apache-2.0
 *
 * Casts, bit for bit what NumPy (and ml_dtypes for bfloat16) give: float32 to and from
 * the 16-bit floats (_half.h says how each rounds), and among the integer types,
 * float32 and float64 (tb_numeric_casts), over contiguous memory; tb_cast and
 * tb_cast_strided (strided sources, read a chunk at a time), at the end, run any of
 * them.
 *
 * float32 <-> float16 uses the CPU's conversion instructions (x86 F16C, 32 then eight
 * values at a time) when the CPU has them, asked at run time, so the package still
 * builds and runs everywhere: elsewhere, and for any block of 32 or 8 holding a NaN
 * (F16C quiets NaNs, NumPy keeps their payload as it is), the portable functions of
 * _half.h. The bfloat16 loops are plain integer arithmetic the compiler vectorises.
 *
 * Each cast returns the TB_CAST_* bits below: the conditions NumPy reports (the caller
 * warns as NumPy does), and whether NumPy must decide instead.
 */
#ifndef TENSORBRIDGE_CASTS_H_
#define TENSORBRIDGE_CASTS_H_

#include "_memory.h" /* (first: it includes Python.h) */

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_half.h"

#define TB_CAST_OVERFLOW 1 /* a finite value became infinite */
#define TB_CAST_INVALID 2  /* a signalling NaN was cast (NumPy and ml_dtypes report it) */
/* A float cast to an integer type was NaN, infinite or out of the type's range: C
 * leaves the result undefined and NumPy's depends on the pair (int8 of 300.0 is 44,
 * uint64 of -1.0 is 2**64-1, NaN gives 0 or the most negative value), so the caller
 * discards this output and lets NumPy cast. */
#define TB_CAST_UNDECIDED 4
/* float64 -> float32 may have underflowed: a nonzero value became float32's smallest
 * normal or less (a superset of the CPU's underflow, which NumPy ignores by default;
 * under another np.errstate the caller leaves such casts to NumPy). */
#define TB_CAST_UNDERFLOW 8

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
/* Four vectors of eight at a time: one test for NaNs (a block holding one goes to the
 * portable code), the overflow test kept in a vector and read once at the end; then
 * eight at a time, then the portable code for the tail. */
__attribute__((target("avx,f16c"))) static int tb_f32_to_f16_f16c(const float *src,
                                                                    uint16_t *dst,
                                                                    size_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 limit = _mm256_set1_ps(TB_HALF_OVERFLOW_AT);
  const __m256 inf = _mm256_set1_ps((float)INFINITY);
  const int round = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __m256 big = _mm256_setzero_ps();
  int flags = 0;
  size_t i = 0;
/* |v| rounds to infinity and v is finite, lane by lane */
#define TB_BIG(v)                                                               \
  _mm256_and_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), limit, _CMP_GE_OQ), \
                _mm256_cmp_ps(_mm256_andnot_ps(sign, v), inf, _CMP_NEQ_OQ))
#define TB_NAN(v) _mm256_cmp_ps(v, v, _CMP_UNORD_Q)
  for (; i + 32 <= n; i += 32) {
    __m256 a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + 8);
    __m256 c = _mm256_loadu_ps(src + i + 16), d = _mm256_loadu_ps(src + i + 24);
    if (_mm256_movemask_ps(_mm256_or_ps(_mm256_or_ps(TB_NAN(a), TB_NAN(b)),
                                        _mm256_or_ps(TB_NAN(c), TB_NAN(d))))) {
      flags |= tb_f32_to_f16_portable(src + i, dst + i, 32);
      continue;
    }
    big = _mm256_or_ps(big, _mm256_or_ps(_mm256_or_ps(TB_BIG(a), TB_BIG(b)),
                                         _mm256_or_ps(TB_BIG(c), TB_BIG(d))));
    _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(a, round));
    _mm_storeu_si128((__m128i *)(dst + i + 8), _mm256_cvtps_ph(b, round));
    _mm_storeu_si128((__m128i *)(dst + i + 16), _mm256_cvtps_ph(c, round));
    _mm_storeu_si128((__m128i *)(dst + i + 24), _mm256_cvtps_ph(d, round));
  }
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(TB_NAN(v))) {
      flags |= tb_f32_to_f16_portable(src + i, dst + i, 8);
      continue;
    }
    big = _mm256_or_ps(big, TB_BIG(v));
    _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(v, round));
  }
#undef TB_BIG
#undef TB_NAN
  if (_mm256_movemask_ps(big)) flags |= TB_CAST_OVERFLOW;
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

/* --------------------------------------------------------------------------
 * Among the integer types, float32 and float64
 * --------------------------------------------------------------------------
 *
 * NumPy casts these pairs with plain C conversions, and so do these loops:
 * integers wrap into narrower integers, integers round to the nearest float (ties
 * to even), float64 rounds to float32, float32 truncates to int32. What NumPy
 * reports is found from the values, not the CPU's status flags: a finite float64
 * that becomes a float32 infinity overflowed; a nonzero one that becomes float32's
 * smallest normal or less may have underflowed (TB_CAST_UNDERFLOW); a signalling NaN
 * cast between float32 and float64 is invalid (the CPU quiets it, as NumPy's cast
 * does); a float32 out of int32's range, NaN or infinite, leaves the cast to NumPy
 * (TB_CAST_UNDECIDED).
 *
 * Only the pairs whose loops the compiler vectorises for x86-64 as fast as NumPy's
 * own SIMD loops (measured: docs/design.md) are here: integers of up to 32 bits
 * among themselves and into float32/float64, float32 <-> float64, float32 -> int32.
 * 64-bit integers (no SIMD conversion to or from floats before AVX-512) and floats
 * into other integer types stay with NumPy. */

enum {
  TB_I8, TB_I16, TB_I32, TB_I64, TB_U8, TB_U16, TB_U32, TB_U64, TB_F32, TB_F64,
  TB_NUMERIC_KINDS
};

/* The kind of a DLPack type (code: 0 int, 1 uint, 2 float), or -1. */
static inline int tb_numeric_kind(int code, int bits) {
  int shift = bits == 8 ? 0 : bits == 16 ? 1 : bits == 32 ? 2 : bits == 64 ? 3 : -1;
  if (shift < 0) return -1;
  if (code == 0) return TB_I8 + shift;
  if (code == 1) return TB_U8 + shift;
  if (code == 2 && shift >= 2) return TB_F32 + shift - 2;
  return -1;
}

typedef int (*tb_numeric_cast)(const void *, void *, size_t);

#define TB_PLAIN(SN, S, DN, D)                                              \
  TB_CLONES static int tb_cast_##SN##_##DN(const void *src_, void *dst_, size_t n) { \
    const S *src = (const S *)src_;                                       \
    D *dst = (D *)dst_;                                                   \
    for (size_t i = 0; i < n; i++) dst[i] = (D)src[i];                    \
    return 0;                                                             \
  }

#define TB_INT_ROW(SN, S)                                                       \
  TB_PLAIN(SN, S, i8, int8_t) TB_PLAIN(SN, S, i16, int16_t)                     \
  TB_PLAIN(SN, S, i32, int32_t) TB_PLAIN(SN, S, u8, uint8_t)                    \
  TB_PLAIN(SN, S, u16, uint16_t) TB_PLAIN(SN, S, u32, uint32_t)                 \
  TB_PLAIN(SN, S, f32, float) TB_PLAIN(SN, S, f64, double)

TB_INT_ROW(i8, int8_t)
TB_INT_ROW(i16, int16_t)
TB_INT_ROW(i32, int32_t)
TB_INT_ROW(u8, uint8_t)
TB_INT_ROW(u16, uint16_t)
TB_INT_ROW(u32, uint32_t)

/* float32 -> int32, exact when trunc(x) is in int32's range: -2**31 - 1 < x < 2**31
 * (as float32: -2**31 <= x, the float32 below -2**31 being -2**31 - 256); NaN fails
 * both comparisons. */
TB_CLONES static int tb_cast_f32_i32(const void *src_, void *dst_, size_t n) {
  const float *src = (const float *)src_;
  int32_t *dst = (int32_t *)dst_;
  int outside = 0;
  for (size_t i = 0; i < n; i++) {
    float x = src[i];
    int ok = x >= -2147483648.0f && x < 2147483648.0f;
    outside |= !ok;
    dst[i] = ok ? (int32_t)x : 0;
  }
  return outside ? TB_CAST_UNDECIDED : 0;
}

/* A NaN without the quiet bit. */
static inline uint32_t tb_signalling32(uint32_t u) {
  return ((u & 0x7fffffffu) > 0x7f800000u) & ((u >> 22) ^ 1u);
}
static inline uint64_t tb_signalling64(uint64_t u) {
  return ((u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) & ((u >> 51) ^ 1u);
}

static int tb_cast_f32_f32(const void *src, void *dst, size_t n) {
  memcpy(dst, src, n * sizeof(float));
  return 0;
}

static int tb_cast_f64_f64(const void *src, void *dst, size_t n) {
  memcpy(dst, src, n * sizeof(double));
  return 0;
}

/* Whether any of n values is a signalling NaN (asked only once a NaN was seen, so
 * the casts' own loops compare floats only, which vectorises on any x86-64). */
static int tb_any_signalling32(const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, src + i, sizeof u);
    if (tb_signalling32(u)) return 1;
  }
  return 0;
}

static int tb_any_signalling64(const double *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t u;
    memcpy(&u, src + i, sizeof u);
    if (tb_signalling64(u)) return 1;
  }
  return 0;
}

/* The float casts look for NaNs and infinities with float comparisons only, in the
 * conversion loop (which the compiler then vectorises for any x86-64; a loop that
 * also tested bits did not), and only where there are some for the exact
 * conditions, in a second pass. */

TB_CLONES static int tb_cast_f32_f64(const void *src_, void *dst_, size_t n) {
  const float *src = (const float *)src_;
  double *dst = (double *)dst_;
  int nan = 0;
  for (size_t i = 0; i < n; i++) {
    nan |= src[i] != src[i];
    dst[i] = (double)src[i];
  }
  return nan && tb_any_signalling32(src, n) ? TB_CAST_INVALID : 0;
}

TB_CLONES static int tb_cast_f64_f32(const void *src_, void *dst_, size_t n) {
  const double *src = (const double *)src_;
  float *dst = (float *)dst_;
  int unusual = 0, flags = 0;
  for (size_t i = 0; i < n; i++) {
    float y = (float)src[i];
    dst[i] = y;
    /* NaN or infinite, or tiny out of a nonzero value */
    unusual |= (!(fabsf(y) < (float)INFINITY)) | ((fabsf(y) <= FLT_MIN) & (src[i] != 0.0));
  }
  if (!unusual) return 0;
  for (size_t i = 0; i < n; i++) {
    double x = src[i];
    float y = dst[i];
    /* An infinity out of a finite value overflowed (a NaN out is a NaN in). */
    if (fabsf(y) == (float)INFINITY && fabs(x) != (double)INFINITY) flags |= TB_CAST_OVERFLOW;
    if (fabsf(y) <= FLT_MIN && x != 0.0) flags |= TB_CAST_UNDERFLOW;
  }
  return flags | (tb_any_signalling64(src, n) ? TB_CAST_INVALID : 0);
}

#define TB_ROW(SN)                                                                      \
  {tb_cast_##SN##_i8, tb_cast_##SN##_i16, tb_cast_##SN##_i32, NULL, tb_cast_##SN##_u8, \
   tb_cast_##SN##_u16, tb_cast_##SN##_u32, NULL, tb_cast_##SN##_f32, tb_cast_##SN##_f64}

/* NULL: NumPy casts the pair. */
static const tb_numeric_cast tb_numeric_casts[TB_NUMERIC_KINDS][TB_NUMERIC_KINDS] = {
    TB_ROW(i8), TB_ROW(i16), TB_ROW(i32), {NULL}, TB_ROW(u8), TB_ROW(u16), TB_ROW(u32), {NULL},
    {NULL, NULL, tb_cast_f32_i32, NULL, NULL, NULL, NULL, NULL, tb_cast_f32_f32, tb_cast_f32_f64},
    {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, tb_cast_f64_f32, tb_cast_f64_f64}};

#undef TB_ROW
#undef TB_INT_ROW
#undef TB_PLAIN

/* --------------------------------------------------------------------------
 * Every cast here, by kind, over contiguous or strided sources
 * -------------------------------------------------------------------------- */

#define TB_F16 TB_NUMERIC_KINDS
#define TB_BF16 (TB_NUMERIC_KINDS + 1)

/* The cast kind of a DLPack type (tb_numeric_kind, or float16 / bfloat16), or -1. */
static inline int tb_cast_kind(int code, int bits) {
  if (bits == 16 && code == 2) return TB_F16;
  if (bits == 16 && code == 4) return TB_BF16;
  return tb_numeric_kind(code, bits);
}

/* Whether tb_cast casts kind `from` to kind `to`: the numeric pairs above, float32
 * to and from float16 and bfloat16. */
static inline int tb_casts(int from, int to) {
  if (from < 0 || to < 0) return 0;
  if (from < TB_NUMERIC_KINDS && to < TB_NUMERIC_KINDS)
    return tb_numeric_casts[from][to] != NULL;
  return (from == TB_F32 && to >= TB_F16) || (to == TB_F32 && from >= TB_F16);
}

/* n contiguous elements of kind `from` cast into dst (kind `to`, a pair tb_casts
 * takes); the TB_CAST_* bits. */
static int tb_cast(int from, int to, const void *src, void *dst, size_t n, int portable) {
  if (from < TB_NUMERIC_KINDS && to < TB_NUMERIC_KINDS)
    return tb_numeric_casts[from][to](src, dst, n);
  if (to == TB_F16) return tb_cast_f32_to_f16((const float *)src, (uint16_t *)dst, n, portable);
  if (to == TB_BF16)
    return tb_cast_f32_to_bf16((const float *)src, (uint16_t *)dst, n, portable);
  if (from == TB_F16)
    return tb_cast_f16_to_f32((const uint16_t *)src, (float *)dst, n, portable);
  return tb_cast_bf16_to_f32((const uint16_t *)src, (float *)dst, n, portable);
}

/* The same over a strided source (its tb_reader), read a chunk at a time into a
 * buffer that stays in the L1 cache; dst is contiguous, out_item bytes per element.
 * Stops at the first chunk that leaves the result to NumPy (TB_CAST_UNDECIDED). */
static int tb_cast_strided(int from, int to, tb_reader *r, char *dst, size_t out_item,
                           int portable) {
  enum { CHUNK = 1024 };
  /* CHUNK elements of up to 8 bytes, aligned for any of them; a union of the types
   * the casts read, so that reading it through any of them is defined C. */
  union {
    int8_t i8[CHUNK];
    int16_t i16[CHUNK];
    int32_t i32[CHUNK];
    uint8_t u8[CHUNK];
    uint16_t u16[CHUNK];
    uint32_t u32[CHUNK];
    float f32[CHUNK];
    double f64[CHUNK];
  } buffer;
  int flags = 0;
  size_t got;
  while ((got = tb_read(r, (char *)&buffer, CHUNK)) != 0) {
    flags |= tb_cast(from, to, &buffer, dst, got, portable);
    if (flags & TB_CAST_UNDECIDED) break;
    dst += got * out_item;
  }
  return flags;
}

#endif /* TENSORBRIDGE_CASTS_H_ */
