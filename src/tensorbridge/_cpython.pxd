# SPDX-License-Identifier: Apache-2.0
# The CPython C API that Cython's own cpython/*.pxd do not declare, shared by every
# compiled module (_core and _testing): capsules, vectorcall, pending calls, type
# version tags, slices and complex numbers.

from cpython.ref cimport PyObject, PyTypeObject

cdef extern from "Python.h":
    # Capsules.
    ctypedef void (*PyCapsule_Destructor)(PyObject*) noexcept
    object PyCapsule_New(void* pointer, const char* name, PyCapsule_Destructor destructor)
    void* PyCapsule_GetPointer(object capsule, const char* name) except? NULL
    const char* PyCapsule_GetName(object capsule) except? NULL
    int PyCapsule_SetName(object capsule, const char* name) except -1
    int PyCapsule_SetContext(object capsule, void* context) except -1
    bint PyCapsule_IsValid(object capsule, const char* name)
    bint PyCapsule_CheckExact(object o)
    # Unchecked: NULL with the exception set.
    PyObject* _raw_capsule_new "PyCapsule_New"(void* pointer, const char* name,
                                               PyCapsule_Destructor destructor)
    # For capsule destructors, which get a capsule whose reference count is 0 (no
    # Python object may be made of it).
    const char* _raw_capsule_name "PyCapsule_GetName"(PyObject* capsule) noexcept
    void* _raw_capsule_context "PyCapsule_GetContext"(PyObject* capsule) noexcept

    # Calls.
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf,
                               PyObject* kwnames)
    object PyObject_VectorcallMethod(object name, PyObject** args, size_t nargsf,
                                     PyObject* kwnames)
    # The same call, unchecked: NULL with the exception set (the caller decides).
    PyObject* _raw_vectorcall "PyObject_Vectorcall"(PyObject* callable, PyObject** args,
                                                    size_t nargsf, PyObject* kwnames)
    PyObject* _raw_vectorcall_method "PyObject_VectorcallMethod"(
        PyObject* name, PyObject** args, size_t nargsf, PyObject* kwnames)
    PyObject* _raw_getattr "PyObject_GetAttr"(PyObject* obj, PyObject* name)
    size_t PY_VECTORCALL_ARGUMENTS_OFFSET
    int Py_AddPendingCall(int (*func)(void*) noexcept, void* arg)
    bint Py_IsInitialized()

    # Method descriptors (type.method): the C function behind one, to call it
    # without the descriptor's vectorcall, which only checks the arguments.
    ctypedef PyObject* (*PyCFunction)(PyObject*, PyObject*)
    ctypedef struct PyMethodDef:
        PyCFunction ml_meth
        int ml_flags
        const char* ml_doc
    ctypedef struct PyMethodDescrObject:
        PyMethodDef* d_method
    PyTypeObject PyMethodDescr_Type
    PyTypeObject* PyDescr_TYPE(object descr)
    int METH_NOARGS
    int METH_COEXIST

    # Errors.
    void PyErr_Fetch(PyObject** type, PyObject** value, PyObject** tb) noexcept
    void PyErr_Restore(PyObject* type, PyObject* value, PyObject* tb) noexcept
    void PyErr_Clear() noexcept
    PyObject* PyErr_Occurred()
    bint PyErr_ExceptionMatches(object exc)

    # Types: the version tag that changes whenever a type or a base is modified.
    ctypedef struct _TypeObj "PyTypeObject":
        unsigned int tp_version_tag
    unsigned long Py_TPFLAGS_HEAPTYPE

    # Numbers, slices, buffers.
    void* PyLong_AsVoidPtr(object) except? NULL
    object PyLong_FromVoidPtr(void*)
    ctypedef struct Py_complex:
        double real
        double imag
    Py_complex PyComplex_AsCComplex(object op) except *
    int PySlice_Unpack(object slice, Py_ssize_t* start, Py_ssize_t* stop,
                       Py_ssize_t* step) except -1
    Py_ssize_t PySlice_AdjustIndices(Py_ssize_t length, Py_ssize_t* start, Py_ssize_t* stop,
                                     Py_ssize_t step) noexcept
    int _get_buffer_or_error "PyObject_GetBuffer"(object obj, Py_buffer* view, int flags)
