/* SPDX-License-Identifier: Apache-2.0
 *
 * Memory of ours: aligned allocation, overflow-checked int64 arithmetic, and the
 * strided copy into C order behind every copy tensorbridge makes.
 */
#ifndef TENSORBRIDGE_MEMORY_H_
#define TENSORBRIDGE_MEMORY_H_

#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* Sizes are int64 and 2**62 bytes is the bound on any extent (BYTE_LIMIT): size_t and
 * pointers must hold that, or a cast to size_t would truncate an allocation that is
 * then filled in full. 32-bit platforms are refused at build time. */
typedef char tb_needs_64_bit_size_t[sizeof(size_t) == 8 && sizeof(void *) == 8 ? 1 : -1];

/* Memory for tensors: 64-byte aligned (what XLA and TensorFlow ask for); large
 * blocks (below) 2 MiB aligned and, where the kernel supports it, backed by
 * transparent huge pages. Free with tb_free(). Returns NULL when out of memory.
 *
 * The block comes from malloc with room to align it, and the pointer malloc gave is
 * kept just below the aligned one. Not posix_memalign: before glibc 2.38 (bug 30723)
 * it freed the remainders it splits off each aligned block into the tcache and
 * fastbins, where they could not be merged back, so a process that makes and frees
 * small tensors in a loop (asarray of a list) grew by about 7 bytes per tensor once
 * its heap was fragmented (measured in the test suite's worker processes).
 *
 * Blocks of 32 MiB or more are 2 MiB aligned and advised into transparent huge pages.
 * Smaller ones are not: glibc serves them from memory it reuses (its mmap threshold
 * grows to 32 MiB), so they fault no pages to save, and the advice itself cost 0.4 ms
 * per 4 MiB block here; from 32 MiB each block is a fresh mapping, whose first writes
 * fault 4.5 times faster in huge pages (docs/design.md has the measurements). Tests
 * and benchmarks switch the advice with use_huge_pages. */
#define TB_HUGE_FROM ((size_t)32 << 20)
static int tb_huge_pages = 1;

static void *tb_alloc(size_t nbytes) {
  const size_t huge = (size_t)1 << 21;
  const size_t align = nbytes >= TB_HUGE_FROM && tb_huge_pages ? huge : 64;
  const size_t room = align - 1 + sizeof(void *);
  if (nbytes > SIZE_MAX - room) return NULL;
  char *raw = (char *)malloc(nbytes + room);
  if (raw == NULL) return NULL;
  char *memory = (char *)(((uintptr_t)raw + room) & ~(uintptr_t)(align - 1));
  ((void **)memory)[-1] = raw;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == huge) madvise(memory, nbytes & ~(huge - 1), MADV_HUGEPAGE);
#endif
  return memory;
}

/* Frees a block of tb_alloc (NULL: nothing). */
static inline void tb_free(void *memory) {
  if (memory != NULL) free(((void **)memory)[-1]);
}

/* a * b into *out; nonzero when the product overflows int64. */
static inline int tb_mul_overflow(int64_t a, int64_t b, int64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

/* a + b into *out; nonzero when the sum overflows int64. */
static inline int tb_add_overflow(int64_t a, int64_t b, int64_t *out) {
  return __builtin_add_overflow(a, b, out);
}

/* n elements of `item` bytes, `step` bytes apart from p, into q one after another;
 * returns q past the last. The common item sizes are fixed-size copies the compiler
 * turns into one load and one store. */
static inline char *tb_gather(char *q, const char *p, int64_t n, int64_t step, size_t item) {
  switch (item) {
#define TB_GATHER_CASE(N)                 \
  case N:                                 \
    for (int64_t i = 0; i < n; ++i) {     \
      memcpy(q, p, N);                    \
      q += N;                             \
      p += step;                          \
    }                                     \
    return q;
    TB_GATHER_CASE(1)
    TB_GATHER_CASE(2)
    TB_GATHER_CASE(4)
    TB_GATHER_CASE(8)
    TB_GATHER_CASE(16)
#undef TB_GATHER_CASE
    default:
      for (int64_t i = 0; i < n; ++i) {
        memcpy(q, p, item);
        q += item;
        p += step;
      }
      return q;
  }
}

/* One plane of a copy whose source runs along another dimension than the output's
 * rows (a transpose, a permute): dst[i][j] = src[i][j] for i < rows, j < cols, with
 * byte strides dst_row (dst_col = item), src_row (small: the source's memory order)
 * and src_col. Square tiles, so that the source lines a tile reads are still cached
 * when the next output row reads them again (a 2048 x 2048 float64 transpose made
 * contiguous: 18.6 ms against 31 ms row by row, here). */
static void tb_copy_plane(char *dst, const char *src, int64_t rows, int64_t cols,
                          int64_t dst_row, int64_t src_row, int64_t src_col, size_t item) {
  const int64_t tile = item <= 4 ? 64 : 32;
  for (int64_t i0 = 0; i0 < rows; i0 += tile) {
    const int64_t i1 = i0 + tile < rows ? i0 + tile : rows;
    for (int64_t j0 = 0; j0 < cols; j0 += tile) {
      const int64_t j1 = j0 + tile < cols ? j0 + tile : cols;
      for (int64_t i = i0; i < i1; ++i) {
        tb_gather(dst + i * dst_row + j0 * (int64_t)item, src + i * src_row + j0 * src_col,
                  j1 - j0, src_col, item);
      }
    }
  }
}

/* The dimension (not the last) along which the source's memory runs, when it is not
 * the last's: the one of smallest nonzero absolute stride, if smaller than the last's;
 * else -1 (also when the last has extent 1 or contiguous elements). Dimensions of
 * extent 1 or stride 0 (broadcast) do not count. */
static int tb_transposed_dim(int ndim, const int64_t *shape, const int64_t *byte_strides,
                             size_t itemsize) {
  if (ndim < 2) return -1;
  const int last = ndim - 1;
  int64_t best = byte_strides[last] < 0 ? -byte_strides[last] : byte_strides[last];
  int k = -1;
  if (shape[last] == 1 || best == (int64_t)itemsize) return -1;
  for (int d = 0; d < last; ++d) {
    int64_t s = byte_strides[d] < 0 ? -byte_strides[d] : byte_strides[d];
    if (shape[d] > 1 && s != 0 && s < best) {
      best = s;
      k = d;
    }
  }
  return k;
}

/* Copy an n-d strided array (byte strides) into a C-contiguous buffer.
 * shape must have no zero extent; ndim <= 64. Where the source runs along another
 * dimension than the last (tb_transposed_dim), plane by plane in tiles; else row by
 * row. Either way no Python object is touched: callers release the GIL. */
static void tb_copy_to_contiguous(char *dst, const char *src, int ndim, const int64_t *shape,
                                  const int64_t *byte_strides, size_t itemsize) {
  int64_t index[64];
  if (ndim == 0) {
    memcpy(dst, src, itemsize);
    return;
  }
  const int k = tb_transposed_dim(ndim, shape, byte_strides, itemsize);
  if (k >= 0) {
    /* The output's strides, then each plane (k, last) of the other dimensions. */
    int64_t dst_strides[64];
    dst_strides[ndim - 1] = (int64_t)itemsize;
    for (int d = ndim - 2; d >= 0; --d) dst_strides[d] = dst_strides[d + 1] * shape[d + 1];
    for (int d = 0; d < ndim; ++d) index[d] = 0;
    for (;;) {
      int64_t from = 0, to = 0;
      for (int d = 0; d < ndim - 1; ++d) {
        from += index[d] * byte_strides[d];
        to += index[d] * dst_strides[d];
      }
      tb_copy_plane(dst + to, src + from, shape[k], shape[ndim - 1], dst_strides[k],
                    byte_strides[k], byte_strides[ndim - 1], itemsize);
      int d = ndim - 2;
      for (; d >= 0; --d) {
        if (d == k) continue;
        if (++index[d] < shape[d]) break;
        index[d] = 0;
      }
      if (d < 0) return;
    }
  }
  const int64_t inner = shape[ndim - 1];
  const int64_t step = byte_strides[ndim - 1];
  for (int d = 0; d < ndim; ++d) index[d] = 0;
  for (;;) {
    if (step == (int64_t)itemsize) {
      memcpy(dst, src, (size_t)inner * itemsize);
      dst += (size_t)inner * itemsize;
    } else {
      dst = tb_gather(dst, src, inner, step, itemsize);
    }
    int d = ndim - 2;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        src += byte_strides[d];
        break;
      }
      /* (back to the start: stride * (extent - 1) is within the layout's bound,
       * stride * extent may not be) */
      src -= byte_strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

/* Reads an n-d strided array (byte strides, no zero extent, 1 <= ndim <= 64) in C
 * order, a chunk at a time, into contiguous buffers: for loops that work on
 * contiguous runs (the casts of _casts.h) over sources that are not. */
typedef struct {
  const char *row; /* the current innermost row */
  int ndim;
  const int64_t *shape;
  const int64_t *strides;
  size_t itemsize;
  int64_t inner;    /* position in the row */
  int64_t index[64];
} tb_reader;

static void tb_reader_init(tb_reader *r, const char *src, int ndim, const int64_t *shape,
                           const int64_t *byte_strides, size_t itemsize) {
  r->row = src;
  r->ndim = ndim;
  r->shape = shape;
  r->strides = byte_strides;
  r->itemsize = itemsize;
  r->inner = 0;
  for (int d = 0; d < ndim; ++d) r->index[d] = 0;
}

/* Copies the next (at most) max elements into out; returns how many (0 at the end). */
static size_t tb_read(tb_reader *r, char *out, size_t max) {
  const int last = r->ndim - 1;
  const int64_t step = r->strides[last];
  const size_t item = r->itemsize;
  size_t got = 0;
  while (got < max && r->row != NULL) {
    int64_t left = r->shape[last] - r->inner;
    size_t take = (size_t)left < max - got ? (size_t)left : max - got;
    tb_gather(out + got * item, r->row + r->inner * step, (int64_t)take, step, item);
    got += take;
    r->inner += (int64_t)take;
    if (r->inner == r->shape[last]) {
      r->inner = 0;
      int d = last - 1;
      for (; d >= 0; --d) {
        if (++r->index[d] < r->shape[d]) {
          r->row += r->strides[d];
          break;
        }
        r->row -= r->strides[d] * (r->shape[d] - 1);
        r->index[d] = 0;
      }
      if (d < 0) r->row = NULL; /* done */
    }
  }
  return got;
}

#endif /* TENSORBRIDGE_MEMORY_H_ */
