/* SPDX-License-Identifier: Apache-2.0
 *
 * Lifetime plumbing shared by the compiled modules: the deleters of the
 * managed tensors tensorbridge exports, the destructors of its capsules, and a
 * strided copy.  Rules (docs/design.md, "Ownership"):
 *
 *  - An exported managed tensor is one PyMem block (struct, shape, strides);
 *    manager_ctx is a strong reference to the exporting Tensor.
 *  - Its deleter may run on any thread, with or without the GIL, even during
 *    or after interpreter shutdown: once the interpreter is gone it does
 *    nothing (a deliberate leak); otherwise it takes the GIL, frees the block
 *    and drops the reference.
 *  - A capsule destructor frees only an unconsumed capsule ("dltensor" /
 *    "dltensor_versioned"); a consumer renamed it to "used_*" and owns it then.
 */
#ifndef TENSORBRIDGE_RUNTIME_H_
#define TENSORBRIDGE_RUNTIME_H_

#include <Python.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "_dlpack.h"

/* True when Python can no longer be entered from this thread. */
static inline int tb_interpreter_gone(void) {
  if (!Py_IsInitialized()) return 1;
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing() && !PyGILState_Check()) return 1;
#else
  if (_Py_IsFinalizing() && !PyGILState_Check()) return 1;
#endif
  return 0;
}

/* How many of our export deleters are running (under the GIL). While it is
 * nonzero, a Tensor that dies must not call its producer's deleter on the spot:
 * the framework calling our deleter may hold a lock its own deleter needs
 * (PaddlePaddle's DeleterBridge does: docs/design.md, "Ownership"). */
static int tb_export_release_depth = 0;

static void tb_release_owner(PyObject *owner) {
  ++tb_export_release_depth;
  Py_XDECREF(owner);
  --tb_export_release_depth;
}

/* The one export deleter body.  manager_ctx sits at a different offset in the
 * two struct kinds, so each kind has a two-line entry point. */
static void tb_export_release(void *block, PyObject *owner) {
  PyGILState_STATE state = PyGILState_Ensure();
  PyMem_Free(block);
  tb_release_owner(owner);
  PyGILState_Release(state);
}

static void tb_export_deleter_versioned(DLManagedTensorVersioned *self) {
  if (self == NULL || tb_interpreter_gone()) return;
  tb_export_release(self, (PyObject *)self->manager_ctx);
}

static void tb_export_deleter_legacy(DLManagedTensor *self) {
  if (self == NULL || tb_interpreter_gone()) return;
  tb_export_release(self, (PyObject *)self->manager_ctx);
}

/* Call a managed tensor's deleter (either kind) if it has one. */
static inline void tb_call_deleter(void *managed, int versioned) {
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)managed;
    if (m->deleter != NULL) m->deleter(m);
  } else {
    DLManagedTensor *m = (DLManagedTensor *)managed;
    if (m->deleter != NULL) m->deleter(m);
  }
}

/* Capsule destructors, called by CPython with the GIL while the capsule is being
 * deallocated, possibly with an exception set (saved around the work).  They
 * read the capsule's name and pointer and nothing else: no Python call may see
 * the dying capsule (PyErr_WriteUnraisable(capsule) would take a new reference
 * to it and re-enter its deallocation).  The name decides:
 *   - the unconsumed name: nobody took the tensor, so its deleter runs here;
 *   - any "used_" name: a consumer took it (whichever used-name it chose) and
 *     calls the deleter itself;
 *   - anything else: a consumer renamed it without saying whether it took the
 *     tensor.  Reported as unraisable, and the block is leaked: a leak is
 *     recoverable, a double free is not. */
static void tb_capsule_destructor(PyObject *capsule, const char *unconsumed, int versioned) {
  const char *name = PyCapsule_GetName(capsule); /* cannot fail on a live capsule */
  if (name != NULL && strncmp(name, "used_", 5) == 0) return; /* consumed */
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  void *managed = NULL;
  if (name != NULL && strcmp(name, unconsumed) == 0) {
    managed = PyCapsule_GetPointer(capsule, unconsumed);
  }
  if (managed != NULL) {
    tb_call_deleter(managed, versioned);
  } else {
    PyErr_Clear();
    PyErr_Format(PyExc_RuntimeWarning,
                 "tensorbridge: a DLPack capsule exported as '%s' was renamed to '%s' by a "
                 "consumer and then dropped; its tensor is leaked rather than risk freeing "
                 "it twice (a consumer must rename it 'used_%s')",
                 unconsumed, name != NULL ? name : "NULL", unconsumed);
    PyErr_WriteUnraisable(NULL);
  }
  PyErr_Restore(type, value, tb);
}

static void tb_capsule_destructor_versioned(PyObject *capsule) {
  tb_capsule_destructor(capsule, TB_CAPSULE_VERSIONED, 1);
}

static void tb_capsule_destructor_legacy(PyObject *capsule) {
  tb_capsule_destructor(capsule, TB_CAPSULE_LEGACY, 0);
}

/* Memory for tensors: 64-byte aligned (what XLA and TensorFlow ask for); blocks
 * of 4 MiB or more are 2 MiB aligned and, where the kernel supports it, backed by
 * transparent huge pages, so first writes fault 512 times less often (NumPy
 * does the same). Free with free(). Returns NULL when out of memory. */
static void *tb_alloc(size_t nbytes) {
  void *memory = NULL;
  const size_t huge = (size_t)1 << 21;
  int large = nbytes >= ((size_t)1 << 22);
  if (posix_memalign(&memory, large ? huge : 64, nbytes) != 0) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (large) madvise(memory, nbytes & ~(huge - 1), MADV_HUGEPAGE);
#endif
  return memory;
}

/* a * b into *out; nonzero when the product overflows int64. */
static inline int tb_mul_overflow(int64_t a, int64_t b, int64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

/* a + b into *out; nonzero when the sum overflows int64. */
static inline int tb_add_overflow(int64_t a, int64_t b, int64_t *out) {
  return __builtin_add_overflow(a, b, out);
}

/* Copy an n-d strided array (byte strides) into a C-contiguous buffer.
 * shape must have no zero extent; ndim <= 64. */
static void tb_copy_to_contiguous(char *dst, const char *src, int ndim, const int64_t *shape,
                                  const int64_t *byte_strides, size_t itemsize) {
  int64_t index[64];
  if (ndim == 0) {
    memcpy(dst, src, itemsize);
    return;
  }
  const int64_t inner = shape[ndim - 1];
  const int64_t step = byte_strides[ndim - 1];
  for (int d = 0; d < ndim; ++d) index[d] = 0;
  for (;;) {
    if (step == (int64_t)itemsize) {
      memcpy(dst, src, (size_t)inner * itemsize);
      dst += (size_t)inner * itemsize;
    } else {
      const char *p = src;
      switch (itemsize) {
#define TB_COPY_CASE(N)                        \
  case N:                                      \
    for (int64_t i = 0; i < inner; ++i) {      \
      memcpy(dst, p, N);                       \
      dst += N;                                \
      p += step;                               \
    }                                          \
    break;
        TB_COPY_CASE(1)
        TB_COPY_CASE(2)
        TB_COPY_CASE(4)
        TB_COPY_CASE(8)
        TB_COPY_CASE(16)
#undef TB_COPY_CASE
        default:
          for (int64_t i = 0; i < inner; ++i) {
            memcpy(dst, p, itemsize);
            dst += itemsize;
            p += step;
          }
      }
    }
    int d = ndim - 2;
    for (; d >= 0; --d) {
      src += byte_strides[d];
      if (++index[d] < shape[d]) break;
      src -= byte_strides[d] * shape[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}


/* The head of NumPy's array and dtype structs: the fields NumPy's C API
 * declares public and has kept in place since 1.7 (PyArrayObject_fields,
 * PyArray_Descr up to type_num, identical in NumPy 1.x and 2.x). asarray reads
 * them instead of asking for a buffer (which formats a string on every call);
 * _core checks the reading against the buffer protocol on the first array it
 * sees and stops reading if they ever disagree. */
typedef struct {
  PyObject ob_base;
  PyObject *typeobj;
  char kind;
  char type;
  char byteorder;
  char former_flags;
  int type_num;
} tb_npy_descr;

typedef struct {
  PyObject ob_base;
  char *data;
  int nd;
  Py_ssize_t *dimensions;
  Py_ssize_t *strides;
  PyObject *base;
  tb_npy_descr *descr;
  int flags;
} tb_npy_array;

#define TB_NPY_WRITEABLE 0x0400

/* DLPack (code, bits) of a NumPy type number; 0 when DLPack has no such type. */
static inline int tb_npy_dtype(int type_num, uint8_t *code, uint8_t *bits) {
  switch (type_num) {
    case 0: *code = kDLBool; *bits = 8; return 1;
    case 1: *code = kDLInt; *bits = 8; return 1;
    case 2: *code = kDLUInt; *bits = 8; return 1;
    case 3: *code = kDLInt; *bits = 16; return 1;
    case 4: *code = kDLUInt; *bits = 16; return 1;
    case 5: *code = kDLInt; *bits = 8 * sizeof(int); return 1;
    case 6: *code = kDLUInt; *bits = 8 * sizeof(int); return 1;
    case 7: *code = kDLInt; *bits = 8 * sizeof(long); return 1;
    case 8: *code = kDLUInt; *bits = 8 * sizeof(long); return 1;
    case 9: *code = kDLInt; *bits = 64; return 1;
    case 10: *code = kDLUInt; *bits = 64; return 1;
    case 11: *code = kDLFloat; *bits = 32; return 1;
    case 12: *code = kDLFloat; *bits = 64; return 1;
    case 14: *code = kDLComplex; *bits = 64; return 1;
    case 15: *code = kDLComplex; *bits = 128; return 1;
    case 23: *code = kDLFloat; *bits = 16; return 1;
    default: return 0;
  }
}

#endif /* TENSORBRIDGE_RUNTIME_H_ */
