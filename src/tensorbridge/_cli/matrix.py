# SPDX-License-Identifier: Apache-2.0
"""The interoperability matrix: what actually exchanges on this machine.

For every ordered pair of installed frameworks (tensorbridge included), a small
tensor goes through the consumer's own ``from_dlpack`` ("native") and through
``tensorbridge.convert``. Each exchange is classified by comparing data addresses
and by writing through one side and reading the other, and timed. The frameworks
come from the registry; what the matrix needs of each, from `probes`.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from tensorbridge import _core
from tensorbridge._cli.probes import Probe, pointer, probe
from tensorbridge._core import DLPACK_VERSION, convert
from tensorbridge._dtypes import DTYPES
from tensorbridge._errors import ImportOrderError
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
]

#: Frameworks the matrix covers, in display (and import) order: the registry's,
#: but for those that need a GPU (cupy).
ORDER: list[str] = framework_names(gpu=False)
VALUES = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


@dataclasses.dataclass
class Exchange:
    """One exchange: ``status`` is "zero-copy", "copy" or "fails"."""

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
    names: list[str] | None = None, skipped: dict[str, str] | None = None
) -> dict[str, str]:
    """The installed frameworks (importing each, in ORDER, which imports paddle
    before tensorflow), with their versions. Frameworks that are installed but
    cannot be imported in this process go into `skipped`, with the reason."""
    found = {}
    for name in sorted(names or ORDER, key=ORDER.index):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # import-time chatter of the frameworks
            try:
                FRAMEWORKS[name].module()
            except ImportOrderError as exc:
                if skipped is not None:
                    skipped[name] = str(exc)
                continue
            except ImportError:
                continue
        probe(name).prepare()
        found[name] = version(name)
    return found


def _time_us(call: Callable[[], object], budget: float = 0.004) -> float:
    """Median per-call time in microseconds over a few short repeats."""
    samples = []
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, min(2000, int(budget / once)))
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(samples)


def _classify(producer: type[Probe], consumer: type[Probe], source: Any, result: Any) -> Exchange:
    src, dst = pointer(source), pointer(result)
    unusable = consumer.unusable(result)
    if unusable:
        return Exchange("fails", reason=unusable)
    if consumer.dtype_name(result) != "float32":
        return Exchange("fails", reason=f"float32 arrived as {consumer.dtype_name(result)}")
    if src is None or dst is None or src != dst:
        return Exchange("copy")
    # Shared memory: prove it by writing through one side and reading the other.
    if producer.write_first(source, -9.0):
        return Exchange("zero-copy", write_through=consumer.first_value(result) == -9.0)
    if consumer.write_first(result, -9.0):
        return Exchange("zero-copy", write_through=producer.first_value(source) == -9.0)
    return Exchange("zero-copy")


def _attempt(call: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return call(), None
    except Exception as exc:  # a peer's failure is a result here, not an error
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"{type(exc).__name__}: {message}"[:160]


def _routes(consumer: type[Probe], name: str) -> dict[str, Callable[[Any], Any]]:
    """How each route hands a source to the consumer: its own from_dlpack, or convert."""

    def native(src: Any) -> Any:
        return consumer.native_from_dlpack(src)

    def through_convert(src: Any) -> Any:
        return convert(src, name)  # type: ignore[call-overload]  # (a name of the registry)

    return {"native": native, "convert": through_convert}


def exchange_matrix(names: list[str], timing: bool = True) -> Results:
    """(producer, consumer, "native"|"convert") -> Exchange, for every ordered pair."""
    results: Results = {}
    for p in names:
        P = probe(p)
        for c in names:
            C = probe(c)
            for route, call in _routes(C, c).items():
                source = P.sample(VALUES, "float32")
                result, error = _attempt(lambda: call(source))  # noqa: B023 (called at once)
                if error:
                    results[(p, c, route)] = Exchange("fails", reason=error)
                    continue
                exchange = _classify(P, C, source, result)
                if exchange.status != "fails" and timing:
                    fresh = P.sample(VALUES, "float32")
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        exchange.time_us = _time_us(lambda: call(fresh))  # noqa: B023
                results[(p, c, route)] = exchange
    return results


def sweep_dtypes() -> tuple[list[str], list[str]]:
    """(the dtypes the sweep can make values of here, those it cannot: bfloat16 and
    the float8/6/4 types need ml_dtypes, which a NumPy-only install lacks)."""
    usable, missing = [], []
    for dtype in DTYPES:
        try:
            _core.asarray([1.0], dtype=dtype)
        except ImportError:
            missing.append(dtype)
        else:
            usable.append(dtype)
    return usable, missing


def dtype_sweep(names: list[str]) -> Sweep:
    """consumer -> dtype -> {"native": ok, "convert": ok}, from tensorbridge tensors,
    for the dtypes of `sweep_dtypes()` (others are left out).

    ok means the consumer's array has the same dtype and values."""
    sweep: Sweep = {}
    values = [1.0, 2.0, 4.0, 0.5]
    usable, _ = sweep_dtypes()
    for c in names:
        C = probe(c)
        routes = _routes(C, c)
        sweep[c] = {}
        for dtype in usable:
            row = {}
            for route, call in routes.items():
                source = _core.asarray(values, dtype=dtype)
                result, error = _attempt(lambda: call(source))  # noqa: B023 (called at once)
                row[route] = error is None and _same(C, result, source)
            sweep[c][dtype] = row
    return sweep


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
    seconds: float,
    results: Results,
    sweep: Sweep,
    untested: list[str],
) -> dict[str, Any]:
    """The matrix as JSON-ready data (``tensorbridge --json``)."""
    return {
        "tensorbridge": __version__,
        "dlpack": list(DLPACK_VERSION),
        "frameworks": versions,
        "skipped": skipped,
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
    }
