# SPDX-License-Identifier: Apache-2.0
"""What PyTorch's DLPack suite checks of PyTorch, asked of tensorbridge in both roles.

The peer suite is pytorch/pytorch ``test/test_dlpack.py``. Producer role: PyTorch
(``torch.from_dlpack``, ``torch.tensor``/``torch.asarray``) reads a ``tb.Tensor`` or a
capsule of ours. Consumer role: ``tb.from_dlpack``/``tb.asarray`` read torch tensors
and torch capsules, or fake producers of (made-up) GPU memory where the peer test
needs CUDA or ROCm. Checks that older tests already make are not repeated here;
tests/peers/COVERAGE.md maps every peer check to the test that covers it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from needs import framework
from producers import Producer, capsule_of, fake_device_producer

import tensorbridge as tb
from tensorbridge._core import FLAG_IS_COPIED, inspect_capsule

torch = framework("torch")
torch_dlpack = framework("torch.utils.dlpack")

# all_types_and_complex_and(half, bfloat16, bool, uint16, uint32, uint64)
DTYPES = [
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float16",
    "bfloat16",
    "bool",
    "uint16",
    "uint32",
    "uint64",
]


def _sample(name, shape=(5,)):
    """A torch tensor of ``name`` with distinct, exactly representable values."""
    n = int(np.prod(shape))
    values = torch.arange(n, dtype=torch.int64).reshape(shape)
    if name == "bool":
        return values % 2 == 0
    if name.startswith("complex"):
        return (values + 1j * values).to(getattr(torch, name))
    return values.to(getattr(torch, name))


class DLPackOnly:
    """Exposes nothing but the two DLPack methods of the object it wraps."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, *args, **kwargs):
        return self.inner.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


# --------------------------------------------------------------------------
# Capsules and protocol, every dtype
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", DTYPES)
def test_capsule_conversion_every_dtype(name):
    """Mirrors test_dlpack_capsule_conversion: from_dlpack(to_dlpack(x)) == x, with
    tensorbridge consuming torch's capsule, torch consuming ours, and ours round
    tripping through tb.to_dlpack/tb.from_dlpack."""
    x = _sample(name)
    ours = tb.from_dlpack(torch_dlpack.to_dlpack(x))
    assert ours.dtype == name and ours.data_ptr() == x.data_ptr()
    back = torch.from_dlpack(tb.to_dlpack(ours))
    assert back.dtype == x.dtype and torch.equal(back, x)
    again = tb.from_dlpack(tb.to_dlpack(ours))
    assert again.dtype == name and again.data_ptr() == x.data_ptr()
    assert torch.equal(torch.from_dlpack(again), x)


def test_capsule_exchange_shares_storage():
    """Mirrors test_dlpack_shared_storage, tensorbridge producing: a write through
    torch's import of our capsule is seen in our tensor."""
    t = tb.asarray([1.0, 2.0, 3.0, 4.0, 5.0], dtype="float64")
    z = torch.from_dlpack(tb.to_dlpack(t))
    z[0] = z[0] + 20.0
    assert t.tolist() == [21.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize("name", DTYPES)
def test_noncontiguous_views_both_ways(name):
    """Mirrors test_from_dlpack_noncontinguous: rows, columns and a transpose of a
    5x5 tensor. torch views go into tensorbridge; the same views made by
    tensorbridge go into torch. Both keep the values and the memory."""
    x = _sample(name, (5, 5))
    t = tb.from_dlpack(x)
    views = {
        "x[0]": (lambda a: a[0]),
        "x[:, 0]": (lambda a: a[:, 0]),
        "x[1, :]": (lambda a: a[1, :]),
        "x[1]": (lambda a: a[1]),
        "x.T": (lambda a: a.T),
    }
    for label, view in views.items():
        expected = view(x)
        ours = tb.from_dlpack(expected)
        assert ours.shape == tuple(expected.shape), label
        assert ours.strides == expected.stride(), label
        assert ours.data_ptr() == expected.data_ptr(), label
        assert torch.equal(torch.from_dlpack(ours), expected), label
        theirs = torch.from_dlpack(view(t))
        assert theirs.stride() == expected.stride(), label
        assert theirs.data_ptr() == expected.data_ptr(), label
        assert torch.equal(theirs, expected), label


def test_size_one_dimension_keeps_its_stride():
    """Mirrors test_dlpack_normalize_strides: x[::3][:1] has shape (1,) and stride 3,
    and the stride survives the exchange (no normalisation) both ways."""
    x = torch.rand(16)
    y = x[::3][:1]
    assert tb.from_dlpack(y).strides == (3,)
    t = tb.from_dlpack(x)[::3][:1]
    assert t.shape == (1,) and t.strides == (3,)
    z = torch.from_dlpack(t)
    assert tuple(z.shape) == (1,) and z.stride() == (3,)
    assert inspect_capsule(t.__dlpack__(max_version=(1, 3)))["strides"] == (3,)


def test_objects_with_only_dlpack_methods_are_recognised():
    """Mirrors test_automatically_select_in_creation: an object offering only
    __dlpack__/__dlpack_device__ is read through DLPack, in both roles."""
    x = torch.rand(10)
    ours = tb.asarray(DLPackOnly(x))
    assert ours.data_ptr() == x.data_ptr()
    t = tb.asarray(np.arange(10, dtype=np.float32))
    assert torch.tensor(DLPackOnly(t)).tolist() == t.tolist()
    assert torch.asarray(DLPackOnly(t)).data_ptr() == t.data_ptr()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({}, "dltensor"),
        ({"max_version": (0, 8)}, "dltensor"),
        ({"max_version": (1, 0)}, "dltensor_versioned"),
        ({"max_version": (2, 0)}, "dltensor_versioned"),
    ],
    ids=["none", "0.8", "1.0", "2.0"],
)
def test_max_version_capsules_both_ways(kwargs, name):
    """Mirrors test_max_version: the capsule kind follows max_version (None and 0.x
    legacy, 1.x and newer majors versioned), and the other side imports it."""
    x = _sample("float32")
    capsule = x.__dlpack__(**kwargs)
    assert inspect_capsule(capsule)["name"] == name
    assert torch.equal(torch.from_dlpack(tb.from_dlpack(capsule)), x)
    t = tb.from_dlpack(x)
    capsule = t.__dlpack__(**kwargs)
    assert inspect_capsule(capsule)["name"] == name
    assert torch.equal(torch.from_dlpack(capsule), x)


# --------------------------------------------------------------------------
# device= and copy= (the CUDA tests' rule, on the CPU)
# --------------------------------------------------------------------------

COPY_CASES = [
    ({}, True),
    ({"copy": False}, True),
    ({"copy": True}, False),
    ({"device": "cpu"}, True),
    ({"device": "cpu", "copy": False}, True),
    ({"device": "cpu", "copy": True}, False),
]


@pytest.mark.parametrize(("kwargs", "shared"), COPY_CASES, ids=lambda v: str(v))
def test_copy_and_device_requests_both_ways(kwargs, shared):
    """Mirrors test_copy / test_no_copy (_test_from_dlpack's rule) on the CPU: the
    result is on the requested device, equal, and shares memory exactly when no
    copy was asked for."""
    x = _sample("float32")
    ours = tb.from_dlpack(x, **kwargs)
    assert str(ours.device) == "cpu"
    assert torch.equal(torch.from_dlpack(ours), x)
    assert (ours.data_ptr() == x.data_ptr()) is shared

    t = tb.from_dlpack(_sample("float32"))
    theirs = torch.from_dlpack(t, **kwargs)
    assert theirs.device == torch.device("cpu")
    assert theirs.tolist() == t.tolist()
    assert (theirs.data_ptr() == t.data_ptr()) is shared


def test_device_move_with_copy_false_is_a_value_error():
    """Mirrors test_needs_copy_error (ValueError for a CUDA tensor asked for the CPU
    with copy=False); the Array API standard's from_dlpack asks the same
    ("If a copy must be made ... but copy is set to False, the function must
    raise ValueError"). The CUDA producer is a fake that behaves as the standard
    asks of __dlpack__: a host copy flagged IS_COPIED for dl_device=(1, 0), and a
    BufferError when that copy is forbidden."""
    host = np.arange(4.0)

    def export(dl_device=None, copy=None, **kwargs):
        if dl_device is None:
            return fake_device_producer((2, 0)).make()
        if copy is False:
            raise BufferError("a copy to the host is needed, but copy=False")
        return capsule_of(host.copy(), flags=FLAG_IS_COPIED)

    p = Producer(export, device=(2, 0))
    moved = tb.from_dlpack(p, device="cpu")
    assert str(moved.device) == "cpu" and moved.tolist() == host.tolist()
    with pytest.raises(ValueError, match=r"copy=False.*cuda:0.*cpu"):
        tb.from_dlpack(p, device="cpu", copy=False)


def test_unsupported_dl_device_is_a_buffer_error():
    """Mirrors test_unsupported_device_error: dl_device=(kDLHexagon, 0) for CPU
    data. Producing, ours refuses; consuming, torch's refusal reaches the caller
    as a BufferError naming both devices."""
    t = tb.arange(5, dtype="float32")
    with pytest.raises(BufferError, match="dl_device=hexagon:0"):
        t.__dlpack__(max_version=(1, 0), dl_device=(tb.DLDeviceType.kDLHexagon, 0))
    with pytest.raises(BufferError, match=r"cpu.*hexagon:0"):
        tb.from_dlpack(_sample("float32"), device="hexagon")


# --------------------------------------------------------------------------
# What torch refuses to export reaches our caller as a BufferError
# --------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["from_dlpack", "asarray"])
def test_quantized_tensors_are_refused(via):
    """Mirrors test_dlpack_unsupported_dtype_error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates quantized tensors (warns once)
        q = torch.quantize_per_tensor(torch.randn(()), 0.1, 10, torch.qint8)
    with pytest.raises(BufferError, match="not supported by dlpack"):
        getattr(tb, via)(q)


@pytest.mark.parametrize("via", ["from_dlpack", "asarray"])
def test_sparse_tensors_are_refused(via):
    """Mirrors test_dlpack_export_non_strided."""
    x = torch.sparse_coo_tensor([[0]], [1.0], size=(1,), check_invariants=True)
    with pytest.raises(BufferError, match="strided"):
        getattr(tb, via)(torch.conj(x))


def test_packed_float4_pairs_are_refused_cleanly():
    """Mirrors the float4_e2m1fn_x2 case of
    test_dlpack_conversion_with_streams_narrow_precision (CUDA there; the export is
    the same on the CPU): torch exports the pairs as lanes=2, which tensorbridge
    does not import (scalar element types only)."""
    x = torch.zeros(5, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert inspect_capsule(x.__dlpack__(max_version=(1, 3)))["dtype"] == (17, 4, 2)
    with pytest.raises(BufferError, match="lanes is 2"):
        tb.from_dlpack(x)


# --------------------------------------------------------------------------
# Streams
# --------------------------------------------------------------------------


def test_cpu_export_refuses_stream_zero():
    """Mirrors test_dlpack_invalid_cpu_stream: on the CPU only None (and, by our
    choice, -1) is a stream."""
    t = tb.arange(5, dtype="float32")
    with pytest.raises(BufferError, match="stream=0 is not valid for CPU memory"):
        t.__dlpack__(stream=0)


@pytest.mark.parametrize("stream", [1, 2])
def test_rocm_streams_one_and_two_are_refused(stream):
    """Mirrors test_dlpack_invalid_rocm_streams; the Array API standard lists the
    ROCm streams as None, 0 (the default) and handles > 2, "Using 1 and 2 is not
    supported". Producing, a ROCm tensor refuses them; consuming, they are not
    passed on to a ROCm producer (as stream=0 is not passed to a CUDA one)."""
    t = tb.from_dlpack(fake_device_producer((10, 0)))
    with pytest.raises(ValueError, match=f"stream={stream}"):
        t.__dlpack__(max_version=(1, 3), stream=stream)
    p = fake_device_producer((10, 0))
    with pytest.raises(ValueError, match=f"stream={stream}"):
        tb.from_dlpack(p, stream=stream)
    assert p.calls == []


def test_rocm_default_and_handle_streams_are_accepted():
    """The accepted side of test_dlpack_invalid_rocm_streams."""
    t = tb.from_dlpack(fake_device_producer((10, 0)))
    for stream in (None, 0, -1, 0xBEEF00):
        capsule = t.__dlpack__(max_version=(1, 3), stream=stream)
        assert inspect_capsule(capsule)["device"] == (10, 0)
