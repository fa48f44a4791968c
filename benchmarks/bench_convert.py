# SPDX-License-Identifier: Apache-2.0
"""convert against each consumer's own from_dlpack, every ordered pair, small and 100 MB.

    python benchmarks/bench_convert.py [--quick] [--rounds 15] [--large-rounds 7]
                                       [--sizes small,large] [--json out.json]

Consumers: every installed framework of the registry (``names(gpu=False)``).
Producers: the same, plus a read-only NumPy array (what pandas' copy-on-write values
and Ray's ``get`` results are) and, when pandas is installed, ``Series.to_numpy()``.
For every ordered pair (producer, consumer) and two sizes of a contiguous 1-d
float32 vector, small (1000 elements) and large (25 * 10**6 elements, 100 MB), it
times ``tb.convert(x, consumer)`` against the consumer's own DLPack import of ``x``
(the call a user would make: ``torch.from_dlpack(x)``, ``jax.dlpack.from_dlpack(x)``,
``tf.experimental.dlpack.from_dlpack(x.__dlpack__())``...), the result released
each time. Both sides are called the same way (a ``functools.partial`` with every
argument bound), in one process: each pair's two calls are timed back to back in
every round (``_timing.measure_pairs``), the pairs in a shuffled order, and the ratio
is the median of the per-round ratios (the ratio of the two medians is kept in the
JSON as ``ratio_of_medians``; on a shared machine whose speed changes by phases it
moves with them, and the paired ratio much less).
On large tensors, where a consumer returns before its work is done, both sides
wait for it: JAX copies unaligned memory asynchronously (``block_until_ready``),
MLX is lazy (``mx.eval``). Small tensors are timed bare, as bench_matrix.py does
(waiting costs JAX about 10 µs more on its own import than on convert's result).
PyTorch runs on one thread, as in bench_matrix.py.

Every pair is first tried once in a child process (a peer that aborts or hangs
there takes the child down, not the benchmark); pairs whose native import fails
are skipped, and native imports that succeed but give an unusable result or wrong
values are marked and left out of the targets. Whether each side shares memory
with the source is read from the data pointers of their DLPack exports.

Prints Markdown: per size, the ratio matrix (convert over native, rows producer,
columns consumer, each cell with who shared) and every pair's times; then the worst
pair, the pairs slower than 1.25 times native on small tensors, and the pairs where
convert copies large tensors that the native import shares.
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
import os
import select
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import tensorbridge as tb
from tensorbridge._cli.probes import pointer, probe
from tensorbridge._frameworks import FRAMEWORKS, names

sys.path.insert(0, os.path.dirname(__file__))
from _timing import machine, markdown_table, measure_pairs, write_json

SIZES = {"small": 1000, "large": 25_000_000}
#: The bound the issue sets for convert on small tensors (convert µs / native µs).
SMALL_BOUND = 1.25
TIMES = "\N{MULTIPLICATION SIGN}"
#: How long the child process may be silent on one side of a pair (seconds).
PAIR_TIMEOUT = 120

# -- the frameworks ------------------------------------------------------------


def _consumer_names() -> list[str]:
    """Installed frameworks of the registry, in its order (PaddlePaddle is imported
    before TensorFlow by walking that order)."""
    found = []
    for name in names(gpu=False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if FRAMEWORKS[name].available():
                found.append(name)
    return found


def native_import(name: str) -> Callable[[Any], Any]:
    """The consumer's own DLPack import, resolved once (the probes' ``native_from_dlpack``
    looks the module up on every call, which would be timed with it)."""
    m = FRAMEWORKS[name].module()
    if name in ("numpy", "torch", "mlx", "array_api_strict", "tvm_ffi"):
        return m.from_dlpack
    if name == "jax":
        import jax.dlpack

        return jax.dlpack.from_dlpack
    if name == "paddle":
        return m.utils.dlpack.from_dlpack
    if name == "tensorflow":
        tf_import = m.experimental.dlpack.from_dlpack

        def tf_from_dlpack(obj: Any) -> Any:  # TensorFlow takes capsules only
            return tf_import(obj.__dlpack__())

        return tf_from_dlpack
    if name == "pyarrow":
        return m.Array.from_dlpack
    if name == "tensorbridge":
        return tb.from_dlpack
    return probe(name).native_from_dlpack


def finisher(name: str, n: int) -> Callable[[Any], Any] | None:
    """What completes a consumer's import of n elements, where its call returns before
    the work is done: JAX copies asynchronously (its from_dlpack of 100 MB of unaligned
    memory returns in microseconds, the copy finishes about 90 ms later, and one still
    running at exit aborts the process), MLX evaluates lazily. Timed on both sides
    alike, on large tensors only."""
    if n <= SIZES["small"]:
        return None
    if name == "jax":
        return operator.methodcaller("block_until_ready")
    if name == "mlx":
        return FRAMEWORKS["mlx"].module().eval
    return None


def _nothing(result: Any) -> None:
    pass


def _finished(finish: Callable[[Any], Any], fn: Callable[..., Any], *args: Any) -> None:
    finish(fn(*args))


def timed_call(
    finish: Callable[[Any], Any] | None, fn: Callable[..., Any], *args: Any
) -> Callable[[], Any]:
    """``fn(*args)`` as a case: every argument bound, then completed by `finish`."""
    if finish is None:
        return functools.partial(fn, *args)
    return functools.partial(_finished, finish, fn, *args)


def make_source(name: str, n: int) -> Any:
    """A contiguous 1-d float32 vector 0, 1, ..., n-1 in the producer's own memory."""
    if name == "numpy":
        return np.arange(n, dtype=np.float32)
    if name == "numpy-readonly":
        a = np.arange(n, dtype=np.float32)
        a.flags.writeable = False
        return a
    if name == "pandas":  # Series.to_numpy(): read-only under copy-on-write (pandas 3)
        import pandas as pd

        return pd.Series(np.arange(n, dtype=np.float32)).to_numpy()
    m = FRAMEWORKS[name].module()
    if name == "torch":
        return m.arange(n, dtype=m.float32)
    if name == "jax":
        import jax.numpy as jnp

        return jnp.arange(n, dtype=jnp.float32).block_until_ready()
    if name == "paddle":
        return m.arange(n, dtype="float32")
    if name == "tensorflow":
        return m.range(n, dtype=m.float32)
    if name == "mlx":
        x = m.arange(n, dtype=m.float32)
        m.eval(x)
        return x
    if name == "pyarrow":
        return m.array(np.arange(n, dtype=np.float32))
    if name == "array_api_strict":
        return m.arange(n, dtype=m.float32)
    if name == "tvm_ffi":  # tvm-ffi makes no arrays of its own: it wraps NumPy's
        return m.from_dlpack(np.arange(n, dtype=np.float32))
    if name == "tensorbridge":
        return tb.arange(n, dtype="float32")
    return tb.convert(np.arange(n, dtype=np.float32), name, copy=True)


def frameworks() -> tuple[list[str], list[str], dict[str, str]]:
    """(producers, consumers, versions)."""
    consumers = _consumer_names()
    producers = list(consumers)
    producers.insert(producers.index("numpy") + 1 if "numpy" in producers else 0, "numpy-readonly")
    try:
        import pandas  # noqa: F401
    except ImportError:
        pass
    else:
        producers.append("pandas")
    versions = {"tensorbridge": tb.__version__}
    for name in consumers:
        if name != "tensorbridge":
            versions[name] = str(getattr(FRAMEWORKS[name].module(), "__version__", "?"))
    if "pandas" in producers:
        versions["pandas"] = sys.modules["pandas"].__version__
    if "torch" in consumers:
        FRAMEWORKS["torch"].module().set_num_threads(1)  # as bench_matrix: less noise
    return producers, consumers, versions


def pairs(producers: list[str], consumers: list[str], sizes: list[str]) -> list[tuple[str, ...]]:
    return [(s, p, c) for s in sizes for p in producers for c in consumers]


# -- the check of every pair, once ----------------------------------------------------


def _values_problem(consumer: str, result: Any, n: int) -> str | None:
    """Why a result does not read 0, 1, ..., n-1 (None: it does, or it cannot be read
    safely: a result the consumer's probe calls unusable is not read, as TensorFlow
    aborts on unaligned data; whether one is depends on each allocation, so it is
    judged again where the pair is timed)."""
    if n > SIZES["small"] or probe(consumer).unusable(result) is not None:
        return None  # reading 25M values through every framework is too slow
    try:
        got = [float(v) for v in probe(consumer).to_list(result)]
    except Exception as exc:
        return f"unreadable result ({type(exc).__name__})"
    return None if got == [float(i) for i in range(n)] else "wrong values"


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return type(exc).__name__ + (f": {text[0][:80].strip()}" if text else "")


def check_side(call: Callable[[], Any], consumer: str, n: int) -> dict[str, Any]:
    """One side of a pair, called once: its status ("ok" or the error) and, when it
    worked, what is wrong with the values it gives (None: nothing)."""
    try:
        result = call()
        (finisher(consumer, n) or _nothing)(result)
    except Exception as exc:
        return {"status": _error(exc)}
    return {"status": "ok", "values": _values_problem(consumer, result, n)}


def preflight_child(sizes: list[str], skip: int) -> int:
    """Try every pair once, each side announced before it runs (the parent finds the
    side that took the process down, or hung, in the last announcement)."""
    warnings.simplefilter("ignore")
    producers, consumers, _ = frameworks()
    natives = {c: native_import(c) for c in consumers}
    sources: dict[tuple[str, str], Any] = {}
    for i, (size, p, c) in enumerate(pairs(producers, consumers, sizes)):
        if i < skip:
            continue
        if (size, p) not in sources:
            sources.clear()  # one producer's source at a time: memory stays low
            sources[(size, p)] = make_source(p, SIZES[size])
        source, n = sources[(size, p)], SIZES[size]
        print(json.dumps({"i": i, "pair": [size, p, c], "side": "native"}), flush=True)
        native = check_side(functools.partial(natives[c], source), c, n)
        print(json.dumps({"i": i, "side": "convert", "native": native}), flush=True)
        convert = check_side(functools.partial(tb.convert, source, c), c, n)
        print(json.dumps({"i": i, "native": native, "convert": convert}), flush=True)
    return 0


def start_preflight(sizes: list[str], skip: int = 0) -> subprocess.Popen:
    script = os.path.abspath(__file__)
    return subprocess.Popen(
        [sys.executable, script, "--sizes", ",".join(sizes), "--preflight-child", str(skip)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        bufsize=0,
    )


def _messages(proc: subprocess.Popen) -> Iterator[dict | None]:
    """The child's messages as they come; None when it is silent for PAIR_TIMEOUT."""
    assert proc.stdout is not None
    pending = b""
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], PAIR_TIMEOUT)
        if not ready:
            yield None
            return
        chunk = os.read(proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"{"):
                yield json.loads(line)


def finish_preflight(proc: subprocess.Popen, sizes: list[str], todo: list[tuple[str, ...]]) -> dict:
    """Every pair's check: {"native": {...}, "convert": {...}}, each side's "status"
    "ok" or why not. A side that kills or hangs the child is recorded as such and the
    child is started again after its pair."""
    checked: dict[tuple[str, ...], dict] = {}
    while True:
        current: dict[str, Any] = {}
        hung = False
        for msg in _messages(proc):
            if msg is None:
                hung = True
                break
            if "pair" in msg:
                current = {"i": msg["i"], "pair": tuple(msg["pair"]), "side": "native"}
            elif "side" in msg:
                current.update(side="convert", native=msg["native"])
            else:
                checked[current["pair"]] = {"native": msg["native"], "convert": msg["convert"]}
                current = {}
        if hung:
            proc.kill()
            how = f"no answer within {PAIR_TIMEOUT} s (killed)"
        else:
            how = "the process died"
        status = proc.wait()
        if not current:  # every pair it started was answered
            if status != 0 and len(checked) < len(todo):
                raise RuntimeError(f"the preflight child failed outside any pair ({status})")
            return checked
        lost = {"status": f"{how} (exit status {status})", "fatal": True}
        if current["side"] == "native":
            checked[current["pair"]] = {"native": lost, "convert": {"status": "not tried"}}
        else:
            checked[current["pair"]] = {"native": current["native"], "convert": lost}
        if current["i"] + 1 >= len(todo):
            return checked
        proc = start_preflight(sizes, current["i"] + 1)


# -- measuring -------------------------------------------------------------------------


def shares(result: Any, source_address: int | None) -> bool | None:
    address = pointer(result)
    if address is None or source_address is None:
        return None
    return address == source_address


def build_cases(
    size: str,
    producers: list[str],
    consumers: list[str],
    natives: dict[str, Callable[[Any], Any]],
    checked: dict,
) -> tuple[
    dict[str, tuple[Callable[[], Any], Callable[[], Any]]], dict[tuple[str, str], dict], list[Any]
]:
    """Timed pairs (native, convert) for one size and every pair's facts: status,
    problems, sharing."""
    n = SIZES[size]
    cases: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    facts: dict[tuple[str, str], dict] = {}
    sources = []
    for p in producers:
        source = make_source(p, n)
        sources.append(source)
        source_address = pointer(source)
        for c in consumers:
            unchecked = {"status": "not checked"}
            check = checked.get((size, p, c), {"native": unchecked, "convert": unchecked})
            fact: dict[str, Any] = {"check": check}
            facts[(p, c)] = fact
            if check["native"]["status"] != "ok":
                fact["skip"] = f"native: {check['native']['status']}"
                continue
            if check["convert"]["status"] != "ok":
                fact["skip"] = f"convert: {check['convert']['status']}"
                continue
            native = timed_call(finisher(c, n), natives[c], source)
            convert = timed_call(finisher(c, n), tb.convert, source, c)
            finish = finisher(c, n) or _nothing
            try:  # once more in this process (alignment differs from the child's)
                result = natives[c](source)
                finish(result)
                fact["native_shares"] = shares(result, source_address)
                fact["native_problem"] = probe(c).unusable(result) or check["native"]["values"]
                del result
                result = tb.convert(source, c)
                finish(result)
                fact["convert_shares"] = shares(result, source_address)
                fact["convert_problem"] = probe(c).unusable(result) or check["convert"]["values"]
                del result
            except Exception as exc:
                fact["skip"] = f"in this process: {_error(exc)}"
                continue
            cases[f"{size}:{p}->{c}"] = (native, convert)
    return cases, facts, sources


def run_size(
    size: str,
    producers: list[str],
    consumers: list[str],
    natives: dict,
    checked: dict,
    rounds: int,
    target: float,
) -> dict[tuple[str, str], dict]:
    cases, facts, sources = build_cases(size, producers, consumers, natives, checked)
    results = measure_pairs(cases, rounds=rounds, target=target)
    del sources
    for (p, c), fact in facts.items():
        if "skip" in fact:
            continue
        timed = results[f"{size}:{p}->{c}"]
        fact["native"] = timed["base"]
        fact["convert"] = timed["other"]
        fact["ratio"] = timed["ratio"]
        fact["ratio_quartiles"] = timed["ratio_quartiles"]
        fact["ratio_of_medians"] = timed["ratio_of_medians"]
    return facts


# -- the report ------------------------------------------------------------------------


def _us(v: float) -> str:
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def _ratio(r: float) -> str:
    return f"{r:.2f}" if r < 10 else f"{r:.1f}" if r < 100 else f"{r:.0f}"


def _shared(flag: bool | None) -> str:
    return "?" if flag is None else "s" if flag else "c"


def _short_skip(fact: dict) -> str:
    side, _, why = fact["skip"].partition(": ")
    kind = why.split(":")[0] if ":" in why else why
    return f"✗ {side} {kind}".replace("|", "/")


def matrix(facts: dict, producers: list[str], consumers: list[str]) -> str:
    rows = []
    for p in producers:
        line = [p]
        for c in consumers:
            fact = facts[(p, c)]
            if "skip" in fact:
                line.append(_short_skip(fact))
                continue
            cell = f"{_ratio(fact['ratio'])} {_shared(fact['native_shares'])}/"
            cell += _shared(fact["convert_shares"])
            if fact.get("native_problem"):
                cell += " †"
            if fact["ratio"] > SMALL_BOUND:
                cell = f"**{cell}**"
            line.append(cell)
        rows.append(line)
    return markdown_table(["producer \\ consumer", *consumers], rows)


def details(facts: dict) -> str:
    rows = []
    for (p, c), fact in facts.items():
        if "skip" in fact:
            rows.append([p, c, "-", "-", "-", "-", "-", "-", "-", fact["skip"].replace("|", "/")])
            continue
        notes = []
        if fact.get("native_problem"):
            notes.append("† native result unusable or wrong")
        if fact.get("convert_problem"):
            notes.append(f"convert result: {fact['convert_problem']}")
        rows.append(
            [
                p,
                c,
                _us(fact["native"]["median_us"]),
                _us(fact["convert"]["median_us"]),
                _ratio(fact["ratio"]),
                "-".join(_ratio(q) for q in fact["ratio_quartiles"]),
                _ratio(fact["ratio_of_medians"]),
                _shared(fact["native_shares"]),
                _shared(fact["convert_shares"]),
                "; ".join(notes),
            ]
        )
    return markdown_table(
        [
            "producer",
            "consumer",
            "native µs",
            "convert µs",
            "ratio",
            "ratio q1-q3",
            "of medians",
            "native",
            "convert",
            "note",
        ],
        rows,
    )


def comparable(facts: dict) -> list[tuple[tuple[str, str], dict]]:
    """Measured pairs whose native import is correct (the targets' domain)."""
    return [
        (pair, f) for pair, f in facts.items() if "skip" not in f and not f.get("native_problem")
    ]


def _sharing(flag: bool | None) -> str:
    return "cannot tell" if flag is None else "shares" if flag else "copies"


def _pair_line(pair: tuple[str, str], f: dict) -> str:
    p, c = pair
    return (
        f"{p} -> {c}: {TIMES}{_ratio(f['ratio'])}, the median per-round ratio "
        f"(medians {_us(f['convert']['median_us'])} µs against "
        f"{_us(f['native']['median_us'])} µs; "
        f"native {_sharing(f['native_shares'])}, convert {_sharing(f['convert_shares'])})"
    )


def report(all_facts: dict, producers: list[str], consumers: list[str], rounds: dict) -> None:
    for size, facts in all_facts.items():
        n = SIZES[size]
        print(
            f"## {size}: {n} float32 ({n * 4 / 1e6:g} MB), {rounds[size]} rounds, each "
            "pair's two calls back to back"
        )
        print()
        print(
            "Cells: convert over native (the median of the per-round ratios), then who "
            "shares memory with the source, "
            "native/convert (s: shared, c: copied, ?: cannot tell); bold: over "
            f"{SMALL_BOUND}; †: the native result is wrong or unusable (out of the "
            "targets); ✗: the pair is skipped (the side that fails, and why)."
        )
        print()
        print(matrix(facts, producers, consumers))
        print()
        print(details(facts))
        print()
    for size, facts in all_facts.items():
        pool = comparable(facts)
        if pool:
            worst = max(pool, key=lambda item: item[1]["ratio"])
            print(f"Worst pair, {size}: {_pair_line(*worst)}")
    print()
    if "small" in all_facts:
        pool = comparable(all_facts["small"])
        slow = sorted(
            (item for item in pool if item[1]["ratio"] > SMALL_BOUND),
            key=lambda item: -item[1]["ratio"],
        )
        _print_pairs(
            f"Small tensors: {len(pool) - len(slow)} of {len(pool)} pairs (native import "
            f"correct) are within {SMALL_BOUND}{TIMES} of native; over it:",
            slow,
        )
    if "large" in all_facts:
        pool = comparable(all_facts["large"])
        copies = sorted(
            (
                item
                for item in pool
                if item[1]["native_shares"] and item[1]["convert_shares"] is False
            ),
            key=lambda item: -item[1]["ratio"],
        )
        _print_pairs(
            f"Large tensors: convert copies where the native import shares, "
            f"{len(copies)} of {len(pool)} pairs:",
            copies,
        )
    _print_problems(all_facts, "native_problem", "Native imports left out of the targets (†):")
    _print_problems(
        all_facts,
        "convert_problem",
        "convert results that are wrong or unusable (tensorbridge bugs):",
    )


def _print_pairs(title: str, pairs: list[tuple[tuple[str, str], dict]]) -> None:
    print(title)
    print()
    for item in pairs:
        print(f"- {_pair_line(*item)}")
    print()


def _print_problems(all_facts: dict, key: str, title: str) -> None:
    """Every pair whose facts have ``key`` set, under ``title`` (nothing if none)."""
    problems = [
        (size, p, c, f[key])
        for size, facts in all_facts.items()
        for (p, c), f in facts.items()
        if f.get(key)
    ]
    if problems:
        print(title)
        print()
        for size, p, c, why in problems:
            print(f"- {size}: {p} -> {c}: {why}")
        print()


def _jsonable(all_facts: dict) -> dict:
    return {
        size: {f"{p}->{c}": fact for (p, c), fact in facts.items()}
        for size, facts in all_facts.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds on small tensors")
    parser.add_argument("--large-rounds", type=int, default=7, help="rounds on large tensors")
    parser.add_argument("--quick", action="store_true", help="5 and 2 rounds, shorter samples")
    parser.add_argument("--sizes", default="small,large", help="small, large or both")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--preflight-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [s for s in args.sizes.split(",") if s]
    if not set(sizes) <= set(SIZES):
        parser.error(f"--sizes: choose among {', '.join(SIZES)}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.preflight_child is not None:
        return preflight_child(sizes, args.preflight_child)

    began = time.perf_counter()
    child = start_preflight(sizes)  # runs while this process imports and builds
    warnings.simplefilter("ignore")  # the peers' deprecation chatter, and convert's notes
    producers, consumers, versions = frameworks()
    natives = {c: native_import(c) for c in consumers}
    checked = finish_preflight(child, sizes, pairs(producers, consumers, sizes))
    rounds = {"small": 5, "large": 2} if args.quick else {"small": args.rounds}
    rounds.setdefault("large", args.large_rounds)
    target = 0.01 if args.quick else 0.02
    all_facts = {
        size: run_size(size, producers, consumers, natives, checked, rounds[size], target)
        for size in sizes
    }
    elapsed = time.perf_counter() - began

    print(", ".join(f"{k} {v}" for k, v in versions.items()))
    print(machine())
    print()
    print(
        f"`tb.convert(x, consumer)` against the consumer's own DLPack import of `x`, "
        f"µs per call (result released), {len(producers)} producers {TIMES} "
        f"{len(consumers)} consumers; {elapsed:.0f} s in all. numpy-readonly: a NumPy "
        "array with writeable=False, as pandas' copy-on-write values and Ray's get "
        "results are."
    )
    print()
    report(all_facts, producers, consumers, rounds)
    if args.json:
        write_json(
            args.json,
            {
                "machine": machine(),
                "versions": versions,
                "sizes": {s: SIZES[s] for s in sizes},
                "rounds": rounds,
                "seconds": elapsed,
                "pairs": _jsonable(all_facts),
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
