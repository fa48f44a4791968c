# SPDX-License-Identifier: Apache-2.0
"""The consumer side: crafted producers handed to the ``from_dlpack`` under test.

Each probe hands the consumer producers of `_crafted` (capsules crafted field by
field over NumPy memory of tensorbridge's), so it knows the right values, sees
whether the result shares that memory and counts the deleter calls. Whatever the
consumer does, each capsule must end with its deleter called exactly once: by the
consumer (after renaming the capsule ``used_*``) or by the capsule's destructor
(when it was left as it was). Every
exchange is graded twice more for that: ``consumer.capsule_protocol`` (renamed
exactly when consumed) and ``consumer.deleter_once`` (no leak, no double free).

A consumer that refuses 2-d tensors but takes 1-d ones (PyArrow's arrays) is given
1-d tensors throughout (`Layout`), so that its other rules can still be graded.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from tensorbridge._devices import DLDeviceType
from tensorbridge._dtypes import DTYPES
from tensorbridge._frameworks.base import STANDARD
from tensorbridge.testing._crafted import (
    READ_ONLY,
    CraftedProducer,
    Expected,
    Layout,
    Readback,
    address,
    aligned,
    craft,
    crafted,
    declared_dtype,
    describe,
    grid,
)
from tensorbridge.testing._isolate import Probe
from tensorbridge.testing._report import CheckResult, Status, worst

__all__ = ["PROBES"]

_testing: Any = importlib.import_module("tensorbridge._testing")

SPEC = "DLPack Python spec"
HEADER = "dlpack.h 1.3"
ARRAY_API = "Array API"
PROTOCOL_CLAUSE = f"{SPEC}: rename the capsule used_* exactly when consuming it"
DELETER_CLAUSE = f"{HEADER}: the deleter is called exactly once (no leak, no double free)"

#: Exceptions a consumer may refuse a tensor with (BufferError is the standard's choice).
_CLEAN = (BufferError, TypeError, ValueError)

#: id(consumer) -> (consumer, its layout): decided once per process.
_LAYOUTS: dict[int, tuple[Any, Layout]] = {}


def _layout(fn: Callable[..., Any]) -> Layout:
    """1-d when ``fn`` refuses a plain 2-d float32 tensor and takes a 1-d one."""
    known = _LAYOUTS.get(id(fn))
    if known is not None and known[0] is fn:
        return known[1]
    layout = Layout(False)
    for flat in (False, True):
        producer = crafted(Layout(flat).grid())
        outcome = _call(fn, producer, producer.made)
        ok = outcome.error is None
        _protocol(outcome, "", shared=None)
        if ok:
            layout = Layout(flat)
            break
    _LAYOUTS[id(fn)] = (fn, layout)
    return layout


def _strip(exc: BaseException) -> BaseException:
    """The exception without tracebacks: their frames would keep the capsules alive."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return exc


class _Outcome:
    """What one call of the consumer did, and the capsules' fate."""

    def __init__(self, result: Any, error: BaseException | None, made: list[Any]) -> None:
        self.result = result
        self.error = error
        self.made = made  # (capsule, counter) pairs
        # name and deleter calls of each capsule right after the call
        self.after = [(_testing.capsule_name(c), n.calls) for c, n in made]


def _call(from_dlpack: Callable[..., Any], arg: Any, made: list[Any], **kwargs: Any) -> _Outcome:
    try:
        result = from_dlpack(arg, **kwargs)
    except Exception as exc:
        return _Outcome(None, _strip(exc), made)
    return _Outcome(result, None, made)


def _protocol(
    outcome: _Outcome, label: str, *, shared: bool | None
) -> tuple[list[tuple[Status, str]], list[tuple[Status, str]]]:
    """Grade the capsules' fate: (renaming verdicts, deleter verdicts); drops the
    result, the error and the capsules."""
    prefix = f"{label}: " if label else ""
    renaming: list[tuple[Status, str]] = []
    for name, calls in outcome.after:
        used = name is not None and name.startswith("used_")
        if calls and not used:
            renaming.append(
                ("fail", f"{prefix}called the deleter but left the capsule named {name!r}")
            )
        if outcome.error is not None and used and calls == 0:
            renaming.append(("fail", f"{prefix}refused the tensor but renamed its capsule"))
        if outcome.error is None and not used and shared:
            renaming.append(("fail", f"{prefix}shares the memory without consuming the capsule"))
    counters = [n for _, n in outcome.made]
    outcome.result = None
    outcome.error = None
    outcome.made.clear()
    _collect(counters)
    deleter: list[tuple[Status, str]] = []
    for counter in counters:
        if counter.calls == 0:
            deleter.append(("fail", f"{prefix}the deleter was never called (a leak)"))
        elif counter.calls > 1:
            deleter.append(("fail", f"{prefix}the deleter was called {counter.calls} times"))
    return renaming, deleter


def _collect(counters: list[Any]) -> None:
    """Free what the consumer dropped: a young collection, then a full one when a
    deleter has not run yet (a result in a reference cycle that outlived a young
    collection while the consumer worked is only freed by a full one)."""
    gc.collect(0)
    if any(counter.calls == 0 for counter in counters):
        gc.collect()


def _results(
    name: str, clause: str, verdicts: list[tuple[Status, str]], passed: str
) -> list[CheckResult]:
    if not verdicts:
        return [CheckResult(name, "pass", passed, clause)]
    status = worst(s for s, _ in verdicts)
    detail = "; ".join(dict.fromkeys(d for s, d in verdicts if s == status))
    return [CheckResult(name, status, detail, clause)]


def _lifetime(
    label: str,
    renaming: list[tuple[Status, str]],
    deleter: list[tuple[Status, str]],
) -> list[CheckResult]:
    return _results(
        "consumer.capsule_protocol", PROTOCOL_CLAUSE, renaming, f"{label}: ok"
    ) + _results("consumer.deleter_once", DELETER_CLAUSE, deleter, f"{label}: ok")


def _finish(outcome: _Outcome, label: str, *, shared: bool | None = None) -> list[CheckResult]:
    return _lifetime(label, *_protocol(outcome, label, shared=shared))


def _exchange(
    from_dlpack: Callable[..., Any],
    name: str,
    clause: str,
    producer: CraftedProducer,
    *,
    refusal: Status,
    refusal_note: str = "",
    expected: Expected | None = None,
    label: str | None = None,
) -> list[CheckResult]:
    """Hand ``producer`` to the consumer; the result must hold the producer's values."""
    expected = expected or Expected(producer.array)
    outcome = _call(from_dlpack, producer, producer.made)
    shared = None
    if outcome.error is not None:
        clean = isinstance(outcome.error, _CLEAN)
        status: Status = refusal if clean else worst([refusal, "warn"])
        detail = f"refused: {describe(outcome.error)}"
        if status != "pass" and refusal_note:
            detail += f" {refusal_note}"
        if not clean:
            detail += " (BufferError expected)"
    else:
        back = Readback(outcome.result)
        declared = declared_dtype(outcome.result)
        if back.tensor is None:
            status, detail = "warn", back.note or f"the result is on device {back.device}"
        else:
            status, detail = expected.verdict(back)
            if status == "pass" and declared is not None and declared != expected.name:
                status = "fail"
                detail = f"its dtype says {declared}, expected {expected.name}"
            elif status == "pass":
                shared = back.address == address(expected.raw) and expected.raw.size > 0
                detail = "right values, " + ("shared memory" if shared else "a copy")
        del back
    return [
        CheckResult(name, status, detail, clause),
        *_finish(outcome, label or name, shared=shared),
    ]


# ---------------------------------------------------------------------------------------
# Probes


def probe_versioned(fn: Callable[..., Any]) -> list[CheckResult]:
    layout = _layout(fn)
    clause = f"{SPEC}: a producer answering both kinds of capsule"
    producer = crafted(layout.grid())
    results = _exchange(fn, "consumer.basic", clause, producer, refusal="fail")
    asked = [c.get("max_version") for c in producer.calls]
    clause = f"{SPEC}: consumers pass max_version=(1, x) and read versioned capsules"
    if any(v is not None and v[0] == 1 for v in asked):
        results.append(CheckResult("consumer.asks_versioned", "pass", f"asked {asked}", clause))
    else:
        detail = f"never passed max_version (calls: {producer.calls}): READ_ONLY cannot reach it"
        results.append(CheckResult("consumer.asks_versioned", "warn", detail, clause))
    clause = f"{HEADER}: ndim may be anything from 0 to the consumer's limit"
    if layout.flat:
        detail = "takes 1-d tensors only (2-d refused): the other checks used 1-d tensors"
        results.append(CheckResult("consumer.ndim", "warn", detail, clause))
    else:
        results.append(CheckResult("consumer.ndim", "pass", "takes 2-d tensors", clause))
    return results


def probe_legacy_only(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{SPEC}: retry without max_version when a pre-1.0 producer raises TypeError"
    producer = crafted(_layout(fn).grid(), "legacy-only")
    return _exchange(fn, "consumer.legacy_producer", clause, producer, refusal="fail")


def probe_legacy_answer(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{SPEC}: a producer may answer max_version with a legacy capsule"
    producer = crafted(_layout(fn).grid(), "legacy-answer")
    return _exchange(fn, "consumer.legacy_answer", clause, producer, refusal="fail")


def probe_versioned_only(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{SPEC}: producers may refuse legacy export (BufferError) since 2025"
    producer = crafted(_layout(fn).grid(), "versioned-only")
    return _exchange(
        fn,
        "consumer.versioned_only",
        clause,
        producer,
        refusal="warn",
        refusal_note="(a legacy-only consumer)",
    )


def probe_negative_strides(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: negative strides are legal; support them or raise BufferError"
    producer = crafted(_layout(fn).negative())
    return _exchange(fn, "consumer.negative_strides", clause, producer, refusal="pass")


def probe_zero_strides(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: zero strides (broadcast views) are legal; support or BufferError"
    producer = crafted(_layout(fn).zero(), flags=READ_ONLY)
    return _exchange(fn, "consumer.zero_strides", clause, producer, refusal="pass")


def probe_byte_offset(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: element 0 is at data + byte_offset"
    base = aligned(np.arange(16, dtype=np.float32))
    view = base[4:]
    producer = crafted(view, data=address(base), byte_offset=16, owner=base)
    return _exchange(fn, "consumer.byte_offset", clause, producer, refusal="warn")


def probe_null_strides(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: NULL strides (legacy, < 1.2) mean C-contiguous"
    producer = crafted(_layout(fn).grid(), "legacy-answer", strides=None)
    return _exchange(fn, "consumer.null_strides", clause, producer, refusal="fail")


def probe_size0(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: a size-0 tensor's data may be NULL"
    layout = _layout(fn)
    producer = crafted(layout.size0(), data=0, strides=layout.size0_strides())
    return _exchange(fn, "consumer.size0_null_data", clause, producer, refusal="fail")


#: The dtypes NumPy has natively, in DLPack's order (the registry's STANDARD).
_DTYPES = [name for name in DTYPES if name in STANDARD]

#: dtypes NumPy has no type of its own for, crafted as their bits: name -> bits' type.
_LOW_PRECISION = {
    "bfloat16": "uint16",
    "float8_e4m3fn": "uint8",
    "float8_e5m2": "uint8",
}


def _dtype_case(layout: Layout, name: str) -> tuple[CraftedProducer, Expected]:
    if name in _LOW_PRECISION:
        raw = layout.grid(_LOW_PRECISION[name])  # small bit patterns: no NaN, no inf
        d = DTYPES[name]
        return crafted(raw, dtype=(d.code, d.bits, 1)), Expected(raw, name)
    array = layout.grid(name) if name != "bool" else aligned(layout.grid() % 3 == 0)
    return crafted(array), Expected(array)


def _dtype_probe(
    fn: Callable[..., Any], name: str, clause: str, dtypes: list[str]
) -> list[CheckResult]:
    layout = _layout(fn)
    verdicts: list[tuple[Status, str]] = []
    lifetime: list[CheckResult] = []
    refused = []
    for dtype in dtypes:
        producer, expected = _dtype_case(layout, dtype)
        for result in _exchange(
            fn, name, clause, producer, refusal="pass", expected=expected, label=f"{name} {dtype}"
        ):
            if result.name != name:
                lifetime.append(result)
            elif result.detail.startswith("refused"):
                refused.append(dtype)
                if result.status != "pass":
                    verdicts.append((result.status, f"{dtype}: {result.detail}"))
            elif result.status != "pass":
                verdicts.append((result.status, f"{dtype}: {result.detail}"))
    passed = f"{len(dtypes) - len(refused)} dtypes right" + (
        f"; refused {', '.join(refused)}" if refused else ""
    )
    return _results(name, clause, verdicts, passed) + lifetime


def probe_dtypes(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: DLDataType codes and bits (refuse unknown ones with BufferError)"
    return _dtype_probe(fn, "consumer.dtypes", clause, _DTYPES)


def probe_low_precision(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: kDLBfloat (4) and the float8 codes (from 1.1): read right or refused"
    return _dtype_probe(fn, "consumer.dtypes.low_precision", clause, list(_LOW_PRECISION))


def probe_read_only(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.read_only"
    clause = f"{ARRAY_API}: honour READ_ONLY, or ignore it if read-only cannot be expressed"
    source = _layout(fn).grid()
    producer = crafted(source, flags=READ_ONLY)
    outcome = _call(fn, producer, producer.made)
    verdicts: list[tuple[Status, str]] = []
    passed = ""
    if outcome.error is not None:
        verdicts.append(("warn", f"refused a read-only tensor: {describe(outcome.error)}"))
    elif not any(c.get("max_version") for c in producer.calls):
        detail = (
            "never passed max_version, so it got a legacy capsule, which cannot say "
            "read-only: whether it honours READ_ONLY is unknown (consumer.asks_versioned)"
        )
        verdicts.append(("warn", detail))
    else:
        verdicts.extend(_write_verdict(outcome.result, source))
        passed = "the result cannot be written"
    return _results(name, clause, verdicts, passed) + _finish(outcome, name)


def _write_verdict(result: Any, source: np.ndarray) -> list[tuple[Status, str]]:
    if isinstance(result, np.ndarray):
        if result.flags.writeable and np.shares_memory(result, source):
            return [("warn", "READ_ONLY ignored: the result is writable and shares memory")]
        return []
    index = (0,) * source.ndim
    try:
        result[index] = 99
    except Exception:
        return []
    if source[index] == 99:
        source[index] = 0
        return [("warn", "READ_ONLY ignored: a write through the result changed the source")]
    return []


def probe_cuda(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.device"
    clause = f"{SPEC}: a kDLCUDA tensor is kept on its device or refused, never read as CPU"
    source = _layout(fn).grid()
    producer = crafted(source, device=(int(DLDeviceType.kDLCUDA), 0))
    outcome = _call(fn, producer, producer.made)
    verdicts: list[tuple[Status, str]] = []
    passed = ""
    if outcome.error is not None:
        status: Status = "pass" if isinstance(outcome.error, _CLEAN) else "warn"
        passed = f"refused: {describe(outcome.error)}"
        if status != "pass":
            verdicts.append((status, passed + " (BufferError expected)"))
    else:
        device = None
        try:
            kind, index = outcome.result.__dlpack_device__()
            device = (int(kind), 0 if index is None else int(index))
        except Exception as exc:
            verdicts.append(("warn", f"accepted; its device cannot be read: {describe(exc)}"))
        if device is not None and device[0] != int(DLDeviceType.kDLCUDA):
            verdicts.append(("fail", f"accepted a CUDA tensor as device {device}"))
        passed = f"kept on device {device}"
    return _results(name, clause, verdicts, passed) + _finish(outcome, name)


def probe_cpu_stream(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.cpu_stream"
    clause = f"{SPEC}: stream is None for a kDLCPU producer (NumPy's refuses any other)"
    producer = crafted(_layout(fn).grid())
    outcome = _call(fn, producer, producer.made)
    streams = [c["stream"] for c in producer.calls if c.get("stream") is not None]
    verdicts: list[tuple[Status, str]] = []
    if streams:
        detail = (
            f"passed stream={streams[0]!r} to a producer whose __dlpack_device__() is "
            f"kDLCPU (calls: {producer.calls})"
        )
        verdicts.append(("fail", detail))
    passed = "stream=None" if any("stream" in c for c in producer.calls) else "no stream"
    return _results(name, clause, verdicts, f"{passed} for a CPU producer") + _finish(outcome, name)


def _no_keyword(exc: BaseException, keyword: str) -> bool:
    """Whether exc says the consumer does not take ``keyword=``."""
    return (
        isinstance(exc, TypeError)
        and keyword in str(exc)
        and any(w in str(exc) for w in ("unexpected keyword", "incompatible", "positional"))
    )


def _keyword_exchange(
    fn: Callable[..., Any], name: str, clause: str, copy: bool
) -> list[CheckResult]:
    source = _layout(fn).grid()
    producer = crafted(source)
    outcome = _call(fn, producer, producer.made, copy=copy)
    verdicts: list[tuple[Status, str]] = []
    shared = None
    passed = ""
    error = outcome.error
    if error is not None and _no_keyword(error, "copy"):
        verdicts.append(("warn", f"does not take copy= ({describe(error)})"))
    elif error is not None:
        if copy:
            verdicts.append(("fail", f"copy=True of host memory refused: {describe(error)}"))
        elif isinstance(error, (BufferError, ValueError)):
            passed = f"refused (a copy would be needed): {describe(error)}"
        else:
            detail = f"copy=False raised {describe(error)} (BufferError or ValueError expected)"
            verdicts.append(("fail", detail))
    else:
        read_at = _check_values(outcome.result, source, verdicts)
        if read_at is not None:
            shared = read_at == address(source)
            if copy and shared:
                verdicts.append(("fail", "copy=True returned the producer's memory, not a copy"))
            if not copy and not shared:
                verdicts.append(("fail", "copy=False returned a copy"))
            passed = "a copy" if copy else "shared memory"
    return _results(name, clause, verdicts, passed) + _finish(outcome, name, shared=shared)


def _check_values(
    result: Any, source: np.ndarray, verdicts: list[tuple[Status, str]]
) -> int | None:
    """Add the verdict on result's values (against source) to verdicts; the address of
    its data, None when it cannot be read. (The readback is dropped on return: it must
    not keep the result alive while deleter calls are counted.)"""
    back = Readback(result)
    if back.tensor is None:
        verdicts.append(("warn", back.note or "the result could not be read"))
        return None
    status, detail = Expected(source).verdict(back)
    if status != "pass":
        verdicts.append((status, detail))
    return back.address


def probe_copy_true(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{ARRAY_API} 2023.12: from_dlpack(x, copy=True) always copies"
    return _keyword_exchange(fn, "consumer.copy.true", clause, True)


def probe_copy_false(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{ARRAY_API} 2023.12: from_dlpack(x, copy=False) never copies (or raises)"
    return _keyword_exchange(fn, "consumer.copy.false", clause, False)


def probe_device_argument(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.device_argument"
    clause = f"{ARRAY_API} 2023.12: from_dlpack(x, device=d) with the device of its own result"
    source = _layout(fn).grid()
    first = crafted(source)
    outcome = _call(fn, first, first.made)
    device = getattr(outcome.result, "device", None)
    _protocol(outcome, name, shared=None)
    if device is None:
        detail = "its result has no .device to ask for (or the plain call failed)"
        return [CheckResult(name, "skip", detail, clause)]
    producer = crafted(source)
    outcome = _call(fn, producer, producer.made, device=device)
    verdicts: list[tuple[Status, str]] = []
    error = outcome.error
    if error is not None and _no_keyword(error, "device"):
        verdicts.append(("warn", f"does not take device= ({describe(error)})"))
    elif error is not None:
        verdicts.append(("fail", f"device={device!r} (its own) raised {describe(error)}"))
    else:
        _check_values(outcome.result, source, verdicts)
    return _results(name, clause, verdicts, f"device={device!r} accepted") + _finish(outcome, name)


def probe_read_after_free(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.read_after_free"
    clause = f"{HEADER}: nothing is read through a managed tensor after its deleter ran"
    verdicts: list[tuple[Status, str]] = []
    results: list[CheckResult] = []
    # 1. The memory: the deleter poisons it, so values read after it are wrong.
    source = _layout(fn).grid()
    expected = source.copy()
    producer = crafted(source, poison=True)
    outcome = _call(fn, producer, producer.made)
    if outcome.error is None:
        back = Readback(outcome.result)
        if back.tensor is not None:
            values = np.array(back.tensor, copy=True)
            if not np.array_equal(values, expected) and np.all(values == -1):
                verdicts.append(("fail", "read the tensor's memory after calling its deleter"))
        del back
    results += _finish(outcome, f"{name} (memory)")
    # 2. The capsule: a producer handing out the same capsule again, once consumed.
    producer = crafted(_layout(fn).grid(), "same-capsule")
    first = _call(fn, producer, producer.made)
    if first.error is None and first.after:
        name_after, calls_after = first.after[0]
        second = _call(fn, producer, [])
        accepted = second.error is None
        second.result = second.error = None
        if accepted and calls_after:
            verdicts.append(
                (
                    "fail",
                    "imported a capsule again after calling its deleter (it left it named "
                    f"{name_after!r}): a use after free",
                )
            )
        elif accepted and not str(name_after).startswith("used_"):
            verdicts.append(("fail", "imported one capsule twice (it does not rename it)"))
        elif accepted:
            verdicts.append(("fail", f"imported a capsule named {name_after!r}"))
    results += _finish(first, f"{name} (capsule)")
    return _results(name, clause, verdicts, "nothing read after the deleter") + results


def probe_used_capsule(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.used_capsule"
    clause = f"{SPEC}: a capsule named used_* is consumed already: refuse it"
    verdicts: list[tuple[Status, str]] = []
    capsule, counter = craft(grid(), versioned=True)
    _testing.set_capsule_name(capsule, "used_dltensor_versioned")
    try:
        fn(capsule)
    except Exception:
        pass
    else:
        verdicts.append(("fail", "accepted a used capsule passed directly"))
    if counter.calls:
        verdicts.append(("fail", "called the deleter of a used capsule"))
    # The same through a producer whose __dlpack__ hands out a used capsule.
    producer = crafted(_layout(fn).grid(), "used-answer")
    try:
        fn(producer)
    except Exception:
        pass
    else:
        verdicts.append(("fail", "accepted a used capsule from __dlpack__"))
    if any(n.calls for _, n in producer.made):
        verdicts.append(("fail", "called the deleter of a used capsule from __dlpack__"))
    # These capsules were never really consumed: free their structs through the counter.
    for cap, _ in producer.made:
        _testing.set_capsule_name(cap, _testing.capsule_name(cap).removeprefix("used_"))
    _testing.set_capsule_name(capsule, "dltensor_versioned")
    return _results(name, clause, verdicts, "refused, deleter not called")


def probe_raw_capsule(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.raw_capsule_twice"
    clause = f"{SPEC}: a consumed capsule is renamed, so a second import is refused"
    source = _layout(fn).grid()
    capsule, counter = craft(source, versioned=False)
    try:
        first = fn(capsule)
    except Exception as exc:
        detail = f"raw capsules are not taken ({describe(exc)}); not in the standard"
        return [CheckResult(name, "skip", detail, clause)]
    verdicts: list[tuple[Status, str]] = []
    if not str(_testing.capsule_name(capsule)).startswith("used_"):
        verdicts.append(("fail", "the capsule was not renamed used_dltensor on import"))
        del first
        gc.collect(0)
        return _results(name, clause, verdicts, "")
    try:
        fn(capsule)
    except Exception:
        pass
    else:
        verdicts.append(("fail", "a second import of the same capsule succeeded"))
    del first
    del capsule
    _collect([counter])
    if counter.calls != 1:
        verdicts.append(("fail", f"the deleter was called {counter.calls} times"))
    return _results(name, clause, verdicts, "renamed on import; a second import refused")


_MALFORMED_CLAUSE = f"{HEADER}: refuse what cannot be read (BufferError), never read it"
_MALFORMED: dict[str, dict[str, Any]] = {
    "ndim -1": dict(ndim=-1),
    "dtype code 99": dict(dtype=(99, 32, 1)),
    "float32 with 4 lanes": dict(dtype=(2, 32, 4)),
    "version 2.0": dict(version=(2, 0)),
}


def _malformed(label: str) -> Callable[[Callable[..., Any]], list[CheckResult]]:
    """The probe of one malformed struct (one each: a crash names its case)."""

    def probe(fn: Callable[..., Any]) -> list[CheckResult]:
        name, clause = "consumer.malformed", _MALFORMED_CLAUSE
        producer = crafted(_layout(fn).grid(), "versioned-only", **_MALFORMED[label])
        outcome = _call(fn, producer, producer.made)
        verdicts: list[tuple[Status, str]] = []
        if outcome.error is None:
            verdicts.append(("fail", f"{label}: accepted"))
        elif not isinstance(outcome.error, BufferError):
            verdicts.append(("warn", f"{label}: {describe(outcome.error)} (BufferError expected)"))
        passed = f"{label}: refused"
        return _results(name, clause, verdicts, passed) + _finish(outcome, f"{name} {label}")

    return probe


PROBES = [
    Probe("consumer.basic", f"{SPEC}: a producer answering both kinds of capsule", probe_versioned),
    Probe(
        "consumer.legacy_producer",
        f"{SPEC}: retry without max_version when a pre-1.0 producer raises TypeError",
        probe_legacy_only,
    ),
    Probe(
        "consumer.legacy_answer",
        f"{SPEC}: a producer may answer max_version with a legacy capsule",
        probe_legacy_answer,
    ),
    Probe(
        "consumer.versioned_only",
        f"{SPEC}: producers may refuse legacy export (BufferError) since 2025",
        probe_versioned_only,
    ),
    Probe(
        "consumer.dtypes",
        f"{HEADER}: DLDataType codes and bits (refuse unknown ones with BufferError)",
        probe_dtypes,
    ),
    Probe(
        "consumer.dtypes.low_precision",
        f"{HEADER}: kDLBfloat (4) and the float8 codes (from 1.1): read right or refused",
        probe_low_precision,
    ),
    Probe(
        "consumer.byte_offset", f"{HEADER}: element 0 is at data + byte_offset", probe_byte_offset
    ),
    Probe(
        "consumer.null_strides",
        f"{HEADER}: NULL strides (legacy, < 1.2) mean C-contiguous",
        probe_null_strides,
    ),
    Probe("consumer.size0_null_data", f"{HEADER}: a size-0 tensor's data may be NULL", probe_size0),
    Probe(
        "consumer.read_only",
        f"{ARRAY_API}: honour READ_ONLY, or ignore it if read-only cannot be expressed",
        probe_read_only,
    ),
    Probe(
        "consumer.copy.true",
        f"{ARRAY_API} 2023.12: from_dlpack(x, copy=True) always copies",
        probe_copy_true,
    ),
    Probe(
        "consumer.copy.false",
        f"{ARRAY_API} 2023.12: from_dlpack(x, copy=False) never copies (or raises)",
        probe_copy_false,
    ),
    Probe(
        "consumer.device_argument",
        f"{ARRAY_API} 2023.12: from_dlpack(x, device=d) with the device of its own result",
        probe_device_argument,
    ),
    Probe(
        "consumer.read_after_free",
        f"{HEADER}: nothing is read through a managed tensor after its deleter ran",
        probe_read_after_free,
    ),
    Probe(
        "consumer.negative_strides",
        f"{HEADER}: negative strides are legal; support them or raise BufferError",
        probe_negative_strides,
    ),
    Probe(
        "consumer.zero_strides",
        f"{HEADER}: zero strides (broadcast views) are legal; support or BufferError",
        probe_zero_strides,
    ),
    Probe(
        "consumer.device",
        f"{SPEC}: a kDLCUDA tensor is kept on its device or refused, never read as CPU",
        probe_cuda,
    ),
    Probe(
        "consumer.cpu_stream",
        f"{SPEC}: stream is None for a kDLCPU producer (NumPy's refuses any other)",
        probe_cpu_stream,
    ),
    Probe(
        "consumer.used_capsule",
        f"{SPEC}: a capsule named used_* is consumed already: refuse it",
        probe_used_capsule,
    ),
    Probe(
        "consumer.raw_capsule_twice",
        f"{SPEC}: a consumed capsule is renamed, so a second import is refused",
        probe_raw_capsule,
    ),
    *(
        Probe(f"consumer.malformed[{label}]", clause, _malformed(label), "consumer.malformed")
        for label in _MALFORMED
        for clause in [_MALFORMED_CLAUSE]
    ),
]
