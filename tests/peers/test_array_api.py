# SPDX-License-Identifier: Apache-2.0
"""What the Array API test suite and the standard's text ask of ``__dlpack__``,
``__dlpack_device__`` and ``from_dlpack``, asked of tensorbridge in both roles.

The peer suite is data-apis/array-api-tests ``array_api_tests/test_dlpack.py``; the
normative text is data-apis/array-api ``src/array_api_stubs/_2025_12/array_object.py``
(``__dlpack__``, ``__dlpack_device__``) and ``creation_functions.py``
(``from_dlpack``), the same words as in 2024.12. Producer role: a ``tb.Tensor``
(read by ``array_api_strict.from_dlpack`` where a consumer is needed). Consumer
role: ``tb.from_dlpack`` reads ``array_api_strict`` arrays, Tensors and fake
producers. Checks that older tests already make are not repeated here;
tests/peers/COVERAGE.md maps every check to the test that covers it.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from needs import framework
from producers import Producer, capsule_of, fake_device_producer

import tensorbridge as tb
from tensorbridge._core import FLAG_IS_COPIED, inspect_capsule

# The device types __dlpack_device__'s documentation lists as valid.
STANDARD_DEVICE_TYPES = {1, 2, 3, 4, 7, 8, 9, 10, 13, 14}
ALL_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
]
# hh.shapes(min_dims=1, max_side=2)
SHAPES = [(0,), (1,), (2,), (2, 0), (1, 2), (2, 2), (2, 1, 2)]


def _strict():
    return framework("array_api_strict")


def _ptr(capsule_info):
    return capsule_info["data"] + capsule_info["byte_offset"]


# --------------------------------------------------------------------------
# array-api-tests: test_dlpack_device
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dlpack_device_is_a_standard_pair(dtype):
    """Mirrors test_dlpack_device: (device_type, device_id) with a device type the
    standard lists and an int id, for a tensor of every dtype, and for our import
    of an array_api_strict array on each of its devices."""
    device_type, device_id = tb.empty(3, dtype=dtype).__dlpack_device__()
    assert int(device_type) in STANDARD_DEVICE_TYPES and isinstance(device_id, int)

    xp = _strict()
    if dtype in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
        "float64",
        "complex64",
        "complex128",
    ):
        info = xp.__array_namespace_info__()
        for device in info.devices():
            if dtype not in info.dtypes(device=device):
                continue  # e.g. Device('no_x64') has no 64-bit dtypes
            x = xp.empty(3, dtype=getattr(xp, dtype), device=device)
            pair = tb.from_dlpack(x).__dlpack_device__()
            assert pair == x.__dlpack_device__()
            assert int(pair[0]) in STANDARD_DEVICE_TYPES and isinstance(pair[1], int)


@pytest.mark.parametrize("device_type", sorted(STANDARD_DEVICE_TYPES - {1}))
def test_dlpack_device_of_device_memory(device_type):
    """test_dlpack_device's TODO (inputs on other devices), with fake device memory:
    the import reports the producer's device as the enum and an int."""
    t = tb.from_dlpack(fake_device_producer((device_type, 1)), stream=-1)
    pair = t.__dlpack_device__()
    assert pair == (device_type, 1)
    assert type(pair[0]) is tb.DLDeviceType and type(pair[1]) is int


# --------------------------------------------------------------------------
# array-api-tests: test_dunder_dlpack, with what the standard says of the result
# --------------------------------------------------------------------------

ABSENT = object()
COPIES = [ABSENT, None, True, False]
MAX_VERSIONS = [ABSENT, (0, 0), (1, 0), (2, 0)]
DL_DEVICES = [ABSENT, (1, 0)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dunder_dlpack_takes_every_keyword_combination(dtype, shape):
    """Mirrors test_dunder_dlpack: every combination of copy (absent, None, True,
    False), max_version (absent, (0, 0), (1, 0), (2, 0)) and dl_device (absent,
    (kDLCPU, 0)) exports. The standard's words on the result are checked too: a
    versioned capsule exactly when max_version's major is >= 1; copy=True copies and
    sets IS_COPIED; copy None/False share and do not set it; the device is the CPU."""
    t = tb.zeros(shape, dtype=dtype)
    for copy, max_version, dl_device in itertools.product(COPIES, MAX_VERSIONS, DL_DEVICES):
        kwargs = {
            k: v
            for k, v in (("copy", copy), ("max_version", max_version), ("dl_device", dl_device))
            if v is not ABSENT
        }
        info = inspect_capsule(t.__dlpack__(**kwargs))
        versioned = max_version is not ABSENT and max_version[0] >= 1
        assert info["name"] == ("dltensor_versioned" if versioned else "dltensor"), kwargs
        assert info["device"] == (1, 0) and info["shape"] == shape, kwargs
        if versioned:
            assert info["version"] == (1, 3), kwargs
            assert bool(info["flags"] & FLAG_IS_COPIED) is (copy is True), kwargs
        if t.size:
            assert (_ptr(info) == t.data_ptr()) is (copy is not True), kwargs


# --------------------------------------------------------------------------
# array-api-tests: test_from_dlpack
# --------------------------------------------------------------------------

STRICT_DTYPES = ["bool", "int8", "int64", "uint16", "float32", "float64", "complex64"]


@pytest.mark.parametrize("copy", [None, True, False])
@pytest.mark.parametrize("dtype", STRICT_DTYPES)
def test_from_dlpack_of_array_api_strict_arrays(dtype, copy):
    """Mirrors test_from_dlpack, tensorbridge consuming: for arrays on each of
    array_api_strict's devices, no device request gives the source's device (as a
    DLPack pair) and equal values; a device request gives that device; memory is
    shared unless copy=True."""
    xp = _strict()
    info = xp.__array_namespace_info__()
    for device in info.devices():
        if dtype not in info.dtypes(device=device):
            continue  # e.g. Device('no_x64') has no 64-bit dtypes
        x = xp.asarray(np.arange(4).reshape(2, 2) % 3, dtype=getattr(xp, dtype), device=device)
        address = np.from_dlpack(x).__array_interface__["data"][0]
        for target in (None, "cpu", tb.Device("cpu"), (1, 0)):
            y = tb.from_dlpack(x, copy=copy, device=target)
            if target is None:
                assert y.__dlpack_device__() == x.__dlpack_device__()
            else:
                assert y.device == tb.Device(target)
            assert y.tolist() == np.from_dlpack(x).tolist()
            assert (y.data_ptr() == address) is (copy is not True)


@pytest.mark.parametrize("copy", [None, True, False])
@pytest.mark.parametrize("dtype", STRICT_DTYPES)
def test_array_api_strict_from_dlpack_of_tensors(dtype, copy):
    """Mirrors test_from_dlpack, tensorbridge producing: array_api_strict imports a
    tensor on its default device or the one requested, with equal values, sharing
    unless copy=True."""
    xp = _strict()
    t = tb.asarray((np.arange(4).reshape(2, 2) % 3).tolist(), dtype=dtype)
    info = xp.__array_namespace_info__()
    for device in [None, *info.devices()]:
        if device is not None and dtype not in info.dtypes(device=device):
            continue  # e.g. Device('no_x64') has no 64-bit dtypes
        y = xp.from_dlpack(t, device=device, copy=copy)
        assert y.device == (info.default_device() if device is None else device)
        back = np.from_dlpack(y)
        assert back.tolist() == t.tolist()
        assert (back.__array_interface__["data"][0] == t.data_ptr()) is (copy is not True)


@pytest.mark.parametrize("copy", [None, True, False])
def test_from_dlpack_of_our_own_tensors(copy):
    """Mirrors test_from_dlpack with tensorbridge on both ends."""
    t = tb.arange(6, dtype="int32").reshape(2, 3)
    for target in (None, "cpu"):
        y = tb.from_dlpack(t, device=target, copy=copy)
        assert y.device == t.device and y.tolist() == t.tolist()
        assert (y.data_ptr() == t.data_ptr()) is (copy is not True)


# --------------------------------------------------------------------------
# The standard's text: __dlpack__
# --------------------------------------------------------------------------


def test_dl_device_cpu_export_takes_no_stream():
    """__dlpack__: "When dl_device is provided explicitly, stream must be a valid
    construct for the specified device type. In particular, when kDLCPU is in use,
    stream must be None". Producing: managed memory exported to (kDLCPU, 0) refuses a
    CUDA stream, as tensorbridge's CPU exports do."""
    capsule, _ = capsule_of(np.arange(4.0), device=(13, 0))  # CUDA managed memory
    t = tb.from_dlpack(capsule)
    for stream in (None, -1):
        capsule = t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), stream=stream)
        assert inspect_capsule(capsule)["device"] == (1, 0)
    for stream in (1, 5):
        with pytest.raises(BufferError, match=f"stream={stream}"):
            t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), stream=stream)


def test_asking_for_the_cpu_passes_no_stream():
    """The same sentence, consuming: asking a CUDA producer for (kDLCPU, 0) passes
    no stream (None), whatever stream the caller gave."""
    a = np.arange(4.0)
    for stream in (None, 7):
        p = fake_device_producer((2, 0))
        p.make = lambda **kw: capsule_of(a, flags=FLAG_IS_COPIED)  # a host copy
        assert tb.from_dlpack(p, device="cpu", stream=stream).tolist() == a.tolist()
        assert p.calls[-1].get("dl_device") == (1, 0)
        assert p.calls[-1].get("stream") is None, p.calls


# --------------------------------------------------------------------------
# The standard's text: from_dlpack
# --------------------------------------------------------------------------


def test_input_without_dlpack_methods_is_an_attribute_error():
    """from_dlpack raises AttributeError "If the __dlpack__ and __dlpack_device__
    methods are not present on the input array". tensorbridge's NotDLPackError is
    both that and the TypeError it used to raise."""

    class OnlyDLPack:
        def __dlpack__(self, **kwargs):
            raise AssertionError("must not be called")

    for obj in (object(), [1.0, 2.0], OnlyDLPack()):
        with pytest.raises(AttributeError, match="__dlpack_device__") as info:
            tb.from_dlpack(obj)
        assert isinstance(info.value, TypeError)
        assert type(info.value).__name__ == "NotDLPackError"
    assert issubclass(tb.NotDLPackError, AttributeError)
    assert issubclass(tb.NotDLPackError, TypeError)


def test_capsule_of_another_major_version_is_refused_through_a_producer():
    """__dlpack__ "may return a capsule of version max_version ... or of a different
    version. This means the consumer must verify the version even when max_version
    is passed": a 2.0 capsule handed back for max_version=(1, 3) is refused, renamed
    and released once (the DLPack header's rule for a major version it cannot read)."""
    a = np.arange(3.0)
    p = Producer(lambda **kw: capsule_of(a, version=(2, 0)))
    with pytest.raises(BufferError, match=r"DLPack version 2\.0"):
        tb.from_dlpack(p)
    assert p.calls == [{"max_version": (1, 3)}]
    assert p.counters[0].calls == 1


def test_capsule_of_a_newer_minor_version_is_accepted():
    """The standard's note on versions: "minor versions represent ABI-compatible
    additions", so a 1.99 capsule is read like a 1.3 one."""
    a = np.arange(3.0)
    t = tb.from_dlpack(Producer(lambda **kw: capsule_of(a, version=(1, 99))))
    assert t.data_ptr() == a.ctypes.data and t.tolist() == [0.0, 1.0, 2.0]
