# SPDX-License-Identifier: Apache-2.0
"""Devices: the DLPack device-type enum and a small `Device` value type."""

from __future__ import annotations

import enum

TYPE_CHECKING = False  # typing costs ~10 ms of import time; annotations are strings
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DLDeviceType", "Device", "as_device"]


class DLDeviceType(enum.IntEnum):
    """Every device type of the DLPack 1.3 header (values 5 and 6 are unused)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18


#: Short names used by `Device` and in strings such as ``"cuda:1"``.
_NAMES = {
    1: "cpu",
    2: "cuda",
    3: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    9: "vpi",
    10: "rocm",
    11: "rocm_host",
    12: "ext_dev",
    13: "cuda_managed",
    14: "oneapi",
    15: "webgpu",
    16: "hexagon",
    17: "maia",
    18: "trn",
}
_TYPES = {name: value for value, name in _NAMES.items()}
# Other frameworks' spellings of the same device types.
_TYPES.update(
    {
        "cuda_pinned": 3,
        "cpu_pinned": 3,
        "pinned": 3,
        "hip": 10,
        "mps": 8,  # PyTorch's Metal backend
        "xpu": 14,  # PyTorch's oneAPI backend
        "sycl": 14,
    }
)

#: Device types whose memory the CPU can read and write directly.
HOST_ACCESSIBLE = frozenset({1, 3, 11, 13})


class Device:
    """Where a tensor's memory lives: a DLPack device type and an index.

    ``Device("cpu")``, ``Device("cuda", 1)``, ``Device("cuda:1")``,
    ``Device((2, 1))`` and ``Device(torch.device("cuda:1"))`` all work, as does
    any object with ``__dlpack_device__``. ``str(Device("cuda", 1))`` is
    ``"cuda:1"``; a Device compares equal to its string and to its
    ``(device_type, index)`` tuple.
    """

    __slots__ = ("device_type", "index")

    device_type: DLDeviceType
    index: int

    def __new__(cls, type: Any, index: int | None = None) -> Device:
        device_type, parsed_index = _parse(type, index)
        return cached_device(device_type, parsed_index)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"Device is immutable; cannot set {key!r}")

    @property
    def type(self) -> str:
        """The device type's short name, e.g. ``"cuda"``."""
        return _NAMES[self.device_type]

    def __dlpack_device__(self) -> tuple[DLDeviceType, int]:
        return (self.device_type, self.index)

    def __str__(self) -> str:
        if self.device_type == 1 and self.index == 0:
            return "cpu"
        return f"{_NAMES[self.device_type]}:{self.index}"

    def __repr__(self) -> str:
        return f"tensorbridge.Device({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Device):
            return self is other or (
                self.device_type == other.device_type and self.index == other.index
            )
        if isinstance(other, (str, tuple)):
            try:
                return self == Device(other)
            except (TypeError, ValueError):
                return False
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash((int(self.device_type), self.index))

    def __reduce__(self) -> tuple[object, tuple[int, int]]:
        return (_make, (int(self.device_type), self.index))


_CACHE: dict[tuple[int, int], Device] = {}


def cached_device(device_type: int, index: int) -> Device:
    """The cached Device for an already validated (device_type, index)."""
    key = (device_type, index)
    device = _CACHE.get(key)
    if device is None:
        device = object.__new__(Device)
        object.__setattr__(device, "device_type", DLDeviceType(device_type))
        object.__setattr__(device, "index", index)
        _CACHE[key] = device
    return device


def _make(device_type: Any, index: Any) -> Device:
    """A Device from a pickle (the name pickles refer to, since 0.1.0): checked as
    Device() checks it, since a pickle says anything (cpu:-5 was made, and sent to
    producers as dl_device)."""
    what = (device_type, index)
    return cached_device(_check_type(device_type, what), _check_index(index, what))


def _check_index(index: Any, what: object) -> int:
    if isinstance(index, bool) or not isinstance(index, int):
        # numpy/torch integer scalars are fine; anything else is not an index.
        if hasattr(index, "__index__") and not isinstance(index, bool):
            index = int(index.__index__())
        else:
            raise TypeError(f"device index must be an int; got {index!r} in {what!r}")
    if not 0 <= index < 2**31:
        raise ValueError(f"device index must be in [0, 2**31); got {index} in {what!r}")
    return int(index)


def _check_type(device_type: Any, what: object) -> int:
    if isinstance(device_type, bool) or not isinstance(device_type, int):
        raise TypeError(f"device type must be an int; got {device_type!r} in {what!r}")
    if device_type not in _NAMES:
        raise ValueError(
            f"unknown DLPack device type {int(device_type)} in {what!r}; "
            f"expected one of {sorted(_NAMES)}"
        )
    return int(device_type)


#: Names that say "a GPU" without saying whose memory (JAX's platform, Paddle's and
#: TensorFlow's device names): refused, with the names that say it.
_AMBIGUOUS = frozenset({"gpu"})


def _known_names() -> str:
    """The device names, each with its other spellings."""
    other: dict[int, list[str]] = {}
    for name, value in _TYPES.items():
        if name != _NAMES[value]:
            other.setdefault(value, []).append(name)
    return ", ".join(
        f"{name} ({', '.join(other[value])})" if value in other else name
        for value, name in sorted(_NAMES.items(), key=lambda item: item[1])
    )


def _parse_str(text: str, index: int | None) -> tuple[int, int]:
    name, sep, tail = text.strip().lower().partition(":")
    if name in _AMBIGUOUS:
        raise ValueError(
            f"device {text!r} does not say whose GPU memory: name it by its kind, 'cuda' "
            f"(NVIDIA) or 'rocm' (AMD), e.g. 'cuda{':' + tail if sep else ''}'"
        )
    if name not in _TYPES:
        raise ValueError(
            f"unknown device {text!r}; expected a name such as 'cpu' or 'cuda:1' "
            f"(known: {_known_names()}){_module_hint(name)}"
        )
    if sep:
        if index is not None:
            raise ValueError(f"device index given twice: {text!r} and index={index!r}")
        if not tail.isdigit():
            raise ValueError(f"device index in {text!r} must be a non-negative integer")
        index = int(tail)
    return _TYPES[name], _check_index(0 if index is None else index, text)


def _module_hint(name: str) -> str:
    """A hint for a device name that is a module's (``t.to("numpy")``), else ""."""
    import importlib.util

    try:
        found = name.isidentifier() and importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return ""
    return (
        f"; {name!r} names a module, not a device: tensorbridge.convert(x, {name!r}) "
        f"makes an array of it"
    )


def _parse(obj: Any, index: Any) -> tuple[int, int]:
    if isinstance(obj, Device):
        if index is not None and index != obj.index:
            raise ValueError(f"device index given twice: {obj} and index={index!r}")
        return int(obj.device_type), obj.index
    if isinstance(obj, str):
        return _parse_str(obj, index)
    if isinstance(obj, int) and not isinstance(obj, bool):
        return _check_type(obj, obj), _check_index(0 if index is None else index, obj)
    if index is not None:
        raise TypeError(f"index= is only accepted with a device name or type; got {obj!r}")
    if isinstance(obj, tuple):
        if len(obj) != 2:
            raise ValueError(f"a device tuple must be (device_type, index); got {obj!r}")
        dev_index = 0 if obj[1] is None else obj[1]
        return _check_type(obj[0], obj), _check_index(dev_index, obj)
    dlpack_device = getattr(type(obj), "__dlpack_device__", None)
    if dlpack_device is not None:
        return _parse(tuple(dlpack_device(obj)), None)
    # torch.device (type, index); JAX devices (platform, id).
    kind = getattr(obj, "type", None)
    if isinstance(kind, str):
        dev_index = getattr(obj, "index", None)
        return _parse_str(kind, 0 if dev_index is None else dev_index)
    platform = getattr(obj, "platform", None)
    if isinstance(platform, str) and isinstance(getattr(obj, "id", None), int):
        if platform in _AMBIGUOUS:
            # A JAX device says "gpu"; its client says whose (cuda, rocm).
            whose = getattr(getattr(obj, "client", None), "platform", None)
            platform = whose if isinstance(whose, str) else platform
        return _parse_str(platform, obj.id)
    raise TypeError(
        "device must be a Device, a name such as 'cuda:1', a (device_type, index) tuple "
        f"or a framework device object; got {type(obj).__name__} {obj!r}"
    )


def as_device(obj: Any) -> Device:
    """Convert anything `Device` accepts into a Device (Devices pass through)."""
    if type(obj) is Device:
        return obj
    return Device(obj)


def device_name(device_type: int) -> str:
    """The short name of a device type value, or ``"device_type=N"`` if unknown."""
    return _NAMES.get(device_type, f"device_type={device_type}")
