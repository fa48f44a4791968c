# SPDX-License-Identifier: Apache-2.0
"""The consumer side: crafted producers handed to the ``from_dlpack`` under test.

Each probe builds producers whose capsules tensorbridge crafts field by field
(`tensorbridge._testing.make_capsule`) over NumPy memory of its own, so it knows
the right values, can see whether the result shares that memory, and counts the
calls of every capsule's deleter. Whatever the consumer does, each capsule must end
with its deleter called exactly once: by the consumer (after renaming the capsule
``used_*``) or by the capsule's destructor (when it was left as it was).
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

import tensorbridge as tb
from tensorbridge._devices import DLDeviceType
from tensorbridge.testing._isolate import Probe
from tensorbridge.testing._report import CheckResult, Status, worst

__all__ = ["PROBES"]

_testing: Any = importlib.import_module("tensorbridge._testing")

SPEC = "DLPack Python spec"
HEADER = "dlpack.h 1.3"
ARRAY_API = "Array API"
PROTOCOL_CLAUSE = f"{SPEC}: rename the capsule used_* exactly when consuming it; deleter once"

_KEYWORDS = ("stream", "max_version", "dl_device", "copy")
#: Exceptions a consumer may refuse a tensor with (BufferError is the standard's choice).
_CLEAN = (BufferError, TypeError, ValueError)
_CODES = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}


def _dtype_triple(dtype: np.dtype[Any]) -> tuple[int, int, int]:
    return (_CODES[dtype.kind], dtype.itemsize * 8, 1)


def _craft(array: np.ndarray, *, versioned: bool, **overrides: Any) -> tuple[Any, Any]:
    """A crafted capsule describing ``array``'s memory (kept alive by the capsule)."""
    fields: dict[str, Any] = dict(
        shape=array.shape,
        strides=tuple(s // array.itemsize for s in array.strides),
        dtype=_dtype_triple(array.dtype),
        owner=array,
        versioned=versioned,
    )
    fields.update(overrides)
    data = fields.pop("data", array.__array_interface__["data"][0])
    made: tuple[Any, Any] = _testing.make_capsule(data, **fields)
    return made


class CraftedProducer:
    """Answers ``__dlpack__`` with crafted capsules and keeps them for the checks.

    ``mode``: "both" (versioned when asked with major 1, legacy otherwise),
    "legacy-only" (a pre-1.0 signature: only ``stream``), "legacy-answer" (takes the
    keywords, answers legacy), "versioned-only" (BufferError without max_version).
    """

    def __init__(
        self,
        array: np.ndarray,
        mode: str = "both",
        device: tuple[int, int] = (1, 0),
        **overrides: Any,
    ) -> None:
        self.array = array
        self.mode = mode
        self.device = device
        self.overrides = overrides
        self.calls: list[dict[str, Any]] = []
        self.made: list[tuple[Any, Any]] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        accepts = ("stream",) if self.mode == "legacy-only" else _KEYWORDS
        for key in kwargs:
            if key not in accepts:
                raise TypeError(f"__dlpack__() got an unexpected keyword argument {key!r}")
        max_version = kwargs.get("max_version")
        asked_versioned = max_version is not None and max_version[0] >= 1
        if self.mode == "versioned-only" and not asked_versioned:
            raise BufferError("this producer exports DLPack 1.x (versioned) capsules only")
        versioned = asked_versioned and self.mode in ("both", "versioned-only")
        overrides = dict(self.overrides)
        if not versioned:
            overrides.pop("flags", None)
            overrides.pop("version", None)
        made = _craft(self.array, versioned=versioned, device=self.device, **overrides)
        self.made.append(made)
        return made[0]


# One type per flavour: consumers may remember per type which call a producer takes.
class _Both(CraftedProducer):
    pass


class _LegacyOnly(CraftedProducer):
    pass


class _LegacyAnswer(CraftedProducer):
    pass


class _VersionedOnly(CraftedProducer):
    pass


_FLAVOURS: dict[str, type[CraftedProducer]] = {
    "both": _Both,
    "legacy-only": _LegacyOnly,
    "legacy-answer": _LegacyAnswer,
    "versioned-only": _VersionedOnly,
}


def _producer(array: np.ndarray, mode: str = "both", **kwargs: Any) -> CraftedProducer:
    return _FLAVOURS[mode](array, mode, **kwargs)


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:160]}"


def _grid(dtype: Any = np.float32) -> np.ndarray:
    return np.arange(12).reshape(3, 4).astype(dtype)


class _Outcome:
    """What one call of the consumer did, and the capsules' fate."""

    def __init__(self, result: Any, error: BaseException | None, made: list[Any]) -> None:
        self.result = result
        self.error = error
        self.made = made  # (capsule, counter) pairs
        # name and deleter calls of each capsule right after the call
        self.after = [(_testing.capsule_name(c), n.calls) for c, n in made]


def _call(from_dlpack: Callable[..., Any], arg: Any, made: list[Any]) -> _Outcome:
    try:
        result = from_dlpack(arg)
    except Exception as exc:
        return _Outcome(None, exc, made)
    return _Outcome(result, None, made)


def _read(result: Any) -> tuple[np.ndarray | None, int | None, tuple[int, int] | None, str]:
    """(values, address of element 0, device, note) of a consumer's result."""
    device = None
    if hasattr(result, "__dlpack_device__"):
        try:
            kind, index = result.__dlpack_device__()
            device = (int(kind), 0 if index is None else int(index))
        except Exception as exc:
            return None, None, None, f"its __dlpack_device__() raised {_err(exc)}"
    if device is not None and device[0] != int(DLDeviceType.kDLCPU):
        return None, None, device, ""
    try:
        t = tb.from_dlpack(result) if hasattr(result, "__dlpack__") else tb.asarray(result)
        return np.array(t, copy=True), t.data_ptr(), device, ""
    except Exception as exc:
        return None, None, device, f"the result could not be read back: {_err(exc)}"


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _protocol(outcome: _Outcome, *, shared: bool | None) -> list[tuple[Status, str]]:
    """Grade the capsules' fate; drops the result and the capsules."""
    problems: list[tuple[Status, str]] = []
    for name, calls in outcome.after:
        used = name is not None and name.startswith("used_")
        if calls and not used:
            problems.append(("fail", f"the deleter was called but the capsule kept name {name!r}"))
        if outcome.error is not None and used and calls == 0:
            problems.append(("fail", "refused the tensor but renamed its capsule (a leak)"))
        if outcome.error is None and not used and shared:
            problems.append(("fail", "shares the memory without consuming the capsule"))
    counters = [n for _, n in outcome.made]
    outcome.result = None
    outcome.made.clear()
    gc.collect(0)
    for counter in counters:
        if counter.calls != 1:
            problems.append(("fail", f"the deleter was called {counter.calls} times in all"))
    return problems


def _results(
    name: str, clause: str, verdicts: list[tuple[Status, str]], passed: str
) -> list[CheckResult]:
    if not verdicts:
        return [CheckResult(name, "pass", passed, clause)]
    status = worst(s for s, _ in verdicts)
    detail = "; ".join(d for s, d in verdicts if s == status)
    return [CheckResult(name, status, detail, clause)]


def _exchange(
    from_dlpack: Callable[..., Any],
    name: str,
    clause: str,
    producer: CraftedProducer,
    *,
    refusal: Status,
    refusal_note: str = "",
) -> list[CheckResult]:
    """Hand ``producer`` to the consumer; the result must hold the producer's values."""
    expected = producer.array
    outcome = _call(from_dlpack, producer, producer.made)
    shared = None
    if outcome.error is not None:
        clean = isinstance(outcome.error, _CLEAN)
        status: Status = refusal if clean else worst([refusal, "warn"])
        detail = f"refused: {_err(outcome.error)}"
        if status != "pass" and refusal_note:
            detail += f" {refusal_note}"
        if not clean:
            detail += " (BufferError expected)"
    else:
        values, address, _device, note = _read(outcome.result)
        if values is None:
            status, detail = "warn", note
        elif values.shape != expected.shape or not np.array_equal(values, expected):
            status, detail = "fail", f"wrong values: {values.tolist()!r:.100}"
        elif values.dtype != expected.dtype:
            status, detail = "fail", f"dtype {values.dtype}, expected {expected.dtype}"
        else:
            shared = address == _address(expected) and expected.size > 0
            status, detail = "pass", "right values, " + ("shared memory" if shared else "a copy")
    protocol = _protocol(outcome, shared=shared)
    return [
        CheckResult(name, status, detail, clause),
        *_results("consumer.capsule_protocol", PROTOCOL_CLAUSE, protocol, f"{name}: ok"),
    ]


# ---------------------------------------------------------------------------------------
# Probes


def probe_versioned(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{SPEC}: a producer answering both kinds of capsule"
    producer = _producer(_grid())
    results = _exchange(fn, "consumer.basic", clause, producer, refusal="fail")
    asked = [c.get("max_version") for c in producer.calls]
    clause = f"{SPEC}: consumers pass max_version=(1, x) and read versioned capsules"
    if any(v is not None and v[0] == 1 for v in asked):
        results.append(CheckResult("consumer.asks_versioned", "pass", f"asked {asked}", clause))
    else:
        detail = f"never passed max_version (calls: {producer.calls}): READ_ONLY cannot reach it"
        results.append(CheckResult("consumer.asks_versioned", "warn", detail, clause))
    return results


def probe_legacy_only(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{SPEC}: retry without max_version when a pre-1.0 producer raises TypeError"
    producer = _producer(_grid(), "legacy-only")
    return _exchange(fn, "consumer.legacy_producer", clause, producer, refusal="fail")


def probe_legacy_answer(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{SPEC}: a producer may answer max_version with a legacy capsule"
    producer = _producer(_grid(), "legacy-answer")
    return _exchange(fn, "consumer.legacy_answer", clause, producer, refusal="fail")


def probe_versioned_only(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{SPEC}: producers may refuse legacy export (BufferError) since 2025"
    producer = _producer(_grid(), "versioned-only")
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
    producer = _producer(_grid()[:, ::-1])
    return _exchange(fn, "consumer.negative_strides", clause, producer, refusal="pass")


def probe_zero_strides(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: zero strides (broadcast views) are legal; support or BufferError"
    array = np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4))
    producer = _producer(array, flags=1)
    return _exchange(fn, "consumer.zero_strides", clause, producer, refusal="pass")


def probe_byte_offset(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: element 0 is at data + byte_offset"
    base = np.arange(16, dtype=np.float32)
    view = base[4:]
    producer = _producer(view, data=_address(base), byte_offset=16, owner=base)
    return _exchange(fn, "consumer.byte_offset", clause, producer, refusal="warn")


def probe_null_strides(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: NULL strides (legacy, < 1.2) mean C-contiguous"
    producer = _producer(_grid(), "legacy-answer", strides=None)
    return _exchange(fn, "consumer.null_strides", clause, producer, refusal="fail")


def probe_size0(fn: Callable[..., Any]) -> list[CheckResult]:
    clause = f"{HEADER}: a size-0 tensor's data may be NULL"
    array = np.zeros((0, 3), dtype=np.float32)
    producer = _producer(array, data=0, strides=(3, 1))
    return _exchange(fn, "consumer.size0_null_data", clause, producer, refusal="fail")


_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


def probe_dtypes(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.dtypes"
    clause = f"{HEADER}: DLDataType codes and bits (refuse unknown ones with BufferError)"
    verdicts: list[tuple[Status, str]] = []
    protocol: list[CheckResult] = []
    refused = []
    for dtype in _DTYPES:
        array = _grid(dtype) if dtype != "bool" else _grid() % 3 == 0
        for result in _exchange(fn, f"{name}.{dtype}", clause, _producer(array), refusal="pass"):
            if result.name == "consumer.capsule_protocol":
                protocol.append(result)
            elif result.detail.startswith("refused"):
                refused.append(dtype)
                if result.status != "pass":
                    verdicts.append((result.status, f"{dtype}: {result.detail}"))
            elif result.status != "pass":
                verdicts.append((result.status, f"{dtype}: {result.detail}"))
    passed = f"{len(_DTYPES) - len(refused)} dtypes right" + (
        f"; refused {', '.join(refused)}" if refused else ""
    )
    return _results(name, clause, verdicts, passed) + protocol


def probe_read_only(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.read_only"
    clause = f"{ARRAY_API}: honour READ_ONLY, or ignore it if read-only cannot be expressed"
    source = _grid()
    producer = _producer(source, flags=1)
    outcome = _call(fn, producer, producer.made)
    verdicts: list[tuple[Status, str]] = []
    passed = ""
    if outcome.error is not None:
        verdicts.append(("warn", f"refused a read-only tensor: {_err(outcome.error)}"))
    elif not any(c.get("max_version") for c in producer.calls):
        passed = "got a legacy capsule (never asked max_version), so no flag to honour"
    else:
        verdicts.extend(_write_verdict(outcome.result, source))
        passed = "the result cannot be written"
    protocol = _protocol(outcome, shared=None)
    return _results(name, clause, verdicts, passed) + _results(
        "consumer.capsule_protocol", PROTOCOL_CLAUSE, protocol, f"{name}: ok"
    )


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
    source = _grid()
    producer = _producer(source, device=(int(DLDeviceType.kDLCUDA), 0))
    outcome = _call(fn, producer, producer.made)
    verdicts: list[tuple[Status, str]] = []
    passed = ""
    if outcome.error is not None:
        status: Status = "pass" if isinstance(outcome.error, _CLEAN) else "warn"
        passed = f"refused: {_err(outcome.error)}"
        if status != "pass":
            verdicts.append((status, passed + " (BufferError expected)"))
    else:
        device = None
        try:
            kind, index = outcome.result.__dlpack_device__()
            device = (int(kind), 0 if index is None else int(index))
        except Exception as exc:
            verdicts.append(("warn", f"accepted; its device cannot be read: {_err(exc)}"))
        if device is not None and device[0] != int(DLDeviceType.kDLCUDA):
            verdicts.append(("fail", f"accepted a CUDA tensor as device {device}"))
        passed = f"kept on device {device}"
    protocol = _protocol(outcome, shared=None)
    return _results(name, clause, verdicts, passed) + _results(
        "consumer.capsule_protocol", PROTOCOL_CLAUSE, protocol, f"{name}: ok"
    )


def probe_used_capsule(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.used_capsule"
    clause = f"{SPEC}: a capsule named used_* is consumed already: refuse it"
    verdicts: list[tuple[Status, str]] = []
    capsule, counter = _craft(_grid(), versioned=True)
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
    producer = _producer(_grid())
    original = producer.__dlpack__

    def used(**kwargs: Any) -> Any:
        cap = original(**kwargs)
        _testing.set_capsule_name(cap, "used_" + _testing.capsule_name(cap))
        return cap

    producer.__dlpack__ = used  # type: ignore[method-assign]
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
    source = _grid()
    capsule, counter = _craft(source, versioned=False)
    try:
        first = fn(capsule)
    except Exception as exc:
        detail = f"raw capsules are not taken ({_err(exc)}); not in the standard"
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
    gc.collect(0)
    if counter.calls != 1:
        verdicts.append(("fail", f"the deleter was called {counter.calls} times"))
    return _results(name, clause, verdicts, "renamed on import; a second import refused")


_MALFORMED: dict[str, dict[str, Any]] = {
    "ndim -1": dict(ndim=-1),
    "dtype code 99": dict(dtype=(99, 32, 1)),
    "float32 with 4 lanes": dict(dtype=(2, 32, 4)),
    "version 2.0": dict(version=(2, 0)),
}


def probe_malformed(fn: Callable[..., Any]) -> list[CheckResult]:
    name = "consumer.malformed"
    clause = f"{HEADER}: refuse what cannot be read (BufferError), never read it"
    verdicts: list[tuple[Status, str]] = []
    protocol: list[tuple[Status, str]] = []
    for label, fields in _MALFORMED.items():
        producer = _producer(_grid(), "versioned-only", **fields)
        outcome = _call(fn, producer, producer.made)
        if outcome.error is None:
            verdicts.append(("fail", f"{label}: accepted"))
        elif not isinstance(outcome.error, BufferError):
            verdicts.append(("warn", f"{label}: {_err(outcome.error)} (BufferError expected)"))
        protocol += [(s, f"{label}: {d}") for s, d in _protocol(outcome, shared=None)]
    return _results(name, clause, verdicts, f"{len(_MALFORMED)} refused") + _results(
        "consumer.capsule_protocol", PROTOCOL_CLAUSE, protocol, f"{name}: ok"
    )


PROBES = [
    Probe("consumer.basic", f"{SPEC}: from_dlpack", probe_versioned),
    Probe("consumer.legacy_producer", f"{SPEC}: legacy producers", probe_legacy_only),
    Probe("consumer.legacy_answer", f"{SPEC}: legacy answers", probe_legacy_answer),
    Probe("consumer.versioned_only", f"{SPEC}: versioned producers", probe_versioned_only),
    Probe("consumer.dtypes", f"{HEADER}: DLDataType", probe_dtypes),
    Probe("consumer.byte_offset", f"{HEADER}: byte_offset", probe_byte_offset),
    Probe("consumer.null_strides", f"{HEADER}: NULL strides", probe_null_strides),
    Probe("consumer.size0_null_data", f"{HEADER}: size-0 tensors", probe_size0),
    Probe("consumer.read_only", f"{ARRAY_API}: READ_ONLY", probe_read_only),
    Probe("consumer.negative_strides", f"{HEADER}: negative strides", probe_negative_strides),
    Probe("consumer.zero_strides", f"{HEADER}: zero strides", probe_zero_strides),
    Probe("consumer.device", f"{SPEC}: devices", probe_cuda),
    Probe("consumer.used_capsule", f"{SPEC}: used capsules", probe_used_capsule),
    Probe("consumer.raw_capsule_twice", f"{SPEC}: consumed capsules", probe_raw_capsule),
    Probe("consumer.malformed", f"{HEADER}: malformed structs", probe_malformed),
]
