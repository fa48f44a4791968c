# SPDX-License-Identifier: Apache-2.0
"""Device values (_devices.py) and the DLDeviceType enum."""

from __future__ import annotations

import pickle

import pytest
from needs import needs

import tensorbridge as tb


def test_dldevicetype_has_every_header_value():
    expected = {
        "kDLCPU": 1,
        "kDLCUDA": 2,
        "kDLCUDAHost": 3,
        "kDLOpenCL": 4,
        "kDLVulkan": 7,
        "kDLMetal": 8,
        "kDLVPI": 9,
        "kDLROCM": 10,
        "kDLROCMHost": 11,
        "kDLExtDev": 12,
        "kDLCUDAManaged": 13,
        "kDLOneAPI": 14,
        "kDLWebGPU": 15,
        "kDLHexagon": 16,
        "kDLMAIA": 17,
        "kDLTrn": 18,
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


@needs("torch")
def test_device_from_torch():
    import torch

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


@pytest.mark.parametrize("name", ["gpu", "GPU", "gpu:1"])
def test_gpu_is_refused_with_the_names_that_say_whose_memory(name):
    with pytest.raises(ValueError, match=r"does not say whose GPU memory.*'cuda'.*'rocm'"):
        tb.Device(name)


def test_a_jax_gpu_device_is_the_memory_its_client_names():
    class Client:
        platform = "rocm"

    class JaxLikeDevice:  # jax.Device: platform "gpu", its client says whose
        platform = "gpu"
        id = 1
        client = Client()

    assert tb.Device(JaxLikeDevice()) == "rocm:1"
    Client.platform = "cuda"
    assert tb.Device(JaxLikeDevice()) == "cuda:1"


def test_an_unknown_device_is_answered_with_every_name_and_spelling():
    with pytest.raises(ValueError) as info:
        tb.Device("tpu")
    said = str(info.value)
    for name in ("cpu", "cuda", "rocm (hip)", "metal (mps)", "oneapi (xpu, sycl)"):
        assert name in said
    assert "cuda_host (cuda_pinned, cpu_pinned, pinned)" in said
    assert "names a module" not in said
    # A module's name is not a device: it is a framework, which convert makes.
    with pytest.raises(ValueError, match=r"'numpy' names a module, not a device: "):
        tb.Device("numpy")
    with pytest.raises(ValueError, match=r"^to\(\): unknown device 'numpy'.*convert\(x, 'numpy'\)"):
        tb.asarray([1.0]).to("numpy")


def test_device_is_immutable():
    with pytest.raises(AttributeError, match="immutable"):
        tb.Device("cpu").index = 3
