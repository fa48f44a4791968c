# SPDX-License-Identifier: Apache-2.0
"""Nested sequences of Python scalars (_sequences.pxi, and _creation.py's general path):
dtypes, shapes, int ranges, and errors that name the position."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from needs import needs

import tensorbridge as tb
from tensorbridge._frameworks.base import STANDARD


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


@needs("torch")
def test_sequences_of_tensors_and_dlpack_objects():
    import torch

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


# -- every fixed-size dtype filled in C, as NumPy's asarray fills it ---------------------

# The fixed-size dtypes: the standard ones and bfloat16 (float8/6/4 need ml_dtypes).
FILLED = sorted(STANDARD | {"bfloat16"})

EDGES = [
    0,
    1,
    -1,
    True,
    False,
    127,
    128,
    -128,
    -129,
    255,
    256,
    2**15 - 1,
    2**15,
    -(2**15) - 1,
    2**16 - 1,
    2**16,
    2**31 - 1,
    2**31,
    -(2**31) - 1,
    2**32,
    2**53 + 1,
    2**60 + 2**52 + 2**36 + 1,  # (bfloat16: rounded once from int64, as ml_dtypes does)
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64 - 1,
    2**64,
    10**400,
    0.0,
    -0.0,
    0.5,
    -0.5,
    1.7,
    -2.5,
    255.9,
    256.0,
    -1.5,
    1e-10,
    6e-8,
    65504.0,
    65520.0,
    70000.0,
    3.4e38,
    3.5e38,
    1e300,
    -1e300,
    2.0**-149,
    5e-324,
    9.3e18,
    float("inf"),
    float("-inf"),
    float("nan"),
    -float("nan"),
    1 + 2j,
    -0.0j,
    complex(1e300, 1),
    complex(float("nan"), 0),
]


def _outcome(make):
    """What make() gives: ("ok", bytes, dtype name, warning categories) or ("raises",
    exception type, warning categories)."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            result = make()
        except Exception as exc:
            return ("raises", type(exc), sorted({w.category.__name__ for w in seen}))
    if type(result) is tb.Tensor:  # (NumPy imports no bfloat16: its bytes, through uint8)
        data, dtype = np.from_dlpack(result.view("uint8")).tobytes(), result.dtype.name
    else:
        data, dtype = result.tobytes(), str(result.dtype)
    return ("ok", data, dtype, sorted({w.category.__name__ for w in seen}))


def _numpy_dtype(name):
    import ml_dtypes

    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


@pytest.mark.parametrize("name", FILLED)
@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_each_value_is_filled_as_numpy_fills_it(name, value):
    ours = _outcome(lambda: tb.asarray([value, 0], dtype=name))
    theirs = _outcome(lambda: np.asarray([value, 0], dtype=_numpy_dtype(name)))
    assert ours == theirs


@pytest.mark.parametrize("name", FILLED)
def test_clean_values_never_reach_the_general_path(name, monkeypatch):
    from tensorbridge import _creation

    def general(*args):
        raise AssertionError("the general path was asked")

    monkeypatch.setattr(_creation, "_sequence_general", general)
    values = [[0, 1, True], [2.5, -3.0, 7]] if name not in ("bool",) else [[0, 1, True]]
    if name.startswith("uint"):
        values = [[0, 1, True], [2.5, 3.0, 7]]
    t = tb.asarray(values, dtype=name)
    expected = np.asarray(values, dtype=_numpy_dtype(name))
    assert np.from_dlpack(t.view("uint8")).tobytes() == expected.tobytes()
    t = tb.asarray(tuple(map(tuple, values)), dtype=name, copy=True)
    assert t.shape == (len(values), 3)


def test_float16_and_bfloat16_round_as_numpy_and_ml_dtypes_at_every_tie():
    # Every float16 and bfloat16 value, the points halfway between neighbours (exact
    # ties, as doubles) and the doubles either side of each tie.
    import ml_dtypes

    for name, dtype in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        with np.errstate(invalid="ignore"):  # (ml_dtypes warns casting its NaNs)
            every = np.arange(2**16, dtype=np.uint16).view(dtype).astype(np.float64)
        every = every[np.isfinite(every)]  # (NaNs and infinities: the edge cases above)
        finite = np.sort(every)
        ties = (finite[:-1] + finite[1:]) / 2
        values = np.concatenate(
            [every, ties, np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf)]
        )
        biggest = float(ml_dtypes.finfo(dtype).max)
        values = values[np.abs(values) <= biggest].tolist()  # (no overflow)
        ours = np.from_dlpack(tb.asarray(values, dtype=name).view("uint16"))
        theirs = np.asarray(values, dtype=dtype).view(np.uint16)
        assert np.array_equal(ours, theirs), name


def test_a_default_float16_or_bfloat16_is_filled_in_c():
    tb.set_default_dtype("float16")
    try:
        t = tb.asarray([0.1, 2, 65504.0])
        assert t.dtype == "float16"
        assert np.from_dlpack(t).tobytes() == np.asarray([0.1, 2, 65504.0], np.float16).tobytes()
        tb.set_default_dtype("bfloat16")
        assert tb.asarray([[1.0, 3.0]]).dtype == "bfloat16"
        assert tb.asarray([1j]).dtype == "complex64"
        tb.set_default_dtype("float64")
        assert tb.asarray([1j]).dtype == "complex128"
    finally:
        tb.set_default_dtype("float32")
    assert tb.asarray([0.5]).dtype == "float32"


_LEAVES = (
    st.integers(-(2**65), 2**65)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(-1e6, 1e6)
    | st.booleans()
    | st.complex_numbers(max_magnitude=1e6)
)


@given(st.sampled_from(FILLED), st.lists(_LEAVES, min_size=1, max_size=6))
@settings(max_examples=400, deadline=None)
def test_random_lists_are_filled_as_numpy_fills_them(name, values):
    ours = _outcome(lambda: tb.asarray(values, dtype=name))
    theirs = _outcome(lambda: np.asarray(values, dtype=_numpy_dtype(name)))
    assert ours == theirs
