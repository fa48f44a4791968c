# SPDX-License-Identifier: Apache-2.0
"""Consuming capsules (_capsules.pxi): raw capsules, validation of the DLTensor before it
is owned, layouts, every DLPack dtype. The export side is in test_capsules_export.py."""

from __future__ import annotations

import numpy as np
import pytest
from producers import Producer, capsule_of

import tensorbridge as tb
from tensorbridge import _testing

# --------------------------------------------------------------------------
# Raw capsules
# --------------------------------------------------------------------------


@pytest.mark.parametrize("versioned", [True, False])
def test_a_capsule_is_consumed_once(versioned):
    a = np.arange(4.0)
    capsule, counter = capsule_of(a, versioned=versioned)
    t = tb.from_dlpack(capsule)
    used = "used_dltensor_versioned" if versioned else "used_dltensor"
    assert _testing.capsule_name(capsule) == used
    assert t.data_ptr() == a.ctypes.data
    with pytest.raises(BufferError, match=f"already consumed.*{used}"):
        tb.from_dlpack(capsule)
    del capsule
    assert counter.calls == 0
    del t
    assert counter.calls == 1


def test_capsule_with_another_name():
    capsule, _ = _testing.make_capsule(0, name="not_a_tensor")
    with pytest.raises(TypeError, match="got a capsule named 'not_a_tensor'"):
        tb.from_dlpack(capsule)


def test_capsule_device_request():
    a = np.arange(3.0)
    capsule, _ = capsule_of(a, device=(3, 0))  # pinned: host-accessible
    t = tb.from_dlpack(capsule, device="cpu")
    assert t.device == "cpu" and t.data_ptr() == a.ctypes.data
    capsule, _ = capsule_of(a)
    with pytest.raises(BufferError, match="cannot move a capsule's cpu data to cuda:0"):
        tb.from_dlpack(capsule, device="cuda")


def test_capsule_copy_true():
    a = np.arange(3.0)
    capsule, counter = capsule_of(a)
    t = tb.from_dlpack(capsule, copy=True)
    assert t.data_ptr() != a.ctypes.data
    assert counter.calls == 1


def test_capsule_of_device_memory_cannot_honour_a_stream():
    capsule, _ = _testing.make_capsule(0x1000, shape=(2,), strides=(1,), device=(2, 0))
    with pytest.raises(BufferError, match="cannot be synchronised with stream=5"):
        tb.from_dlpack(capsule, stream=5)
    capsule, _ = _testing.make_capsule(0x1000, shape=(2,), strides=(1,), device=(2, 0))
    assert tb.from_dlpack(capsule, stream=-1).device == "cuda:0"


# --------------------------------------------------------------------------
# Validation of the DLTensor (validated before it is owned, deleter called once)
# --------------------------------------------------------------------------


BAD_FIELDS = {
    "major version 2": (dict(version=(2, 0)), "DLPack version 2.0"),
    "major version 0": (dict(version=(0, 9)), "DLPack version 0.9"),
    "unknown code": (dict(dtype=(42, 32, 1)), "unknown DLTensor.dtype code 42"),
    "bad float bits": (dict(dtype=(2, 24, 1)), r"code 2 with bits=24; .*\[16, 32, 64\]"),
    "fp4 bits 8": (dict(dtype=(17, 8, 1)), r"code 17 with bits=8; .*\[4\]"),
    "fp6 bits 8": (dict(dtype=(15, 8, 1)), r"code 15 with bits=8; .*\[6\]"),
    "bool bits 1": (dict(dtype=(6, 1, 1)), r"code 6 with bits=1"),
    "opaque handle": (dict(dtype=(3, 64, 1)), "kDLOpaqueHandle"),
    "lanes": (dict(dtype=(2, 32, 4)), "lanes is 4"),
    "negative shape": (dict(shape=(2, -3), strides=(1, 1)), r"shape\[1\] is -3"),
    "ndim too large": (dict(ndim=65), "ndim is 65"),
    "ndim negative": (dict(ndim=-1), "ndim is -1"),
    "null shape": (dict(shape=(2,), strides=(1,), null_shape=True), "shape is NULL but ndim is 1"),
    "null data": (dict(data=0, shape=(2,), strides=(1,)), "data is NULL but the tensor has 2"),
    "address wraps": (
        dict(data=2**64 - 1, byte_offset=1, dtype=(1, 8, 1)),
        r"data \(0xffffffffffffffff\) \+ byte_offset \(1\) is past the end",
    ),
    "device type 5": (dict(device=(5, 0)), "device_type 5"),
    "device type 99": (dict(device=(99, 0)), "device_type 99"),
    "device id": (dict(device=(2, -1)), "device_id is -1"),
    "huge shape": (dict(shape=(2**40, 2**40), strides=(1, 1)), "too many elements"),
    "huge byte_offset": (dict(byte_offset=2**63 - 1), "byte_offset 9223372036854775807 is out"),
    "huge span": (dict(shape=(2**20,), strides=(2**41,)), "span more memory"),
    "absurd stride": (
        dict(shape=(4,), strides=(2**61,)),
        r"strides\[0\] is 2305843009213693952; out",
    ),
    "packed fp4 strided": (
        dict(dtype=(17, 4, 1), shape=(4,), strides=(2,)),
        "bit-packed float4_e2m1fn data must be C-contiguous",
    ),
}


BAD_CASES = [
    pytest.param(fields, message, versioned, id=f"{case}-{'versioned' if versioned else 'legacy'}")
    for case, (fields, message) in BAD_FIELDS.items()
    for versioned in (True, False)
    if versioned or "version" not in fields  # legacy capsules carry no version
]


@pytest.mark.parametrize(("fields", "message", "versioned"), BAD_CASES)
def test_malformed_tensors_are_refused_precisely(fields, message, versioned):
    a = np.zeros(8, dtype=np.float32)
    fields = {"shape": (2,), "strides": (1,), **fields}
    capsule, counter = capsule_of(a, versioned=versioned, **fields)
    with pytest.raises(BufferError, match=message):
        tb.from_dlpack(capsule)
    if "version" in fields:
        # Another major version: the header says the consumer calls the deleter
        # (renaming first, so the capsule's destructor does not call it again).
        assert _testing.capsule_name(capsule).startswith("used_")
        assert counter.calls == 1
    else:
        # Refused before it was owned: left exactly as it was, and freed once by
        # its own destructor.
        assert _testing.capsule_name(capsule) == ("dltensor_versioned" if versioned else "dltensor")
        assert counter.calls == 0
    del capsule
    assert counter.calls == 1


def test_a_failing_import_through_a_producer_frees_the_capsule():
    a = np.zeros(2)
    p = Producer(lambda **kw: capsule_of(a, dtype=(2, 24, 1)))
    with pytest.raises(BufferError, match="bits=24"):
        tb.from_dlpack(p)
    assert p.counters[0].calls == 1


def test_null_deleter_is_allowed():
    a = np.arange(3.0)
    capsule, counter = capsule_of(a, deleter=False)
    t = tb.from_dlpack(capsule)
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0]
    del t, capsule
    assert counter.calls == 0


def test_unknown_flag_bits_are_ignored():
    a = np.arange(3.0)
    capsule, _ = capsule_of(a, flags=1 << 40)
    t = tb.from_dlpack(capsule)
    assert not t.readonly
    assert t.__dlpack__(max_version=(1, 3)) is not None


# --------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", [None, (1, 0), (1, 1)], ids=["legacy", "v1.0", "v1.1"])
def test_null_strides_mean_c_order(version):
    a = np.arange(24.0).reshape(2, 3, 4)
    kwargs = {"versioned": False} if version is None else {"version": version}
    capsule, _ = capsule_of(a, strides=None, **kwargs)
    t = tb.from_dlpack(capsule)
    assert t.strides == (12, 4, 1)
    assert np.from_dlpack(t).tolist() == a.tolist()


LAYOUTS = {
    "0-d": lambda: np.array(3.5),
    "size-0": lambda: np.zeros((0, 3)),
    "size-0 middle": lambda: np.zeros((2, 0, 3)),
    "contiguous": lambda: np.arange(12.0).reshape(3, 4),
    "transposed": lambda: np.arange(12.0).reshape(3, 4).T,
    "step": lambda: np.arange(20.0)[::3],
    "negative": lambda: np.arange(12.0).reshape(3, 4)[::-1, ::-2],
    "zero stride": lambda: np.broadcast_to(np.arange(4.0), (3, 4)),
    "offset view": lambda: np.arange(12.0).reshape(3, 4)[1:, 1:],
    "fortran": lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "size-1 dims odd strides": lambda: np.arange(6.0).reshape(6, 1)[::2],
}


@pytest.mark.parametrize("make", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_layouts_round_trip_with_shared_memory(make):
    a = make()
    t = tb.from_dlpack(a)
    assert t.shape == a.shape
    assert t.ndim == a.ndim and t.size == a.size
    if a.size:
        assert t.strides == tuple(s // a.itemsize for s in a.strides)
        assert t.data_ptr() == a.__array_interface__["data"][0]
    assert np.from_dlpack(t).tolist() == a.tolist()
    assert np.asarray(t).tolist() == a.tolist()


def test_byte_offset_is_honoured():
    a = np.arange(8, dtype=np.int32)
    base = a.ctypes.data
    capsule, _ = capsule_of(a, data=base, byte_offset=12, shape=(5,), strides=(1,))
    t = tb.from_dlpack(capsule)
    assert t.data_ptr() == base + 12
    assert np.from_dlpack(t).tolist() == [3, 4, 5, 6, 7]


def test_size_zero_with_null_data():
    capsule, _ = _testing.make_capsule(0, shape=(0, 3), strides=(3, 1))
    t = tb.from_dlpack(capsule)
    assert t.shape == (0, 3) and t.size == 0 and t.nbytes == 0
    assert np.from_dlpack(t).shape == (0, 3)
    assert memoryview(t).shape == (0, 3)


def test_size_zero_extents_must_still_fit():
    # NumPy's rule (PyTorch's too): the non-zero extents must fit the address space.
    capsule, _ = _testing.make_capsule(0, shape=(2**40, 2**40, 0), strides=(1, 1, 1))
    with pytest.raises(BufferError, match=r"shape \(1099511627776, 1099511627776, 0\) has too"):
        tb.from_dlpack(capsule)


def test_size_zero_strides_are_normalised():
    capsule, _ = _testing.make_capsule(0, shape=(3, 0, 5), strides=(2**61, -7, 0))
    t = tb.from_dlpack(capsule)
    assert t.shape == (3, 0, 5) and t.strides == (5, 5, 1)


def test_zero_d_with_null_shape_and_strides():
    a = np.array([7], dtype=np.int16)
    capsule, _ = capsule_of(a, shape=(), strides=None, null_shape=True)
    t = tb.from_dlpack(capsule)
    assert t.shape == () and t.strides == () and t.size == 1
    assert np.from_dlpack(t).item() == 7


# --------------------------------------------------------------------------
# Every DLPack dtype
# --------------------------------------------------------------------------


ALL_DTYPES = {
    "bool": (6, 8),
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint8": (1, 8),
    "uint16": (1, 16),
    "uint32": (1, 32),
    "uint64": (1, 64),
    "float16": (2, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "bfloat16": (4, 16),
    "complex64": (5, 64),
    "complex128": (5, 128),
    "float8_e3m4": (7, 8),
    "float8_e4m3": (8, 8),
    "float8_e4m3b11fnuz": (9, 8),
    "float8_e4m3fn": (10, 8),
    "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8),
    "float8_e8m0fnu": (14, 8),
    "float6_e2m3fn": (15, 6),
    "float6_e3m2fn": (16, 6),
    "float4_e2m1fn": (17, 4),
}


@pytest.mark.parametrize(("name", "code_bits"), ALL_DTYPES.items(), ids=ALL_DTYPES.keys())
@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
def test_every_dlpack_dtype_imports_and_reexports(name, code_bits, padded):
    code, bits = code_bits
    memory = np.arange(16, dtype=np.uint8)
    flags = tb._core.FLAG_SUBBYTE_PADDED if padded and bits < 8 else 0
    capsule, _ = _testing.make_capsule(
        memory, shape=(2, 4), strides=(4, 1), dtype=(code, bits, 1), flags=flags, owner=memory
    )
    t = tb.from_dlpack(capsule)
    assert t.dtype == name and t.dtype is getattr(tb, name)
    assert t.dtype.code == code and t.dtype.bits == bits
    expected = (8 * bits + 7) // 8 if bits < 8 and not padded else 8 * t.itemsize
    assert t.nbytes == expected
    info = tb._core.inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    assert info["dtype"] == (code, bits, 1)
    assert info["flags"] == flags
