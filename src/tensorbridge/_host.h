/* SPDX-License-Identifier: Apache-2.0
 *
 * Host memory in: the PEP 3118 buffer formats as one table read both ways, and
 * the head of NumPy's array struct.
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

#endif /* TENSORBRIDGE_HOST_H_ */
