/* SPDX-License-Identifier: Apache-2.0
 *
 * PyTorch's own C++ readers of a tensor's negative and conjugate bits, and the
 * at::Tensor a torch tensor's Python object holds. Nothing here is trusted
 * before _quirks.pxi has checked it against torch's methods on tensors made for
 * the purpose; until then (and wherever a check fails) the methods are called.
 */
#ifndef TENSORBRIDGE_TORCH_H_
#define TENSORBRIDGE_TORCH_H_

#include <Python.h>
#include <stdbool.h>

#if !defined(_WIN32)
#include <dlfcn.h>
#endif

/* at::native::is_neg and is_conj: bool(const at::Tensor &). An at::Tensor is one
 * pointer (to its TensorImpl), so a pointer to such a pointer is the reference. */
typedef bool (*tb_torch_bit_reader)(const void *tensor);

/* The symbol `name` in the loaded library `library` or in one it links (dlsym on
 * a handle searches the library's dependencies too); NULL when it is not there,
 * when the library is not loaded already, or on Windows, whose C++ names differ. */
static void *tb_loaded_symbol(const char *library, const char *name) {
#if defined(_WIN32)
  (void)library;
  (void)name;
  return NULL;
#else
  void *handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  void *symbol;
  if (handle == NULL) {
    return NULL;
  }
  symbol = dlsym(handle, name);
  /* RTLD_NOLOAD only took a reference: the library stays loaded (an imported
   * extension module is never unloaded), and so does the symbol. */
  dlclose(handle);
  return symbol;
#endif
}

/* A torch tensor's Python object (THPVariable) is the object head followed by
 * its at::Tensor. */
static inline const void *tb_torch_cdata(PyObject *tensor) {
  return (const char *)tensor + sizeof(PyObject);
}

/* The TensorImpl that at::Tensor points to (what torch's Tensor._cdata gives). */
static inline void *tb_torch_impl(PyObject *tensor) {
  return *(void *const *)tb_torch_cdata(tensor);
}

static inline int tb_torch_bit(void *reader, PyObject *tensor) {
  return ((tb_torch_bit_reader)reader)(tb_torch_cdata(tensor)) ? 1 : 0;
}

#endif /* TENSORBRIDGE_TORCH_H_ */
