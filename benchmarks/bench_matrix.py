# SPDX-License-Identifier: Apache-2.0
"""Every consumer on every producer, tensorbridge against its peers, in one run.

    python benchmarks/bench_matrix.py [--rounds 15] [--json out.json] [--quick]

Producers and consumers: tensorbridge, NumPy, PyTorch, JAX, PaddlePaddle, tvm-ffi,
array-api-strict and pydlpack (those installed). Each case is one full exchange of
a 1000-element float32 vector (the consumer's entry point on the producer's object,
and releasing the result); pairs that cannot exchange at all are marked. Cases are
interleaved round-robin in one process and compared by medians. Prints Markdown:
the matrix with every consumer's ratio to tensorbridge on the same producer, the
convert rows, the import time of tensorbridge (cumulative ``-X importtime``, median
of 10 fresh processes), and each speed target with its ratio.

pydlpack's DLPackObject is single-use, so its column wraps a NumPy array afresh
for every call (``dlpack.asdlpack(memoryview(a))``, the wrapping included), and
its row is ``dlpack.asdlpack(x)`` (pydlpack has no consumer of its own: it re-wraps).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import tensorbridge as tb
from tensorbridge._frameworks import FRAMEWORKS

sys.path.insert(0, os.path.dirname(__file__))
from _timing import machine, markdown_table, measure, write_json

N = 1000
#: Display order: tensorbridge, then the registry's frameworks (those `build` makes
#: here), then pydlpack, which re-wraps and is no bridge target of ours.
ORDER = ["tensorbridge", *(n for n in FRAMEWORKS if n != "tensorbridge"), "pydlpack"]
#: Top-level modules `import tensorbridge` must not load: every framework's (from the
#: registry), pydlpack's and ml_dtypes.
FRAMEWORK_MODULES = [
    *(m for f in FRAMEWORKS.values() if f.name != "tensorbridge" for m in f.modules),
    "dlpack",
    "ml_dtypes",
]


def _try_import(name: str) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return __import__(name, fromlist=["_"])
    except Exception:
        return None


def build() -> tuple[dict[str, Callable[[], Any]], dict[str, Callable[[Any], Any]], dict[str, str]]:
    """producers: name -> a function giving the object to consume (the same object
    each time, but for pydlpack); consumers: name -> from_dlpack-like callable."""
    a = np.arange(N, dtype=np.float32)
    t = tb.arange(N, dtype="float32")
    producers: dict[str, Callable[[], Any]] = {
        "tensorbridge": lambda: t,
        "numpy": lambda: a,
    }
    consumers: dict[str, Callable[[Any], Any]] = {
        "tensorbridge": tb.from_dlpack,
        "numpy": np.from_dlpack,
    }
    versions = {"tensorbridge": tb.__version__, "numpy": np.__version__}
    torch = _try_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
        x = torch.arange(N, dtype=torch.float32)
        producers["torch"] = lambda: x
        consumers["torch"] = torch.from_dlpack
        versions["torch"] = torch.__version__
    jax = _try_import("jax")
    if jax is not None:
        import jax.dlpack
        import jax.numpy as jnp

        j = jnp.arange(N, dtype=jnp.float32)
        producers["jax"] = lambda: j
        consumers["jax"] = jax.dlpack.from_dlpack
        versions["jax"] = jax.__version__
    paddle = _try_import("paddle")
    if paddle is not None:
        p = paddle.arange(N, dtype="float32")
        producers["paddle"] = lambda: p
        consumers["paddle"] = paddle.utils.dlpack.from_dlpack
        versions["paddle"] = paddle.__version__
    tvm_ffi = _try_import("tvm_ffi")
    if tvm_ffi is not None:
        v = tvm_ffi.from_dlpack(np.arange(N, dtype=np.float32))
        producers["tvm_ffi"] = lambda: v
        consumers["tvm_ffi"] = tvm_ffi.from_dlpack
        versions["tvm_ffi"] = tvm_ffi.__version__
    xp = _try_import("array_api_strict")
    if xp is not None:
        s = xp.arange(N, dtype=xp.float32)
        producers["array_api_strict"] = lambda: s
        consumers["array_api_strict"] = xp.from_dlpack
        versions["array_api_strict"] = xp.__version__
    dlpack = _try_import("dlpack")
    if dlpack is not None and hasattr(dlpack, "asdlpack"):
        m = memoryview(np.arange(N, dtype=np.float32))
        producers["pydlpack"] = lambda: dlpack.asdlpack(m)
        consumers["pydlpack"] = dlpack.asdlpack
        versions["pydlpack"] = getattr(dlpack, "__version__", "?")
    return producers, consumers, versions


def _case_name(consumer: str, producer: str) -> str:
    return f"{consumer}<-{producer}"


def build_cases(producers: dict, consumers: dict) -> tuple[dict, dict]:
    """Every pair that works once; failures are returned with their reason."""
    cases: dict[str, Callable[[], Any]] = {}
    failures: dict[str, str] = {}
    rows = dict(consumers)
    rows["tensorbridge.asarray"] = tb.asarray
    for cname, consume in rows.items():
        for pname, produce in producers.items():
            if pname == "pydlpack":  # single-use objects: a fresh one per call

                def fresh(c: Callable[[Any], Any] = consume, p: Callable[[], Any] = produce) -> Any:
                    return c(p())

                fn: Callable[[], Any] = fresh
                case: Any = fn
            else:
                obj = produce()

                def same(c: Callable[[Any], Any] = consume, o: Any = obj) -> Any:
                    return c(o)

                fn = same

                case = (consume, obj)  # timed as consume(obj), no lambda in between
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn()
                    fn()
            except Exception as exc:  # a pair that cannot exchange: reported, not timed
                failures[_case_name(cname, pname)] = type(exc).__name__
                continue
            cases[_case_name(cname, pname)] = case
    if "torch" in producers:
        # What the PyTorch bit-view guard costs: one is_neg() call (it releases and
        # retakes the GIL); tensorbridge makes it on every torch import.
        x = producers["torch"]()
        cases["torch.Tensor.is_neg<-torch"] = (type(x).is_neg, x)
    for target in ("torch", "paddle"):
        if target not in consumers:
            continue
        for pname, produce in producers.items():
            if pname == "pydlpack":

                def fresh_convert(p: Callable[[], Any] = produce, to: str = target) -> Any:
                    return tb.convert(p(), to)

                fn = fresh_convert
            else:
                obj = produce()

                def same_convert(o: Any = obj, to: str = target) -> Any:
                    return tb.convert(o, to)

                fn = same_convert
            try:
                fn()
                fn()
            except Exception as exc:
                failures[_case_name(f"convert->{target}", pname)] = type(exc).__name__
                continue
            cases[_case_name(f"convert->{target}", pname)] = fn
    return cases, failures


def import_time(runs: int = 10) -> dict[str, Any]:
    """Cumulative -X importtime of tensorbridge (µs) in fresh processes, and the
    frameworks present in sys.modules right after the import."""
    check = (
        "import sys, tensorbridge; "
        f"print(sorted(m for m in {FRAMEWORK_MODULES!r} if m in sys.modules))"
    )
    totals, loaded = [], None
    editable = any("editable" in name for name in sys.modules)
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", check],
            capture_output=True,
            text=True,
            check=True,
        )
        for line in proc.stderr.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3 and parts[2] == "tensorbridge":
                totals.append(int(parts[1]))
        loaded = proc.stdout.strip()
    return {
        "editable_install": editable,
        "cumulative_us_median": statistics.median(totals),
        "cumulative_us_all": totals,
        "frameworks_loaded": loaded,
    }


def _median(results: dict, consumer: str, producer: str) -> float | None:
    r = results.get(_case_name(consumer, producer))
    return None if r is None else r["median_us"]


def targets(results: dict, names: list[str]) -> list[list[str]]:
    """The speed targets: [what, ours µs, reference, reference µs, ratio, bound, verdict]."""
    rows = []

    def add(what: str, ours: float | None, ref_name: str, ref: float | None, bound: float) -> None:
        if ours is None or ref is None:
            rows.append([what, "-", ref_name, "-", "-", f"≤ {bound:g}", "not measured"])
            return
        ratio = ours / ref
        rows.append(
            [
                what,
                f"{ours:.3f}",
                ref_name,
                f"{ref:.3f}",
                f"{ratio:.2f}",
                f"≤ {bound:g}",
                "met" if ratio <= bound else "missed",
            ]
        )

    m = lambda c, p: _median(results, c, p)  # noqa: E731
    add(
        "tensorbridge.from_dlpack(torch)",
        m("tensorbridge", "torch"),
        "torch.from_dlpack(torch)",
        m("torch", "torch"),
        0.1,
    )
    add(
        "tensorbridge.from_dlpack(torch)",
        m("tensorbridge", "torch"),
        "tvm_ffi.from_dlpack(torch)",
        m("tvm_ffi", "torch"),
        1.0,
    )
    add(
        "tensorbridge.from_dlpack(numpy)",
        m("tensorbridge", "numpy"),
        "numpy.from_dlpack(numpy)",
        m("numpy", "numpy"),
        1.0,
    )
    add(
        "tensorbridge.asarray(numpy)",
        m("tensorbridge.asarray", "numpy"),
        "numpy.from_dlpack(numpy)",
        m("numpy", "numpy"),
        0.5,
    )
    add(
        "tensorbridge.convert(numpy, 'torch')",
        m("convert->torch", "numpy"),
        "torch.from_dlpack(numpy)",
        m("torch", "numpy"),
        0.5,
    )
    peers = [n for n in names if n != "tensorbridge"]
    for p in names:
        fastest = min(((m(c, p), c) for c in peers if m(c, p) is not None), default=None)
        if fastest is not None:
            add(
                f"tensorbridge.from_dlpack({p})",
                m("tensorbridge", p),
                f"fastest peer: {fastest[1]}({p})",
                fastest[0],
                1.0,
            )
    for c in peers:
        fastest = min(((m(c, p), p) for p in peers if m(c, p) is not None), default=None)
        if fastest is not None:
            add(
                f"{c}.from_dlpack(tensorbridge)",
                m(c, "tensorbridge"),
                f"fastest peer: {c}({fastest[1]})",
                fastest[0],
                1.0,
            )
    return rows


def matrix_table(results: dict, failures: dict, producers: list[str], rows: list[str]) -> str:
    body = []
    for c in rows:
        line = [c]
        for p in producers:
            name = _case_name(c, p)
            if name in failures:
                line.append(f"✗ {failures[name]}")
                continue
            ours = _median(results, "tensorbridge", p)
            value = _median(results, c, p)
            if value is None:
                line.append("-")
            elif c == "tensorbridge" or ours is None:
                line.append(f"**{value:.2f}**")
            else:
                line.append(f"{value:.2f} (×{value / ours:.1f})")  # noqa: RUF001
        body.append(line)
    return markdown_table(["consumer \\ producer", *producers], body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="5 rounds, shorter samples")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    producers, consumers, versions = build()
    names = [n for n in ORDER if n in producers]
    cases, failures = build_cases(producers, consumers)
    rounds, target = (5, 0.01) if args.quick else (args.rounds, 0.02)
    results = measure(cases, rounds=rounds, target=target)
    imports = import_time()

    print(", ".join(f"{k} {v}" for k, v in versions.items()))
    print(machine())
    print()
    print(
        f"µs per exchange of {N} float32 (median of {rounds} interleaved rounds); "
        "(×r): the consumer's time over tensorbridge.from_dlpack's on the same producer; "  # noqa: RUF001
        "✗: the pair cannot exchange."
    )
    print()
    rows = ["tensorbridge", "tensorbridge.asarray"] + [n for n in names if n != "tensorbridge"]
    rows += [f"convert->{t}" for t in ("torch", "paddle") if t in consumers]
    print(matrix_table(results, failures, names, rows))
    print()
    guard = _median(results, "torch.Tensor.is_neg", "torch")
    if guard is not None:
        print(
            f"torch.Tensor.is_neg(), which tensorbridge calls on every torch import so "
            f"that bit views (z.conj().imag) are never read with the wrong sign: "
            f"{guard:.3f} µs"
        )
        print()
    print(
        f"import tensorbridge: {imports['cumulative_us_median'] / 1000:.1f} ms cumulative "
        f"(-X importtime, median of {len(imports['cumulative_us_all'])} fresh processes); "
        f"frameworks loaded by it: {imports['frameworks_loaded']}"
        + (
            " (an editable install: this includes meson-python's rebuild check; measure "
            "on a regular install)"
            if imports["editable_install"]
            else ""
        )
    )
    print()
    print(
        markdown_table(
            ["target", "µs", "reference", "µs", "ratio", "bound", "verdict"],
            targets(results, names),
        )
    )
    if args.json:
        write_json(
            args.json,
            {
                "machine": machine(),
                "versions": versions,
                "n": N,
                "rounds": rounds,
                "results": results,
                "failures": failures,
                "import": imports,
                "targets": targets(results, names),
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
