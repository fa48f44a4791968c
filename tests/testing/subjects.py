# SPDX-License-Identifier: Apache-2.0
"""Producers and consumers graded by the tests of tensorbridge.testing: importable by
name (``testing.subjects:...``), so the checker can probe them in child processes."""

from __future__ import annotations

from typing import Any

import numpy as np

import tensorbridge as tb
from tensorbridge.testing import CASES


def tensorbridge_tensor(case: str = "float32") -> Any:
    return tb.asarray(CASES[case]())


def numpy_array(case: str = "float32") -> Any:
    return CASES[case]()


# ---------------------------------------------------------------------------------------
# Producers that break one rule each (a Wrapped tensorbridge Tensor, altered)

import os  # noqa: E402
import time  # noqa: E402

from tensorbridge import _core, _testing  # noqa: E402


class Wrapped:
    """Delegates to a tensorbridge Tensor; subclasses break one rule."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.t = tb.asarray(array)

    def __dlpack_device__(self) -> Any:
        return self.t.__dlpack_device__()

    def __dlpack__(self, **kw: Any) -> Any:
        return self.t.__dlpack__(**kw)

    def craft(self, **fields: Any) -> Any:
        a = self.array
        base: dict[str, Any] = dict(
            shape=a.shape,
            strides=tuple(s // a.itemsize for s in a.strides),
            dtype=(2, 32, 1),
            owner=a,
        )
        base.update(fields)
        return _testing.make_capsule(base.pop("data", a.ctypes.data), **base)[0]


def wrapped(cls: type[Wrapped]) -> Any:
    def make(case: str = "float32") -> Any:
        return cls(CASES[case]())

    return make


class DeviceNone(Wrapped):
    def __dlpack_device__(self) -> Any:
        return (1, None)


class AlwaysVersioned(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        kw["max_version"] = (1, 3)
        return self.t.__dlpack__(**kw)


class NoMaxVersion(Wrapped):
    def __dlpack__(self, stream: Any = None) -> Any:
        return self.t.__dlpack__()


class NoStream(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if "stream" in kw:
            raise RuntimeError("no stream")
        return self.t.__dlpack__(**kw)


class NoDlDevice(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if kw.get("dl_device") is not None:
            raise BufferError("no dl_device")
        return self.t.__dlpack__(**kw)


class CopyIgnored(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        kw.pop("copy", None)
        return self.t.__dlpack__(**kw)


class CopyFalseCopies(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if kw.get("copy") is False:
            kw["copy"] = True
        return self.t.__dlpack__(**kw)


class SameCapsule(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if not hasattr(self, "capsule"):
            self.capsule = self.t.__dlpack__(**kw)
        return self.capsule


def _crafting(**fields: Any) -> type[Wrapped]:
    class Crafted(Wrapped):
        def __dlpack__(self, **kw: Any) -> Any:
            versioned = kw.get("max_version") is not None
            extra = dict(fields) if versioned else {}
            return self.craft(versioned=versioned, **extra)

    return Crafted


# make() only (no cases): float32 crafted capsules with one field wrong
NullStrides = _crafting(strides=None)
Version2 = _crafting(version=(2, 0))
UnknownDType = _crafting(dtype=(99, 32, 1))
WrongDevice = _crafting(device=(3, 0))
NegativeNdim = _crafting(ndim=-1)
NullData = _crafting(data=0)
UnknownFlags = _crafting(flags=1 << 10)


def float32_only(cls: type[Wrapped]) -> Any:
    def make() -> Any:
        return cls(CASES["float32"]())

    return make


class WrongValues(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        return tb.asarray(np.ascontiguousarray(self.array) + 1).__dlpack__(**kw)


class DropsReadOnly(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        return self.craft(versioned=kw.get("max_version") is not None, dtype=_dl(self.array))


def _dl(a: np.ndarray) -> tuple[int, int, int]:
    return ({"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}[a.dtype.kind], a.itemsize * 8, 1)


_kept: list[Any] = []


class Leaky(Wrapped):
    """Its exports keep the object alive for ever (the counters are never dropped)."""

    def __dlpack__(self, **kw: Any) -> Any:
        capsule, counter = _testing.make_capsule(
            self.array.ctypes.data, shape=(3, 4), strides=(4, 1), owner=self, deleter=False
        )
        _kept.append(counter)
        return capsule


class NullFunctionTable(Wrapped):
    __dlpack_c_exchange_api__ = _testing.exchange_table("null-fn")


class WrongNameTable(Wrapped):
    __dlpack_c_exchange_api__ = _testing.exchange_table("wrong-name")


class AbortsOnCopy(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if kw.get("copy"):
            os.abort()
        return self.t.__dlpack__(**kw)


class HangsOnStream(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if "stream" in kw:
            time.sleep(600)
        return self.t.__dlpack__(**kw)


# ---------------------------------------------------------------------------------------
# Consumers that break one rule each


def no_retry(x: Any) -> Any:
    return tb.from_dlpack(x.__dlpack__(max_version=(1, 3)))


def versioned_names_only(x: Any) -> Any:
    capsule = x.__dlpack__(max_version=(1, 3))
    if _testing.capsule_name(capsule) != "dltensor_versioned":
        raise ValueError("PyCapsule_GetPointer called with incorrect name")
    return tb.from_dlpack(capsule)


def ignores_byte_offset(x: Any) -> Any:
    capsule = x.__dlpack__(max_version=(1, 3))
    info = _core.inspect_capsule(capsule)
    t = tb.from_dlpack(capsule)
    if info["byte_offset"]:
        return np.array(tb.from_dlpack(t).flatten())[: t.size - 4].copy()
    return t


def deletes_without_renaming(x: Any) -> Any:
    capsule = x.__dlpack__(max_version=(1, 3))
    name = _testing.capsule_name(capsule)
    t = tb.from_dlpack(capsule)
    values = np.array(t)
    del t  # the deleter runs
    _testing.set_capsule_name(capsule, name)  # as if never renamed
    return values


def ignores_read_only(x: Any) -> Any:
    return _core.set_readonly(tb.from_dlpack(x), False)


def cuda_as_cpu(x: Any) -> Any:
    if int(x.__dlpack_device__()[0]) != 1:
        return np.zeros((3, 4), np.float32)
    return tb.from_dlpack(x)


def takes_used(x: Any) -> Any:
    if _core.is_capsule(x):
        name = _testing.capsule_name(x)
        if name.startswith("used_"):
            _testing.set_capsule_name(x, name.removeprefix("used_"))
    return tb.from_dlpack(x)


def accepts_malformed(x: Any) -> Any:
    try:
        return tb.from_dlpack(x)
    except BufferError:
        return np.zeros(())


def aborts_on_negative_strides(x: Any) -> Any:
    info = _core.inspect_capsule(x.__dlpack__(max_version=(1, 3)))
    if any(s < 0 for s in info.get("strides") or ()):
        os.abort()
    return tb.from_dlpack(x)


def hangs_on_zero_strides(x: Any) -> Any:
    info = _core.inspect_capsule(x.__dlpack__(max_version=(1, 3)))
    if 0 in (info.get("strides") or ()):
        time.sleep(600)
    return tb.from_dlpack(x)


def aborts_on_copy() -> Any:
    return AbortsOnCopy(CASES["float32"]())


def hangs_on_stream() -> Any:
    return HangsOnStream(CASES["float32"]())


def torch_tensor() -> Any:
    import torch

    return torch.arange(12, dtype=torch.float32).reshape(3, 4)
