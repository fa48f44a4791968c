# SPDX-License-Identifier: Apache-2.0
"""Per-call cost of DLPack exchanges: tensorbridge against NumPy and PyTorch, in one run.

    python benchmarks/bench_exchange.py [--rounds 15] [--json out.json]

Each case is a full exchange of a 1000-element float32 vector: the consumer's
from_dlpack on the producer's object (device query, __dlpack__, import, and
releasing the result). Cases are interleaved round-robin; medians and best
samples are reported, with ratios for the exchange targets.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import tensorbridge as tb

sys.path.insert(0, __import__("os").path.dirname(__file__))
from _timing import machine, markdown_table, measure, write_json


def build_cases() -> tuple[dict, dict]:
    a = np.arange(1000, dtype=np.float32)
    t = tb.from_dlpack(a)
    producers = {"numpy": a, "tensorbridge": t}
    consumers = {"tensorbridge": tb.from_dlpack, "numpy": np.from_dlpack}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        producers["torch"] = torch.arange(1000, dtype=torch.float32)
        consumers["torch"] = torch.from_dlpack
    cases = {}
    for cname, consume in consumers.items():
        for pname, obj in producers.items():
            cases[f"{cname}.from_dlpack({pname})"] = lambda c=consume, o=obj: c(o)
    return cases, {"numpy": np.__version__, "torch": getattr(torch, "__version__", None)}


TARGETS = [
    # (case, reference, meaning of "no slower")
    ("tensorbridge.from_dlpack(numpy)", "numpy.from_dlpack(numpy)"),
    ("numpy.from_dlpack(tensorbridge)", "numpy.from_dlpack(numpy)"),
    ("tensorbridge.from_dlpack(torch)", "torch.from_dlpack(torch)"),
    ("torch.from_dlpack(tensorbridge)", "torch.from_dlpack(numpy)"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    cases, versions = build_cases()
    results = measure(cases, rounds=args.rounds)
    rows = [
        [name, f"{r['median_us']:.3f}", f"{r['best_us']:.3f}"]
        for name, r in sorted(results.items())
    ]
    print(f"tensorbridge {tb.__version__}, numpy {versions['numpy']}, torch {versions['torch']}")
    print(machine())
    print()
    print(markdown_table(["exchange (1000 x float32)", "median µs", "best µs"], rows))
    print()
    ratio_rows = []
    for case, ref in TARGETS:
        if case in results and ref in results:
            ratio = results[case]["median_us"] / results[ref]["median_us"]
            ratio_rows.append([case, ref, f"{ratio:.2f}", "met" if ratio <= 1.0 else "missed"])
    print(markdown_table(["case", "vs", "ratio of medians", "target ≤ 1.0"], ratio_rows))
    if args.json:
        write_json(args.json, {"machine": machine(), "versions": versions, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
