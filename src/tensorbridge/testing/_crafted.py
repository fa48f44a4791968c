# SPDX-License-Identifier: Apache-2.0
"""The producers the consumer checks hand out, and how a consumer's result is read back.

`CraftedProducer` answers ``__dlpack__`` with capsules tensorbridge crafts field by
field (`tensorbridge._testing.make_capsule`) over NumPy memory of its own, so the
checks know the right values, can see whether a result shares that memory, and
count the calls of every capsule's deleter. `Layout` holds the arrays handed out
(2-d, or 1-d for a consumer that takes only 1-d); `Readback` reads a result back
through tensorbridge and `Expected` grades it.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import numpy as np

import tensorbridge as tb
from tensorbridge._devices import DLDeviceType
from tensorbridge._dtypes import DTYPES
from tensorbridge.testing._report import Status

__all__ = [
    "IS_COPIED",
    "READ_ONLY",
    "CraftedProducer",
    "Expected",
    "Layout",
    "Poison",
    "Readback",
    "address",
    "aligned",
    "craft",
    "crafted",
    "declared_dtype",
    "describe",
    "grid",
]

_testing: Any = importlib.import_module("tensorbridge._testing")

_KEYWORDS = ("stream", "max_version", "dl_device", "copy")
_CODES = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}
READ_ONLY, IS_COPIED = 1, 2


def _dtype_triple(dtype: np.dtype[Any]) -> tuple[int, int, int]:
    return (_CODES[dtype.kind], dtype.itemsize * 8, 1)


def craft(array: np.ndarray, *, versioned: bool, **overrides: Any) -> tuple[Any, Any]:
    """A crafted capsule describing ``array``'s memory (kept alive by the capsule)."""
    fields: dict[str, Any] = dict(
        shape=array.shape,
        strides=tuple(s // array.itemsize for s in array.strides),
        dtype=_dtype_triple(array.dtype),
        owner=array,
        versioned=versioned,
    )
    fields.update(overrides)
    data = fields.pop("data", array.__array_interface__["data"][0])
    made: tuple[Any, Any] = _testing.make_capsule(data, **fields)
    return made


class Poison:
    """Owns a crafted tensor's memory: dropped by the first deleter call, it
    overwrites that memory with -1, so a consumer reading it afterwards reads that."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __del__(self) -> None:
        self.array[...] = -1


class CraftedProducer:
    """Answers ``__dlpack__`` with crafted capsules and keeps them for the checks.

    ``mode``: "both" (versioned when asked with major 1, legacy otherwise),
    "legacy-only" (a pre-1.0 signature: only ``stream``), "legacy-answer" (takes the
    keywords, answers legacy), "versioned-only" (BufferError without max_version).
    ``poison=True``: the deleter overwrites the memory (`Poison`).
    ``copy=True`` exports a private copy (flagged IS_COPIED when versioned),
    ``dl_device`` other than its own device raises BufferError.
    """

    def __init__(
        self,
        array: np.ndarray,
        mode: str = "both",
        device: tuple[int, int] = (1, 0),
        **overrides: Any,
    ) -> None:
        self.array = array
        self.mode = mode
        self.device = device
        self.overrides = overrides
        self.calls: list[dict[str, Any]] = []
        self.made: list[tuple[Any, Any]] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        accepts = ("stream",) if self.mode == "legacy-only" else _KEYWORDS
        for key in kwargs:
            if key not in accepts:
                raise TypeError(f"__dlpack__() got an unexpected keyword argument {key!r}")
        max_version = kwargs.get("max_version")
        asked_versioned = max_version is not None and max_version[0] >= 1
        if self.mode == "versioned-only" and not asked_versioned:
            raise BufferError("this producer exports DLPack 1.x (versioned) capsules only")
        dl_device = kwargs.get("dl_device")
        if dl_device is not None and tuple(dl_device) != self.device:
            raise BufferError(f"this producer cannot export to device {dl_device}")
        versioned = asked_versioned and self.mode in ("both", "versioned-only")
        overrides = dict(self.overrides)
        array = self.array
        if overrides.pop("poison", False):
            overrides["owner"] = Poison(array)  # held by this capsule alone
        if kwargs.get("copy") and "data" not in overrides:
            array = np.array(array, copy=True)
            overrides.pop("owner", None)
            overrides["flags"] = overrides.get("flags", 0) | IS_COPIED
        if not versioned:
            overrides.pop("flags", None)
            overrides.pop("version", None)
        made = craft(array, versioned=versioned, device=self.device, **overrides)
        self.made.append(made)
        return made[0]


# One type per flavour: consumers may remember per type which call a producer takes.
class _Both(CraftedProducer):
    pass


class _LegacyOnly(CraftedProducer):
    pass


class _LegacyAnswer(CraftedProducer):
    pass


class _VersionedOnly(CraftedProducer):
    pass


class _SameCapsule(CraftedProducer):
    """Hands out its first capsule again on every call (a used one, once consumed)."""

    def __dlpack__(self, **kwargs: Any) -> Any:
        if not self.made:
            return super().__dlpack__(**kwargs)
        self.calls.append(kwargs)
        return self.made[0][0]


class _UsedAnswer(CraftedProducer):
    """Answers with a capsule named ``used_*`` already, as if it had been consumed (a
    method of its type: consumers may look ``__dlpack__`` up there, as Python does
    for special methods)."""

    def __dlpack__(self, **kwargs: Any) -> Any:
        capsule = super().__dlpack__(**kwargs)
        _testing.set_capsule_name(capsule, "used_" + _testing.capsule_name(capsule))
        return capsule


_FLAVOURS: dict[str, type[CraftedProducer]] = {
    "both": _Both,
    "legacy-only": _LegacyOnly,
    "legacy-answer": _LegacyAnswer,
    "versioned-only": _VersionedOnly,
    "same-capsule": _SameCapsule,
    "used-answer": _UsedAnswer,
}

#: The modes `CraftedProducer` itself knows; the other flavours answer as "both".
_MODES = ("both", "legacy-only", "legacy-answer", "versioned-only")


def crafted(array: np.ndarray, mode: str = "both", **kwargs: Any) -> CraftedProducer:
    """A producer of the flavour ``mode`` (a mode of `CraftedProducer`, or
    "same-capsule": its first capsule again on every call, or "used-answer": a
    capsule named ``used_*``)."""
    return _FLAVOURS[mode](array, mode if mode in _MODES else "both", **kwargs)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:160]}"


def aligned(array: np.ndarray, alignment: int = 64) -> np.ndarray:
    """A C-contiguous copy of ``array`` at an address that is a multiple of
    ``alignment``: consumers that share only aligned memory (JAX) or crash on
    unaligned memory (TensorFlow) then behave the same on every run."""
    size = max(array.nbytes, 1)
    block = np.empty(size + alignment, dtype=np.uint8)
    start = -block.ctypes.data % alignment
    out = block[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def grid(dtype: Any = np.float32) -> np.ndarray:
    """The 3x4 grid 0..11 of a dtype, 64-byte aligned."""
    return aligned(np.arange(12).reshape(3, 4).astype(dtype))


class Layout:
    """The arrays the probes hand out: 2-d, or 1-d for a consumer that takes only 1-d."""

    def __init__(self, flat: bool) -> None:
        self.flat = flat

    def grid(self, dtype: Any = np.float32) -> np.ndarray:
        a = grid(dtype)
        return a.reshape(-1) if self.flat else a

    def negative(self) -> np.ndarray:
        return self.grid()[::-1] if self.flat else self.grid()[:, ::-1]

    def zero(self) -> np.ndarray:
        row = aligned(np.arange(4, dtype=np.float32))
        return np.broadcast_to(row[1:2], (4,)) if self.flat else np.broadcast_to(row, (3, 4))

    def size0(self) -> np.ndarray:
        return np.zeros((0,) if self.flat else (0, 3), dtype=np.float32)

    def size0_strides(self) -> tuple[int, ...]:
        return (1,) if self.flat else (3, 1)


class Readback:
    """A consumer's result read back through tensorbridge."""

    def __init__(self, result: Any) -> None:
        self.tensor: Any = None
        self.device: tuple[int, int] | None = None
        self.note = ""
        if hasattr(result, "__dlpack_device__"):
            try:
                kind, index = result.__dlpack_device__()
                self.device = (int(kind), 0 if index is None else int(index))
            except Exception as exc:
                self.note = f"its __dlpack_device__() raised {describe(exc)}"
                return
        if self.device is not None and self.device[0] != int(DLDeviceType.kDLCPU):
            return
        try:
            self.tensor = tb.from_dlpack(result) if hasattr(result, "__dlpack__") else None
            if self.tensor is None:
                self.tensor = tb.asarray(result)
        except Exception as exc:
            self.note = f"the result could not be read back: {describe(exc)}"

    @property
    def address(self) -> int | None:
        return None if self.tensor is None else int(self.tensor.data_ptr())


class Expected:
    """What a crafted tensor holds: ``raw`` is its memory (NumPy), ``name`` its dtype."""

    def __init__(self, raw: np.ndarray, name: str | None = None) -> None:
        self.raw = raw
        self.name = name or raw.dtype.name
        # dtypes NumPy has no type for are compared as their bits
        self.as_bits = self.name != raw.dtype.name

    def verdict(self, back: Readback) -> tuple[Status, str]:
        t = back.tensor
        if t.dtype.name != self.name:
            return "fail", f"dtype {t.dtype.name}, expected {self.name}"
        values = np.array(t.view(self.raw.dtype.name) if self.as_bits else t, copy=True)
        if values.shape != self.raw.shape or not np.array_equal(values, self.raw):
            return "fail", f"wrong values: {values.tolist()!r:.100}"
        return "pass", ""


_DTYPE_NAMES = frozenset(DTYPES)


def declared_dtype(result: Any) -> str | None:
    """The dtype name the result's own ``dtype`` attribute spells (None: unknown)."""
    try:
        text = str(getattr(result, "dtype", "")).lower()
    except Exception:
        return None
    found = [w for w in re.findall(r"[a-z][a-z0-9_]*", text) if w in _DTYPE_NAMES]
    return found[-1] if len(set(found)) == 1 else None


def address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])
