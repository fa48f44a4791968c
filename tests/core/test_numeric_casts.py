# SPDX-License-Identifier: Apache-2.0
"""Casts among the integer types, float32 and float64 (_casts.h: tb_numeric_casts, tb_cast),
and casts of strided sources: every pair of these dtypes, on edge values and random
ones, contiguous, strided, transposed, 0-d and empty, compared with NumPy's cast
(values, dtype, shape, warnings, exceptions under np.errstate). Which pairs run in C
is checked too: their results must not come from NumPy's cast."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import tensorbridge as tb

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float32", "float64"]
NUMERIC = INTS + FLOATS
SMALL_INTS = [n for n in INTS if np.dtype(n).itemsize <= 4]

# The pairs _casts.h casts itself (the others go to NumPy's cast: docs/design.md).
IN_C = {(a, b) for a in SMALL_INTS for b in SMALL_INTS + FLOATS}
IN_C |= {(a, b) for a in FLOATS for b in FLOATS} | {("float32", "int32")}
IN_C |= {(a, b) for a in ("float32",) for b in ("float16", "bfloat16")}
IN_C |= {(b, a) for a in ("float32",) for b in ("float16", "bfloat16")}


def _signalling(dtype):
    bits = {"float32": (np.uint32, 0x7F800001), "float64": (np.uint64, 0x7FF0000000000001)}
    kind, pattern = bits[dtype]
    return np.array([pattern], dtype=kind).view(dtype)[0]


def _edges(dtype):
    """Each type's extremes and its neighbours of zero; for floats also the values
    around every integer type's range, ties, infinities, NaNs (quiet and
    signalling, both signs), zeros and subnormals."""
    if dtype in INTS:
        info = np.iinfo(dtype)
        values = [info.min, info.min + 1, -1, 0, 1, 2, info.max - 1, info.max, 127, 128, 255]
        return np.array([v for v in values if info.min <= v <= info.max], dtype=dtype)
    info = np.finfo(dtype)
    values = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.9999, -0.9999]
    for name in INTS:
        lo, hi = int(np.iinfo(name).min), int(np.iinfo(name).max)
        values += [lo, hi, lo - 1, hi + 1, lo - 0.5, hi + 0.5, hi + 2.0**10]
    values += [float(info.max), -float(info.max), float(info.tiny), float(info.smallest_subnormal)]
    values += [1e300, -1e300, 3.5e38, 3.4028235e38, 1e-45, 1e-320]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (1e300 as float32 overflows: that is the point)
        out = np.array([*values, np.inf, -np.inf, np.nan, -np.nan], dtype=dtype)
    return np.concatenate([out, [_signalling(dtype)], -np.array([_signalling(dtype)])])


def _random(dtype, n=3000, seed=0):
    rng = np.random.default_rng(seed)
    if dtype in INTS:
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    scale = rng.choice([1.0, 100.0, 1e5, 1e10], n)
    return (rng.standard_normal(n) * scale).astype(dtype)


def _outcome(make):
    """What a cast gives: (bytes, dtype, shape) or the exception, and its warnings."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            result = make()
        except FloatingPointError as exc:
            return ("raises", type(exc), str(exc)), []
        array = np.asarray(result) if type(result) is tb.Tensor else result
        got = (np.ascontiguousarray(array).tobytes(), str(array.dtype), array.shape)
    return got, sorted({str(w.message) for w in seen})


def _same(source, name):
    ours = _outcome(lambda: _defined(source, tb.asarray(source).astype(name)))
    theirs = _outcome(lambda: _defined(source, source.astype(name)))
    if _undefined(source, name).any() and not source.flags.c_contiguous:
        ours, theirs = ours[0], theirs[0]  # (see _undefined: warnings vary by loop)
    assert ours == theirs, (source.dtype, name, source[:8])


def _undefined(source, name):
    """The elements whose cast NumPy leaves undefined: a float NaN, infinite or out
    of an integer type's range. NumPy's own values for them, and whether it warns,
    depend on the CPU and on the loop it picks (a transposed source and its
    contiguous copy differ: float64 -> uint32 warns in one and not the other)."""
    target = np.dtype(name)
    if source.dtype.kind != "f" or target.kind not in "iu":
        return np.zeros(source.shape, bool)
    info = np.iinfo(target)
    with np.errstate(invalid="ignore", over="ignore"):
        wide = np.trunc(source.astype(np.float64))
        inside = (wide >= info.min) & (wide <= info.max)
    # (float64 cannot hold every 64-bit bound: values that far out are left out)
    return ~inside | (np.abs(wide) >= 2.0**63)


def _defined(source, result):
    """The result with the undefined elements (_undefined) set to 0."""
    array = np.asarray(result) if type(result) is tb.Tensor else result
    out = np.array(array, copy=True)
    out[_undefined(source, array.dtype)] = 0
    return out


def _layouts(values):
    """values contiguous, strided, reversed, transposed, 0-d, empty, and (non-empty)
    one element."""
    n = values.size - values.size % 6
    grid = values[:n].reshape(-1, 6) if n else values[:0].reshape(0, 6)
    yield values
    yield values[::3]
    yield values[::-1]
    yield grid.T
    yield grid[:, 1::2]
    yield values[:0]
    if values.size:
        yield values[:1]
        yield values[0].reshape(())
        yield np.broadcast_to(values[:5], (3, 5))  # a stride of 0
    if n >= 24:
        yield values[:24].reshape(2, 3, 2, 2).transpose(3, 1, 0, 2)  # four dims


@pytest.mark.parametrize(("source", "target"), list(itertools.product(NUMERIC, NUMERIC)))
def test_every_pair_casts_as_numpy_casts(source, target):
    for values in (_edges(source), _random(source)):
        for layout in _layouts(values):
            _same(layout, target)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(NUMERIC, NUMERIC)))
def test_each_edge_value_alone(source, target):
    """Each edge value among clean ones, so that it alone decides the outcome (a
    bound off by one, a missed overflow or signalling NaN would show), contiguous:
    values and warnings compared."""
    clean = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=source)
    for value in _edges(source):
        values = clean.copy()
        values[4] = value
        _same(values, target)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_16_bit_casts_of_strided_sources(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    peer = np.float16 if name == "float16" else ml_dtypes.bfloat16
    values = np.linspace(-70000, 70000, 6001, dtype=np.float32)
    values[::97] = np.nan
    values[5::97] = _signalling("float32")
    for layout in _layouts(values):
        ours = _outcome(lambda x=layout: np.asarray(tb.asarray(x).astype(name).view("uint16")))
        theirs = _outcome(lambda x=layout: x.astype(peer).view(np.uint16))
        assert ours == theirs
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (compared above)
            narrow = layout.astype(peer)  # and back, from strided 16-bit sources
        ours = _outcome(lambda x=narrow: tb.asarray(x.view(np.uint16)).view(name).astype("float32"))
        theirs = _outcome(lambda x=narrow: x.astype(np.float32))
        assert ours == theirs


NUMERIC_IN_C = sorted((a, b) for a, b in IN_C if a in NUMERIC and b in NUMERIC)


@pytest.mark.parametrize(("source", "target"), NUMERIC_IN_C)
def test_these_pairs_are_cast_in_c(source, target, monkeypatch):
    """Clean values of the C pairs never reach NumPy's cast."""
    values = _random(source, 500)
    if source in FLOATS and target in INTS:
        values = np.round(values % 1000).astype(source)  # within the integer type
    t = tb.asarray(values)
    expected = values.astype(target)
    import tensorbridge._numpy as ops  # what Tensor.astype falls back to

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy's cast was asked")

    monkeypatch.setattr(ops, "cast_operands", refuse)
    for layout in (t, t[::2], t[:0]):
        got = layout.astype(target)
        assert np.array_equal(np.asarray(got), np.asarray(layout).astype(target))
    assert np.asarray(t.astype(target)).tobytes() == expected.tobytes()


@pytest.mark.parametrize("setting", ["ignore", "raise", "warn"])
@pytest.mark.parametrize(
    ("source", "target", "value"),
    [
        ("float64", "float32", 1e300),
        ("float64", "float32", 1e-300),
        ("float64", "float32", "snan"),
        ("float32", "float64", "snan"),
        ("float32", "int32", 3e9),
        ("float32", "int32", np.nan),
        ("int64", "float32", 2**63 - 1),
    ],
)
def test_numpy_errstate_is_honoured(source, target, value, setting):
    item = _signalling(source) if value == "snan" else value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = np.array([1.0, 2.0, item, 3.0] * 3, dtype=source)
    with np.errstate(all=setting):
        ours = _outcome(lambda: tb.asarray(values).astype(target))
        theirs = _outcome(lambda: values.astype(target))
    assert ours == theirs


def test_misaligned_and_offset_sources():
    raw = np.arange(8 * 64 + 16, dtype=np.uint8)
    base = tb.asarray(raw)
    for start in (8, 4, 1, 3):
        for name, target in (("float64", "float32"), ("int32", "float64"), ("uint16", "int8")):
            width = np.dtype(name).itemsize
            t = base[start : start + width * 32].view(name)
            expected = raw[start : start + width * 32].view(name)
            _same_tensor(t, expected, target)


def _same_tensor(t, array, target):
    ours = _outcome(lambda: t.astype(target))
    theirs = _outcome(lambda: array.astype(target))
    assert ours == theirs


def test_results_are_new_aligned_c_contiguous_memory():
    a = np.arange(24, dtype=np.int16).reshape(4, 6)
    t = tb.asarray(a)
    for source in (t, t.T, t[:, ::2]):
        out = source.astype("float32")
        assert out.is_contiguous() and out.data_ptr() % 64 == 0
        assert not np.shares_memory(np.asarray(out), a)
        assert out.shape == source.shape
    assert t.astype("int16", copy=False) is t
    copied = t.astype("int16")
    assert copied is not t and np.array_equal(np.asarray(copied), a)


def test_long_strided_sources_cross_the_read_chunks():
    """Longer than the C reader's buffer (1024 elements), rows of awkward lengths: the
    16-bit casts read strided sources in C at any size, the numeric pairs up to 8192
    elements (then NumPy's cast: compared all the same)."""
    values = np.linspace(-7e4, 7e4, 3 * 1031 * 7, dtype=np.float32).reshape(3, 1031, 7)
    values[1, 500, 3] = np.nan
    for layout in (values.transpose(2, 0, 1), values[:, ::-1, ::3], values.transpose(1, 2, 0)):
        _same(layout, "float16")
        _same(layout, "float64")
        _same(layout[:, :300], "float64")  # (under 8192 elements: in C)
        _same(np.trunc(layout[:, :300] / 10), "int32")
    floats = np.linspace(-1e4, 1e4, 5000, dtype=np.float32)[::-2]
    floats[700] = 5e9  # out of int32's range, in a later chunk: NumPy decides
    _same(floats, "int32")


def test_large_strided_numeric_casts_go_to_numpy(monkeypatch):
    import tensorbridge._numpy as ops

    asked = []
    original = ops.cast_operands

    def spy(*args):
        asked.append(args[0].shape)
        return original(*args)

    monkeypatch.setattr(ops, "cast_operands", spy)
    values = np.arange(2 * 8192, dtype=np.int32)
    t = tb.asarray(values)
    assert np.array_equal(np.asarray(t[::2].astype("float64")), values[::2].astype(np.float64))
    assert asked == []  # 8192 elements: in C
    assert np.array_equal(np.asarray(t[::1].astype("float64")), values.astype(np.float64))
    assert asked == []  # contiguous: in C at any size
    wide = tb.asarray(np.arange(2 * 8194, dtype=np.int32))
    wide[::2].astype("float64")
    assert asked == [(8194,)]
    floats = tb.asarray(np.linspace(-100, 100, 40000, dtype=np.float32))
    half = floats[::2].astype("float16")  # the 16-bit casts: in C at any size
    half[::-1].astype("float32")
    floats[::2].astype("bfloat16")[::3].astype("float32")
    assert asked == [(8194,)]


@pytest.mark.parametrize("setting", ["ignore", "raise", "warn"])
@pytest.mark.parametrize(
    "value",
    [
        2.0**-126 * (1 - 2.0**-24),  # rounds up to float32's smallest normal: underflow
        2.0**-126 * (1 - 2.0**-26),
        2.0**-126,
        2.0**-150,
        -(2.0**-150),
        2.0**-151,
        1e-320,
        -0.0,
    ],
)
def test_float64_to_float32_underflow_at_the_boundary(value, setting):
    """Each value alone among clean ones, under each setting of `under` alone."""
    values = np.array([1.0, value, 2.0], dtype=np.float64)
    with np.errstate(under=setting):
        ours = _outcome(lambda: tb.asarray(values).astype("float32"))
        theirs = _outcome(lambda: values.astype(np.float32))
    assert ours == theirs


@pytest.mark.parametrize("setting", ["warn", "raise"])
@pytest.mark.parametrize(("source", "target"), [("float32", "float64"), ("float64", "float32")])
def test_infinities_and_quiet_nans_are_not_invalid(source, target, setting):
    values = np.array([np.inf, -np.inf, np.nan, -np.nan, 1.0], dtype=source)
    with np.errstate(all=setting, under="ignore"):  # (warn: NumPy's default)
        ours = _outcome(lambda: tb.asarray(values).astype(target))
        theirs = _outcome(lambda: values.astype(target))
    assert ours == theirs
    assert ours[1] == [] and ours[0][0] != "raises"


@pytest.mark.parametrize("category", ["over", "under", "invalid"])
@pytest.mark.parametrize("setting", ["call", "log", "print", "raise", "ignore"])
def test_each_errstate_category_and_mode(category, setting, capsys):
    values = np.array(
        [1.0, 1e300, 1e-300, _signalling("float64"), 2.0, 3e9, np.nan], dtype=np.float64
    )
    seen: dict[str, list] = {"ours": [], "theirs": []}
    for who, make in (
        ("ours", lambda: tb.asarray(values).astype("float32")),
        ("theirs", lambda: values.astype(np.float32)),
    ):
        calls = seen[who]

        class Log:
            def __init__(self, calls):
                self.calls = calls

            def write(self, message):
                self.calls.append(("log", message))

        def call(kind, flag, calls=calls):
            calls.append(("call", kind, flag))

        handler = Log(calls) if setting == "log" else call
        old = np.seterrcall(handler)
        try:
            with np.errstate(**{category: setting}):
                seen[who].append(_outcome(make))
        finally:
            np.seterrcall(old)
        seen[who].append(capsys.readouterr().out)
    assert seen["ours"] == seen["theirs"]


def test_clean_floats_stay_in_c_under_another_errstate(monkeypatch):
    """float32 <-> float64 ask NumPy's error handling only once a condition happened."""
    import tensorbridge._numpy as ops

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy's cast was asked")

    monkeypatch.setattr(ops, "cast_operands", refuse)
    values = np.linspace(-1e6, 1e6, 1001)
    with np.errstate(all="raise"):
        narrow = tb.asarray(values).astype("float32")
        wide = narrow.astype("float64")
    assert np.array_equal(np.asarray(narrow), values.astype(np.float32))
    assert np.array_equal(np.asarray(wide), values.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_16_bit_casts_of_strided_sources_run_in_c(name, monkeypatch):
    import tensorbridge._numpy as ops

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy's cast was asked")

    values = np.linspace(-100, 100, 301, dtype=np.float32)
    t = tb.asarray(values)
    expected = np.asarray(t.astype(name).view("uint16"))[::-3]
    monkeypatch.setattr(ops, "cast_operands", refuse)
    narrow = t[::-3].astype(name)
    assert np.array_equal(np.asarray(narrow.view("uint16")), expected)
    back = narrow.reshape(101, 1)[::2].astype("float32")  # a strided 16-bit source
    assert back.shape == (51, 1)


def test_warnings_name_the_callers_line():
    """Like NumPy's astype, on both paths: in C (an overflow) and NumPy's cast (a NaN
    into int32); so Python's default filter shows one per calling line."""
    wide = tb.asarray(np.array([1e300]))
    nan = tb.asarray(np.array([np.nan], dtype=np.float32))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        wide.astype("float32")
        wide.astype("float32")
        nan.astype("int32")
        nan.astype("int32")
    assert len(seen) == 4, [str(w.message) for w in seen]
    assert {w.filename for w in seen} == {__file__}
    assert len({w.lineno for w in seen}) == 4
