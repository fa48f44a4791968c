# SPDX-License-Identifier: Apache-2.0
"""Regressions for memory-safety bugs found by an ASan/UBSan review of the core.

Each case once wrote or read outside an allocation (or dereferenced NULL). Under a
plain build some would only corrupt the heap silently, so the tests check the
precise error or the exact bytes; run them under ASan to see the memory side.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from producers import Producer, capsule_of

import tensorbridge as tb
from tensorbridge import _core, _testing


@pytest.mark.parametrize("name", ["float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"])
def test_subbyte_allocations_hold_one_byte_per_element(name):
    t = tb.zeros(64, dtype=name)
    assert t.nbytes == 64
    assert bytes(t.view("uint8").numpy()) == bytes(64)
    raw = bytes(range(100))
    u = tb.asarray(bytearray(raw), dtype=name).copy()
    assert u.nbytes == 100
    assert bytes(u.view("uint8").numpy()) == raw


def test_allocation_byte_count_overflow():
    with pytest.raises(ValueError, match="does not fit a 64-bit address space"):
        tb.empty((2**60 + 1,), dtype=tb.complex128)
    with pytest.raises(ValueError, match="does not fit a 64-bit address space"):
        tb.empty((2**40, 2**40))


def test_sequence_mutated_between_scan_and_fill():
    inner = [1.0] * 4
    data = [inner, [2.0] * 4]
    armed = [False]

    def grow(phase, info):
        if phase == "start" and armed[0]:
            armed[0] = False
            inner.extend([3.0] * 10_000)

    # Tensors come from a free list, which does not count as an allocation for the
    # collector: held here, they leave it empty, so the new tensor is allocated.
    held = [tb.empty(0) for _ in range(64)]
    gc.callbacks.append(grow)
    threshold = gc.get_threshold()
    gc.set_threshold(1)  # a second tracked allocation collects, and so runs the callback
    try:
        gc.collect()  # (count 0; the callback is not armed yet)
        armed[0] = True
        marker = []  # count 1: the next tracked allocation, the tensor's, collects
        before = [list(row) for row in data]
        result = _core.from_sequence(data, None)
        del marker, held
    except ValueError as exc:
        # Grown between the scan and the fill: seen; or before the scan: ragged data.
        said = str(exc)
        assert "changed while it was being read" in said or "ragged nested sequence" in said
    else:
        # Whatever it read, it read consistently: the data before the call, or grown
        # before the scan (where a collection runs depends on the interpreter).
        assert result.tolist() in (before, data)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(grow)
    assert armed[0] is False, "no collection ran: the test did not exercise anything"


def test_forged_dtypes_are_refused():
    forged = tb.DType("float8_forged", 2, 8, "float")
    t = tb.asarray([1.0, 2.0])
    with pytest.raises(TypeError, match="not one of tensorbridge's dtypes"):
        t.view(forged)
    with pytest.raises(TypeError, match="not one of tensorbridge's dtypes"):
        tb.asarray(bytearray(8), dtype=tb.DType("z", 2, 0, "float"))
    with pytest.raises(TypeError, match="not a tensorbridge dtype"):
        _core.empty_tensor((2,), tb.DType("wide", 250, 8, "float"))


def test_copy_true_from_a_producer_that_lies_about_its_device():
    capsule, _ = _testing.make_capsule(0x1000, shape=(4,), strides=(1,), device=(2, 0))
    liar = Producer(lambda **kw: capsule, device=(1, 0))  # says CPU, exports CUDA
    with pytest.raises(BufferError, match=r"says cpu, but its __dlpack__\(\) exported cuda:0"):
        tb.from_dlpack(liar, copy=True)


def test_pickle_rebuild_validates_the_shape():
    from tensorbridge._numpy import _rebuild

    with pytest.raises(ValueError, match="0 to 64 dimensions"):
        _rebuild(b"\0" * 4, (2, *(1,) * 98, 2), "uint8", False)
    with pytest.raises(ValueError, match="invalid shape"):
        _rebuild(b"\0" * 8, (-2, -4), "uint8", False)


def test_stride_products_cannot_overflow():
    t = tb.asarray(np.arange(8.0))
    one = t[:: 2**62]  # its one element (as NumPy answers): no stride times the step
    assert one.tolist() == [0.0] and one.strides == (1,)
    assert t[1 :: -(2**63) + 1].tolist() == [1.0]
    a = np.zeros(2)
    capsule, _ = capsule_of(a, shape=(1, 2), strides=(-(2**63), 1))
    with pytest.raises(BufferError, match=r"strides\[0\] is -9223372036854775808; out of range"):
        tb.from_dlpack(capsule)
    capsule, _ = capsule_of(a, shape=(0, 2), strides=(2**62, 1))
    assert tb.from_dlpack(capsule).strides == (2, 1)  # an empty tensor's strides mean nothing


def test_index_into_an_empty_tensor_keeps_the_pointer():
    t = tb.zeros((3, 0))
    assert t[2].data_ptr() == t.data_ptr()


def test_testing_capsules_need_matching_strides():
    with pytest.raises(ValueError, match="one entry per dimension"):
        _testing.make_capsule(0, shape=(2,), strides=(1, 1, 1))


def test_heap_type_named_like_numpy_is_not_numpy():
    # Only NumPy's static ndarray type skips __dlpack_device__; a class that merely
    # calls itself "numpy.ndarray" is asked, and so gets the stream a GPU needs.
    from producers import fake_device_producer

    p = fake_device_producer((2, 0))

    class Impostor(type(p)):
        pass

    Impostor.__name__ = "numpy.ndarray"
    p.__class__ = Impostor
    tb.from_dlpack(p)
    # (its first capsule, asked without a stream, was GPU memory: released, and asked
    # again with the stream)
    assert p.calls[-1] == {"max_version": (1, 3), "stream": 1} and len(p.calls) == 2
    a = np.arange(3.0)
    assert tb.from_dlpack(a).data_ptr() == a.ctypes.data


def test_pickles_say_only_integers_and_real_devices():
    # A pickle says anything: a float extent was truncated ((4.9,) gave (4,)), 2**63
    # raised OverflowError, and a Device of index -5 was made and sent to producers.
    from tensorbridge._devices import _make
    from tensorbridge._numpy import _rebuild

    with pytest.raises(ValueError, match=r"4\.9 is not an integer"):
        _rebuild(b"\0" * 4, (4.9,), "uint8", False)
    with pytest.raises(ValueError, match="out of range"):
        _rebuild(b"\0" * 4, (2**63,), "uint8", False)
    with pytest.raises(ValueError, match="True is not an extent"):
        _rebuild(b"\0" * 4, (True, 4), "uint8", False)
    assert _rebuild(b"\0" * 4, (np.int64(2), 2), "uint8", False).shape == (2, 2)
    with pytest.raises(ValueError, match="device index must be in"):
        _make(1, -5)
    with pytest.raises(ValueError, match="device index must be in"):
        _make(2, 2**40)
    with pytest.raises(ValueError, match="unknown DLPack device type"):
        _make(99, 0)
    assert _make(2, 1) is tb.Device("cuda:1")


def test_pickle_rebuild_checks_the_byte_count():
    from tensorbridge._numpy import _rebuild

    with pytest.raises(ValueError, match="too many elements"):
        _rebuild(b"\0" * 16, (2**60 + 1,), "complex128", False)
    with pytest.raises(ValueError, match="1 bytes cannot hold a float6_e2m3fn tensor"):
        _rebuild(b"\0", (3074457345618258604,), "float6_e2m3fn", True)
    with pytest.raises(ValueError, match="rebuilt from contiguous bytes"):
        _rebuild(memoryview(bytearray(16))[::-1], (16,), "uint8", False)


def test_lying_buffer_exporters_are_bounded():
    base = np.zeros(4, dtype=np.uint8)
    huge_stride = np.lib.stride_tricks.as_strided(base.view(np.uint32), (3,), (2**63 - 8,))
    with pytest.raises(BufferError, match=r"strides\[0\] is 2305843009213693950; out of range"):
        tb.asarray(memoryview(huge_stride))
    huge_span = np.lib.stride_tricks.as_strided(base, shape=(2, 2), strides=(2**62, 2**62))
    with pytest.raises(BufferError, match="span more memory"):
        tb.asarray(memoryview(huge_span))


def test_reshape_of_empty_tensors_to_huge_shapes():
    with pytest.raises(ValueError, match="is too large"):
        tb.zeros(0).reshape(0, 2**31, 2**31, 2**31)
    with pytest.raises(ValueError, match="does not fit a 64-bit address space"):
        tb.empty((0, 2**40, 2**40, 2**40))
    assert tb.zeros(0).reshape(0, 7, 3).strides == (21, 3, 1)
