# SPDX-License-Identifier: Apache-2.0
"""Host memory in (_buffers.pxi): the buffer protocol and its PEP 3118 formats, and
NumPy arrays read through their struct, which must give what NumPy's own DLPack export
gives."""

from __future__ import annotations

import array
import ctypes
import gc
import mmap
import re

import numpy as np
import pytest
from buffer_ctypes import CraftedBuffer

import tensorbridge as tb
from tensorbridge import _core


@pytest.fixture(autouse=True)
def _restore_default_dtype():
    yield
    tb.set_default_dtype(tb.float32)


def ptr(a):
    return a.__array_interface__["data"][0]


# --------------------------------------------------------------------------
# The buffer protocol
# --------------------------------------------------------------------------


def test_bytes_are_reinterpreted_read_only():
    data = np.arange(4, dtype=np.float32).tobytes()
    t = tb.asarray(data)
    assert t.dtype == tb.float32 and t.readonly and t.shape == (4,)
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="read-only"):
        t[0] = 1


def test_bytearray_is_shared_and_writable():
    data = bytearray(np.arange(3, dtype=np.int16).tobytes())
    t = tb.asarray(data, dtype=tb.int16)
    assert not t.readonly and t.tolist() == [0, 1, 2]
    t[1] = -2
    assert np.frombuffer(data, dtype=np.int16).tolist() == [0, -2, 2]
    with pytest.raises(BufferError):
        data.append(0)  # the tensor holds the buffer, as NumPy would


def test_default_float_dtype_for_raw_buffers():
    tb.set_default_dtype(tb.float64)
    assert tb.asarray(bytes(16)).shape == (2,)
    assert tb.asarray(bytes(16)).dtype == tb.float64


def test_raw_buffer_length_must_fit_the_dtype():
    with pytest.raises(ValueError, match=r"a buffer of 6 bytes is not a whole number of float32"):
        tb.asarray(bytes(6))


def test_mmap_is_shared(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(np.arange(4, dtype=np.int32).tobytes())
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        t = tb.asarray(m, dtype=tb.int32)
        t[3] = 42
        del t
        m.flush()
        m.close()
    assert np.frombuffer(path.read_bytes(), dtype=np.int32).tolist() == [0, 1, 2, 42]


def test_memoryview_slices():
    data = bytearray(range(16))
    window = memoryview(data)[4:12]
    t = tb.asarray(window, dtype=tb.uint8)
    assert t.tolist() == list(range(4, 12))
    t[0] = 200
    assert data[4] == 200
    strided = memoryview(data)[::4]  # a strided byte buffer keeps its element type
    s = tb.asarray(strided)
    assert s.dtype == tb.uint8 and s.strides == (4,) and s.tolist() == [0, 200, 8, 12]


def test_typed_buffers_keep_type_and_shape():
    t = tb.asarray(array.array("i", [1, 2, 3]))
    assert t.dtype == tb.int32 and t.tolist() == [1, 2, 3]
    m = memoryview(bytearray(np.arange(6, dtype=np.float64).tobytes())).cast("d", (2, 3))
    t = tb.asarray(m)
    assert t.dtype == tb.float64 and t.shape == (2, 3)
    assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_a_typed_byte_buffer_is_its_type_not_raw_bytes():
    # array.array('B') says uint8: four elements, as NumPy reads it (only byte
    # containers are raw bytes, reinterpreted as the default float dtype).
    data = array.array("B", [1, 2, 3, 4])
    t = tb.asarray(data)
    assert t.dtype == tb.uint8 and t.tolist() == [1, 2, 3, 4]
    t[0] = 9
    assert data[0] == 9  # shared
    assert tb.asarray(array.array("b", [-1, 2])).tolist() == [-1, 2]
    assert tb.asarray(memoryview(array.array("B", [5]))).dtype == tb.uint8
    assert tb.asarray(array.array("B", [1, 2]), dtype=tb.float32).tolist() == [1.0, 2.0]
    for raw in (bytes(4), bytearray(4), memoryview(bytearray(4)), memoryview(bytes(8))[4:]):
        assert tb.asarray(raw).dtype == tb.float32 and tb.asarray(raw).shape == (1,)


def test_typed_buffer_with_another_dtype_is_cast():
    t = tb.asarray(array.array("h", [1, 2]), dtype=tb.float32)
    assert t.dtype == tb.float32 and t.tolist() == [1.0, 2.0]


def test_non_native_byte_order_is_refused():
    swapped = np.arange(3, dtype=">i4")
    with pytest.raises(BufferError, match="native byte order"):
        tb.asarray(memoryview(swapped))


# --------------------------------------------------------------------------
# asarray(ndarray) reads NumPy's struct: the same as NumPy's own DLPack export
# --------------------------------------------------------------------------


NUMPY_CASES = {
    "float64": lambda: np.arange(6.0),
    "bool": lambda: np.array([True, False, True]),
    "int8": lambda: np.arange(-3, 3, dtype=np.int8),
    "uint16": lambda: np.arange(5, dtype=np.uint16),
    "int32": lambda: np.arange(5, dtype=np.int32),
    "intc-long": lambda: np.arange(5, dtype=np.int_),
    "uint64": lambda: np.arange(5, dtype=np.uint64),
    "float16": lambda: np.arange(5, dtype=np.float16),
    "complex64": lambda: np.arange(5, dtype=np.complex64),
    "complex128": lambda: np.arange(5, dtype=np.complex128),
    "0-d": lambda: np.array(3.5),
    "size-0": lambda: np.zeros((0, 3)),
    "transposed": lambda: np.arange(12.0).reshape(3, 4).T,
    "negative": lambda: np.arange(12.0).reshape(3, 4)[::-1, ::-2],
    "broadcast": lambda: np.broadcast_to(np.arange(3.0), (4, 3)),
    "read-only": lambda: _readonly(np.arange(4.0)),
    "offset view": lambda: np.arange(10, dtype=np.int16)[3:7],
}


def _readonly(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("case", list(NUMPY_CASES))
def test_asarray_of_ndarray_matches_dlpack_import(case):
    a = NUMPY_CASES[case]()
    fast = tb.asarray(a)
    slow = tb.from_dlpack(a)  # through NumPy's __dlpack__
    assert _core._ndarray_struct_state() == 1
    assert (fast.shape, fast.dtype, fast.readonly) == (slow.shape, slow.dtype, slow.readonly)
    if fast.size > 1:
        assert fast.strides == slow.strides
    if fast.size:
        assert fast.data_ptr() == slow.data_ptr() == a.__array_interface__["data"][0]
    assert fast.tolist() == a.tolist()


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros(3, dtype=np.longdouble),
        lambda: np.frombuffer(b"\0" * 17, dtype=np.uint8)[1:].view(np.int32),  # unaligned
    ],
    ids=["longdouble", "unaligned"],
)
def test_asarray_of_other_ndarrays_behaves_as_before(make):
    a = make()
    try:
        want = tb.from_dlpack(a)
    except (BufferError, TypeError) as exc:
        with pytest.raises(type(exc)):
            tb.asarray(a, copy=False)
        return
    got = tb.asarray(a)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_asarray_of_ndarray_keeps_the_array_alive_and_unresizable():
    a = np.arange(5.0)
    t = tb.asarray(a)
    with pytest.raises(ValueError):
        a.resize(100)  # NumPy refuses: our reference pins its memory
    del a
    gc.collect()
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_asarray_refuses_numpy_dtypes_without_dlpack_equivalent_saying_so():
    # (from_dlpack passes NumPy's own BufferError through; asarray names the dtype
    # and the fix; a BufferError, as from_dlpack's)
    for refused in (np.zeros(2, dtype="datetime64[s]"), np.zeros(4, dtype=[("a", "<i4")])):
        with pytest.raises(BufferError, match=rf"NumPy {re.escape(str(refused.dtype))} arrays"):
            tb.asarray(refused)
    swapped = np.arange(4, dtype=">f4" if np.little_endian else "<f4")
    assert tb.asarray(swapped).tolist() == [0.0, 1.0, 2.0, 3.0]  # a native-order copy


# -- malformed exporters: what a C exporter may put in a Py_buffer ----------------------


_MEMORY = ctypes.create_string_buffer(64)
_ADDRESS = ctypes.addressof(_MEMORY)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # ndim 2 and no shape: the shape was read from address 0 (a SIGSEGV)
        (dict(ndim=2, shape=None, len=16, itemsize=4, format=b"i"), "2 dimensions but no shape"),
        # no data and 16 bytes: copy() read from NULL (a SIGSEGV); np.asarray read 16
        # bytes of tensorbridge's static memory
        (dict(buf=None, shape=[4], len=16, itemsize=4, format=b"i"), "NULL data pointer"),
        # a shape of 1000 ints over a len of 4 bytes: read per the shape
        (dict(shape=[1000], len=4, itemsize=4, format=b"i"), "holds 4 bytes, but its shape"),
        (dict(shape=[2, 2], strides=[8, 4], len=20, itemsize=4, format=b"i"), "itemsize 4 say 16"),
    ],
)
def test_a_malformed_exporter_is_refused(fields, message):
    fields.setdefault("buf", _ADDRESS)
    with pytest.raises(BufferError, match=message):
        tb.asarray(CraftedBuffer(**fields))


def test_an_honest_crafted_exporter_is_read():
    # (the same exporter, telling the truth: what the refusals above are measured against)
    ctypes.memmove(_ADDRESS, (ctypes.c_int32 * 4)(1, 2, 3, 4), 16)
    t = tb.asarray(CraftedBuffer(buf=_ADDRESS, shape=[2, 2], len=16, itemsize=4, format=b"i"))
    assert t.tolist() == [[1, 2], [3, 4]] and t.data_ptr() == _ADDRESS
    empty = tb.asarray(CraftedBuffer(buf=None, shape=[0], len=0, itemsize=4, format=b"i"))
    assert empty.shape == (0,) and np.asarray(empty).size == 0
