# SPDX-License-Identifier: Apache-2.0
"""Real partners, both directions: NumPy and PyTorch (CPU). Every framework, every
pair: tests/interop/."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb
from tensorbridge._core import inspect_capsule

NUMPY_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_round_trip_every_dtype(dtype):
    a = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
    t = tb.from_dlpack(a)
    assert t.dtype == np.dtype(dtype).name
    b = np.from_dlpack(t)
    assert b.dtype == a.dtype
    assert b.__array_interface__["data"][0] == a.ctypes.data
    assert b.tolist() == a.tolist()


def test_numpy_write_through_both_ways():
    a = np.zeros(4)
    t = tb.from_dlpack(a)
    b = np.from_dlpack(t)
    b[1] = 5
    assert a[1] == 5
    a[2] = 7
    assert b[2] == 7


def test_numpy_readonly_survives_the_round_trip():
    a = np.arange(3.0)
    a.flags.writeable = False
    t = tb.from_dlpack(a)
    assert t.readonly
    assert not np.from_dlpack(t).flags.writeable


def test_numpy_from_dlpack_of_a_tensor_shares_memory():
    a = np.arange(6.0).reshape(2, 3)[:, ::-1]
    b = np.from_dlpack(tb.from_dlpack(a))
    assert b.strides == a.strides
    assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]


# --------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------


@needs("torch")
def test_torch_into_tensorbridge_shares_memory():
    import torch

    t = torch.arange(6, dtype=torch.float32)
    t2 = tb.from_dlpack(t)
    assert t2.data_ptr() == t.data_ptr()
    np.from_dlpack(t2)[:2] = -1
    assert t.tolist() == [-1, -1, 2, 3, 4, 5]


@needs("torch")
def test_torch_legacy_capsule_imported_and_written():
    import torch

    t = torch.arange(4, dtype=torch.int64)
    capsule = torch.utils.dlpack.to_dlpack(t)
    t2 = tb.from_dlpack(capsule)
    assert not t2.readonly
    memoryview(t2)[3] = 99
    assert t[3].item() == 99


@needs("torch")
def test_torch_from_dlpack_of_a_tensor_shares_memory():
    import torch

    a = np.arange(6, dtype=np.float32)
    t = tb.from_dlpack(a)
    x = torch.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr()
    x[0] = 42
    assert a[0] == 42


@needs("torch")
def test_torch_strided_views_both_ways():
    import torch

    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    view = base.t()[1::2]
    t = tb.from_dlpack(view)
    assert t.shape == tuple(view.shape) and t.strides == tuple(view.stride())
    back = torch.from_dlpack(t)
    assert back.stride() == view.stride() and torch.equal(back, view)
    back[0, 0] = -3
    assert view[0, 0].item() == -3


TORCH_DTYPES = [
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
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
]


@needs("torch")
@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_torch_round_trip_every_dtype(name):
    import torch

    dtype = getattr(torch, name)
    x = torch.ones(5, dtype=torch.float32).to(dtype)
    t = tb.from_dlpack(x)
    assert t.dtype == name
    y = torch.from_dlpack(t)
    assert y.dtype == dtype and y.data_ptr() == x.data_ptr()
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8))


@needs("torch")
def test_torch_versioned_export_is_requested():
    import torch

    x = torch.arange(3)
    capsule = x.__dlpack__(max_version=tb.DLPACK_VERSION)
    assert inspect_capsule(capsule)["name"] == "dltensor_versioned"
    t = tb.from_dlpack(capsule)
    assert t.data_ptr() == x.data_ptr()


@needs("torch")
def test_torch_zero_d_and_empty():
    import torch

    for x in (torch.tensor(3.5), torch.zeros(0, 3), torch.zeros(2, 0)):
        t = tb.from_dlpack(x)
        assert t.shape == tuple(x.shape)
        assert torch.equal(torch.from_dlpack(t), x)


@needs("torch")
def test_torch_keeps_our_memory_alive():
    import torch

    a = np.arange(4.0)
    x = torch.from_dlpack(tb.from_dlpack(a))
    del a

    gc.collect()
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
