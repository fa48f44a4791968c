# SPDX-License-Identifier: Apache-2.0
"""Shared timing helpers: interleaved rounds, per-call medians, Markdown output.

The machines are shared and noisy, so every case is measured in the same run,
round-robin in a shuffled order per round, and compared by medians.
"""

from __future__ import annotations

import contextlib
import gc
import json
import platform
import random
import statistics
import time
from collections.abc import Callable


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


def measure(
    cases: dict[str, object], rounds: int = 15, target: float = 0.02
) -> dict[str, dict[str, float]]:
    """Per-call time in microseconds for each case (a callable, or an (fn, arg) pair):
    median, best, and the sample count."""
    numbers = {name: calibrate(fn, target) for name, fn in cases.items()}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            random.shuffle(order)
            for name in order:
                number = numbers[name]
                samples[name].append(_loop(cases[name], number) / number * 1e6)
            gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    return {
        name: {
            "median_us": statistics.median(values),
            "best_us": min(values),
            "calls_per_sample": numbers[name],
            "samples": len(values),
        }
        for name, values in samples.items()
    }


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
