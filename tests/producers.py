# SPDX-License-Identifier: Apache-2.0
"""Fake DLPack producers, one protocol corner each, built on tensorbridge._testing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tensorbridge import _testing

NEW_KEYWORDS = ("stream", "max_version", "dl_device", "copy")

_DL_CODES = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}


def dl_dtype(dtype: Any) -> tuple[int, int, int]:
    dt = np.dtype(dtype)
    return (_DL_CODES[dt.kind], dt.itemsize * 8, 1)


def capsule_of(array: np.ndarray, **overrides: Any) -> tuple[object, _testing.DeleterCounter]:
    """A crafted capsule describing a NumPy array's memory (kept alive by the capsule)."""
    fields: dict[str, Any] = dict(
        shape=array.shape,
        strides=tuple(s // array.itemsize for s in array.strides),
        dtype=dl_dtype(array.dtype),
        owner=array,
    )
    fields.update(overrides)
    data = fields.pop("data", array.__array_interface__["data"][0])
    return _testing.make_capsule(data, **fields)


class Producer:
    """A producer whose __dlpack__ records its calls and returns ``make(**kwargs)``.

    ``accepts`` lists the keywords its __dlpack__ understands; others raise the
    TypeError Python raises for an unexpected keyword.
    """

    def __init__(
        self,
        make: Callable[..., object],
        device: tuple[int, int] = (1, 0),
        accepts: tuple[str, ...] = NEW_KEYWORDS,
    ) -> None:
        if "max_version" not in accepts and type(self) is Producer:
            # A real producer type has one __dlpack__ signature, and tensorbridge
            # remembers per type which call it takes: each old-style producer gets
            # a type of its own (a test that wants a shared type assigns one).
            self.__class__ = type("LegacyProducer", (LegacyProducer,), {})
        self.make = make
        self.device = device
        self.accepts = accepts
        self.calls: list[dict[str, Any]] = []
        self.counters: list[_testing.DeleterCounter] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, **kwargs: Any) -> object:
        self.calls.append(kwargs)
        for key in kwargs:
            if key not in self.accepts:
                raise TypeError(f"__dlpack__() got an unexpected keyword argument {key!r}")
        result = self.make(**kwargs)
        if isinstance(result, tuple):
            capsule, counter = result
            self.counters.append(counter)
            return capsule
        return result


class LegacyProducer(Producer):
    """A producer type whose __dlpack__ predates max_version (DLPack < 1.0)."""


def numpy_producer(array: np.ndarray, **kwargs: Any) -> Producer:
    """A versioned producer of a NumPy array's memory (v1.3 capsules)."""
    return Producer(lambda **kw: capsule_of(array), **kwargs)


def legacy_producer(array: np.ndarray) -> Producer:
    """A DLPack 0.x producer: ``__dlpack__(stream=None)`` only, legacy capsules."""
    return Producer(lambda **kw: capsule_of(array, versioned=False), accepts=("stream",))


def fake_device_producer(device: tuple[int, int], shape=(4,), **kwargs: Any) -> Producer:
    """A producer of memory on a device this machine does not have: the address
    is never touched, so a made-up one is enough."""
    address = 0x7F0000001000

    def make(**kw: Any) -> object:
        return _testing.make_capsule(
            address,
            shape=shape,
            strides=tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape))),
            device=device,
        )

    return Producer(make, device=device, **kwargs)
