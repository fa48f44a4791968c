# SPDX-License-Identifier: Apache-2.0
"""Indexing (_indexing.pxi, and _numpy.py for advanced keys): basic indexing as views,
advanced indexing as copies, assignment."""

from __future__ import annotations

import numpy as np
import pytest
from needs import needs
from producers import fake_device_producer

import tensorbridge as tb


def grid():
    a = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    return a, tb.asarray(a)


BASIC_KEYS = {
    "int": 1,
    "negative int": -1,
    "slice": slice(1, 3),
    "negative step": slice(None, None, -1),
    "negative step with bounds": (slice(None), slice(3, 0, -2)),
    "tuple of ints": (2, 1, 4),
    "ellipsis": (Ellipsis, 2),
    "ellipsis middle": (0, Ellipsis, slice(1, None, 2)),
    "new axis": (None, 1),
    "new axes everywhere": (slice(None), None, 0, None),
    "empty slice": slice(5, 2),
    "numpy int": np.int64(2),
    "0-d int tensor": tb.asarray(1),
}


@pytest.mark.parametrize("key", BASIC_KEYS.values(), ids=BASIC_KEYS.keys())
def test_basic_indexing_is_a_view_like_numpy(key):
    a, t = grid()
    np_key = key.item() if type(key) is tb.Tensor else key  # 0-d int tensors act as ints
    # A trailing Ellipsis makes NumPy return a 0-d view instead of a scalar copy.
    key_tuple = np_key if isinstance(np_key, tuple) else (np_key,)
    expected = a[key_tuple if Ellipsis in key_tuple else (*key_tuple, ...)]
    v = t[key]
    assert v.shape == expected.shape
    assert v.tolist() == expected.tolist()
    if expected.size:
        assert v.data_ptr() == expected.__array_interface__["data"][0]
        assert v.strides == tuple(s // 4 for s in expected.strides)


@pytest.mark.parametrize("length", [0, 1, 6])
@pytest.mark.parametrize("step", [2**62, 2**63 - 1, -(2**63) + 1, 2**70, -(2**70)])
def test_huge_slice_steps_take_one_element_or_none_as_numpy(length, step):
    # A step past the dimension's end is never taken: NumPy answers; these were
    # refused as "too large" (issue 33, item 9).
    a = np.arange(float(length))
    t = tb.asarray(a)
    assert t[::step].tolist() == a[::step].tolist()
    assert t[1::step].tolist() == a[1::step].tolist()
    t[::step] = -1.0
    a[::step] = -1.0
    assert t.tolist() == a.tolist()


def test_an_index_past_int64_is_refused_as_by_numpy():
    # NumPy 2.4 raises OverflowError for a uint64 beyond int64 and IndexError for a
    # Python int beyond it: so does tensorbridge (never a crash or a wrapped index).
    a = np.arange(6.0)
    t = tb.asarray(a)
    for key in (np.uint64(2**64 - 1), 2**64, -(2**64)):
        with pytest.raises(Exception) as ours:
            t[key]
        with pytest.raises(Exception) as theirs:
            a[key]
        assert issubclass(ours.type, theirs.type), (key, ours.type, theirs.type)


def test_views_write_through():
    a, t = grid()
    t[1][2][::-2][0] = -7
    assert a[1, 2, 4] == -7


def test_negative_strides_below_the_start_of_memory():
    # A view whose first element lies before the base pointer moves the pointer.
    a = np.arange(10.0)[::-1]
    t = tb.asarray(a)
    v = t[5:]
    assert v.tolist() == a[5:].tolist()
    assert v.data_ptr() == a[5:].__array_interface__["data"][0]
    assert np.from_dlpack(v).tolist() == a[5:].tolist()


ADVANCED_KEYS = {
    "int list": [0, 2],
    "int list with negatives": [-1, 0, -1],
    "bool mask": np.array([True, False, True]),
    "tensor index": tb.asarray([2, 0]),
    "bool tensor": tb.asarray([False, True, True]),
    "mixed": (slice(None), [1, 3], 2),
    "two arrays": ([0, 2], [1, 3]),
    "python bool": True,
}


@pytest.mark.parametrize("key", ADVANCED_KEYS.values(), ids=ADVANCED_KEYS.keys())
def test_advanced_indexing_copies_like_numpy(key):
    a, t = grid()
    np_key = (
        tuple(k.numpy() if type(k) is tb.Tensor else k for k in key)
        if isinstance(key, tuple)
        else (key.numpy() if type(key) is tb.Tensor else key)
    )
    expected = a[np_key]
    v = t[key]
    assert v.tolist() == expected.tolist() and v.dtype == tb.int32
    v[...] = 0
    assert a.tolist() == np.arange(60).reshape(3, 4, 5).tolist()  # a copy: a untouched


@needs("torch")
def test_torch_tensor_as_index():
    import torch

    a, t = grid()
    assert t[torch.tensor([2, 1])].tolist() == a[[2, 1]].tolist()


@pytest.mark.parametrize(
    ("key", "exc", "message"),
    [
        (3, IndexError, "index 3 is out of bounds for dimension 0 with size 3"),
        ((0, -6), IndexError, "index -6 is out of bounds for dimension 1 with size 4"),
        ((0, 0, 0, 0), IndexError, "too many indices for a tensor of dimension 3"),
        ((..., ...), IndexError, "single ellipsis"),
        (1.5, IndexError, "only integers, slices"),
        ("a", IndexError, "only integers, slices"),
        (slice(None, None, 0), ValueError, "slice step cannot be zero"),
    ],
)
def test_index_errors(key, exc, message):
    _, t = grid()
    with pytest.raises(exc, match=message):
        t[key]


def test_indexing_device_memory_is_metadata_only():
    t = tb.from_dlpack(fake_device_producer((2, 0), shape=(4, 6)))
    v = t[1:, ::2]
    assert v.shape == (3, 3) and v.strides == (6, 2) and v.device == "cuda:0"
    assert v.data_ptr() == t.data_ptr() + 6 * 4
    with pytest.raises(BufferError, match="advanced indexing needs CPU-accessible memory"):
        t[[0, 1]]


# --------------------------------------------------------------------------
# Assignment
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (0, 5),
        (slice(None), 7.9),
        ((slice(None), 1), [1, 2, 3, 4, 5]),
        ((1,), np.arange(20).reshape(4, 5)),
        ((Ellipsis, 0), tb.asarray([[1], [2], [3]])),
        ([0, 2], -1),
        (np.array([True, False, True]), tb.asarray(np.zeros(20, dtype=np.int8)).reshape(4, 5)),
    ],
)
def test_setitem_like_numpy(key, value):
    a, t = grid()
    expected = a.copy()
    np_value = value.numpy() if type(value) is tb.Tensor else value
    expected[key] = np_value
    t[key] = value
    assert a.tolist() == expected.tolist()


@needs("torch")
def test_setitem_from_torch():
    import torch

    a, t = grid()
    t[0, 0] = torch.tensor([9, 8, 7, 6, 5])
    assert a[0, 0].tolist() == [9, 8, 7, 6, 5]


@needs("torch")
def test_seed_write_through_from_dlpack():
    import torch

    x = torch.arange(4)
    t2 = tb.from_dlpack(x)
    t2[:2] = -1
    assert x.tolist() == [-1, -1, 2, 3]
    assert repr(t2) == "tensorbridge.tensor([-1, -1,  2,  3], dtype=int64)"


def test_setitem_read_only_and_device_memory():
    a = np.arange(3)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="assignment destination is read-only"):
        tb.asarray(a)[0] = 1
    t = tb.from_dlpack(fake_device_producer((2, 0)))
    with pytest.raises(BufferError, match="assignment needs CPU-accessible memory"):
        t[0] = 1


def test_setitem_with_overlap():
    t = tb.arange(6)
    t[1:] = t[:-1]
    assert t.tolist() == [0, 0, 1, 2, 3, 4]
