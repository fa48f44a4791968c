# SPDX-License-Identifier: Apache-2.0
"""The Tensor view (_tensor.pxi): metadata, construction, repr, conversions, the NumPy
array interface, the buffer protocol, sub-byte types and pickling."""

from __future__ import annotations

import array
import pickle

import numpy as np
import pytest
from needs import needs
from producers import capsule_of, fake_device_producer

import tensorbridge as tb
from tensorbridge import _testing


def grid():
    a = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    return a, tb.asarray(a)


# --------------------------------------------------------------------------
# The view and its metadata
# --------------------------------------------------------------------------


def test_not_constructible_directly():
    with pytest.raises(
        TypeError, match=r"use tensorbridge.from_dlpack\(obj\) or tensorbridge.asarray"
    ):
        tb.Tensor()
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        tb.Tensor(np.arange(3))


def test_blank_instances_are_harmless():
    # Tensor.__new__ bypasses __init__; the result must still be safe to use.
    t = tb.Tensor.__new__(tb.Tensor)
    assert t.shape == (0,) and t.size == 0
    assert np.asarray(t).shape == (0,)


def test_metadata():
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)[:, 1:, ::2]
    t = tb.from_dlpack(a)
    assert t.shape == (2, 2, 2)
    assert t.strides == (12, 4, 2)
    assert t.ndim == 3 and t.size == 8
    assert t.dtype is tb.float64 and t.dtype == "float64"
    assert t.device == tb.Device("cpu") and str(t.device) == "cpu"
    assert t.itemsize == 8 and t.nbytes == 64
    assert t.readonly is False
    assert t.data_ptr() == a.ctypes.data
    assert not t.is_contiguous()
    assert isinstance(t.shape, tuple) and isinstance(t.strides, tuple)


def test_repr_shows_shape_dtype_device():
    t = tb.from_dlpack(fake_device_producer((2, 1), shape=(2, 3)))
    assert repr(t) == "tensorbridge.Tensor(shape=(2, 3), dtype=float32, device=cuda:1)"
    a = np.zeros(2, dtype=np.int8)
    a.flags.writeable = False
    assert "readonly" in repr(tb.from_dlpack(a))


def test_data_ptr_of_views_and_offsets():
    a = np.arange(10, dtype=np.int64)
    capsule, _ = capsule_of(a, byte_offset=16, shape=(8,), strides=(1,))
    t = tb.from_dlpack(capsule)
    assert t.data_ptr() == a.ctypes.data + 16
    assert np.asarray(t)[0] == 2


# --------------------------------------------------------------------------
# The NumPy array interface
# --------------------------------------------------------------------------


def test_array_interface_shares_memory_both_ways():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[::-1, 1:]
    t = tb.from_dlpack(a)
    b = np.asarray(t)
    assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    assert b.strides == a.strides
    b[0, 0] = -5
    assert a[0, 0] == -5


def test_numpy_views_keep_the_memory_alive():
    capsule, counter = capsule_of(np.arange(3.0))
    b = np.asarray(tb.from_dlpack(capsule))
    del capsule
    assert counter.calls == 0
    assert b.tolist() == [0.0, 1.0, 2.0]
    del b
    assert counter.calls == 1


def test_array_interface_respects_readonly():
    a = np.arange(3.0)
    a.flags.writeable = False
    b = np.asarray(tb.from_dlpack(a))
    assert not b.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        b[0] = 1


def test_array_interface_absent_for_device_memory():
    t = tb.from_dlpack(fake_device_producer((2, 0)))
    assert not hasattr(t, "__array_interface__")
    with pytest.raises(AttributeError, match="only available for CPU-accessible memory"):
        t.__array_interface__  # noqa: B018


# --------------------------------------------------------------------------
# The buffer protocol
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "fmt"),
    [
        (np.bool_, "?"),
        (np.int8, "b"),
        (np.uint16, "H"),
        (np.int32, "i"),
        (np.int64, "q"),
        (np.uint64, "Q"),
        (np.float16, "e"),
        (np.float32, "f"),
        (np.float64, "d"),
        (np.complex64, "Zf"),
        (np.complex128, "Zd"),
    ],
)
def test_buffer_protocol(dtype, fmt):
    a = np.arange(6).astype(dtype).reshape(2, 3)[:, ::-1]
    m = memoryview(tb.from_dlpack(a))
    assert m.format == fmt
    assert m.shape == a.shape and m.strides == a.strides
    assert m.readonly is False
    assert np.asarray(m).tolist() == a.tolist()


def test_buffer_protocol_write_through_and_readonly():
    a = np.arange(4, dtype=np.uint8)
    m = memoryview(tb.from_dlpack(a))
    m[1] = 200
    assert a[1] == 200
    a.flags.writeable = False
    m = memoryview(tb.from_dlpack(a))
    assert m.readonly
    with pytest.raises(TypeError):
        m[0] = 1


def test_buffer_protocol_contiguity_requests():
    t = tb.from_dlpack(np.arange(6.0).reshape(2, 3).T)
    with pytest.raises(BufferError, match="not C-contiguous"):
        array.array("d").frombytes(t)  # asks for a simple (contiguous) buffer
    assert bytes(t) == np.ascontiguousarray(np.asarray(t)).tobytes()
    assert memoryview(t).tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]


def test_buffer_protocol_refused_for_device_memory_and_formatless_dtypes():
    with pytest.raises(BufferError, match="needs CPU-accessible memory"):
        memoryview(tb.from_dlpack(fake_device_producer((2, 0))))
    memory = np.zeros(4, dtype=np.uint8)
    capsule, _ = _testing.make_capsule(memory, shape=(2,), strides=(1,), dtype=(4, 16, 1))
    with pytest.raises(BufferError, match="bfloat16 has no buffer-protocol format"):
        memoryview(tb.from_dlpack(capsule))


def test_memoryview_keeps_the_memory_alive():
    a = np.arange(3.0)
    capsule, counter = capsule_of(a)
    t = tb.from_dlpack(capsule)
    m = memoryview(t)
    del t, capsule
    assert counter.calls == 0
    m.release()
    assert counter.calls == 1


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


@needs("ml_dtypes")
def test_repr_read_only_and_ml_dtypes():
    assert repr(tb.asarray(b"\x00\x00\x80?")) == (
        "tensorbridge.tensor([1.], dtype=float32, readonly=True)"
    )
    assert repr(tb.asarray([0.5, 2.0], dtype="bfloat16")) == (
        "tensorbridge.tensor([0.5000, 2.0000], dtype=bfloat16)"
    )


# --------------------------------------------------------------------------
# Sub-byte types
# --------------------------------------------------------------------------


@needs("ml_dtypes")
def test_packed_float4_unpacks_low_nibble_first():
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


@needs("ml_dtypes")
def test_packed_float6_round_trip_through_pickle():
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


@needs("ml_dtypes")
def test_pickle_ml_dtypes():
    t = tb.asarray([1.0, 0.5], dtype="float8_e4m3fn")
    u = pickle.loads(pickle.dumps(t))
    assert u.dtype == tb.float8_e4m3fn and u.tolist() == [1.0, 0.5]


def test_pickle_refuses_device_memory():
    t = tb.from_dlpack(fake_device_producer((2, 0)))
    with pytest.raises(TypeError, match="cannot pickle a tensor on cuda:0"):
        pickle.dumps(t)
