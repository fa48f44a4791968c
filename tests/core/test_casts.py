# SPDX-License-Identifier: Apache-2.0
"""Casts between float32 and float16 / bfloat16 in C (_casts.h, _half.h): bit for bit
what NumPy and ml_dtypes give, with their warnings, on every 16-bit value, every
rounding tie and NaN payload, sampled float32 values, both the CPU's conversion
instructions and the portable code, and lengths that leave a tail."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorbridge as tb
from tensorbridge import _core

ml_dtypes = pytest.importorskip("ml_dtypes")

KINDS = sorted({"portable", _core.f16_cast_kind()})


@pytest.fixture(params=KINDS)
def kind(request):
    previous = _core.use_portable_casts(request.param == "portable")
    yield request.param
    _core.use_portable_casts(previous)


def _peer(name):
    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


def _cast(values, name, ours):
    """(bits of the result as unsigned ints, warning messages) for NumPy's or our cast."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if ours:
            t = tb.asarray(values).astype(name)
            assert t.dtype == name and t.shape == values.shape and t.is_contiguous()
            out = np.from_dlpack(t.view("uint16" if t.itemsize == 2 else "uint32"))
        else:
            result = values.astype(_peer(name))
            out = result.view(np.uint16 if result.itemsize == 2 else np.uint32)
    return out, sorted({str(w.message) for w in seen})


def _same(values, name):
    ours, our_warnings = _cast(values, name, True)
    theirs, their_warnings = _cast(values, name, False)
    mismatch = np.nonzero(ours != theirs)[0]
    assert mismatch.size == 0, [
        (
            hex(values.view(np.uint32 if values.itemsize == 4 else np.uint16)[i]),
            hex(ours[i]),
            hex(theirs[i]),
        )
        for i in mismatch[:5]
    ]
    assert our_warnings == their_warnings


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_every_16_bit_value_widens_as_the_peer_widens_it(name, kind):
    every = np.arange(2**16, dtype=np.uint16).view(_peer(name))
    _same(every, "float32")


def _float32_cases(name):
    """Every value of the 16-bit type, the float32 ties halfway between neighbours and
    the floats either side, NaNs with payloads, and random bit patterns."""
    with np.errstate(invalid="ignore"):
        every = np.arange(2**16, dtype=np.uint16).view(_peer(name)).astype(np.float32)
    finite = np.unique(every[np.isfinite(every)]).astype(np.float64)
    ties = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)  # exact in float32
    near = [np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))]
    payloads = np.array(
        [0x7F800001, 0x7FA00000, 0x7FC00000, 0x7FFFFFFF, 0xFF800001, 0xFFC00001, 0x7F802000],
        dtype=np.uint32,
    ).view(np.float32)
    rng = np.random.default_rng(7)
    random = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return every, ties, near[0], near[1], payloads, random


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_float32_narrows_as_the_peer_narrows_it(name, kind):
    for values in _float32_cases(name):
        _same(np.ascontiguousarray(values), name)
        finite = values[np.isfinite(values) & (np.abs(values) < 6e4)]
        _same(np.ascontiguousarray(finite), name)  # (no warning expected here)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 15, 16, 17, 33, 40, 64, 71])
def test_tails_and_blocks_holding_a_nan_or_an_overflow(name, n, kind):
    rng = np.random.default_rng(n)
    values = (rng.standard_normal(n) * 100).astype(np.float32)
    _same(values, name)
    # Each special value at every position: each vector of a block of 32, each block
    # of 8 and the tail decide alone; an infinity beside an overflow too.
    for position in range(n):
        for special in (np.nan, np.float32(1e6), -np.inf):
            spiked = values.copy()
            spiked[position] = special
            _same(spiked, name)
            with np.errstate(over="ignore"):
                narrow = spiked.astype(_peer(name))
            _same(narrow, "float32")
        spiked = values.copy()
        spiked[position] = 7e4
        spiked[(position + 8) % n] = np.inf
        _same(spiked, name)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_round_trips_keep_every_16_bit_value(name, kind):
    every = np.arange(2**16, dtype=np.uint16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (bfloat16's signalling NaNs: "invalid value")
        back = tb.asarray(every).view(name).astype("float32").astype(name)
    assert np.array_equal(
        np.from_dlpack(back.view("uint16"))[_keeps(every, name)], every[_keeps(every, name)]
    )


def _keeps(bits, name):
    """The patterns a round trip through float32 keeps: all but bfloat16's signalling
    NaNs (ml_dtypes makes every NaN its quiet NaN, NumPy keeps float16's payloads)."""
    if name == "float16":
        return np.ones(bits.shape, bool)
    nan = (bits & 0x7F80) == 0x7F80
    return ~nan | (bits & 0x7FFF == 0x7FC0)


def test_other_layouts_and_pairs_are_cast_as_numpy_casts_them():
    a = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    t = tb.asarray(a)
    strided = t[:, ::2].astype("float16")  # not contiguous: read a chunk at a time
    assert np.array_equal(np.from_dlpack(strided), a[:, ::2].astype(np.float16))
    assert np.array_equal(np.from_dlpack(t.T.astype("float16")), a.T.astype(np.float16))
    assert np.array_equal(np.from_dlpack(t.astype("float64")), a.astype(np.float64))
    half = t.astype("float16")
    assert np.array_equal(
        np.from_dlpack(half.astype("float64")), a.astype(np.float16).astype(np.float64)
    )
    assert t.astype("float32", copy=False) is t
    assert t.astype("float16").data_ptr() % 64 == 0


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_offset_and_misaligned_sources_are_cast_as_numpy_casts_them(name, kind):
    raw = np.arange(4 * 40 + 8, dtype=np.uint8)
    base = tb.asarray(raw)
    for start in (4, 1, 2):  # an element offset, then addresses not 4-byte aligned
        t = base[start : start + 4 * 40].view("float32")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (these bytes hold huge floats and NaNs)
            expected = raw[start : start + 4 * 40].view(np.float32).astype(_peer(name))
            got = t.astype(name)
        assert np.array_equal(np.from_dlpack(got.view("uint16")), expected.view(np.uint16))


@pytest.mark.parametrize("over", ["ignore", "raise", "warn"])
def test_numpy_errstate_is_honoured(over, kind):
    values = np.array([1.0, 1e6, -3.0] * 5, dtype=np.float32)
    with np.errstate(over=over):
        ours = _outcome_under(lambda: tb.asarray(values).astype("float16"))
        theirs = _outcome_under(lambda: values.astype(np.float16))
    assert ours == theirs


def _outcome_under(make):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            result = make()
        except FloatingPointError as exc:
            return ("raises", str(exc))
    data = (
        np.from_dlpack(result.view("uint16"))
        if type(result) is tb.Tensor
        else result.view(np.uint16)
    )
    return ("ok", data.tobytes(), sorted(str(w.message) for w in seen))
