# SPDX-License-Identifier: Apache-2.0
"""Exporting capsules (_capsules.pxi): Tensor.__dlpack__ / __dlpack_device__ / to_dlpack,
the producer side. The consumer side is in test_capsules.py."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from producers import capsule_of, fake_device_producer

import tensorbridge as tb
from tensorbridge import _testing
from tensorbridge._core import FLAG_IS_COPIED, FLAG_READ_ONLY, inspect_capsule


def readonly_tensor(a):
    a = np.array(a)
    a.flags.writeable = False
    return tb.from_dlpack(a), a


@pytest.mark.parametrize(
    ("max_version", "name"),
    [
        (None, "dltensor"),
        ((0, 8), "dltensor"),
        ((1, 0), "dltensor_versioned"),
        ((1, 3), "dltensor_versioned"),
        ((1, 99), "dltensor_versioned"),
        ((2, 0), "dltensor_versioned"),
    ],
)
def test_max_version_chooses_the_capsule_kind(max_version, name):
    t = tb.from_dlpack(np.arange(3.0))
    info = inspect_capsule(t.__dlpack__(max_version=max_version))
    assert info["name"] == name
    if name == "dltensor_versioned":
        assert info["version"] == (1, 3)  # what we implement, whatever was asked
        assert info["flags"] == 0


@pytest.mark.parametrize("bad", [(1,), [1, 0], (1, "0"), "1.3", 1])
def test_bad_max_version(bad):
    t = tb.from_dlpack(np.arange(3.0))
    with pytest.raises(TypeError, match="max_version"):
        t.__dlpack__(max_version=bad)


def test_arguments_are_keyword_only():
    t = tb.from_dlpack(np.arange(3.0))
    with pytest.raises(TypeError):
        t.__dlpack__(None)


def test_export_describes_the_tensor_exactly():
    a = np.arange(24, dtype=np.int16).reshape(2, 3, 4)[:, ::-1, 1::2]
    t = tb.from_dlpack(a)
    info = inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    assert info["shape"] == (2, 3, 2)
    assert info["strides"] == (12, -4, 2)
    assert info["dtype"] == (0, 16, 1)
    assert info["device"] == (1, 0)
    assert info["data"] + info["byte_offset"] == a.ctypes.data
    assert info["deleter"]


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t[1:],
        lambda t: t[:, 2:],
        lambda t: t.T[1:, ::2],
        lambda t: t[2, 3],
        lambda t: t[::-1, 1:],
    ],
    ids=["rows", "columns", "transposed slice", "0-d", "reversed"],
)
@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_views_export_the_offset_folded_into_data(view, max_version):
    # Consumers that ignore byte_offset (Paddle, dlpack's reference C consumer)
    # read views right: data points at element 0 and byte_offset is 0, as NumPy
    # and PyTorch export them.
    t = view(tb.asarray(np.arange(20.0).reshape(4, 5)))
    capsule = t.__dlpack__(max_version=max_version) if max_version else tb.to_dlpack(t)
    info = inspect_capsule(capsule)
    assert info["byte_offset"] == 0
    assert info["data"] == t.data_ptr()


def test_an_imported_byte_offset_is_folded_on_export():
    a = np.arange(8.0)
    capsule, _ = capsule_of(a, byte_offset=24, shape=(5,), strides=(1,))
    t = tb.from_dlpack(capsule)
    assert t.data_ptr() == a.ctypes.data + 24
    info = inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    assert (info["data"], info["byte_offset"]) == (a.ctypes.data + 24, 0)
    assert np.from_dlpack(t).tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]


@pytest.mark.parametrize(
    ("device", "folded"),
    [
        ((2, 0), True),
        ((3, 0), True),
        ((10, 1), True),
        ((13, 0), True),
        ((14, 0), True),
        ((4, 0), False),
        ((7, 0), False),
        ((8, 0), False),
        ((15, 0), False),
    ],
    ids=[
        "cuda",
        "cuda_host",
        "rocm",
        "cuda_managed",
        "oneapi",
        "opencl",
        "vulkan",
        "metal",
        "webgpu",
    ],
)
def test_byte_offset_is_kept_where_data_may_be_a_handle(device, folded):
    # OpenCL's cl_mem, Vulkan's VkBuffer, Metal's MTLBuffer are handles: pointer
    # arithmetic on them is meaningless, so the offset stays in byte_offset.
    handle = 0x10000
    capsule, _ = _testing.make_capsule(
        handle, shape=(4,), strides=(1,), device=device, byte_offset=16
    )
    t = tb.from_dlpack(capsule)
    info = inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    expected = (handle + 16, 0) if folded else (handle, 16)
    assert (info["data"], info["byte_offset"]) == expected
    view = t[1:]
    info = inspect_capsule(view.__dlpack__(max_version=(1, 3)))
    expected = (handle + 16 + 4, 0) if folded else (handle, 20)
    assert (info["data"], info["byte_offset"]) == expected


def test_zero_d_and_size_zero_exports():
    info = inspect_capsule(tb.from_dlpack(np.array(1.0)).__dlpack__(max_version=(1, 3)))
    assert info["ndim"] == 0 and info["shape"] == () and info["strides"] == ()
    info = inspect_capsule(tb.from_dlpack(np.zeros((0, 3))).__dlpack__(max_version=(1, 3)))
    assert info["data"] == 0 and info["byte_offset"] == 0  # NULL data for empty tensors
    assert info["shape"] == (0, 3) and info["strides"] is not None


def test_strides_are_filled_even_when_the_import_had_none():
    capsule, _ = capsule_of(np.arange(6.0).reshape(2, 3), strides=None, versioned=False)
    t = tb.from_dlpack(capsule)
    assert inspect_capsule(t.__dlpack__(max_version=(1, 3)))["strides"] == (3, 1)


def test_readonly_tensors_only_export_versioned():
    t, _ = readonly_tensor([1.0, 2.0])
    with pytest.raises(BufferError, match=r"read-only.*max_version=\(1, 3\)"):
        t.__dlpack__()
    with pytest.raises(BufferError, match=r"to_dlpack\(\): cannot export a read-only"):
        tb.to_dlpack(t)
    info = inspect_capsule(t.__dlpack__(max_version=(1, 0)))
    assert info["flags"] == FLAG_READ_ONLY


def test_copy_true_exports_a_private_flagged_copy():
    t, a = readonly_tensor(np.arange(6.0).reshape(2, 3).T)
    capsule = t.__dlpack__(max_version=(1, 3), copy=True)
    info = inspect_capsule(capsule)
    assert info["flags"] == FLAG_IS_COPIED  # writable: the copy is the consumer's
    assert info["data"] != a.ctypes.data
    assert info["strides"] == (2, 1)
    b = np.from_dlpack(_Holder(capsule))
    assert b.tolist() == a.tolist() and b.flags.writeable
    # Legacy export of a copy is fine: the copy is writable.
    assert inspect_capsule(t.__dlpack__(copy=True))["name"] == "dltensor"


def test_copy_false_and_none_share():
    a = np.arange(3.0)
    t = tb.from_dlpack(a)
    for copy in (None, False):
        info = inspect_capsule(t.__dlpack__(max_version=(1, 3), copy=copy))
        assert info["data"] == a.ctypes.data and info["flags"] == 0


def test_bad_copy_argument():
    t = tb.from_dlpack(np.arange(3.0))
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        t.__dlpack__(copy="yes")


@pytest.mark.parametrize("dl_device", [(1, 0), (tb.DLDeviceType.kDLCPU, 0)])
def test_dl_device_cpu_is_accepted_for_cpu_data(dl_device):
    t = tb.from_dlpack(np.arange(3.0))
    assert inspect_capsule(t.__dlpack__(max_version=(1, 3), dl_device=dl_device))["device"] == (
        1,
        0,
    )


def test_dl_device_cpu_relabels_host_accessible_memory():
    a = np.arange(3.0)
    capsule, _ = capsule_of(a, device=(13, 0))  # CUDA managed memory
    t = tb.from_dlpack(capsule)
    info = inspect_capsule(t.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))
    assert info["device"] == (1, 0) and info["data"] == a.ctypes.data


@pytest.mark.parametrize(
    ("source", "dl_device"), [((1, 0), (2, 0)), ((2, 0), (1, 0)), ((2, 0), (2, 1))]
)
def test_impossible_dl_device(source, dl_device):
    t = (
        tb.from_dlpack(fake_device_producer(source))
        if source != (1, 0)
        else tb.from_dlpack(np.arange(3.0))
    )
    with pytest.raises(BufferError, match=r"cannot export .* memory to dl_device="):
        t.__dlpack__(max_version=(1, 3), dl_device=dl_device)


@pytest.mark.parametrize("bad", [(1,), "cpu", (1, "0")])
def test_bad_dl_device(bad):
    t = tb.from_dlpack(np.arange(3.0))
    with pytest.raises(TypeError, match="dl_device"):
        t.__dlpack__(max_version=(1, 3), dl_device=bad)


def test_copy_of_device_memory_is_refused():
    t = tb.from_dlpack(fake_device_producer((2, 0)))
    with pytest.raises(BufferError, match="copy=True needs CPU-accessible memory"):
        t.__dlpack__(max_version=(1, 3), copy=True)


@pytest.mark.parametrize(
    ("device", "stream", "exc", "message"),
    [
        ((1, 0), 1, BufferError, "not valid for CPU memory"),
        ((1, 0), 2**40, BufferError, "not valid for CPU memory"),
        ((1, 0), "s", TypeError, "stream must be None or an int"),
        ((1, 0), -7, ValueError, "stream must be -1 or a stream handle"),
        ((2, 0), 0, ValueError, "stream=0 is ambiguous"),
    ],
)
def test_export_stream_validation(device, stream, exc, message):
    t = (
        tb.from_dlpack(np.arange(4.0))
        if device == (1, 0)
        else tb.from_dlpack(fake_device_producer(device))
    )
    with pytest.raises(exc, match=message):
        t.__dlpack__(max_version=(1, 3), stream=stream)


@pytest.mark.parametrize(
    ("device", "stream"),
    [
        ((1, 0), None),
        ((1, 0), -1),
        ((2, 0), None),
        ((2, 0), 1),
        ((2, 0), 2),
        ((2, 0), 2**40),
        ((10, 0), 0),
        ((3, 0), 5),
    ],
)
def test_export_streams_accepted(device, stream):
    t = (
        tb.from_dlpack(np.arange(4.0))
        if device == (1, 0)
        else tb.from_dlpack(fake_device_producer(device))
    )
    assert inspect_capsule(t.__dlpack__(max_version=(1, 3), stream=stream))["device"] == device


def test_device_memory_is_reexported_as_metadata():
    t = tb.from_dlpack(fake_device_producer((2, 3), shape=(2, 5)))
    assert t.device == "cuda:3" and t.__dlpack_device__() == (tb.DLDeviceType.kDLCUDA, 3)
    info = inspect_capsule(t.__dlpack__(max_version=(1, 3), stream=-1))
    assert info["device"] == (2, 3)
    assert info["data"] == 0x7F0000001000
    assert info["shape"] == (2, 5) and info["strides"] == (5, 1)


def test_dlpack_device_returns_the_enum():
    t = tb.from_dlpack(np.arange(3.0))
    dev = t.__dlpack_device__()
    assert dev == (1, 0)
    assert type(dev[0]) is tb.DLDeviceType


def test_to_dlpack_of_a_foreign_object_imports_it_first():
    a = np.arange(3.0)
    capsule = tb.to_dlpack(a)
    info = inspect_capsule(capsule)
    assert info["name"] == "dltensor" and info["data"] == a.ctypes.data
    t = tb.from_dlpack(capsule)
    np.from_dlpack(t)[0] = 42
    assert a[0] == 42


def test_unconsumed_capsules_release_the_tensor():
    t = tb.from_dlpack(np.arange(3.0))
    before = sys.getrefcount(t)
    capsules = [t.__dlpack__(max_version=(1, 3)) for _ in range(10)]
    capsules += [t.__dlpack__() for _ in range(10)]
    assert sys.getrefcount(t) == before + 20
    del capsules
    assert sys.getrefcount(t) == before


class _Holder:
    """Hands out one pre-made capsule (NumPy does not take raw capsules)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)
