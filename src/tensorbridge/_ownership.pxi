# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Ownership: adopting a managed tensor, calling its
# deleter once, and the queue of deleters put off while one of our export
# deleters runs (docs/design.md, "Ownership and lifetime").

from libc.stdint cimport uint32_t, uintptr_t
from tensorbridge._dlpack cimport *
from tensorbridge._cpython cimport *
from tensorbridge._lifetime cimport *


cdef inline void _call_deleter(void* managed, int kind) noexcept:
    tb_call_deleter(managed, kind == OWN_VERSIONED)


# Producer deleters put off while one of our export deleters runs (see
# Tensor.__dealloc__), drained by one pending call. The queue is a C array (a convert
# that reads a producer and exports to the target defers one deleter a call: a list
# of tuples cost about 1,000 instructions more); what does not fit waits in a list.
cdef enum:
    DEFERRED_SLOTS = 64

cdef void* _deferred_managed[DEFERRED_SLOTS]
cdef int _deferred_kind[DEFERRED_SLOTS]
cdef Py_ssize_t _deferred_count = 0
cdef list _deferred_overflow = []
cdef bint _drain_scheduled = False

cdef int _run_deferred_deleters(void* arg) noexcept with gil:
    # A deleter may defer more (it releases a chain through one of our exports) or
    # let another thread run: each entry is taken off before its deleter is called.
    global _drain_scheduled, _deferred_count
    if tb_export_release_depth > 0:
        # Reached from Python code run while an export deleter of ours releases its
        # owner (a __del__): still inside the foreign deleter, so nothing is called
        # here; the drain is asked for again (the next deferral asks if this fails).
        _drain_scheduled = Py_AddPendingCall(_run_deferred_deleters, NULL) == 0
        return 0
    _drain_scheduled = False
    cdef void* managed
    cdef int kind
    while True:
        if _deferred_count > 0:
            _deferred_count -= 1
            managed = _deferred_managed[_deferred_count]
            kind = _deferred_kind[_deferred_count]
        elif _deferred_overflow:
            address, kind = _deferred_overflow.pop()
            managed = <void*><uintptr_t>address
        else:
            return 0
        _call_deleter(managed, kind)


cdef void _defer_deleter(void* managed, int kind) noexcept:
    """Call a producer's deleter soon, from the interpreter loop, not from inside
    the foreign deleter that is releasing us (which may hold a lock it needs)."""
    global _drain_scheduled, _deferred_count
    cdef bint in_array = _deferred_count < DEFERRED_SLOTS
    try:
        if in_array:
            _deferred_managed[_deferred_count] = managed
            _deferred_kind[_deferred_count] = kind
            _deferred_count += 1
        else:
            _deferred_overflow.append((<uintptr_t>managed, kind))
        if not _drain_scheduled:
            if Py_AddPendingCall(_run_deferred_deleters, NULL) != 0:
                raise MemoryError("the pending-call queue is full")
            _drain_scheduled = True
    except BaseException:
        # Cannot defer: releasing now risks that lock, but never leaks or double-frees.
        if in_array:
            if _deferred_count > 0 and _deferred_managed[_deferred_count - 1] == managed:
                _deferred_count -= 1
        elif _deferred_overflow and \
                _deferred_overflow[len(_deferred_overflow) - 1][0] == <uintptr_t>managed:
            _deferred_overflow.pop()
        _call_deleter(managed, kind)


def _deferred_deleters():
    """How many producer deleters wait for the pending call (for tests)."""
    return _deferred_count + len(_deferred_overflow)


cdef void _release_managed(void* managed, int kind) noexcept:
    """Call a producer's deleter now, or soon when one of our export deleters is
    running (the framework calling it may hold a lock the deleter needs)."""
    if tb_export_release_depth > 0:
        _defer_deleter(managed, kind)
    else:
        _call_deleter(managed, kind)


def export_release_depth():
    """How many export deleters of ours are running (for tests)."""
    return tb_export_release_depth


cdef Tensor _adopt(void* managed, int kind):
    """Own a managed tensor (handed over by a C exchange table)."""
    cdef Tensor t
    try:
        t = _new_tensor()
    except BaseException:
        _call_deleter(managed, kind)
        raise
    t._managed = managed
    t._owner_kind = kind
    return t


cdef int _raise_major_version(uint32_t major, uint32_t minor, str api, str what) except -1:
    raise BufferError(
        f"{api}: {what} holds DLPack version {major}.{minor}; tensorbridge reads "
        f"major version {TB_DLPACK_MAJOR} (up to {TB_DLPACK_MAJOR}.{TB_DLPACK_MINOR})")


cdef Tensor _adopt_versioned(DLManagedTensorVersioned* managed, str api, str what,
                             object producer=None):
    """Own a versioned managed tensor that a C exchange table handed over (from
    `producer`'s table, or to ours), then check its version and description: it
    is ours from the start (no capsule can free it), so on failure the Tensor's
    __dealloc__ calls its deleter, once."""
    cdef Tensor t = _adopt(managed, OWN_VERSIONED)
    if managed.version.major != TB_DLPACK_MAJOR:
        # Only version, manager_ctx, deleter and flags may be read now.
        if producer is not None:
            what = f"{type(producer).__name__}'s exchange table gave a tensor that"
        _raise_major_version(managed.version.major, managed.version.minor, api, what)
    _fill(t, &managed.dl_tensor, managed.flags)
    return t
