/* SPDX-License-Identifier: Apache-2.0
 *
 * convert's front door, a METH_FASTCALL function: the call a loop makes,
 * convert(obj, to) with no option, goes straight to the cached routes
 * (_front.pxi's _convert2) without parsing five keyword-only defaults or
 * entering a try block; any other call is passed, as it came, to the function
 * Cython compiled from convert's Python signature, which parses and checks it.
 *
 * Errors from the two-argument path are named as that function names them: an
 * Exception's message begins with "convert(): " (tensorbridge._errors.said_by);
 * anything else (KeyboardInterrupt, SystemExit...) passes as it is.
 */
#ifndef TENSORBRIDGE_DOOR_H_
#define TENSORBRIDGE_DOOR_H_

#include <Python.h>

/* convert(obj, to): a new reference, or NULL with an exception set. */
typedef PyObject *(*tb_convert2_fn)(PyObject *obj, PyObject *to);
/* Names exc (an Exception) convert()'s in place: 0, or -1 with an exception set. */
typedef int (*tb_name_error_fn)(PyObject *exc);

static tb_convert2_fn tb_door_convert2 = NULL;
static tb_name_error_fn tb_door_name_error = NULL;
static PyObject *tb_door_options = NULL; /* a strong reference, set once by _core */

/* The pending exception, named convert()'s when it is an Exception. It is the
 * handled exception while it is named, as in an except block: an error raised by
 * the naming propagates instead, chained to it by Python (its __context__, with
 * Python's own cycle check); the caller's handled exception is restored after. */
static void tb_door_name_pending(void) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value == NULL) {
    PyErr_Restore(type, value, traceback);
    return;
  }
  if (traceback != NULL) {
    PyException_SetTraceback(value, traceback);
  }
  if (PyObject_TypeCheck(value, (PyTypeObject *)PyExc_Exception)) {
    PyObject *saved_type, *saved_value, *saved_traceback;
    int named;
    PyErr_GetExcInfo(&saved_type, &saved_value, &saved_traceback);
    Py_XINCREF(type);
    Py_INCREF(value);
    Py_XINCREF(traceback);
    PyErr_SetExcInfo(type, value, traceback); /* steals the three */
    named = tb_door_name_error(value);
    PyErr_SetExcInfo(saved_type, saved_value, saved_traceback);
    if (named < 0) {
      Py_XDECREF(type);
      Py_DECREF(value);
      Py_XDECREF(traceback);
      return;
    }
  }
  PyErr_Restore(type, value, traceback);
}

static PyObject *tb_door_convert(PyObject *Py_UNUSED(module), PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames) {
  if (nargs == 2 && kwnames == NULL) {
    PyObject *result = tb_door_convert2(args[0], args[1]);
    if (result == NULL) {
      tb_door_name_pending();
    }
    return result;
  }
  return PyObject_Vectorcall(tb_door_options, args, (size_t)nargs, kwnames);
}

/* ml_doc is set by _core (the Python-level function's docstring, after a text
 * signature) before the function object is made. */
static PyMethodDef tb_door_def = {
    "convert", (PyCFunction)(void (*)(void))tb_door_convert, METH_FASTCALL | METH_KEYWORDS,
    NULL};

#endif /* TENSORBRIDGE_DOOR_H_ */
