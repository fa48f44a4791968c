# SPDX-License-Identifier: Apache-2.0
"""DType and Device value types, and the DLDeviceType enum."""

from __future__ import annotations

import pickle

import pytest

import tensorbridge as tb

EXPECTED_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
]


@pytest.mark.parametrize("name", EXPECTED_DTYPES)
def test_every_dtype_is_a_module_attribute(name):
    dtype = getattr(tb, name)
    assert isinstance(dtype, tb.DType)
    assert dtype == name and name == dtype
    assert dtype == dtype and dtype != "float128"
    assert str(dtype) == name and repr(dtype) == f"tensorbridge.{name}"
    assert hash(dtype) == hash(name)
    assert pickle.loads(pickle.dumps(dtype)) is dtype
    assert name in tb.__all__


def test_dtypes_differ_from_each_other():
    assert tb.float32 != tb.float64
    assert tb.int8 != tb.uint8
    assert len({getattr(tb, n) for n in EXPECTED_DTYPES}) == len(EXPECTED_DTYPES)


def test_dtype_fields():
    assert (tb.bfloat16.code, tb.bfloat16.bits, tb.bfloat16.lanes) == (4, 16, 1)
    assert (tb.complex128.code, tb.complex128.bits, tb.complex128.itemsize) == (5, 128, 16)
    assert (tb.float4_e2m1fn.bits, tb.float4_e2m1fn.itemsize) == (4, 1)
    assert tb.bool.kind == "bool" and tb.uint16.kind == "uint" and tb.float8_e5m2.kind == "float"
    with pytest.raises(AttributeError, match="immutable"):
        tb.float32.bits = 64


def test_dldevicetype_has_every_header_value():
    expected = {
        "kDLCPU": 1, "kDLCUDA": 2, "kDLCUDAHost": 3, "kDLOpenCL": 4, "kDLVulkan": 7,
        "kDLMetal": 8, "kDLVPI": 9, "kDLROCM": 10, "kDLROCMHost": 11, "kDLExtDev": 12,
        "kDLCUDAManaged": 13, "kDLOneAPI": 14, "kDLWebGPU": 15, "kDLHexagon": 16,
        "kDLMAIA": 17, "kDLTrn": 18,
    }
    assert {m.name: m.value for m in tb.DLDeviceType} == expected
    assert issubclass(tb.DLDeviceType, int)


@pytest.mark.parametrize(
    ("args", "text", "pair"),
    [
        (("cpu",), "cpu", (1, 0)),
        (("cuda", 1), "cuda:1", (2, 1)),
        (("cuda:1",), "cuda:1", (2, 1)),
        (("cuda",), "cuda:0", (2, 0)),
        (((2, 3),), "cuda:3", (2, 3)),
        ((tb.DLDeviceType.kDLROCM, 2), "rocm:2", (10, 2)),
        ((3,), "cuda_host:0", (3, 0)),
        (("CUDA:2",), "cuda:2", (2, 2)),
        (("mps",), "metal:0", (8, 0)),
        (("xpu:1",), "oneapi:1", (14, 1)),
    ],
)
def test_device_parsing(args, text, pair):
    d = tb.Device(*args)
    assert str(d) == text
    assert (d.device_type, d.index) == pair
    assert d.__dlpack_device__() == pair
    assert d == text and d == pair and d == tb.Device(text)
    assert hash(d) == hash(tb.Device(*pair))
    assert d is tb.Device(pair)  # cached
    assert pickle.loads(pickle.dumps(d)) == d


def test_device_type_names():
    assert tb.Device("cuda", 1).type == "cuda"
    assert tb.Device("cpu").type == "cpu"
    assert repr(tb.Device("cuda", 1)) == "tensorbridge.Device('cuda:1')"


def test_device_from_objects():
    class TorchLike:
        type = "cuda"
        index = 2

    class TorchLikeNoIndex:
        type = "cpu"
        index = None

    class DeviceLike:
        def __dlpack_device__(self):
            return (2, 5)

    assert tb.Device(TorchLike()) == "cuda:2"
    assert tb.Device(TorchLikeNoIndex()) == "cpu"
    assert tb.Device(DeviceLike()) == "cuda:5"


def test_device_from_torch():
    torch = pytest.importorskip("torch")
    assert tb.Device(torch.device("cuda:1")) == "cuda:1"
    assert tb.Device(torch.device("cpu")) == "cpu"


@pytest.mark.parametrize(
    ("args", "exc", "message"),
    [
        (("tpu",), ValueError, "unknown device 'tpu'"),
        (("cuda:x",), ValueError, "must be a non-negative integer"),
        (("cuda:1", 2), ValueError, "index given twice"),
        (((5, 0),), ValueError, "unknown DLPack device type 5"),
        (((2,),), ValueError, r"must be \(device_type, index\)"),
        (("cuda", -1), ValueError, r"index must be in \[0, 2\*\*31\)"),
        (("cuda", "1"), TypeError, "device index must be an int"),
        ((3.5,), TypeError, "device must be a Device"),
        ((None,), TypeError, "device must be a Device"),
    ],
)
def test_device_errors(args, exc, message):
    with pytest.raises(exc, match=message):
        tb.Device(*args)


def test_device_is_immutable():
    with pytest.raises(AttributeError, match="immutable"):
        tb.Device("cpu").index = 3
