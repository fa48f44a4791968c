# SPDX-License-Identifier: Apache-2.0
"""tensorbridge's own operations against NumPy and PyTorch doing the same job, in one run.

    python benchmarks/bench_ops.py [--rounds 11] [--quick] [--only views,casts]
                                   [--torch-threads 1] [--json out.json]

Jobs, in groups (each group's cases are timed interleaved, round-robin, by medians):

- lists: ``asarray`` of Python lists (10, 1000 and 10**6 floats; 1000 ints as int32;
  1000 floats as float16 and bfloat16) against ``numpy.asarray`` and
  ``torch.asarray`` with the same dtype;
- views: on a 3x4 float32 tensor, ``.T``, ``transpose(0, 1)``, ``permute(1, 0)``,
  ``reshape(4, 3)``, ``flatten()``, ``t[0]`` and ``t[1:3]``, against the same view
  in NumPy (``a.T``, ``a.swapaxes(0, 1)``, ``a.transpose(1, 0)``, ``a.reshape``,
  ``a.reshape(-1)``, ``a[0]``, ``a[1:3]``) and PyTorch;
- copies: a 2048x2048 float64 transpose made contiguous, and a contiguous copy of
  10**7 float64;
- casts: 4 * 10**6 elements, float32 to and from float16 and bfloat16 (NumPy through
  ml_dtypes for bfloat16), int32 to float32, float64 to float32 (20 MB written into
  fresh memory on each call), uint8 to float32, float32 to float64 and int32, every
  other float32 (a strided source) to float64 and float16, and a 3x4 float32 tensor
  to float64.

PyTorch runs on ``--torch-threads`` threads (1 by default: NumPy and tensorbridge use
one core). Prints a Markdown table per group: each case's median in µs and the ratio
of tensorbridge's time to the best peer's (the target is 1.0 or less).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import numpy as np

import tensorbridge as tb

sys.path.insert(0, os.path.dirname(__file__))
from _timing import machine, markdown_table, measure, write_json

Job = dict[str, Callable[[], object]]  # "tensorbridge" / "numpy" / "torch" -> case


def _lists(torch, ml_dtypes) -> dict[str, Job]:
    small = [float(i) * 0.5 for i in range(10)]
    floats = [float(i) * 0.5 for i in range(1000)]
    ints = list(range(1000))
    million = [float(i) * 0.5 for i in range(10**6)]
    return {
        "asarray 10 floats": {
            "tensorbridge": lambda: tb.asarray(small),
            "numpy": lambda: np.asarray(small),
            "torch": lambda: torch.asarray(small),
        },
        "asarray 1000 floats": {
            "tensorbridge": lambda: tb.asarray(floats),
            "numpy": lambda: np.asarray(floats),
            "torch": lambda: torch.asarray(floats),
        },
        "asarray 10**6 floats": {
            "tensorbridge": lambda: tb.asarray(million),
            "numpy": lambda: np.asarray(million),
            "torch": lambda: torch.asarray(million),
        },
        "asarray 1000 ints as int32": {
            "tensorbridge": lambda: tb.asarray(ints, dtype="int32"),
            "numpy": lambda: np.asarray(ints, dtype=np.int32),
            "torch": lambda: torch.asarray(ints, dtype=torch.int32),
        },
        "asarray 1000 floats as float16": {
            "tensorbridge": lambda: tb.asarray(floats, dtype="float16"),
            "numpy": lambda: np.asarray(floats, dtype=np.float16),
            "torch": lambda: torch.asarray(floats, dtype=torch.float16),
        },
        "asarray 1000 floats as bfloat16": {
            "tensorbridge": lambda: tb.asarray(floats, dtype="bfloat16"),
            "numpy": lambda: np.asarray(floats, dtype=ml_dtypes.bfloat16),
            "torch": lambda: torch.asarray(floats, dtype=torch.bfloat16),
        },
    }


def _views(torch) -> dict[str, Job]:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tb.asarray(a.copy())
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        ".T": {"tensorbridge": lambda: t.T, "numpy": lambda: a.T, "torch": lambda: x.T},
        "transpose(0, 1)": {
            "tensorbridge": lambda: t.transpose(0, 1),
            "numpy": lambda: a.swapaxes(0, 1),
            "torch": lambda: x.transpose(0, 1),
        },
        "permute(1, 0)": {
            "tensorbridge": lambda: t.permute(1, 0),
            "numpy": lambda: a.transpose(1, 0),
            "torch": lambda: x.permute(1, 0),
        },
        "reshape(4, 3)": {
            "tensorbridge": lambda: t.reshape(4, 3),
            "numpy": lambda: a.reshape(4, 3),
            "torch": lambda: x.reshape(4, 3),
        },
        "flatten()": {
            "tensorbridge": lambda: t.flatten(),
            "numpy": lambda: a.reshape(-1),
            "torch": lambda: x.flatten(),
        },
        "t[0]": {"tensorbridge": lambda: t[0], "numpy": lambda: a[0], "torch": lambda: x[0]},
        "t[1:3]": {
            "tensorbridge": lambda: t[1:3],
            "numpy": lambda: a[1:3],
            "torch": lambda: x[1:3],
        },
    }


def _copies(torch) -> dict[str, Job]:
    square = np.random.default_rng(0).random((2048, 2048))
    sq_t, sq_x = tb.asarray(square), torch.from_numpy(square)
    long = np.random.default_rng(1).random(10**7)
    long_t, long_x = tb.asarray(long), torch.from_numpy(long)
    return {
        "2048x2048 float64 .T made contiguous": {
            "tensorbridge": lambda: sq_t.T.copy(),
            "numpy": lambda: np.ascontiguousarray(square.T),
            "torch": lambda: sq_x.T.contiguous(),
        },
        "copy of 10**7 float64": {
            "tensorbridge": lambda: long_t.copy(),
            "numpy": lambda: long.copy(),
            "torch": lambda: long_x.clone(),
        },
    }


def _casts(torch, ml_dtypes) -> dict[str, Job]:
    n = 4 * 10**6
    rng = np.random.default_rng(2)
    f32 = (rng.standard_normal(n) * 1000).astype(np.float32)
    f16 = f32.astype(np.float16)
    bf16 = f32.astype(ml_dtypes.bfloat16)
    i32 = rng.integers(-(10**6), 10**6, n, dtype=np.int32)
    f64 = rng.standard_normal(n + n // 4)  # 5 * 10**6: 20 MB of float32 out
    t32, t16, tbf, ti32, t64 = (tb.asarray(v) for v in (f32, f16, bf16, i32, f64))
    x32, x16 = torch.from_numpy(f32), torch.from_numpy(f16)
    xbf = torch.from_numpy(f32).to(torch.bfloat16)
    xi32, x64 = torch.from_numpy(i32), torch.from_numpy(f64)
    u8 = rng.integers(0, 256, n, dtype=np.uint8)  # an image's bytes
    tu8, xu8 = tb.asarray(u8), torch.from_numpy(u8)
    small = np.arange(12, dtype=np.float32).reshape(3, 4)
    tsmall, xsmall = tb.asarray(small), torch.from_numpy(small)
    return {
        "float32 -> float16": {
            "tensorbridge": lambda: t32.astype("float16"),
            "numpy": lambda: f32.astype(np.float16),
            "torch": lambda: x32.to(torch.float16),
        },
        "float16 -> float32": {
            "tensorbridge": lambda: t16.astype("float32"),
            "numpy": lambda: f16.astype(np.float32),
            "torch": lambda: x16.to(torch.float32),
        },
        "float32 -> bfloat16": {
            "tensorbridge": lambda: t32.astype("bfloat16"),
            "numpy": lambda: f32.astype(ml_dtypes.bfloat16),
            "torch": lambda: x32.to(torch.bfloat16),
        },
        "bfloat16 -> float32": {
            "tensorbridge": lambda: tbf.astype("float32"),
            "numpy": lambda: bf16.astype(np.float32),
            "torch": lambda: xbf.to(torch.float32),
        },
        "int32 -> float32": {
            "tensorbridge": lambda: ti32.astype("float32"),
            "numpy": lambda: i32.astype(np.float32),
            "torch": lambda: xi32.to(torch.float32),
        },
        "float64 -> float32, 20 MB out": {
            "tensorbridge": lambda: t64.astype("float32"),
            "numpy": lambda: f64.astype(np.float32),
            "torch": lambda: x64.to(torch.float32),
        },
        "uint8 -> float32": {
            "tensorbridge": lambda: tu8.astype("float32"),
            "numpy": lambda: u8.astype(np.float32),
            "torch": lambda: xu8.to(torch.float32),
        },
        "float32 -> float64": {
            "tensorbridge": lambda: t32.astype("float64"),
            "numpy": lambda: f32.astype(np.float64),
            "torch": lambda: x32.to(torch.float64),
        },
        "float32 -> int32": {
            "tensorbridge": lambda: t32.astype("int32"),
            "numpy": lambda: f32.astype(np.int32),
            "torch": lambda: x32.to(torch.int32),
        },
        "float32[::2] -> float64 (strided)": {
            "tensorbridge": lambda: t32[::2].astype("float64"),
            "numpy": lambda: f32[::2].astype(np.float64),
            "torch": lambda: x32[::2].to(torch.float64),
        },
        "float32[::2] -> float16 (strided)": {
            "tensorbridge": lambda: t32[::2].astype("float16"),
            "numpy": lambda: f32[::2].astype(np.float16),
            "torch": lambda: x32[::2].to(torch.float16),
        },
        "3x4 float32 -> float64": {
            "tensorbridge": lambda: tsmall.astype("float64"),
            "numpy": lambda: small.astype(np.float64),
            "torch": lambda: xsmall.to(torch.float64),
        },
    }


GROUPS = ("lists", "views", "copies", "casts")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="3 rounds, shorter samples")
    parser.add_argument("--only", default=",".join(GROUPS), help="groups to run")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rounds, target = (3, 0.005) if args.quick else (args.rounds, 0.02)

    import ml_dtypes
    import torch

    torch.set_num_threads(args.torch_threads)
    makers = {
        "lists": lambda: _lists(torch, ml_dtypes),
        "views": lambda: _views(torch),
        "copies": lambda: _copies(torch),
        "casts": lambda: _casts(torch, ml_dtypes),
    }
    results: dict[str, dict[str, dict[str, float]]] = {}
    print(f"# tensorbridge {tb.__version__}, numpy {np.__version__}, torch {torch.__version__}")
    print(f"(medians of {rounds} interleaved rounds; torch on {args.torch_threads} thread(s))\n")
    worst: tuple[float, str] = (0.0, "")
    for group in args.only.split(","):
        jobs = makers[group]()
        rows = []
        for job, cases in jobs.items():
            timed = measure(cases, rounds=rounds, target=target)
            medians = {name: timed[name]["median_us"] for name in cases}
            results[job] = medians
            best = min(v for k, v in medians.items() if k != "tensorbridge")
            ratio = medians["tensorbridge"] / best
            worst = max(worst, (ratio, job))
            rows.append(
                [job]
                + [f"{medians[k]:.3g}" for k in ("tensorbridge", "numpy", "torch")]
                + [f"**{ratio:.2f}**" if ratio > 1.0 else f"{ratio:.2f}"]
            )
        print(f"## {group}\n")
        headers = ["job", "tensorbridge µs", "numpy µs", "torch µs", "ratio to the best peer"]
        print(markdown_table(headers, rows) + "\n")
    print(f"worst: {worst[1]} at {worst[0]:.2f}x the best peer")
    if args.json:
        write_json(args.json, {"machine": machine(), "rounds": rounds, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
