# SPDX-License-Identifier: Apache-2.0
"""Capsules read, deleters and C exchange tables called by hand (ctypes), where
tensorbridge's own reading would trust what it reads.

`read_capsule` reads a capsule's struct without consuming it, after `peek_mismatch` has
made sure the struct is the one the name says (a versioned struct in a capsule named
``dltensor`` would be read as garbage pointers); `native_call` calls a deleter on a
thread Python knows nothing of; `find_table` finds the major-1 table of a
``dlpack_exchange_api`` capsule (through ``prev_api`` when it is newer), and
`table_from_py`, `table_to_py` and `table_stream` call that table's functions.
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
    "MANDATORY",
    "ExchangeAPI",
    "StructMismatch",
    "capsule_name",
    "capsule_pointer",
    "find_table",
    "native_call",
    "peek_mismatch",
    "read_capsule",
    "table_from_py",
    "table_stream",
    "table_to_py",
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


# ---------------------------------------------------------------------------------------
# C exchange tables (DLPackExchangeAPI, dlpack.h 1.2+)


class _Header(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("prev_api", ctypes.c_void_p),
    ]


class ExchangeAPI(ctypes.Structure):
    """A ``DLPackExchangeAPI``: its header, then the five function pointers."""

    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("prev_api", ctypes.c_void_p),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


#: The functions a table must have (dltensor_from_py_object_no_sync is optional).
MANDATORY = (
    "managed_tensor_allocator",
    "managed_tensor_from_py_object_no_sync",
    "managed_tensor_to_py_object_no_sync",
    "current_work_stream",
)


def find_table(address: int) -> tuple[ExchangeAPI | None, list[tuple[int, int]]]:
    """The major-1 table at ``address`` or reached from it through ``prev_api`` (a
    newer major version links the older tables it still offers), or None; and the
    versions seen on the way."""
    seen: list[tuple[int, int]] = []
    while address and len(seen) < 16:  # a longer chain is a loop
        header = _Header.from_address(address)
        seen.append((header.major, header.minor))
        if header.major == 1:
            return ExchangeAPI.from_address(address), seen
        address = header.prev_api or 0
    return None, seen


# The table's functions expect the GIL held (they take Python objects): PYFUNCTYPE
# keeps it, and raises the exception a failed call set.
_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
_TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
_STREAM = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
)
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# Prototypes of our own (the shared ctypes.pythonapi functions' argtypes are left alone).
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_decref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_DecRef", ctypes.pythonapi))

#: A capsule keeps a pointer to its name: this one lives as long as the module.
_VERSIONED = b"dltensor_versioned"


def _destroy_unconsumed(capsule: int) -> None:
    """A capsule's destructor: the deleter of a managed tensor nobody consumed."""
    if _capsule_is_valid(capsule, _VERSIONED):
        managed = _capsule_pointer(capsule, _VERSIONED)
        deleter = ctypes.c_void_p.from_address(managed + 16).value
        if deleter:
            _DELETER(deleter)(managed)


_destroy = _DESTRUCTOR(_destroy_unconsumed)  # kept alive with the module


def _failed(function: str) -> RuntimeError:
    return RuntimeError(f"{function} returned an error without setting an exception")


def table_from_py(table: ExchangeAPI, obj: Any) -> Any:
    """``managed_tensor_from_py_object_no_sync(obj)``, as a C consumer calls it: the
    managed tensor in a new ``dltensor_versioned`` capsule."""
    out = ctypes.c_void_p()
    if _FROM_PY(table.managed_tensor_from_py_object_no_sync)(obj, ctypes.byref(out)) != 0:
        raise _failed("managed_tensor_from_py_object_no_sync")
    if not out.value:
        raise RuntimeError("managed_tensor_from_py_object_no_sync gave a NULL tensor")
    return _capsule_new(out.value, _VERSIONED, _destroy)


def table_to_py(table: ExchangeAPI, capsule: Any) -> Any:
    """``managed_tensor_to_py_object_no_sync`` on a versioned capsule's managed tensor
    (consumed: the capsule is renamed first, as the function takes it over)."""
    managed = capsule_pointer(capsule, _VERSIONED)
    if managed is None:
        raise ValueError(f"not a 'dltensor_versioned' capsule: {capsule_name(capsule)!r}")
    _testing.set_capsule_name(capsule, "used_dltensor_versioned")
    out = ctypes.c_void_p()
    if _TO_PY(table.managed_tensor_to_py_object_no_sync)(managed, ctypes.byref(out)) != 0:
        raise _failed("managed_tensor_to_py_object_no_sync")
    if not out.value:
        raise RuntimeError("managed_tensor_to_py_object_no_sync gave a NULL object")
    obj = ctypes.cast(out, ctypes.py_object).value
    _decref(obj)  # the new reference the function returned (obj holds its own)
    return obj


def table_stream(table: ExchangeAPI, device_type: int, device_id: int) -> int:
    """``current_work_stream(device_type, device_id)``, as an int (0 for NULL)."""
    out = ctypes.c_void_p(1)
    if _STREAM(table.current_work_stream)(device_type, device_id, ctypes.byref(out)) != 0:
        raise _failed("current_work_stream")
    return out.value or 0
