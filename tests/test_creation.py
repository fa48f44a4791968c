# SPDX-License-Identifier: Apache-2.0
"""asarray and the constructors (_creation.py): what each input kind gives, copy=,
dtype and device rules, casts between every pair of dtypes, empty/zeros/ones/full/arange."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
from needs import needs
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
# Input kinds (buffers: core/test_buffers.py; sequences: core/test_sequences.py)
# --------------------------------------------------------------------------


def test_tensor_is_returned_as_is():
    t = tb.asarray(np.arange(3))
    assert tb.asarray(t) is t
    assert tb.asarray(t, dtype=t.dtype, device="cpu", copy=None) is t
    assert tb.asarray(t, copy=False) is t


@needs("torch")
def test_torch_tensor_is_shared():
    import torch

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
    base = tb.asarray(source) if not tb._core.is_capsule(source) else None
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


@needs("torch")
def test_dtype_spellings():
    import torch

    for spelling in (tb.float16, "float16", np.float16, np.dtype("float16"), torch.float16):
        assert tb.asarray([1, 2], dtype=spelling).dtype is tb.float16
    assert tb.asarray([1], dtype=float).dtype is tb.float64  # as NumPy and torch
    assert tb.asarray([1], dtype=torch.bfloat16).dtype is tb.bfloat16
    with pytest.raises(TypeError, match="has no DLPack equivalent"):
        tb.asarray([1], dtype=torch.complex32)
    with pytest.raises(TypeError, match="dtype must be"):
        tb.asarray([1], dtype="float128x")


def test_python_types_as_dtype_mean_what_numpy_and_torch_read():
    # As np.asarray(..., dtype=float) and torch.tensor(..., dtype=float): float64,
    # whatever the default dtype of values without one (float32 here, as torch's).
    a = np.arange(3.0)
    out = tb.asarray(a, dtype=float)
    assert out.dtype is tb.float64 and out.data_ptr() == a.ctypes.data  # no cast
    assert tb.asarray([1.5], dtype=complex).dtype is tb.complex128
    assert tb.asarray([1.5], dtype=int).dtype is tb.int64
    assert tb.asarray([0, 2], dtype=bool).tolist() == [False, True]
    assert tb.asarray([1.5]).dtype is tb.float32  # values without a dtype: unchanged
    assert tb.asarray([1j]).dtype is tb.complex64
    for py, name in ((float, "float64"), (complex, "complex128"), (int, "int64")):
        assert tb.asarray(np.zeros(2), dtype=py).dtype.name == np.dtype(py).name == name


@needs("torch")
def test_python_float_as_dtype_into_torch():
    import torch

    assert tb.convert(np.arange(2, dtype=np.float32), "torch", dtype=float).dtype == (
        torch.tensor([1], dtype=float).dtype
    )


@needs("torch")
def test_device_spellings():
    import torch

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
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


ML = [
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
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


@needs("ml_dtypes")
@pytest.mark.parametrize("name", ML)
def test_ml_dtypes_casts_both_ways(name):
    import ml_dtypes

    values = [1.0, 2.0, 4.0, 0.5]
    t = tb.asarray(values, dtype=name)
    assert t.dtype == name
    assert t.tolist() == [float(v) for v in np.array(values).astype(getattr(ml_dtypes, name))]
    assert tb.asarray(t, dtype=tb.float32).tolist() == values
    assert tb.asarray(t, dtype=tb.int32).tolist() == [1, 2, 4, 0]
    # between two ml_dtypes types (float8_e8m0fnu has no direct casts: via float32)
    other = "bfloat16" if name != "bfloat16" else "float8_e4m3fn"
    assert tb.asarray(t, dtype=other).astype(tb.float32).tolist() == values


@needs("ml_dtypes")
def test_ml_dtypes_numpy_arrays_are_shared():
    import ml_dtypes

    a = np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)
    t = tb.asarray(a)
    assert t.dtype == tb.bfloat16 and t.data_ptr() == ptr(a)
    back = t.numpy()
    assert back.dtype == a.dtype and ptr(back) == ptr(a)


def test_ml_dtypes_missing_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    t = tb.asarray([1.0, 2.0], dtype="float64")
    with pytest.raises(ImportError, match=r"bfloat16 values need the ml_dtypes package"):
        t.astype(tb.bfloat16)  # (NumPy's cast, through ml_dtypes)
    # float32 to and from bfloat16 are cast in C, without it.
    assert t.astype("float32").astype(tb.bfloat16).astype("float32").tolist() == [1.0, 2.0]


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


def test_range_and_other_sequences_are_read_as_their_items():
    t = tb.asarray(range(3))
    assert t.dtype is tb.int64 and t.tolist() == [0, 1, 2]  # as numpy and torch.asarray
    assert tb.asarray(range(0, 6, 2), dtype=tb.float32).tolist() == [0.0, 2.0, 4.0]
    assert tb.asarray([range(2), range(2, 4)]).tolist() == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="always copied"):
        tb.asarray(range(3), copy=False)


class _ArrayLike:
    """An object speaking only NumPy's __array__ protocol (NumPy 2's copy keyword)."""

    def __init__(self, array, accepts_copy=True):
        self.array = array
        self.asked = []
        if not accepts_copy:
            self.__class__ = _OldArrayLike

    def __array__(self, dtype=None, copy=None):
        self.asked.append(copy)
        if copy is True:
            return self.array.copy()
        return self.array


class _OldArrayLike(_ArrayLike):
    def __array__(self, dtype=None):  # before NumPy 2: no copy keyword
        return self.array


def test_objects_with_array_are_read_through_it_without_a_copy():
    a = np.arange(6.0).reshape(2, 3)
    like = _ArrayLike(a)
    t = tb.asarray(like)
    assert t.data_ptr() == a.ctypes.data and t.shape == (2, 3)
    assert tb.asarray(like, copy=False).data_ptr() == a.ctypes.data
    assert like.asked[-1] is False  # asked not to copy
    assert tb.asarray(like, copy=True).data_ptr() != a.ctypes.data
    with pytest.raises(ValueError, match="cannot be asked not to copy"):
        tb.asarray(_ArrayLike(a, accepts_copy=False), copy=False)
    assert tb.asarray(_ArrayLike(a, accepts_copy=False)).tolist() == a.tolist()
    with pytest.raises(BufferError, match=r"holds <U1 data.*strings have no tensor form"):
        tb.asarray(_ArrayLike(np.array(["a"])))


def test_numpy_arrays_dlpack_cannot_hold_are_refused_with_the_fix():
    cases = {
        "object": (np.array([1], dtype=object), r"astype\(float\)"),
        "datetime64[s]": (np.zeros(2, dtype="M8[s]"), "raw ticks"),
        "<U1": (np.array(["a"]), "strings"),
        "[('a', '<f4')]": (np.zeros(2, dtype=[("a", "f4")]), "one field"),
    }
    for name, (array, fix) in cases.items():
        with pytest.raises(
            BufferError, match=rf"^asarray\(\): NumPy .* arrays have no DLPack.*{fix}"
        ):
            tb.asarray(array)
        assert name == str(array.dtype)


def test_byte_swapped_arrays_are_copied_to_native_order():
    swapped = np.arange(3, dtype=">f4" if np.little_endian else "<f4")
    t = tb.asarray(swapped)
    assert t.dtype is tb.float32 and t.tolist() == [0.0, 1.0, 2.0]
    assert t.data_ptr() != swapped.ctypes.data
    with pytest.raises(ValueError, match="not in native byte order"):
        tb.asarray(swapped, copy=False)


def test_the_refusal_names_the_method_that_gives_an_array():
    class Sparse:
        def toarray(self):
            return np.zeros(2)

    with pytest.raises(TypeError, match=r"Sparse.toarray\(\) gives a dense NumPy array"):
        tb.asarray(Sparse())


@needs("pandas")
def test_pandas_series_and_frames():
    import pandas as pd

    s = pd.Series([1.0, 2.0, 3.0])
    t = tb.asarray(s, copy=False)
    assert t.data_ptr() == s.to_numpy().ctypes.data  # shared
    assert t.tolist() == [1.0, 2.0, 3.0]
    df = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]})
    assert tb.asarray(df).tolist() == [[1.0, 3.0], [2.0, 4.0]]  # one dtype: 2-D
    with pytest.raises(BufferError, match=r"pandas\.Series holds object data"):
        tb.asarray(pd.Series(["x", "y"]))
    assert tb.convert(s, "numpy").tolist() == [1.0, 2.0, 3.0]


@needs("pyarrow")
def test_arrow_arrays_asarray_cannot_take_say_why_and_what_to_do():
    import pyarrow as pa

    with pytest.raises(BufferError, match=r"with 2 nulls has no tensor form.*fill_null"):
        tb.asarray(pa.array([1.0, None, None]))
    with pytest.raises(BufferError, match=r"with 1 null .*drop_null"):
        tb.convert(pa.array([1.0, None]), "numpy")  # (convert reads through asarray)
    with pytest.raises(BufferError, match=r"pyarrow string arrays have no DLPack equivalent"):
        tb.asarray(pa.array(["x"]))
    assert tb.asarray(pa.array([True, False])).tolist() == [True, False]  # unpacked
    with pytest.raises(ValueError, match="bit-packed"):
        tb.asarray(pa.array([True]), copy=False)
