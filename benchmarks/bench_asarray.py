# SPDX-License-Identifier: Apache-2.0
"""asarray against torch.asarray and numpy.asarray, in one run.

    python benchmarks/bench_asarray.py [--rounds 11] [--json out.json]

Cases (the asarray targets):
- zero-copy asarray of a NumPy array and of a PyTorch tensor, against
  torch.asarray(numpy_array): target ratio <= 1;
- a list of 10**6 Python floats, against numpy.asarray(list): target <= 1;
- a float64 -> float32 cast of 10**7 elements, against numpy's astype: target <= 1.10.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import tensorbridge as tb

sys.path.insert(0, os.path.dirname(__file__))
from _timing import machine, markdown_table, measure, write_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)  # NumPy casts on one thread too
    a = np.arange(1000, dtype=np.float32)
    x = torch.arange(1000, dtype=torch.float32)
    floats = [float(i) * 0.5 for i in range(10**6)]
    big = np.random.default_rng(0).random(10**7)
    big_t = tb.asarray(big)

    groups = {
        "zero-copy": {
            "tensorbridge.asarray(numpy)": lambda: tb.asarray(a),
            "tensorbridge.asarray(torch)": lambda: tb.asarray(x),
            "torch.asarray(numpy)": lambda: torch.asarray(a),
            "numpy.asarray(numpy)": lambda: np.asarray(a),
        },
        "list of 10**6 floats": {
            "tensorbridge.asarray(list)": lambda: tb.asarray(floats),
            "numpy.asarray(list)": lambda: np.asarray(floats),
            "numpy.asarray(list, float32)": lambda: np.asarray(floats, dtype=np.float32),
            "torch.asarray(list)": lambda: torch.asarray(floats),
        },
        "cast float64 -> float32, 10**7": {
            "tensorbridge.asarray(t, dtype=float32)": lambda: tb.asarray(big_t, dtype="float32"),
            "numpy astype(float32)": lambda: big.astype(np.float32),
            "torch.asarray(numpy, dtype=float32)": lambda: torch.asarray(big, dtype=torch.float32),
        },
    }
    targets = [
        ("tensorbridge.asarray(numpy)", "torch.asarray(numpy)", 1.0),
        ("tensorbridge.asarray(torch)", "torch.asarray(numpy)", 1.0),
        ("tensorbridge.asarray(list)", "numpy.asarray(list)", 1.0),
        ("tensorbridge.asarray(t, dtype=float32)", "numpy astype(float32)", 1.10),
    ]
    results: dict[str, dict[str, float]] = {}
    for group, cases in groups.items():
        target = 0.02 if group == "zero-copy" else 0.2
        rounds = args.rounds if group == "zero-copy" else max(5, args.rounds // 2)
        results.update(measure(cases, rounds=rounds, target=target))

    print(f"tensorbridge {tb.__version__}, numpy {np.__version__}, torch {torch.__version__}")
    print(machine())
    print()
    rows = []
    for group, cases in groups.items():
        for name in cases:
            r = results[name]
            unit, scale = ("µs", 1.0) if group == "zero-copy" else ("ms", 1e-3)
            rows.append(
                [
                    group,
                    name,
                    f"{r['median_us'] * scale:.3f} {unit}",
                    f"{r['best_us'] * scale:.3f} {unit}",
                ]
            )
    print(markdown_table(["case", "call", "median", "best"], rows))
    print()
    ratio_rows = []
    for case, ref, limit in targets:
        ratio = results[case]["median_us"] / results[ref]["median_us"]
        ratio_rows.append(
            [case, ref, f"{ratio:.2f}", f"≤ {limit:.2f}", "met" if ratio <= limit else "missed"]
        )
    print(markdown_table(["case", "vs", "ratio of medians", "target", ""], ratio_rows))
    if args.json:
        write_json(args.json, {"machine": machine(), "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
