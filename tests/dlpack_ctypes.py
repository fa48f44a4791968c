# SPDX-License-Identifier: Apache-2.0
"""The DLPack 1.3 structs in ctypes, for tests that play a C producer or consumer
(the layouts of ``src/tensorbridge/_dlpack.h``)."""

from __future__ import annotations

import ctypes


class Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", Device),
        ("ndim", ctypes.c_int32),
        ("dtype", DType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class ManagedTensor(ctypes.Structure):
    """The legacy ``DLManagedTensor`` (deleter as an address)."""

    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class ManagedTensorVersioned(ctypes.Structure):
    """``DLManagedTensorVersioned``; its deleter field is typed below."""


# A C deleter called through CFUNCTYPE runs without the GIL, as C++ consumers do.
VERSIONED_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(ManagedTensorVersioned))
ManagedTensorVersioned._fields_ = [
    ("version", Version),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", VERSIONED_DELETER),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]
