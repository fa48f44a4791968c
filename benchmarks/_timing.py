# SPDX-License-Identifier: Apache-2.0
"""Shared timing helpers: interleaved rounds, per-call medians, Markdown output.

The machines are shared and noisy, so every case is measured in the same run,
round-robin in a shuffled order per round, and compared by medians. Two cases
compared with each other (a library call against a peer's) are best measured as a
pair (`measure_pairs`): their samples are taken back to back, and the ratio is the
median of the per-round ratios, which the machine's slow and fast phases (seconds
long on a shared machine, and affecting both sides of a pair alike) move far less
than a ratio of two medians taken at different moments.
"""

from __future__ import annotations

import contextlib
import gc
import json
import platform
import random
import statistics
import time
from collections.abc import Callable, Iterator


def _loop(
    case: Callable[[], object] | tuple[Callable[[object], object], object], number: int
) -> float:
    """Seconds for `number` calls: ``fn()``, or ``fn(arg)`` for an (fn, arg) case,
    which saves the lambda call that would otherwise be timed with every exchange."""
    if isinstance(case, tuple):
        fn, arg = case
        start = time.perf_counter()
        for _ in range(number):
            fn(arg)
        return time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(number):
        case()
    return time.perf_counter() - start


def calibrate(fn, target: float = 0.02) -> int:
    """Calls per sample so that one sample takes about `target` seconds (after one
    untimed call: a first call that decides or imports something would otherwise
    make every sample a single call)."""
    _loop(fn, 1)
    number = 1
    while True:
        start = time.perf_counter()
        _loop(fn, number)
        elapsed = time.perf_counter() - start
        if elapsed >= target / 4 or number >= 1 << 22:
            return max(1, int(number * target / max(elapsed, 1e-9)))
        number *= 4


def _sample(case: object, number: int) -> float:
    """Microseconds per call over one sample of `number` calls."""
    return _loop(case, number) / number * 1e6


def _summary(values: list[float], number: int) -> dict[str, float]:
    """One case's samples as `measure` reports them."""
    return {
        "median_us": statistics.median(values),
        "best_us": min(values),
        "calls_per_sample": number,
        "samples": len(values),
    }


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic collector off while samples are taken (each round collects itself)."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc_was_enabled:
            gc.enable()


def measure(
    cases: dict[str, object], rounds: int = 15, target: float = 0.02
) -> dict[str, dict[str, float]]:
    """Per-call time in microseconds for each case (a callable, or an (fn, arg) pair):
    median, best, and the sample count."""
    numbers = {name: calibrate(fn, target) for name, fn in cases.items()}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    with _gc_paused():
        for _ in range(rounds):
            random.shuffle(order)
            for name in order:
                samples[name].append(_sample(cases[name], numbers[name]))
            gc.collect()
    return {name: _summary(values, numbers[name]) for name, values in samples.items()}


def measure_pairs(
    pairs: dict[str, tuple[object, object]], rounds: int = 15, target: float = 0.02
) -> dict[str, dict[str, object]]:
    """Each pair (base, other) of cases timed back to back in every round (which goes
    first alternates), the pairs in a shuffled order per round. Per pair: ``base`` and
    ``other`` (per-call microseconds, as `measure` gives them), ``ratio`` (the median
    of the per-round ratios other/base), ``ratio_quartiles`` (their first and third
    quartiles, inclusive method) and ``ratio_of_medians`` (other's median over
    base's)."""
    if rounds < 1:
        raise ValueError(f"measure_pairs needs at least one round, got {rounds}")
    numbers = {
        name: (calibrate(base, target), calibrate(other, target))
        for name, (base, other) in pairs.items()
    }
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in pairs}
    order = list(pairs)
    with _gc_paused():
        for r in range(rounds):
            random.shuffle(order)
            for name in order:
                (base, other), (n_base, n_other) = pairs[name], numbers[name]
                first, second = samples[name]
                if r % 2:
                    first.append(_sample(base, n_base))
                    second.append(_sample(other, n_other))
                else:
                    second.append(_sample(other, n_other))
                    first.append(_sample(base, n_base))
            gc.collect()
    results: dict[str, dict[str, object]] = {}
    for name, (first, second) in samples.items():
        ratios = [b / a for a, b in zip(first, second, strict=True)]
        # (inclusive: with few rounds the quartiles stay within the observed ratios)
        quartiles = (
            statistics.quantiles(ratios, n=4, method="inclusive")
            if len(ratios) > 1
            else [ratios[0]] * 3
        )
        base, other = _summary(first, numbers[name][0]), _summary(second, numbers[name][1])
        results[name] = {
            "base": base,
            "other": other,
            "ratio": statistics.median(ratios),
            "ratio_quartiles": (quartiles[0], quartiles[2]),
            "ratio_of_medians": other["median_us"] / base["median_us"],
        }
    return results


def machine() -> dict[str, object]:
    import os

    info: dict[str, object] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    with contextlib.suppress(OSError):  # not every platform has a load average
        info["loadavg"] = os.getloadavg()
    return info


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: str, payload: dict[str, object]) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.write("\n")
