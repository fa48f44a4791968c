# SPDX-License-Identifier: Apache-2.0
"""The Tensor people work with: indexing, assignment, conversions, reshaping, repr, pickling."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from producers import fake_device_producer

import tensorbridge as tb
from tensorbridge import _testing


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
    np_key = tuple(k.numpy() if type(k) is tb.Tensor else k for k in key) if isinstance(
        key, tuple
    ) else (key.numpy() if type(key) is tb.Tensor else key)
    expected = a[np_key]
    v = t[key]
    assert v.tolist() == expected.tolist() and v.dtype == tb.int32
    v[...] = 0 if v.size else 0
    assert a.tolist() == np.arange(60).reshape(3, 4, 5).tolist()  # a copy: a untouched


def test_torch_tensor_as_index():
    torch = pytest.importorskip("torch")
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


def test_setitem_from_torch():
    torch = pytest.importorskip("torch")
    a, t = grid()
    t[0, 0] = torch.tensor([9, 8, 7, 6, 5])
    assert a[0, 0].tolist() == [9, 8, 7, 6, 5]


def test_seed_write_through_from_dlpack():
    torch = pytest.importorskip("torch")
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


# --------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------


def test_tolist_and_item():
    t = tb.asarray([[1.5, 2.0]])
    assert t.tolist() == [[1.5, 2.0]]
    assert type(t.tolist()[0][0]) is float
    assert tb.asarray(3).item() == 3 and type(tb.asarray(3).item()) is int
    assert tb.asarray([True]).item() is True
    with pytest.raises(ValueError, match="only a tensor with one element has an item"):
        t.item()


def test_numpy_is_zero_copy_and_keeps_read_only():
    a = np.arange(4.0)
    t = tb.asarray(a)
    b = t.numpy()
    assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    b[0] = 10
    assert a[0] == 10
    a.flags.writeable = False
    assert not tb.asarray(a).numpy().flags.writeable
    with pytest.raises(BufferError, match="a NumPy view needs CPU-accessible memory"):
        tb.from_dlpack(fake_device_producer((2, 0))).numpy()


def test_array_protocol_copy_keyword():
    t = tb.asarray(np.arange(3, dtype=np.float32))
    shared = np.array(t, copy=False)
    assert shared.__array_interface__["data"][0] == t.data_ptr()
    copied = np.array(t, copy=True)
    assert copied.__array_interface__["data"][0] != t.data_ptr()
    assert t.__array__(dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="copy=False, but casting float32 to float64"):
        t.__array__(dtype=np.float64, copy=False)


def test_len_and_iteration():
    t = tb.asarray([[1, 2], [3, 4], [5, 6]])
    assert len(t) == 3
    rows = list(t)
    assert [r.tolist() for r in rows] == [[1, 2], [3, 4], [5, 6]]
    assert rows[1].data_ptr() == t.data_ptr() + 2 * 8
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(tb.asarray(1))
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(tb.asarray(1)).__next__()


def test_scalar_dunders():
    assert float(tb.asarray(2.5)) == 2.5
    assert int(tb.asarray([7])) == 7
    assert complex(tb.asarray(1j)) == 1j
    assert [10, 20, 30][tb.asarray(2)] == 30
    assert bool(tb.asarray([0])) is False
    with pytest.raises(ValueError, match="ambiguous"):
        bool(tb.asarray([1, 2]))
    with pytest.raises(TypeError, match="only integer tensors"):
        [1][tb.asarray(0.0)]


def test_copy_and_contiguous():
    a, t = grid()
    v = t[:, ::2]
    c = v.copy()
    assert c.is_contiguous() and c.tolist() == v.tolist() and c.data_ptr() != v.data_ptr()
    assert v.contiguous().is_contiguous()
    assert t.contiguous() is t
    with pytest.raises(BufferError, match="cannot copy cuda:0 memory"):
        tb.from_dlpack(fake_device_producer((2, 0))).copy()


def test_astype_and_to():
    t = tb.asarray([1.7, -2.5])
    assert t.astype(tb.int32).tolist() == [1, -2]
    assert t.astype("float32") is not t
    assert t.astype("float32", copy=False) is t
    assert t.to("float64").dtype == tb.float64
    assert t.to("cpu") is t
    assert t.to(device="cpu", dtype="int8").tolist() == [1, -2]
    assert t.to("cpu", copy=True) is not t
    with pytest.raises(BufferError, match="cannot move cpu memory to cuda:0"):
        t.to("cuda")


# --------------------------------------------------------------------------
# Shape manipulation
# --------------------------------------------------------------------------


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
    base, t = grid()
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


# --------------------------------------------------------------------------
# repr
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "text"),
    [
        (lambda: tb.asarray([-1, -1, 2, 3]), "tensorbridge.tensor([-1, -1,  2,  3], dtype=int64)"),
        (lambda: tb.asarray([1.5, 2.0]), "tensorbridge.tensor([1.5000, 2.0000], dtype=float32)"),
        (lambda: tb.asarray([1.0, 2.0]), "tensorbridge.tensor([1., 2.], dtype=float32)"),
        (lambda: tb.asarray(True), "tensorbridge.tensor(True, dtype=bool)"),
        (lambda: tb.zeros((0, 2)), "tensorbridge.tensor([], size=(0, 2), dtype=float32)"),
        (
            lambda: tb.asarray([[1, 2], [3, 4]]),
            "tensorbridge.tensor([[1, 2],\n                     [3, 4]], dtype=int64)",
        ),
        (
            lambda: tb.from_dlpack(fake_device_producer((2, 1), shape=(2, 2))),
            "tensorbridge.Tensor(shape=(2, 2), dtype=float32, device=cuda:1)",
        ),
    ],
)
def test_repr(make, text):
    assert repr(make()) == text


def test_repr_summarises_large_tensors():
    text = repr(tb.arange(10_000))
    assert text == "tensorbridge.tensor([   0,    1,    2, ..., 9997, 9998, 9999], dtype=int64)"
    assert "..." in repr(tb.zeros((100, 100)))


def test_repr_read_only_and_ml_dtypes():
    pytest.importorskip("ml_dtypes")
    assert repr(tb.asarray(b"\x00\x00\x80?")) == (
        "tensorbridge.tensor([1.], dtype=float32, readonly=True)"
    )
    assert repr(tb.asarray([0.5, 2.0], dtype="bfloat16")) == (
        "tensorbridge.tensor([0.5000, 2.0000], dtype=bfloat16)"
    )


# --------------------------------------------------------------------------
# Constructors
# --------------------------------------------------------------------------


def test_constructors():
    assert tb.empty((2, 3)).shape == (2, 3) and tb.empty(4).dtype == tb.float32
    assert tb.zeros((2, 2), dtype="int8").tolist() == [[0, 0], [0, 0]]
    assert tb.ones(3).tolist() == [1.0, 1.0, 1.0] and tb.ones(3).dtype == tb.float32
    assert tb.full((2,), 7).dtype == tb.int64 and tb.full((2,), 7).tolist() == [7, 7]
    assert tb.full((2,), 1.5).dtype == tb.float32
    assert tb.full((1,), True).dtype == tb.bool
    assert tb.full(2, 3, dtype="float16").tolist() == [3.0, 3.0]
    assert tb.arange(4).tolist() == [0, 1, 2, 3] and tb.arange(4).dtype == tb.int64
    assert tb.arange(1, 7, 2).tolist() == [1, 3, 5]
    assert tb.arange(0, 1, 0.25).dtype == tb.float32
    assert tb.arange(0, 1, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert tb.arange(3, dtype="float64").tolist() == [0.0, 1.0, 2.0]
    assert tb.zeros(3, device="cpu").device == "cpu"


def test_constructor_errors():
    with pytest.raises(ValueError, match="negative extent -1"):
        tb.zeros((2, -1))
    with pytest.raises(TypeError, match="shape must be an int or a sequence of ints"):
        tb.ones("3")
    with pytest.raises(ValueError, match="step must not be zero"):
        tb.arange(0, 3, 0)
    with pytest.raises(ValueError, match="fill_value must be a scalar"):
        tb.full(2, [1, 2])


@pytest.mark.parametrize("n", [1, 3, 17, 100, 4097, 1 << 20])
def test_allocations_are_64_byte_aligned(n):
    for t in (tb.empty(n), tb.zeros(n, dtype="int8"), tb.asarray([1.0] * min(n, 1000)),
              tb.asarray(np.arange(n), copy=True), tb.asarray(np.arange(n)).astype("int16")):
        assert t.data_ptr() % 64 == 0


# --------------------------------------------------------------------------
# Sub-byte types
# --------------------------------------------------------------------------


def test_packed_float4_unpacks_low_nibble_first():
    pytest.importorskip("ml_dtypes")
    memory = np.array([0x21, 0x7C], dtype=np.uint8)  # codes 1, 2, 0xC, 0x7
    capsule, _ = _testing.make_capsule(memory, shape=(4,), strides=(1,), dtype=(17, 4, 1))
    t = tb.from_dlpack(capsule)
    assert t.tolist() == [0.5, 1.0, -2.0, 6.0]
    assert t.astype("float32").tolist() == [0.5, 1.0, -2.0, 6.0]
    with pytest.raises(BufferError, match="bit-packed float4_e2m1fn data has no NumPy view"):
        t.numpy()
    with pytest.raises(TypeError, match="cannot assign into bit-packed"):
        t[0] = 1.0
    assert t[2:].tolist() == [-2.0, 6.0]  # starts on a byte boundary
    with pytest.raises(TypeError, match="starts inside a byte"):
        t[1:]


def test_packed_float6_round_trip_through_pickle():
    pytest.importorskip("ml_dtypes")
    codes = np.array([1, 2, 3, 63], dtype=np.uint8)
    from tensorbridge._numpy import _pack_subbyte, _unpack_subbyte

    packed = _pack_subbyte(codes, 6)
    assert packed.size == 3
    assert _unpack_subbyte(packed, 6, 4).tolist() == codes.tolist()
    capsule, _ = _testing.make_capsule(packed, shape=(4,), strides=(1,), dtype=(15, 6, 1))
    t = tb.from_dlpack(capsule)
    u = pickle.loads(pickle.dumps(t, protocol=5))
    assert u.tolist() == t.tolist() and u.nbytes == 3


# --------------------------------------------------------------------------
# Pickling
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_round_trip(protocol):
    a, t = grid()
    for x in (t, t[:, ::-2], t[0, 0, 0], tb.asarray([1.0, 2.0], dtype="float16")):
        y = pickle.loads(pickle.dumps(x, protocol=protocol))
        assert y.shape == x.shape and y.dtype == x.dtype and y.tolist() == x.tolist()
        assert not y.readonly
        y[...] = 0  # writable, and independent of the source
    assert a.sum() == np.arange(60).sum()


def test_pickle_protocol_5_is_out_of_band():
    t = tb.arange(1000)
    buffers = []
    payload = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and len(payload) < 200  # the data is not in the payload
    assert buffers[0].raw().nbytes == 8000
    u = pickle.loads(payload, buffers=buffers)
    assert u.data_ptr() == t.data_ptr()  # no copy at all on the way
    assert u.tolist() == t.tolist()


def test_pickle_ml_dtypes():
    pytest.importorskip("ml_dtypes")
    t = tb.asarray([1.0, 0.5], dtype="float8_e4m3fn")
    u = pickle.loads(pickle.dumps(t))
    assert u.dtype == tb.float8_e4m3fn and u.tolist() == [1.0, 0.5]


def test_pickle_refuses_device_memory():
    t = tb.from_dlpack(fake_device_producer((2, 0)))
    with pytest.raises(TypeError, match="cannot pickle a tensor on cuda:0"):
        pickle.dumps(t)
