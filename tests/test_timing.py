# SPDX-License-Identifier: Apache-2.0
"""benchmarks/_timing.py's paired measurement: what it computes from the samples it
takes (the samples are scripted here, so no timing is asserted)."""

from __future__ import annotations

import importlib.util
import pathlib
import statistics

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "_timing.py"


@pytest.fixture
def timing():
    spec = importlib.util.spec_from_file_location("_timing_under_test", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scripted(
    timing, monkeypatch, seconds: dict[str, list[float]], numbers: dict[str, int]
) -> list[str]:
    """Makes every sample of case ``name`` take the next of ``seconds[name]`` per
    call, with ``numbers[name]`` calls per sample; returns the order the cases were
    timed in."""
    calls: list[str] = []
    left = {name: list(values) for name, values in seconds.items()}
    monkeypatch.setattr(timing, "calibrate", lambda case, target=0.02: numbers[case])

    def loop(case, number):
        assert number == numbers[case]
        calls.append(case)
        return left[case].pop(0) * number

    monkeypatch.setattr(timing, "_loop", loop)
    return calls


def test_the_ratio_is_the_median_of_the_per_round_ratios(timing, monkeypatch):
    # The machine's speed changes from round to round, on both sides of the pair
    # alike; the per-round ratios differ from the ratios of the samples in order,
    # and from the ratio of the medians.
    base = [1.0, 2.0, 1.0, 2.0, 1.0]
    other = [2.5, 2.1, 1.2, 2.3, 1.1]
    _scripted(timing, monkeypatch, {"n": base, "c": other}, {"n": 3, "c": 7})
    result = timing.measure_pairs({"pair": ("n", "c")}, rounds=5)["pair"]
    ratios = [b / a for a, b in zip(base, other, strict=True)]  # 2.5 1.05 1.2 1.15 1.1
    assert result["ratio"] == pytest.approx(statistics.median(ratios))
    assert result["ratio"] == pytest.approx(1.15)
    by_rank = [b / a for a, b in zip(sorted(base), sorted(other), strict=True)]
    assert statistics.median(by_rank) == pytest.approx(1.2)  # (what a wrong pairing gives)
    assert result["ratio_of_medians"] == pytest.approx(2.1)
    quartiles = statistics.quantiles(ratios, n=4, method="inclusive")
    assert result["ratio_quartiles"] == pytest.approx((quartiles[0], quartiles[2]))
    assert result["base"]["median_us"] == pytest.approx(1e6)
    assert result["other"]["median_us"] == pytest.approx(2.1e6)
    assert result["base"]["best_us"] == pytest.approx(1e6)
    assert result["other"]["best_us"] == pytest.approx(1.1e6)
    assert result["base"]["calls_per_sample"] == 3
    assert result["other"]["calls_per_sample"] == 7
    assert result["other"]["samples"] == result["base"]["samples"] == 5


def test_the_two_sides_are_timed_back_to_back_each_going_first_in_turn(timing, monkeypatch):
    rounds = 4
    names = ("a1", "b1", "a2", "b2")
    calls = _scripted(
        timing,
        monkeypatch,
        {name: [1.0] * rounds for name in names},
        dict.fromkeys(names, 1),
    )
    timing.measure_pairs({"one": ("a1", "b1"), "two": ("a2", "b2")}, rounds=rounds)
    assert len(calls) == 4 * rounds
    pairs = [tuple(calls[i : i + 2]) for i in range(0, len(calls), 2)]
    # Each pair's calls are adjacent...
    assert all({a[1:], b[1:]} == {a[1:]} and a[0] != b[0] for a, b in pairs)
    # ...and which side goes first alternates by round.
    for r in range(rounds):
        firsts = {pair[0][0] for pair in pairs[2 * r : 2 * r + 2]}
        assert firsts == ({"a"} if r % 2 else {"b"})


def test_no_rounds_is_refused(timing):
    with pytest.raises(ValueError, match="at least one round"):
        timing.measure_pairs({"pair": (lambda: None, lambda: None)}, rounds=0)
