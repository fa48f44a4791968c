# SPDX-License-Identifier: Apache-2.0
"""Layout (_layout.pxi): contiguity, reshape's strides, transposes and permutations,
dtype views."""

from __future__ import annotations

import numpy as np
import pytest
from producers import fake_device_producer

import tensorbridge as tb


def grid():
    a = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    return a, tb.asarray(a)


@pytest.mark.parametrize(
    ("make", "contiguous"),
    [
        (lambda: np.arange(6.0).reshape(2, 3), True),
        (lambda: np.arange(6.0).reshape(2, 3).T, False),
        # a size-1 dim's stride does not matter
        (lambda: np.lib.stride_tricks.as_strided(np.arange(3.0), (3, 1), (8, 800)), True),
        (lambda: np.arange(6.0).reshape(6, 1)[::2], False),
        (lambda: np.zeros((0, 3))[:, ::2], True),  # empty: always contiguous
        (lambda: np.array(1.0), True),
        (lambda: np.arange(6.0)[::-1], False),
    ],
)
def test_is_contiguous(make, contiguous):
    assert tb.from_dlpack(make()).is_contiguous() is contiguous


@pytest.mark.parametrize(
    ("make", "shape", "view"),
    [
        (lambda a: a, (12, 5), True),
        (lambda a: a, (-1,), True),
        (lambda a: a, (3, 2, 2, 5), True),
        (lambda a: a[1:], (8, 5), True),
        (lambda a: a[:, 1:3], (6, 5), False),  # dims 0 and 1 are no longer contiguous
        (lambda a: a[:, :, ::2], (3, 4, 3), True),
        (lambda a: a[:, 0, ::2], (9,), False),
        (lambda a: a[:, :, ::2], (3, 12), False),
        (lambda a: a.transpose(2, 0, 1), (5, 12), True),
        (lambda a: a.transpose(2, 0, 1), (60,), False),
        (lambda a: a[0:0], (0, 7), True),
        (lambda a: a[1, 1:2, 1], (1, 1), True),
    ],
)
def test_reshape_is_a_view_when_strides_allow(make, shape, view):
    base, _ = grid()
    a = make(base)
    src = tb.asarray(a)
    r = src.reshape(shape)
    expected = a.reshape(shape)
    assert r.shape == expected.shape and r.tolist() == expected.tolist()
    if a.size:
        assert (r.data_ptr() == src.data_ptr() and np.shares_memory(np.asarray(r), base)) is view


def test_reshape_errors():
    _, t = grid()
    with pytest.raises(ValueError, match="cannot reshape a tensor of 60 elements into shape"):
        t.reshape(7, -1)
    with pytest.raises(ValueError, match="only one dimension can be -1"):
        t.reshape(-1, -1)
    with pytest.raises(TypeError, match="shape entries must be ints"):
        t.reshape(2.5)
    dev = tb.from_dlpack(fake_device_producer((2, 0), shape=(4, 6)))
    assert dev[:, ::2].reshape(3, 4).strides == (8, 2)  # uniformly strided: still a view
    with pytest.raises(BufferError, match="cannot copy device memory"):
        dev[:, :2].reshape(8)


def test_flatten_transpose_permute():
    a, t = grid()
    assert t.T.shape == (5, 4, 3) and t.T.tolist() == a.T.tolist()
    assert t.transpose().tolist() == a.T.tolist()
    assert t.transpose(0, 2).tolist() == a.swapaxes(0, 2).tolist()
    assert t.transpose((1, 2, 0)).tolist() == a.transpose(1, 2, 0).tolist()
    assert t.permute(2, 0, 1).tolist() == a.transpose(2, 0, 1).tolist()
    assert t.permute((2, 0, 1)).data_ptr() == t.data_ptr()
    assert t.flatten().tolist() == a.ravel().tolist()
    assert t.flatten().data_ptr() == t.data_ptr()
    with pytest.raises(ValueError, match="repeated dimension"):
        t.permute(0, 0, 1)
    with pytest.raises(IndexError, match="dimension 3 is out of range"):
        t.transpose(0, 3)


@pytest.mark.parametrize(
    ("a", "target", "shape"),
    [
        (np.arange(6, dtype=np.float32).reshape(2, 3), "int32", (2, 3)),
        (np.arange(6, dtype=np.float32).reshape(2, 3), "uint8", (2, 12)),
        (np.arange(4, dtype=np.int16).reshape(2, 2), "int32", (2, 1)),
        (np.arange(4, dtype=np.float64).reshape(2, 2), "complex128", (2, 1)),
        (np.arange(8, dtype=np.uint8).reshape(2, 4), "float16", (2, 2)),
    ],
)
def test_view_dtype(a, target, shape):
    t = tb.asarray(a)
    v = t.view(target)
    assert v.shape == shape and v.dtype == target
    assert v.tolist() == a.view(target).tolist()
    assert v.data_ptr() == t.data_ptr()


def test_view_dtype_errors():
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        tb.asarray(np.arange(8.0))[::2].view("float32")
    with pytest.raises(ValueError, match="not a multiple of the new itemsize 8"):
        tb.asarray(np.arange(3, dtype=np.int32)).view("int64")
    with pytest.raises(ValueError, match="a 0-d tensor cannot change itemsize"):
        tb.asarray(1.0).view("int8")
