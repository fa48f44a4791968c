# SPDX-License-Identifier: Apache-2.0
"""asarray: every input kind, copy semantics, dtype and device rules, casts."""

from __future__ import annotations

import array
import mmap
import sys
import warnings

import numpy as np
import pytest
from producers import Producer, capsule_of, fake_device_producer

import tensorbridge as tb
from tensorbridge import _testing


@pytest.fixture(autouse=True)
def _restore_default_dtype():
    yield
    tb.set_default_dtype(tb.float32)


def ptr(a):
    return a.__array_interface__["data"][0]


# --------------------------------------------------------------------------
# The seeds
# --------------------------------------------------------------------------


def test_seed_asarray_shares_memory():
    a = np.arange(6.0)
    assert tb.asarray(a).data_ptr() == ptr(a)


def test_seed_copy_true_does_not_share():
    a = np.arange(6.0)
    t = tb.asarray(a, copy=True)
    assert t.data_ptr() != ptr(a)
    assert t.tolist() == a.tolist()


def test_seed_dtype_mismatch_copies():
    a = np.arange(6.0)
    t = tb.asarray(a, dtype=tb.float32)
    assert t.data_ptr() != ptr(a) and t.dtype == tb.float32
    assert t.tolist() == a.tolist()


# --------------------------------------------------------------------------
# Input kinds
# --------------------------------------------------------------------------


def test_tensor_is_returned_as_is():
    t = tb.asarray(np.arange(3))
    assert tb.asarray(t) is t
    assert tb.asarray(t, dtype=t.dtype, device="cpu", copy=None) is t
    assert tb.asarray(t, copy=False) is t


def test_torch_tensor_is_shared():
    torch = pytest.importorskip("torch")
    x = torch.arange(5, dtype=torch.int32)
    t = tb.asarray(x)
    assert t.data_ptr() == x.data_ptr() and t.dtype == tb.int32
    t[0] = 9
    assert x[0].item() == 9


def test_dlpack_producer_is_shared():
    a = np.arange(4.0)
    p = Producer(lambda **kw: capsule_of(a))
    assert tb.asarray(p).data_ptr() == ptr(a)


def test_capsule_is_consumed_and_shared():
    a = np.arange(4.0)
    capsule, _ = capsule_of(a)
    t = tb.asarray(capsule)
    assert t.data_ptr() == ptr(a)
    assert _testing.capsule_name(capsule) == "used_dltensor_versioned"


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


def test_typed_buffer_with_another_dtype_is_cast():
    t = tb.asarray(array.array("h", [1, 2]), dtype=tb.float32)
    assert t.dtype == tb.float32 and t.tolist() == [1.0, 2.0]


def test_non_native_byte_order_is_refused():
    swapped = np.arange(3, dtype=">i4")
    with pytest.raises(BufferError, match="native byte order"):
        tb.asarray(memoryview(swapped))


@pytest.mark.parametrize(
    ("value", "dtype", "expected"),
    [
        (True, tb.bool, True),
        (7, tb.int64, 7),
        (2.5, tb.float32, 2.5),
        (1 + 2j, tb.complex64, 1 + 2j),
    ],
)
def test_python_scalars(value, dtype, expected):
    t = tb.asarray(value)
    assert t.ndim == 0 and t.dtype is dtype and t.item() == expected


def test_default_dtype_follows_set_default_dtype():
    tb.set_default_dtype(tb.float64)
    assert tb.get_default_dtype() is tb.float64
    assert tb.asarray(1.5).dtype == tb.float64
    assert tb.asarray([1.5]).dtype == tb.float64
    assert tb.asarray(1j).dtype == tb.complex128
    with pytest.raises(TypeError, match="the default must be"):
        tb.set_default_dtype(tb.int32)


def test_numpy_scalars_keep_their_dtype():
    assert tb.asarray(np.float64(2.5)).dtype == tb.float64
    assert tb.asarray(np.uint16(7)).dtype == tb.uint16
    assert tb.asarray(np.bool_(True)).item() is True
    scalar = np.float32(1.5)  # exports a read-only buffer, but is a value: copied
    t = tb.asarray(scalar)
    assert not t.readonly and t.dtype == tb.float32 and t.item() == 1.5


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


def test_sequences_of_tensors_and_dlpack_objects():
    torch = pytest.importorskip("torch")
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


@pytest.mark.parametrize("obj", ["text", {1: 2}, object(), None])
def test_unsupported_objects(obj):
    with pytest.raises(TypeError, match="asarray"):
        tb.asarray(obj)


# --------------------------------------------------------------------------
# copy=
# --------------------------------------------------------------------------

SHARED_SOURCES = {
    "numpy": lambda: np.arange(4.0),
    "tensor": lambda: tb.asarray(np.arange(4.0)),
    "bytearray": lambda: bytearray(32),
    "capsule": lambda: capsule_of(np.arange(4.0))[0],
}


@pytest.mark.parametrize("make", SHARED_SOURCES.values(), ids=SHARED_SOURCES.keys())
def test_copy_modes_on_shareable_sources(make):
    shared = tb.asarray(make())
    assert tb.asarray(make(), copy=False).dtype == shared.dtype
    source = make()
    base = tb.asarray(source) if not tb._core._is_capsule(source) else None
    fresh = tb.asarray(make(), copy=True)
    if base is not None:
        assert tb.asarray(source, copy=True).data_ptr() != base.data_ptr()
        assert tb.asarray(source, copy=False).data_ptr() == base.data_ptr()
    assert fresh.tolist() == shared.tolist()


def test_copy_false_refusals_say_why():
    with pytest.raises(ValueError, match="copy=False, but a Python list is always copied"):
        tb.asarray([1, 2], copy=False)
    with pytest.raises(ValueError, match="copy=False, but a float scalar is always copied"):
        tb.asarray(1.0, copy=False)
    with pytest.raises(ValueError, match="copy=False, but casting float64 to float32 needs"):
        tb.asarray(np.arange(3.0), dtype=tb.float32, copy=False)
    with pytest.raises(ValueError, match="copy=False, but moving cpu data to cuda:0 needs"):
        tb.asarray(np.arange(3.0), device="cuda", copy=False)


def test_copy_must_be_bool_or_none():
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        tb.asarray([1], copy="no")


# --------------------------------------------------------------------------
# dtype and device arguments
# --------------------------------------------------------------------------


def test_dtype_spellings():
    torch = pytest.importorskip("torch")
    for spelling in (tb.float16, "float16", np.float16, np.dtype("float16"), torch.float16):
        assert tb.asarray([1, 2], dtype=spelling).dtype is tb.float16
    assert tb.asarray([1], dtype=float).dtype is tb.float32
    assert tb.asarray([1], dtype=torch.bfloat16).dtype is tb.bfloat16
    with pytest.raises(TypeError, match="has no DLPack equivalent"):
        tb.asarray([1], dtype=torch.complex32)
    with pytest.raises(TypeError, match="dtype must be"):
        tb.asarray([1], dtype="float128x")


def test_device_spellings():
    torch = pytest.importorskip("torch")
    a = np.arange(3.0)
    for spelling in ("cpu", tb.Device("cpu"), torch.device("cpu"), (1, 0)):
        assert tb.asarray(a, device=spelling).data_ptr() == ptr(a)


def test_device_move_asks_the_producer():
    a = np.arange(4.0)
    p = fake_device_producer((2, 0))
    p.make = lambda **kw: capsule_of(a)  # "copies" to the CPU when asked
    t = tb.asarray(p, device="cpu")
    assert p.calls[-1]["dl_device"] == (1, 0)
    assert t.device == "cpu"


def test_device_move_that_nothing_can_make():
    with pytest.raises(BufferError, match="cannot export its cpu data to cuda:0"):
        tb.asarray(np.arange(3.0), device="cuda")
    with pytest.raises(BufferError, match="cannot move cpu data to cuda:1"):
        tb.asarray(bytearray(8), device="cuda:1")
    with pytest.raises(BufferError, match="tensorbridge allocates CPU memory only"):
        tb.zeros(3, device="cuda")


def test_pinned_memory_relabels_to_cpu_without_copy():
    a = np.arange(3.0)
    capsule, _ = capsule_of(a, device=(3, 0))
    t = tb.asarray(capsule, device="cpu", copy=False)
    assert t.device == "cpu" and t.data_ptr() == ptr(a)


# --------------------------------------------------------------------------
# Casts: every pair of the standard dtypes, and the ml_dtypes ones
# --------------------------------------------------------------------------

STANDARD = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]
ML = [
    "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
]
VALUES = [0, 1, 2, 4]  # exactly representable everywhere (float8_e8m0fnu has no 0: see below)


@pytest.mark.parametrize("target", STANDARD)
@pytest.mark.parametrize("source", STANDARD)
def test_every_standard_cast(source, target):
    a = np.array(VALUES).astype(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        expected = a.astype(target)
        t = tb.asarray(a, dtype=target)
    assert t.dtype == target
    assert t.tolist() == expected.tolist()


@pytest.mark.parametrize("name", ML)
def test_ml_dtypes_casts_both_ways(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = [1.0, 2.0, 4.0, 0.5]
    t = tb.asarray(values, dtype=name)
    assert t.dtype == name
    assert t.tolist() == [float(v) for v in np.array(values).astype(getattr(ml_dtypes, name))]
    assert tb.asarray(t, dtype=tb.float32).tolist() == values
    assert tb.asarray(t, dtype=tb.int32).tolist() == [1, 2, 4, 0]
    # between two ml_dtypes types (float8_e8m0fnu has no direct casts: via float32)
    other = "bfloat16" if name != "bfloat16" else "float8_e4m3fn"
    assert tb.asarray(t, dtype=other).astype(tb.float32).tolist() == values


def test_ml_dtypes_numpy_arrays_are_shared():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)
    t = tb.asarray(a)
    assert t.dtype == tb.bfloat16 and t.data_ptr() == ptr(a)
    back = t.numpy()
    assert back.dtype == a.dtype and ptr(back) == ptr(a)


def test_ml_dtypes_missing_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    t = tb.asarray([1.0, 2.0])
    with pytest.raises(ImportError, match=r"bfloat16 values need the ml_dtypes package"):
        t.astype(tb.bfloat16)
