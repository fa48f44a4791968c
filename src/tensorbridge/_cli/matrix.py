# SPDX-License-Identifier: Apache-2.0
"""The interoperability matrix: what actually exchanges on this machine.

For every ordered pair of installed frameworks (tensorbridge included), a small
tensor goes through the consumer's own ``from_dlpack`` ("native") and through
``tensorbridge.convert``. Each exchange is classified by comparing data addresses
and by writing through one side and reading the other, and timed; every result
says why (`reasons`). The frameworks come from the registry; what the matrix needs
of each, from `probes`. The caller keeps the frameworks' own output quiet while they
are imported and probed (`tensorbridge._cli.quiet`); a Ctrl-C that a framework
swallowed is raised again between steps (`interrupts.check`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from tensorbridge import _core
from tensorbridge._cli import interrupts, reasons
from tensorbridge._cli.probes import Probe, pointer, probe
from tensorbridge._core import DLPACK_VERSION, convert
from tensorbridge._dtypes import DTYPES
from tensorbridge._frameworks import FRAMEWORKS, version
from tensorbridge._frameworks import names as framework_names
from tensorbridge._version import __version__

__all__ = [
    "ORDER",
    "VALUES",
    "Exchange",
    "available",
    "dtype_sweep",
    "exchange_matrix",
    "payload",
    "sweep_dtypes",
    "untried",
]

#: Frameworks the matrix covers, in display (and import) order: the registry's,
#: but for those that need a GPU (cupy).
ORDER: list[str] = framework_names(gpu=False)
VALUES = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]

#: What is told of the progress: one line at a time (`progress.Progress`).
Report = Callable[[str], None]


def _silent(text: str) -> None:
    """The default `Report`: nothing shown."""


@dataclasses.dataclass
class Exchange:
    """One exchange: ``status`` is "zero-copy", "copy" or "fails"; ``reason`` says
    why, in words (`reasons`)."""

    status: str
    time_us: float | None = None
    write_through: bool | None = None  # None: both sides are immutable
    reason: str = ""

    @property
    def code(self) -> str:
        return {"zero-copy": "S", "copy": "C", "fails": "✗"}[self.status]


#: (producer, consumer, "native" | "convert") -> what happened.
Results = dict[tuple[str, str, str], Exchange]
#: consumer -> dtype -> {"native": ok, "convert": ok}.
Sweep = dict[str, dict[str, dict[str, bool]]]


def available(
    names: list[str] | None = None,
    skipped: dict[str, str] | None = None,
    changes: list[str] | None = None,
    progress: Report = _silent,
) -> dict[str, str]:
    """The installed frameworks (importing each, in ORDER, which imports paddle
    before tensorflow), with their versions. Frameworks that are installed but
    cannot be imported in this process (a failing import; paddle once tensorflow
    is loaded) go into `skipped`, with the reason: never silently left out. What
    setting them up for probing changed in the process goes into `changes`."""
    found = {}
    chosen = sorted(names or ORDER, key=ORDER.index)
    for number, name in enumerate(chosen, 1):
        interrupts.check()
        framework = FRAMEWORKS[name]
        if not framework.installed():
            continue
        progress(f"importing {name}… {number}/{len(chosen)}")
        try:
            framework.module()
        except Exception as exc:
            # An interrupt a framework's import turned into an ImportError (or
            # swallowed) is not that framework's failure.
            interrupts.check()
            reason = framework.import_failure(
                exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
            )
            if skipped is not None:
                skipped[name] = reason
            continue
        interrupts.check()
        changed = probe(name).prepare()
        if changes is not None:
            changes.extend(changed)
        found[name] = version(name)
    return found


def _time_us(call: Callable[[], object], budget: float = 0.001) -> float:
    """Median per-call time in microseconds over five repeats of about `budget`
    seconds each (a millisecond: 200 exchanges are timed in about half a second, and
    the medians agree with those of longer repeats within a few percent)."""
    samples = []
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, min(2000, int(budget / once)))
    for _ in range(5):
        interrupts.check()
        start = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(samples)


def _classify(
    route: str, producer: type[Probe], consumer: type[Probe], source: Any, result: Any
) -> Exchange:
    src, dst = pointer(source), pointer(result)
    unusable = consumer.unusable(result)
    if unusable:
        return Exchange("fails", reason=unusable)
    if consumer.dtype_name(result) != "float32":
        return Exchange("fails", reason=f"float32 arrived as {consumer.dtype_name(result)}")
    if src is None or dst is None or src != dst:
        return Exchange("copy", reason=reasons.copied(route, producer, consumer, source))
    # Shared memory: prove it by writing through one side and reading the other.
    if producer.write_first(source, -9.0):
        seen = consumer.first_value(result) == -9.0
        reason = reasons.shared(producer, consumer, "source", seen)
        return Exchange("zero-copy", write_through=seen, reason=reason)
    if consumer.write_first(result, -9.0):
        seen = producer.first_value(source) == -9.0
        reason = reasons.shared(producer, consumer, "result", seen)
        return Exchange("zero-copy", write_through=seen, reason=reason)
    return Exchange("zero-copy", reason=reasons.shared(producer, consumer, None, False))


def _attempt(call: Callable[[], Any]) -> tuple[Any, Exception | None]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return call(), None
    except Exception as exc:  # a peer's failure is a result here, not an error
        return None, exc


def _routes(consumer: type[Probe], name: str) -> dict[str, Callable[[Any], Any]]:
    """How each route hands a source to the consumer: its own from_dlpack, or convert."""

    def native(src: Any) -> Any:
        return consumer.native_from_dlpack(src)

    def through_convert(src: Any) -> Any:
        return convert(src, name)  # type: ignore[call-overload]  # (a name of the registry)

    return {"native": native, "convert": through_convert}


def exchange_matrix(names: list[str], timing: bool = True, progress: Report = _silent) -> Results:
    """(producer, consumer, "native"|"convert") -> Exchange, for every ordered pair."""
    results: Results = {}
    pairs = [(p, c) for p in names for c in names]
    for number, (p, c) in enumerate(pairs, 1):
        interrupts.check()
        progress(f"{'timing' if timing else 'probing'} {p}→{c} {number}/{len(pairs)}")
        P, C = probe(p), probe(c)
        for route, call in _routes(C, c).items():
            source = P.sample(VALUES, "float32")
            result, error = _attempt(lambda: call(source))  # noqa: B023 (called at once)
            if error is not None:
                interrupts.check()  # (a peer may turn an interrupt into its own error)
                reason = reasons.failed(route, P, C, source, error)
                results[(p, c, route)] = Exchange("fails", reason=reason)
                continue
            exchange = _classify(route, P, C, source, result)
            if exchange.status != "fails" and timing:
                fresh = P.sample(VALUES, "float32")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    exchange.time_us = _time_us(lambda: call(fresh))  # noqa: B023
            results[(p, c, route)] = exchange
    return results


def sweep_dtypes() -> tuple[list[str], list[str]]:
    """(the dtypes the sweep can make values of here, those it cannot: the float8/6/4
    types need ml_dtypes, which a NumPy-only install lacks)."""
    usable, missing = [], []
    for dtype in DTYPES:
        try:
            _core.asarray([1.0], dtype=dtype)
        except ImportError:
            missing.append(dtype)
        else:
            usable.append(dtype)
    return usable, missing


def dtype_sweep(names: list[str], progress: Report = _silent) -> Sweep:
    """consumer -> dtype -> {"native": ok, "convert": ok}, from tensorbridge tensors,
    for the dtypes of `sweep_dtypes()` (others are left out).

    ok means the consumer's array has the same dtype and values. The dtypes of a
    probe's `native_untried` are not handed to its consumer's own from_dlpack (not
    ok; `untried` says so)."""
    sweep: Sweep = {}
    values = [1.0, 2.0, 4.0, 0.5]
    usable, _ = sweep_dtypes()
    for number, c in enumerate(names, 1):
        progress(f"dtype sweep: {c} {number}/{len(names)}")
        C = probe(c)
        routes = _routes(C, c)
        sweep[c] = {}
        for dtype in usable:
            interrupts.check()
            row = {}
            for route, call in routes.items():
                if route == "native" and dtype in C.native_untried:
                    row[route] = False
                    continue
                source = _core.asarray(values, dtype=dtype)
                result, error = _attempt(lambda: call(source))  # noqa: B023 (called at once)
                row[route] = error is None and _same(C, result, source)
            sweep[c][dtype] = row
    return sweep


def untried(names: list[str]) -> dict[str, dict[str, Any]]:
    """consumer -> {"dtypes": [...], "reason": ...}: what the sweep does not hand to
    the consumer's own from_dlpack (`Probe.native_untried`), and why."""
    usable = set(sweep_dtypes()[0])
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        P = probe(name)
        dtypes = [d for d in DTYPES if d in P.native_untried and d in usable]
        if dtypes:
            out[name] = {"dtypes": dtypes, "reason": P.native_untried_reason}
    return out


def _same(C: type[Probe], result: Any, source: Any) -> bool:
    try:
        if C.dtype_name(result) != source.dtype.name:
            return False
        if C.unusable(result):
            return False  # e.g. TF on unaligned memory: it aborts on first use
        # Compare as float64 (complex128 for complex types, so nothing is discarded).
        wide = "complex128" if source.dtype.name.startswith("complex") else "float64"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = (
                convert(result, "tensorbridge").astype(wide).tolist()
                if source.dtype.name != "bool"
                else convert(result, "numpy").tolist()
            )
        want = source.astype(wide).tolist() if source.dtype.name != "bool" else source.tolist()
        return bool(got == want)
    except Exception:
        return False


def payload(
    *,
    versions: dict[str, str],
    skipped: dict[str, str],
    changes: list[str],
    seconds: float,
    results: Results,
    sweep: Sweep | None,
    untested: list[str] | None,
) -> dict[str, Any]:
    """The matrix as JSON-ready data (``tensorbridge --json``; ``dtypes`` and
    ``untested_dtypes`` are null without the sweep, ``--dtypes``)."""
    return {
        "tensorbridge": __version__,
        "dlpack": list(DLPACK_VERSION),
        "frameworks": versions,
        "skipped": skipped,
        "process_changes": changes,
        "seconds": round(seconds, 2),
        "exchanges": [
            {
                "producer": p,
                "consumer": c,
                "route": route,
                "status": e.status,
                "time_us": e.time_us,
                "write_through": e.write_through,
                "reason": e.reason,
            }
            for (p, c, route), e in results.items()
        ],
        "dtypes": sweep,
        "untested_dtypes": untested,
        "native_untried": untried(list(versions)) if sweep is not None else None,
    }
