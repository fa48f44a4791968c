/* SPDX-License-Identifier: Apache-2.0
 *
 * Lifetime plumbing included by the compiled modules (_core and _testing; each
 * extension has its own copy of the statics, and only _core's deleters count): the
 * interpreter-gone check, the one deleter body of the managed tensors
 * tensorbridge exports (both struct kinds), the one capsule destructor body, and
 * the call of any managed tensor's deleter, and the count of export deleters
 * running (which makes a dying Tensor defer its producer's deleter).  Rules
 * (docs/design.md, "Ownership and lifetime"):
 *
 *  - An exported managed tensor is one PyMem block (struct, shape, strides);
 *    manager_ctx is a strong reference to the exporting Tensor.
 *  - Its deleter may run on any thread, with or without the GIL, even during
 *    or after interpreter shutdown: once the interpreter is gone it does
 *    nothing (a deliberate leak); otherwise it takes the GIL, frees the block
 *    and drops the reference.
 *  - A capsule destructor frees only an unconsumed capsule ("dltensor" /
 *    "dltensor_versioned"); a consumer renamed it to "used_*" and owns it then;
 *    any other name is reported as unraisable and the block leaked, never
 *    freed twice.
 */
#ifndef TENSORBRIDGE_LIFETIME_H_
#define TENSORBRIDGE_LIFETIME_H_

#include <Python.h>
#include <string.h>

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

#endif /* TENSORBRIDGE_LIFETIME_H_ */
