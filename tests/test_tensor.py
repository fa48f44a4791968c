# SPDX-License-Identifier: Apache-2.0
"""The Tensor view: metadata, construction, NumPy array interface, buffer protocol."""

from __future__ import annotations

import array

import numpy as np
import pytest
from producers import capsule_of, fake_device_producer

import tensorbridge as tb
from tensorbridge import _testing


def test_not_constructible_directly():
    with pytest.raises(TypeError, match=r"use tensorbridge.from_dlpack\(obj\) or tensorbridge.asarray"):
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


def test_repr_shows_shape_dtype_device():
    t = tb.from_dlpack(fake_device_producer((2, 1), shape=(2, 3)))
    assert repr(t) == "tensorbridge.Tensor(shape=(2, 3), dtype=float32, device=cuda:1)"
    a = np.zeros(2, dtype=np.int8)
    a.flags.writeable = False
    assert "readonly" in repr(tb.from_dlpack(a))


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


def test_data_ptr_of_views_and_offsets():
    a = np.arange(10, dtype=np.int64)
    capsule, _ = capsule_of(a, byte_offset=16, shape=(8,), strides=(1,))
    t = tb.from_dlpack(capsule)
    assert t.data_ptr() == a.ctypes.data + 16
    assert np.asarray(t)[0] == 2
