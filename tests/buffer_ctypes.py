# SPDX-License-Identifier: Apache-2.0
"""A buffer-protocol exporter whose every ``Py_buffer`` field the test chooses (NULL
shapes and data pointers, lengths that disagree with the shape, odd formats), made
with ctypes alone: a heap type from ``PyType_FromSpec`` whose ``bf_getbuffer`` slot is
a Python callback. For tests that play a malformed C exporter."""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["CraftedBuffer"]

_ssize = ctypes.c_ssize_t


class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", _ssize),
        ("itemsize", _ssize),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(_ssize)),
        ("strides", ctypes.POINTER(_ssize)),
        ("suboffsets", ctypes.POINTER(_ssize)),
        ("internal", ctypes.c_void_p),
    ]


class _Slot(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_int), ("pfunc", ctypes.c_void_p)]


class _Spec(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("basicsize", ctypes.c_int),
        ("itemsize", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("slots", ctypes.POINTER(_Slot)),
    ]


_GETBUFFER = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int
)
_BF_GETBUFFER = 1  # (Py_bf_getbuffer in typeslots.h)
_DEFAULT_FLAGS = (1 << 9) | (1 << 10)  # Py_TPFLAGS_HEAPTYPE | Py_TPFLAGS_BASETYPE


def _getbuffer(exporter: Any, view: Any, flags: int) -> int:
    fields = exporter.fields
    v = view.contents
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(exporter))  # PyBuffer_Release drops it
    v.obj = id(exporter)
    v.buf = fields.get("buf")
    v.len = fields.get("len", 0)
    v.itemsize = fields.get("itemsize", 1)
    v.readonly = fields.get("readonly", 1)
    shape = fields.get("shape")
    v.ndim = fields.get("ndim", len(shape) if shape is not None else 1)
    v.format = fields.get("format", b"B")
    for name in ("shape", "strides", "suboffsets"):
        values = fields.get(name)
        if values is None:
            setattr(v, name, None)
        else:
            array = (_ssize * max(len(values), 1))(*values)
            exporter.arrays.append(array)  # alive as long as the exporter
            setattr(v, name, ctypes.cast(array, ctypes.POINTER(_ssize)))
    v.internal = None
    return 0


_callback = _GETBUFFER(_getbuffer)
_slots = (_Slot * 2)(_Slot(_BF_GETBUFFER, ctypes.cast(_callback, ctypes.c_void_p)), _Slot(0, None))
_spec = _Spec(b"tests.CraftedBufferBase", 16, 0, _DEFAULT_FLAGS, _slots)
_from_spec = ctypes.pythonapi.PyType_FromSpec
_from_spec.restype = ctypes.py_object
_from_spec.argtypes = [ctypes.POINTER(_Spec)]
_Base = _from_spec(ctypes.byref(_spec))


class CraftedBuffer(_Base):  # type: ignore[misc,valid-type]
    """An exporter of the given Py_buffer fields (buf: an address or None; shape,
    strides, suboffsets: lists or None; format: bytes or None)."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields
        self.arrays: list = []
