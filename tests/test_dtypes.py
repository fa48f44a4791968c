# SPDX-License-Identifier: Apache-2.0
"""DType values (_dtypes.py): every DLPack dtype as a module attribute, and its fields."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb

EXPECTED_DTYPES = [
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


# -- DTypes interoperate with NumPy's and the frameworks' spellings ---------------------


def test_np_dtype_of_a_dtype():
    for name in ("bool", "int8", "uint64", "float16", "float32", "float64", "complex128"):
        assert np.dtype(getattr(tb, name)) == np.dtype(name)
    assert np.zeros(2, dtype=tb.int16).dtype == np.int16


@needs("ml_dtypes")
def test_np_dtype_of_an_ml_dtypes_type():
    import ml_dtypes

    assert np.dtype(tb.bfloat16) == np.dtype(ml_dtypes.bfloat16)
    assert np.dtype(tb.float8_e4m3fn) == np.dtype(ml_dtypes.float8_e4m3fn)


def test_a_dtype_equals_the_same_type_spelt_by_numpy_or_python():
    assert tb.float32 == np.float32 and np.float32 == tb.float32
    assert tb.float32 == np.dtype("float32") and np.dtype("float32") == tb.float32
    assert tb.float64 == float and tb.complex128 == complex and tb.int64 == int  # noqa: E721
    assert tb.float32 != np.float64 and tb.float32 != np.dtype("float64")
    assert tb.float32 != float  # noqa: E721 (float is float64, as NumPy reads it)
    assert tb.float64 != None  # noqa: E711 (np.dtype(None) would be float64)
    assert tb.float32 != 3 and tb.float32 != [("a", "f4")] and tb.float32 != object()
    assert tb.float32 != np.dtype(">f4")  # another byte order is another type


@needs("torch")
def test_a_dtype_equals_torch_s():
    import torch

    assert tb.float32 == torch.float32 and torch.float32 == tb.float32
    assert tb.bfloat16 == torch.bfloat16 and tb.float32 != torch.float16
    assert tb.float32 != torch.complex32  # (no DLPack equivalent: not equal, no error)


@needs("dask")
def test_dask_arrays_from_tensors():
    import dask.array as da

    t = tb.asarray(np.arange(6.0).reshape(2, 3))
    x = da.from_array(t, chunks=(1, 3))
    assert x.dtype == np.float64 and x.shape == (2, 3)
    assert x.sum().compute() == 15.0
    y = da.asarray(t)
    assert y.dtype == tb.float64 and y.compute().tolist() == t.tolist()


def test_arrays_and_values_are_not_dtypes():
    # np.dtype(x) reads x.dtype: equality must not (an array of float32 is not float32).
    # (the array answers, element by element, as it would for a NumPy dtype)
    assert not np.any(tb.float32 == np.zeros(2, dtype=np.float32))
    assert (tb.float32 == np.float32(1.0)) is False
    assert tb.float32 != b"float32" and tb.float32 != None  # noqa: E711

    class Broken:
        shape = ()

        @property
        def dtype(self):
            raise RuntimeError("deleted")

    assert tb.float32 != Broken()  # (its error does not escape ==)


@needs("paddle")
def test_a_dtype_equals_paddle_s():
    import paddle

    from tensorbridge._dtypes import as_dtype

    assert tb.float32 == paddle.float32 and as_dtype(paddle.int64) is tb.int64


def test_dtype_attribute_probes_see_no_attribute_without_its_package(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # as if not installed
    assert not hasattr(tb.bfloat16, "dtype")
    with pytest.raises(TypeError, match="pip install"):
        tb.bfloat16.dtype  # noqa: B018
