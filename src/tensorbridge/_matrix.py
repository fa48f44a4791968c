# SPDX-License-Identifier: Apache-2.0
"""The interoperability matrix: what actually exchanges on this machine.

For every ordered pair of installed frameworks (tensorbridge included), a small
tensor goes through the consumer's own ``from_dlpack`` ("native") and through
``tensorbridge.convert``. Each exchange is classified by comparing data addresses
and by writing through one side and reading the other, and timed.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import statistics
import time
import warnings
from typing import Any

from tensorbridge import _core
from tensorbridge._convert import convert
from tensorbridge._dtypes import DTYPES
from tensorbridge._errors import ImportOrderError
from tensorbridge._frameworks import FRAMEWORKS, Framework

__all__ = ["Exchange", "available", "dtype_sweep", "exchange_matrix"]

#: Frameworks the matrix covers, in display order (cupy needs a GPU).
ORDER = [
    "numpy", "torch", "jax", "paddle", "tensorflow", "mlx", "pyarrow",
    "array_api_strict", "tvm_ffi", "tensorbridge",
]
_DISTRIBUTIONS = {
    "numpy": "numpy", "torch": "torch", "jax": "jax", "paddle": "paddlepaddle",
    "tensorflow": "tensorflow-cpu", "mlx": "mlx", "pyarrow": "pyarrow",
    "array_api_strict": "array-api-strict", "tvm_ffi": "apache-tvm-ffi",
}
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


def available(
    names: list[str] | None = None, skipped: dict[str, str] | None = None
) -> dict[str, str]:
    """The installed frameworks (importing each, in ORDER, which imports paddle
    before tensorflow), with their versions. Frameworks that are installed but
    cannot be imported in this process go into `skipped`, with the reason."""
    found = {}
    for name in sorted(names or ORDER, key=ORDER.index):
        framework = FRAMEWORKS[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # import-time chatter of the frameworks
            try:
                if name != "tensorbridge":
                    framework.module()
            except ImportOrderError as exc:
                if skipped is not None:
                    skipped[name] = str(exc)
                continue
            except ImportError:
                continue
        if name == "jax":
            import jax

            jax.config.update("jax_enable_x64", True)  # else 64-bit data is narrowed
        if name == "tensorbridge":
            from tensorbridge import __version__ as version
        else:
            try:
                version = importlib.metadata.version(_DISTRIBUTIONS[name])
            except importlib.metadata.PackageNotFoundError:
                version = getattr(framework.module(), "__version__", "?")
        found[name] = version
    return found


def _pointer(obj: Any) -> int | None:
    for kwargs in ({"max_version": (1, 3)}, {}):
        try:
            info = _core._inspect_capsule(obj.__dlpack__(**kwargs))
        except Exception:
            continue
        return info["data"] + info["byte_offset"]
    return None


def _first_value(framework: type[Framework], obj: Any) -> float:
    return float(_core.asarray(obj).astype("float64").reshape(-1)[0].item()) \
        if framework.name not in ("tensorflow",) else float(obj.numpy().reshape(-1)[0])


def _time_us(call: Any, budget: float = 0.004) -> float:
    """Median per-call time in microseconds over a few short repeats."""
    samples = []
    number = 1
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


def _classify(
    producer: type[Framework], consumer: type[Framework], source: Any, result: Any
) -> Exchange:
    src, dst = _pointer(source), _pointer(result)
    if consumer.name == "tensorflow" and dst is not None and dst % 64:
        return Exchange(
            "fails", reason="imported memory that is not 64-byte aligned: the first "
            "TensorFlow operation on it aborts the process"
        )
    if consumer.dtype_name(result) != "float32":
        return Exchange("fails", reason=f"float32 arrived as {consumer.dtype_name(result)}")
    if src is None or dst is None or src != dst:
        return Exchange("copy")
    # Shared memory: prove it by writing through one side and reading the other.
    if producer.write_first(source, -9.0):
        return Exchange("zero-copy", write_through=_first_value(consumer, result) == -9.0)
    if consumer.write_first(result, -9.0):
        return Exchange("zero-copy", write_through=_first_value(producer, source) == -9.0)
    return Exchange("zero-copy")


def _attempt(call: Any) -> tuple[Any, str | None]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return call(), None
    except Exception as exc:  # a peer's failure is a result here, not an error
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"{type(exc).__name__}: {message}"[:160]


def exchange_matrix(names: list[str], timing: bool = True) -> dict[tuple[str, str, str], Exchange]:
    """(producer, consumer, "native"|"convert") -> Exchange, for every ordered pair."""
    results: dict[tuple[str, str, str], Exchange] = {}
    for p in names:
        P = FRAMEWORKS[p]
        for c in names:
            C = FRAMEWORKS[c]
            routes = {
                "native": lambda src, C=C: C.native_from_dlpack(src),
                "convert": lambda src, c=c: convert(src, c),
            }
            for route, call in routes.items():
                source = P.sample(VALUES, "float32")
                result, error = _attempt(lambda: call(source))
                if error:
                    results[(p, c, route)] = Exchange("fails", reason=error)
                    continue
                exchange = _classify(P, C, source, result)
                if exchange.status != "fails" and timing:
                    fresh = P.sample(VALUES, "float32")
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        exchange.time_us = _time_us(lambda: call(fresh))
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


def dtype_sweep(names: list[str]) -> dict[str, dict[str, dict[str, bool]]]:
    """consumer -> dtype -> {"native": ok, "convert": ok}, from tensorbridge tensors,
    for the dtypes of `sweep_dtypes()` (others are left out).

    ok means the consumer's array has the same dtype and values."""
    sweep: dict[str, dict[str, dict[str, bool]]] = {}
    values = [1.0, 2.0, 4.0, 0.5]
    usable, _ = sweep_dtypes()
    for c in names:
        C = FRAMEWORKS[c]
        sweep[c] = {}
        for dtype in usable:
            row = {}
            for route in ("native", "convert"):
                source = _core.asarray(values, dtype=dtype)
                call = C.native_from_dlpack if route == "native" else (lambda s, c=c: convert(s, c))
                result, error = _attempt(lambda: call(source))
                row[route] = error is None and _same(C, result, source)
            sweep[c][dtype] = row
    return sweep


def _same(C: type[Framework], result: Any, source: Any) -> bool:
    try:
        if C.dtype_name(result) != source.dtype.name:
            return False
        if C.name == "tensorflow" and (_pointer(result) or 0) % 64:
            return False  # unusable: TF aborts on unaligned memory
        # Compare as float64 (complex128 for complex types, so nothing is discarded).
        wide = "complex128" if source.dtype.name.startswith("complex") else "float64"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = convert(result, "tensorbridge").astype(wide).tolist() \
                if source.dtype.name != "bool" else convert(result, "numpy").tolist()
        want = source.astype(wide).tolist() if source.dtype.name != "bool" \
            else source.tolist()
        return got == want
    except Exception:
        return False
