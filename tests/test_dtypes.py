# SPDX-License-Identifier: Apache-2.0
"""DType values (_dtypes.py): every DLPack dtype as a module attribute, and its fields."""

from __future__ import annotations

import pickle

import pytest

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
