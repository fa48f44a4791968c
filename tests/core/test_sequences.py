# SPDX-License-Identifier: Apache-2.0
"""Nested sequences of Python scalars (_sequences.pxi, and _creation.py's general path):
dtypes, shapes, int ranges, and errors that name the position."""

from __future__ import annotations

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb


def test_int_overflow():
    with pytest.raises(OverflowError, match="does not fit int64"):
        tb.asarray(2**63)
    with pytest.raises(OverflowError, match=r"the int at \[1\] does not fit int64"):
        tb.asarray([1, 2**64])
    assert tb.asarray(2**63, dtype=tb.uint64).item() == 2**63
    assert tb.asarray([2**63], dtype="uint64").tolist() == [2**63]


@pytest.mark.parametrize(
    ("obj", "dtype", "shape"),
    [
        ([1, 2, 3], tb.int64, (3,)),
        ([1, 2.5], tb.float32, (2,)),
        ([True, False], tb.bool, (2,)),
        ([True, 2], tb.int64, (2,)),
        ([1, 2j], tb.complex64, (2,)),
        ([[1, 2], [3, 4]], tb.int64, (2, 2)),
        (((1.0,), (2.0,)), tb.float32, (2, 1)),
        ([], tb.float32, (0,)),
        ([[], []], tb.float32, (2, 0)),
    ],
)
def test_nested_sequences(obj, dtype, shape):
    t = tb.asarray(obj)
    assert t.dtype is dtype and t.shape == shape
    assert t.tolist() == np.asarray(obj).tolist()


def test_sequences_with_explicit_dtypes():
    assert tb.asarray([1, 2], dtype=tb.float64).tolist() == [1.0, 2.0]
    assert tb.asarray([1.7, -2.2], dtype=tb.int8).tolist() == [1, -2]
    assert tb.asarray([0.5, 1], dtype="float16").dtype == tb.float16
    assert tb.asarray([1, 0], dtype=tb.bool).tolist() == [True, False]


@needs("torch")
def test_sequences_of_tensors_and_dlpack_objects():
    import torch

    rows = [torch.tensor([1.0, 2.0]), np.array([3.0, 4.0], dtype=np.float32)]
    t = tb.asarray(rows)
    assert t.shape == (2, 2) and t.dtype == tb.float32
    assert t.tolist() == [[1, 2], [3, 4]]
    zero_d = [tb.asarray(1), tb.asarray(2), np.int64(3)]
    assert tb.asarray(zero_d).tolist() == [1, 2, 3]


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        ([[1, 2], [3]], r"the sequence at \[1\] has length 1"),
        ([[1, 2], 3], r"the item at \[1\] is a number"),
        ([1, [2]], r"the item at \[1\] is a sequence"),
        ([[[1], [2]], [[3], [4, 5]]], r"the sequence at \[1\]\[1\] has length 2"),
        ([np.arange(2), np.arange(3)], r"the item at \[1\] has shape \(3,\)"),
    ],
)
def test_ragged_sequences_name_the_position(obj, where):
    with pytest.raises(ValueError, match=f"ragged nested sequence: .*{where}"):
        tb.asarray(obj)


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        ([1, "a"], r"the item at \[1\] is str 'a'"),
        ([[1.0], [None]], r"the item at \[1\]\[0\] is NoneType"),
        ([np.float32(1), {}], r"the item at \[1\] is dict"),
    ],
)
def test_non_numeric_items_name_the_position(obj, where):
    with pytest.raises(TypeError, match=where):
        tb.asarray(obj)
