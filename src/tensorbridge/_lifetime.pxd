# SPDX-License-Identifier: Apache-2.0
# Interface of _lifetime.h: export deleters, capsule destructors, deleter calls.

from cpython.ref cimport PyObject

from tensorbridge._dlpack cimport DLManagedTensor, DLManagedTensorVersioned

cdef extern from "_lifetime.h":
    bint tb_interpreter_gone() noexcept nogil
    int tb_export_release_depth
    void tb_export_deleter_versioned(DLManagedTensorVersioned*) noexcept nogil
    void tb_export_deleter_legacy(DLManagedTensor*) noexcept nogil
    void tb_capsule_destructor_versioned(PyObject*) noexcept
    void tb_capsule_destructor_legacy(PyObject*) noexcept
    void tb_call_deleter(void* managed, int versioned) noexcept nogil
