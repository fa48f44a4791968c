# SPDX-License-Identifier: Apache-2.0
"""Layout (_layout.pxi): contiguity, reshape's strides, transposes and permutations,
dtype views."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from producers import capsule_of, fake_device_producer

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


@pytest.mark.parametrize(
    ("shape", "source", "target"),
    [
        ((3, 0), "float32", "float64"),  # strides of 4 bytes: no whole float64
        ((0, 0), "float16", "float64"),
        ((2, 0, 3), "float32", "uint8"),
        ((0, 4), "float32", "float64"),
        ((0,), "uint8", "float64"),
        ((0, 1), "float32", "float64"),  # 4 bytes a row: refused, as by NumPy
        ((2, 0, 3), "float32", "float64"),
    ],
)
def test_view_dtype_of_empty_tensors_as_numpy(shape, source, target):
    # Strides that address no element need not be whole numbers of the new itemsize
    # (issue 33, item 9: these were refused where NumPy answers).
    a = np.zeros(shape, dtype=source)
    try:
        want = a.view(target)
    except ValueError:
        with pytest.raises(ValueError, match="not a multiple of the new itemsize"):
            tb.asarray(a).view(target)
        return
    got = tb.asarray(a).view(target)
    assert got.shape == want.shape and got.dtype == target and got.size == 0
    assert np.asarray(got).shape == want.shape


@pytest.mark.parametrize(("bits", "stride"), [(8, 2**62), (16, 2**61)])
def test_reshape_at_the_layout_bound_keeps_strides_in_range(bits, stride):
    # Two elements 2**62 bytes apart pass the layout check; reshape(1, 2) gave the
    # extent-1 dimension stride * 2: -2**63 (signed overflow), or 2**62 elements that
    # memoryview and __array_interface__ turned into -2**63 bytes.
    buf = np.zeros(16, np.int8)
    capsule, _ = capsule_of(buf, shape=(2,), strides=(stride,), dtype=(0, bits, 1))
    v = tb.from_dlpack(capsule).reshape(1, 2)
    assert v.shape == (1, 2) and v.strides[1] == stride
    for element_stride in v.strides:
        assert 0 < element_stride * (bits // 8) <= 2**62
    assert memoryview(v).strides[1] == stride * (bits // 8)
    assert all(s > 0 for s in v.__array_interface__["strides"])


def test_view_dtype_errors():
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        tb.asarray(np.arange(8.0))[::2].view("float32")
    with pytest.raises(ValueError, match="not a multiple of the new itemsize 8"):
        tb.asarray(np.arange(3, dtype=np.int32)).view("int64")
    with pytest.raises(ValueError, match="a 0-d tensor cannot change itemsize"):
        tb.asarray(1.0).view("int8")


# -- the views computed in C, against NumPy's on random layouts ---------------------------

_SLICES = st.tuples(
    st.integers(-6, 6) | st.none(), st.integers(-6, 6) | st.none(), st.sampled_from([1, 2, -1, -2])
)


@st.composite
def _strided(draw):
    """A NumPy array and the same view of it as a Tensor: up to 4 dimensions, zero
    extents, step slices and negative strides."""
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=4))
    base = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape)
    key = tuple(slice(*draw(_SLICES)) for _ in shape)
    a = base[key] if key else base  # (NumPy's base[()] of a 0-d array is a scalar)
    return a, tb.asarray(base)[key]


def _same_view(t, expected, owner):
    assert t.shape == expected.shape and t.tolist() == expected.tolist()
    if expected.size > 1:
        assert t.strides == tuple(s // expected.itemsize for s in expected.strides)
    if expected.size:
        assert t.data_ptr() == expected.__array_interface__["data"][0]
        assert np.shares_memory(np.from_dlpack(t), owner)


@given(_strided(), st.data())
@settings(max_examples=300, deadline=None)
def test_views_in_c_match_numpy(case, data):
    a, t = case
    owner = a.base if a.base is not None else a
    _same_view(t.T, a.T, owner)
    _same_view(t.transpose(), a.T, owner)
    if a.ndim:
        i = data.draw(st.integers(-a.ndim, a.ndim - 1))
        j = data.draw(st.integers(-a.ndim, a.ndim - 1))
        _same_view(t.transpose(i, j), a.swapaxes(i, j), owner)
        order = data.draw(st.permutations(range(a.ndim)))
        _same_view(t.permute(*order), a.transpose(order), owner)
        _same_view(t.permute(order), a.transpose(order), owner)
        _same_view(t.transpose(tuple(order)), a.transpose(order), owner)
        if a.shape[0]:
            k = data.draw(st.integers(-a.shape[0], a.shape[0] - 1))
            _same_view(t[k], a[k, ...], owner)  # (a[k] of a 1-d array is a scalar)
        s = slice(*data.draw(_SLICES))
        _same_view(t[s], a[s], owner)
    flat = t.flatten()
    assert flat.tolist() == a.ravel().tolist()
    assert np.shares_memory(np.from_dlpack(flat), owner) == np.shares_memory(a.reshape(-1), owner)
    if a.size:
        shape = data.draw(st.sampled_from([(-1,), (1, -1), (a.size, 1), (-1, 1, 1)]))
        r = t.reshape(*shape)
        expected = a.reshape(shape)
        assert r.shape == expected.shape and r.tolist() == expected.tolist()
        # A view exactly where NumPy's reshape gives one.
        assert np.shares_memory(np.from_dlpack(r), owner) == np.shares_memory(expected, owner)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda t: t.permute(0, 1), ValueError, r"permute\(\): expected 3 dimensions; got 2"),
        (
            lambda t: t.permute(0, 2, 2),
            ValueError,
            r"permute\(\): repeated dimension in \(0, 2, 2\)",
        ),
        (lambda t: t.transpose((0, 0, 1)), ValueError, r"transpose\(\): repeated dimension"),
        (lambda t: t.permute(0, 1, 3), IndexError, r"dimension 3 is out of range .* 3 dimensions"),
        (lambda t: t.permute(0, 1, True), TypeError, r"dimensions must be ints; got True"),
        (lambda t: t.transpose(0, 1.0), TypeError, r"dimensions must be ints; got 1.0"),
        (lambda t: t.transpose(0, 1, 2), TypeError, r"two dimensions to swap"),
        (lambda t: t.reshape(True, -1), TypeError, r"shape entries must be ints; got True"),
        (lambda t: t.reshape(2**62, 2**62), ValueError, r"is too large"),
        (lambda t: t[3], IndexError, r"index 3 is out of bounds for dimension 0 with size 3"),
        (lambda t: t[-4], IndexError, r"index -4 is out of bounds for dimension 0 with size 3"),
        (lambda t: t[2**70], IndexError, r"index 1180591620717411303424 is out of bounds"),
    ],
)
def test_view_errors_name_what_was_wrong(call, error, message):
    _, t = grid()
    with pytest.raises(error, match=message):
        call(t)
