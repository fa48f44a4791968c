# SPDX-License-Identifier: Apache-2.0
"""Capsules read and deleters called by hand (ctypes), where tensorbridge's own
reading would trust what it reads.

`read_capsule` reads a capsule's struct without consuming it, after `peek_mismatch` has
made sure the struct is the one the name says (a versioned struct in a capsule named
``dltensor`` would be read as garbage pointers); `native_call` calls a deleter on a
thread Python knows nothing of.
"""

from __future__ import annotations

import ctypes
import importlib
import threading
from typing import Any

from tensorbridge import _core
from tensorbridge._devices import DLDeviceType

__all__ = [
    "DELETER_SECONDS",
    "DEVICE_TYPES",
    "KNOWN_FLAGS",
    "StructMismatch",
    "capsule_name",
    "capsule_pointer",
    "native_call",
    "peek_mismatch",
    "read_capsule",
]

_testing: Any = importlib.import_module("tensorbridge._testing")

READ_ONLY, IS_COPIED, SUBBYTE_PADDED = 1, 2, 4
#: The flag bits DLPack 1.3 defines.
KNOWN_FLAGS = READ_ONLY | IS_COPIED | SUBBYTE_PADDED
#: Every DLDeviceType value.
DEVICE_TYPES = frozenset(int(d) for d in DLDeviceType)


def capsule_name(capsule: Any) -> str | None:
    if not _core.is_capsule(capsule):
        return f"<not a capsule: {type(capsule).__name__}>"
    return str(_testing.capsule_name(capsule))


class StructMismatch(Exception):
    """A capsule whose name says one struct and which holds the other."""


def peek_mismatch(capsule: Any) -> str | None:
    """Why a 'dltensor' capsule holds a DLManagedTensorVersioned, or None.

    Read as a versioned struct, its head is a version 1.x, known flag bits, a known
    device and a sane ndim; read as the legacy struct its name promises, the device
    and ndim are nonsense (pydlpack 0.2.1 makes these)."""
    if not _core.is_capsule(capsule) or _testing.capsule_name(capsule) != "dltensor":
        return None
    address = capsule_pointer(capsule, b"dltensor")
    if address is None:
        return None
    major, minor = (ctypes.c_uint32 * 2).from_address(address)
    flags = ctypes.c_uint64.from_address(address + 24).value
    v_device, v_ndim = (ctypes.c_int32 * 4).from_address(address + 40)[::2]
    l_device, _l_id, l_ndim = (ctypes.c_int32 * 3).from_address(address + 8)
    versioned = (
        major == 1
        and minor < 64
        and not flags & ~KNOWN_FLAGS
        and v_device in DEVICE_TYPES
        and 0 <= v_ndim <= 64
    )
    legacy = l_device in DEVICE_TYPES and 0 <= l_ndim <= 64
    if versioned and not legacy:
        return (
            f"a capsule named 'dltensor' holds a DLManagedTensorVersioned (version "
            f"{major}.{minor}, flags {flags}), not the DLManagedTensor its name says"
        )
    return None


def read_capsule(capsule: Any) -> dict[str, Any]:
    """`inspect_capsule`, refusing a capsule whose struct is not the one its name says
    (reading it as that struct would read garbage pointers)."""
    mismatch = peek_mismatch(capsule)
    if mismatch is not None:
        raise StructMismatch(mismatch)
    info: dict[str, Any] = _core.inspect_capsule(capsule)
    return info


#: Seconds a deleter called without the GIL may take before it counts as deadlocked.
DELETER_SECONDS = 10.0


def native_call(function: int, argument: int) -> str | None:
    """Run ``function(argument)`` on a new thread Python knows nothing of (no thread
    state, the GIL not held): None once it returned, else why it could not be run or
    did not return."""
    try:
        libc = ctypes.CDLL(None)
        create, join = libc.pthread_create, libc.pthread_join
    except (OSError, AttributeError):
        return "pthread_create is not available here"
    pointer = ctypes.c_void_p
    create.argtypes = [ctypes.POINTER(ctypes.c_ulong), pointer, pointer, pointer]
    create.restype = ctypes.c_int
    join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    join.restype = ctypes.c_int
    handle = ctypes.c_ulong()
    # A deleter is void (*)(T*), a thread's start routine void* (*)(void*): the same
    # call on the platforms with pthreads; its return value is not read.
    if create(ctypes.byref(handle), None, function, argument) != 0:
        return "pthread_create failed"
    done = threading.Event()

    def wait() -> None:
        join(handle.value, None)  # a ctypes call: the GIL is released while it waits
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    if not done.wait(DELETER_SECONDS):
        return "hung"
    return None


def capsule_pointer(capsule: Any, name: bytes) -> int | None:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    try:
        return get(capsule, name) or None
    except ValueError:
        return None
