/* SPDX-License-Identifier: Apache-2.0
 *
 * Host memory: the PEP 3118 buffer formats as one table read both ways, the
 * head of NumPy's array struct, and the slots of NumPy's C API table that make
 * an array.
 */
#ifndef TENSORBRIDGE_HOST_H_
#define TENSORBRIDGE_HOST_H_

#include <Python.h>
#include <string.h>

#include "_dlpack.h"

/* The native byte-order character of PEP 3118 and NumPy. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define TB_NATIVE_ORDER '>'
#else
#define TB_NATIVE_ORDER '<'
#endif

/* PEP 3118 formats in native order and size ('@', '=' or the native character
 * may precede them) and their DLPack types. Reading a buffer takes the type code
 * from the format and the bits from the buffer's itemsize; writing a format takes
 * the first row of the dtype's (code, bits). */
typedef struct {
  const char *format;
  uint8_t code;
  uint8_t bits;
} tb_format_row;

static const tb_format_row tb_formats[] = {
    {"?", kDLBool, 8},
    {"b", kDLInt, 8},
    {"h", kDLInt, 16},
    {"i", kDLInt, 32},
    {"q", kDLInt, 64},
    {"l", kDLInt, 8 * sizeof(long)},
    {"n", kDLInt, 8 * sizeof(Py_ssize_t)},
    {"B", kDLUInt, 8},
    {"H", kDLUInt, 16},
    {"I", kDLUInt, 32},
    {"Q", kDLUInt, 64},
    {"L", kDLUInt, 8 * sizeof(long)},
    {"N", kDLUInt, 8 * sizeof(size_t)},
    {"c", kDLUInt, 8},
    {"e", kDLFloat, 16},
    {"f", kDLFloat, 32},
    {"d", kDLFloat, 64},
    {"Zf", kDLComplex, 64},
    {"Zd", kDLComplex, 128},
};

#define TB_FORMAT_ROWS ((int)(sizeof(tb_formats) / sizeof(tb_formats[0])))

/* The DLPack type code of a format without its byte-order character, or -1. */
static inline int tb_format_code(const char *body) {
  for (int i = 0; i < TB_FORMAT_ROWS; ++i) {
    if (strcmp(body, tb_formats[i].format) == 0) return tb_formats[i].code;
  }
  return -1;
}

/* The format of a DLPack (code, bits), or NULL when the buffer protocol has none. */
static inline const char *tb_format_of(uint8_t code, uint8_t bits) {
  for (int i = 0; i < TB_FORMAT_ROWS; ++i) {
    if (tb_formats[i].code == code && tb_formats[i].bits == bits) return tb_formats[i].format;
  }
  return NULL;
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

/* NumPy type number of a DLPack type NumPy has natively; -1 otherwise. The type
 * numbers NumPy's own DLPack import gives (its NPY_INT32/NPY_INT64...: NPY_LONG
 * where long has that size, else NPY_INT or NPY_LONGLONG). */
static inline int tb_npy_type_num(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes != 1) return -1;
  switch (code) {
    case kDLBool: return bits == 8 ? 0 : -1;
    case kDLInt:
      switch (bits) {
        case 8: return 1;
        case 16: return 3;
        case 32: return sizeof(long) == 4 ? 7 : sizeof(int) == 4 ? 5 : -1;
        case 64: return sizeof(long) == 8 ? 7 : 9;
        default: return -1;
      }
    case kDLUInt:
      switch (bits) {
        case 8: return 2;
        case 16: return 4;
        case 32: return sizeof(long) == 4 ? 8 : sizeof(int) == 4 ? 6 : -1;
        case 64: return sizeof(long) == 8 ? 8 : 10;
        default: return -1;
      }
    case kDLFloat: return bits == 16 ? 23 : bits == 32 ? 11 : bits == 64 ? 12 : -1;
    case kDLComplex: return bits == 64 ? 14 : bits == 128 ? 15 : -1;
    default: return -1;
  }
}

/* NumPy's C API table: the pointer array in the _ARRAY_API capsule of
 * numpy._core._multiarray_umath (numpy.core._multiarray_umath in NumPy 1.x) that
 * every NumPy C extension imports. The slots used here, at the indices NumPy's ABI
 * fixes (numpy/__multiarray_api.h; the same in NumPy 1.x and 2.x): */
#define TB_NPY_API_ABI_VERSION 0      /* unsigned int (void) */
#define TB_NPY_API_NDARRAY 2          /* PyTypeObject: numpy.ndarray */
#define TB_NPY_API_DESCR_FROM_TYPE 45 /* PyArray_DescrFromType */
#define TB_NPY_API_NEW_FROM_DESCR 94  /* PyArray_NewFromDescr */
#define TB_NPY_API_SET_BASE 282       /* PyArray_SetBaseObject */
#define TB_NPY_ABI_1 0x01000009u /* and its dimension limit: */
#define TB_NPY_MAXDIMS_1 32
#define TB_NPY_ABI_2 0x02000000u
#define TB_NPY_MAXDIMS_2 64

/* NumPy's ABI version, or 0 when a slot used here is empty. */
static inline unsigned int tb_npy_abi_version(void **api) {
  if (api[TB_NPY_API_ABI_VERSION] == NULL || api[TB_NPY_API_NDARRAY] == NULL ||
      api[TB_NPY_API_DESCR_FROM_TYPE] == NULL || api[TB_NPY_API_NEW_FROM_DESCR] == NULL ||
      api[TB_NPY_API_SET_BASE] == NULL) {
    return 0;
  }
  return ((unsigned int (*)(void))api[TB_NPY_API_ABI_VERSION])();
}

static inline int tb_npy_is_ndarray_type(void **api, PyObject *tp) {
  return api[TB_NPY_API_NDARRAY] == (void *)tp;
}

/* A numpy.ndarray over `data` (strides in bytes), writable or not, whose base is
 * `base`: the array numpy.from_dlpack makes, without a capsule. Steals the
 * reference to base (also on failure); NULL with an exception set on failure. */
static inline PyObject *tb_npy_view(void **api, int type_num, int nd, const Py_ssize_t *dims,
                                    const Py_ssize_t *strides, void *data, int writable,
                                    PyObject *base) {
  PyObject *descr = ((PyObject * (*)(int)) api[TB_NPY_API_DESCR_FROM_TYPE])(type_num);
  if (descr == NULL) {
    Py_DECREF(base);
    return NULL;
  }
  /* NewFromDescr steals descr; with data given, flags are the array's flags
   * (contiguity and alignment are computed from the strides). */
  PyObject *array = ((PyObject * (*)(PyTypeObject *, PyObject *, int, const Py_ssize_t *,
                                      const Py_ssize_t *, void *, int, PyObject *))
                         api[TB_NPY_API_NEW_FROM_DESCR])(
      (PyTypeObject *)api[TB_NPY_API_NDARRAY], descr, nd, dims, strides, data,
      writable ? TB_NPY_WRITEABLE : 0, NULL);
  if (array == NULL) {
    Py_DECREF(base);
    return NULL;
  }
  if (((int (*)(PyObject *, PyObject *))api[TB_NPY_API_SET_BASE])(array, base) < 0) {
    Py_DECREF(array); /* (SetBaseObject stole base) */
    return NULL;
  }
  return array;
}

#endif /* TENSORBRIDGE_HOST_H_ */
