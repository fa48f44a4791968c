# SPDX-License-Identifier: Apache-2.0
"""Grade any library's DLPack producer and consumer against the standard.

``check_producer(make)`` exercises the ``__dlpack__`` / ``__dlpack_device__`` (and
C exchange table) of the objects ``make`` returns; ``check_consumer(from_dlpack)``
hands crafted producers to a ``from_dlpack``. Both return a `Report`: one
`CheckResult` per rule, ``fail`` for what the standard says *must*, ``warn`` for
*should*. ``check_library(make, from_dlpack)`` runs both, sharing the child
processes (the library is imported once). ``assert_conformant_producer`` /
``assert_conformant_consumer`` raise an `AssertionError` listing every failure, for a
library's own test suite.

Probes that can crash the process run in child processes when the callable can be
imported there by name (``module:qualname``; a string of that form is accepted too):
a crash or a hang (``timeout`` seconds per probe) is a failed check, not the end of
the run. Each child runs in a session of its own and is killed with every process the
library started in it (on Linux, even those that left its session) when it ends, hangs
or the check is interrupted. This module needs NumPy; ``import tensorbridge`` does not
import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensorbridge.testing._isolate import (
    DEFAULT_TIMEOUT,
    Factory,
    Group,
    qualified_name,
    run_groups,
    run_probes,
)
from tensorbridge.testing._producer import CASES
from tensorbridge.testing._report import CheckResult, Report, worst

__all__ = [
    "CASES",
    "CheckResult",
    "Report",
    "assert_conformant_consumer",
    "assert_conformant_producer",
    "check_consumer",
    "check_library",
    "check_producer",
]


def _label(obj: Any, name: str | None) -> str:
    if name is not None:
        return name
    if isinstance(obj, Factory):
        return f"{obj.function}{tuple(obj.args)!r}"
    return qualified_name(obj) or getattr(obj, "__qualname__", None) or repr(obj)


def _merge(results: list[CheckResult]) -> list[CheckResult]:
    """One result per name: the worst status, with the details of that status."""
    order: dict[str, list[CheckResult]] = {}
    for r in results:
        order.setdefault(r.name, []).append(r)
    merged = []
    for name, group in order.items():
        if len(group) == 1:
            merged.append(group[0])
            continue
        status = worst(r.status for r in group)
        # each detail once, in order: several exchanges often fail the same way
        details = list(dict.fromkeys(r.detail for r in group if r.status == status))
        if status == "pass":
            details = [f"{len(group)} exchanges checked"]
        elif len(details) > _MAX_DETAILS:
            more = len(details) - _MAX_DETAILS
            details = [*details[:_MAX_DETAILS], f"(+{more} more)"]
        merged.append(CheckResult(name, status, "; ".join(details), group[0].clause))
    return merged


#: Details kept when several results of one check are merged.
_MAX_DETAILS = 8


def check_producer(
    make: Callable[..., Any] | str,
    *,
    name: str | None = None,
    isolate: bool | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Report:
    """Check the DLPack producer side of the objects ``make`` returns.

    ``make()`` must return a fresh object of the library under test (a CPU float32
    array is the best default). If ``make`` takes a ``case`` keyword, it is also
    called as ``make(case=c)`` for every ``c`` in `CASES` (dtypes; ``"0-d"``,
    ``"size-0"``, ``"transposed"``, ``"step-sliced"``, ``"negative-strides"``,
    ``"offset-view"``, ``"read-only"``) and must return an object equal to the NumPy
    array ``CASES[c]()``, made with the library's own operations so that a view stays
    a view, or raise `NotImplementedError` (or return None) when it cannot; the
    exports are then also checked against those values.

    Checks: ``__dlpack_device__``; ``__dlpack__`` with no keyword (legacy capsule),
    ``max_version`` (1, x) and (0, x), ``stream=None``, ``dl_device`` (its own),
    ``copy=True`` and ``copy=False``; a fresh capsule per call; the struct's fields
    (version, ndim and shape, dtype, device, strides, byte_offset, data, flags) and
    values; ``READ_ONLY``; the deleter (through the exported object's reference
    count: skipped when the export holds no reference to it); the C exchange table
    (its major-1 table, through ``prev_api`` when the type offers a newer one).

    ``make`` may be a ``"module:qualname"`` string. ``isolate``: None (default) runs
    the probes in child processes when ``make`` can be imported by name, in this
    process (with a warning) otherwise; True requires child processes (`ValueError`
    for a callable that cannot be found by name, such as a lambda); False runs them
    in this process. ``timeout``: seconds each probe may take before it is reported
    as hung: a positive, finite number (anything else is refused before anything
    runs); a child's start-up has a limit of its own.
    """
    from tensorbridge.testing import _producer

    results = run_probes(
        "producer", _producer.__name__, _producer.PROBES, make, isolate=isolate, timeout=timeout
    )
    return Report("producer", _label(make, name), _merge(results))


def check_consumer(
    from_dlpack: Callable[..., Any] | str,
    *,
    name: str | None = None,
    isolate: bool | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Report:
    """Check a DLPack consumer: ``from_dlpack(x)`` is called with crafted producers.

    The producers answer legacy, versioned or both; hold read-only, negative-
    and zero-strided, offset, NULL-strided and size-0 tensors of every common dtype;
    claim CUDA memory; hand out used or malformed capsules. Checked: the values (read
    back through tensorbridge), whether memory is shared, READ_ONLY honoured (or
    ignored: a warning), refusals with the standard's exception types, ``stream``
    left None for a CPU producer, and that every capsule is renamed ``used_*``
    exactly when it is consumed and its deleter runs exactly once. ``from_dlpack``
    may be a ``"module:qualname"`` string; ``isolate`` and ``timeout`` as for
    `check_producer`.
    """
    from tensorbridge.testing import _consumer

    results = run_probes(
        "consumer",
        _consumer.__name__,
        _consumer.PROBES,
        from_dlpack,
        isolate=isolate,
        timeout=timeout,
    )
    return Report("consumer", _label(from_dlpack, name), _merge(results))


def check_library(
    make: Callable[..., Any] | str,
    from_dlpack: Callable[..., Any] | str,
    *,
    name: str | None = None,
    isolate: bool | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[Report, Report]:
    """`check_producer` of ``make`` and `check_consumer` of ``from_dlpack``, run in
    the same child processes (a library that takes seconds to import is imported
    once, not once per role); the two reports. Arguments as for those."""
    from tensorbridge.testing import _consumer, _producer

    groups = [
        Group("producer", _producer.__name__, _producer.PROBES, make),
        Group("consumer", _consumer.__name__, _consumer.PROBES, from_dlpack),
    ]
    produced, consumed = run_groups(groups, isolate=isolate, timeout=timeout)
    return (
        Report("producer", _label(make, name), _merge(produced)),
        Report("consumer", _label(from_dlpack, name), _merge(consumed)),
    )


def _assert_ok(report: Report) -> None:
    if not report.ok:
        lines = [f"{len(report.failures)} DLPack {report.kind} check(s) failed for {report.name}:"]
        lines += [f"- {r.name}: {r.detail} ({r.clause})" for r in report.failures]
        raise AssertionError("\n".join(lines))


def assert_conformant_producer(make: Callable[..., Any] | str, **kwargs: Any) -> Report:
    """`check_producer`, raising `AssertionError` listing every failure; the report."""
    report = check_producer(make, **kwargs)
    _assert_ok(report)
    return report


def assert_conformant_consumer(from_dlpack: Callable[..., Any] | str, **kwargs: Any) -> Report:
    """`check_consumer`, raising `AssertionError` listing every failure; the report."""
    report = check_consumer(from_dlpack, **kwargs)
    _assert_ok(report)
    return report
