# SPDX-License-Identifier: Apache-2.0
"""The producer side: ``__dlpack__``, ``__dlpack_device__`` and the C exchange table.

Every probe takes ``make`` (see `check_producer`), makes fresh objects with it,
exports them and reads what comes back with tensorbridge's own means: the capsule's
struct without consuming it (`_raw.read_capsule`, once the struct is known to be the
one the capsule's name says), its values through `tensorbridge.from_dlpack`, and the
reference count of the exported object to see whether the producer's deleter ran
(also when called on a thread without the GIL, `_raw.native_call`). A producer with
a pre-1.0 signature is asked again without ``max_version`` by the checks that are not
about the version, as consumers do.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import tensorbridge as tb
from tensorbridge import _core
from tensorbridge._devices import DLDeviceType
from tensorbridge._dtypes import dtype_from_code
from tensorbridge.testing._isolate import Probe
from tensorbridge.testing._raw import (
    DELETER_SECONDS,
    DEVICE_TYPES,
    KNOWN_FLAGS,
    MANDATORY,
    StructMismatch,
    capsule_name,
    capsule_pointer,
    find_table,
    native_call,
    peek_mismatch,
    read_capsule,
    table_from_py,
    table_stream,
    table_to_py,
)
from tensorbridge.testing._report import CheckResult, Status, worst

__all__ = ["CASES", "PROBES"]

_testing: Any = importlib.import_module("tensorbridge._testing")

SPEC = "DLPack Python spec"
HEADER = "dlpack.h 1.3"
ARRAY_API = "Array API"

READ_ONLY, IS_COPIED = 1, 2
_MAX_VERSION = (1, 3)
#: The most dimensions tensorbridge reads (DLPack itself sets no limit).
_MAX_NDIM = 64


def _grid(dtype: Any = np.float32) -> np.ndarray:
    return np.arange(12).reshape(3, 4).astype(dtype)


def _read_only() -> np.ndarray:
    a = _grid()
    a.flags.writeable = False
    return a


#: What ``make(case=...)`` is asked for: each returns the NumPy array the producer's
#: object must equal (values, dtype, shape; for "read-only" also not writable).
CASES: dict[str, Callable[[], np.ndarray]] = {
    "float32": _grid,
    "float64": lambda: _grid(np.float64),
    "float16": lambda: _grid(np.float16),
    "int8": lambda: _grid(np.int8),
    "int16": lambda: _grid(np.int16),
    "int32": lambda: _grid(np.int32),
    "int64": lambda: _grid(np.int64),
    "uint8": lambda: _grid(np.uint8),
    "uint16": lambda: _grid(np.uint16),
    "uint32": lambda: _grid(np.uint32),
    "uint64": lambda: _grid(np.uint64),
    "bool": lambda: _grid() % 3 == 0,
    "complex64": lambda: (_grid() + 1j * _grid()[::-1]).astype(np.complex64),
    "complex128": lambda: _grid() + 1j * _grid()[::-1],
    "0-d": lambda: np.array(7, dtype=np.float32),
    "size-0": lambda: np.zeros((0, 3), dtype=np.float32),
    "transposed": lambda: _grid().T,
    "step-sliced": lambda: np.arange(48, dtype=np.float32).reshape(6, 8)[::2, ::3],
    "negative-strides": lambda: _grid()[:, ::-1],
    "offset-view": lambda: _grid()[1:, 1:],
    "read-only": _read_only,
}


# ---------------------------------------------------------------------------------------
# Helpers


def _takes_case(make: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(make).parameters
    except (TypeError, ValueError):
        return False
    return "case" in params


def _make(make: Callable[..., Any], case: str | None = None) -> Any:
    """A fresh object; for a case, None when the library cannot make it."""
    if case is None:
        return make()
    try:
        obj = make(case=case)
    except NotImplementedError:
        return None
    return obj


def _cases(make: Callable[..., Any]) -> list[tuple[str | None, Any, np.ndarray | None]]:
    """(case, object, expected array) for every case make can make, or the one default."""
    if not _takes_case(make):
        return [(None, make(), None)]
    made: list[tuple[str | None, Any, np.ndarray | None]] = []
    for case, expected in CASES.items():
        obj = _make(make, case)
        if obj is not None:
            made.append((case, obj, expected()))
    return made


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _export(x: Any, **kwargs: Any) -> Any:
    return x.__dlpack__(**kwargs)


def _export_any(x: Any, **kwargs: Any) -> Any:
    """``x.__dlpack__(**kwargs)``, asked again without ``max_version`` when a pre-1.0
    signature refuses it (TypeError), as consumers do: for the checks that are not
    about the version."""
    try:
        return x.__dlpack__(**kwargs)
    except TypeError as exc:
        if "max_version" not in kwargs or "max_version" not in str(exc):
            raise
    kwargs.pop("max_version")
    return x.__dlpack__(**kwargs)


def _call(kwargs: dict[str, Any]) -> str:
    return "__dlpack__(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"


def _device(x: Any) -> tuple[int, int] | None:
    try:
        kind, index = x.__dlpack_device__()
        return int(kind), 0 if index is None else int(index)
    except Exception:
        return None


def _pointer(info: dict[str, Any]) -> int:
    return int(info["data"]) + int(info["byte_offset"])


def _values(capsule: Any) -> np.ndarray:
    """The values a capsule holds, copied out (consumes it)."""
    mismatch = peek_mismatch(capsule)
    if mismatch is not None:
        raise StructMismatch(mismatch)
    t = tb.from_dlpack(capsule)
    try:
        return np.array(t, copy=True)
    finally:
        del t


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))


def _is_cpu(x: Any) -> bool:
    dev = _device(x)
    return dev is not None and dev[0] == int(DLDeviceType.kDLCPU)


def _result(name: str, status: Status, detail: str, clause: str) -> list[CheckResult]:
    return [CheckResult(name, status, detail, clause)]


class _Tally:
    """Collects per-export verdicts of several checks, one result per check."""

    def __init__(self, checks: dict[str, str]) -> None:
        self.checks = checks
        self.entries: dict[str, list[tuple[Status, str]]] = {name: [] for name in checks}

    def add(self, check: str, status: Status, detail: str = "") -> None:
        self.entries[check].append((status, detail))

    def results(self) -> list[CheckResult]:
        out = []
        for name, clause in self.checks.items():
            entries = self.entries[name]
            if not entries:
                out.append(CheckResult(name, "skip", "nothing to check", clause))
                continue
            status = worst(s for s, _ in entries)
            if status == "pass":
                detail = f"{len(entries)} export(s) checked"
            else:
                bad = [d for s, d in entries if s == status]
                detail = "; ".join(bad[:6]) + (f" (+{len(bad) - 6} more)" if len(bad) > 6 else "")
            out.append(CheckResult(name, status, detail, clause))
        return out


#: The rule each probe checks: its result's name -> the clause of the standard.
_CLAUSES = {
    "producer.dlpack_device": f"{SPEC}: __dlpack_device__() -> (int enum, int)",
    "producer.max_version.none": (
        f"{SPEC}: __dlpack__() without max_version returns a legacy 'dltensor' capsule"
    ),
    "producer.max_version.1": (
        f"{SPEC}: __dlpack__(max_version=(1, x)) returns a 'dltensor_versioned' capsule"
    ),
    "producer.max_version.0": (
        f"{SPEC}: max_version with an older major: a legacy capsule or BufferError"
    ),
    "producer.stream": f"{SPEC}: __dlpack__(stream=None) (the only CPU value)",
    "producer.dl_device": (
        f"{ARRAY_API} 2023.12: __dlpack__(dl_device=its own device) exports there"
    ),
    "producer.copy.true": f"{ARRAY_API} 2023.12: __dlpack__(copy=True) copies and sets IS_COPIED",
    "producer.copy.false": (
        f"{ARRAY_API} 2023.12: __dlpack__(copy=False) never copies (BufferError instead)"
    ),
    "producer.fresh_capsule": (
        f"{SPEC}: each __dlpack__ call returns a new capsule, consumable on its own"
    ),
    "producer.struct": f"{HEADER}: DLTensor fields",
    "producer.read_only": f"{HEADER}: READ_ONLY set when the source is read-only (legacy: refuse)",
    "producer.deleter.unconsumed": (
        f"{SPEC}: an unconsumed capsule's destructor calls the deleter once"
    ),
    "producer.deleter.once": (
        f"{SPEC}: a consumed capsule's destructor does nothing; the deleter runs once"
    ),
    "producer.deleter.no_gil": (
        f"{HEADER}: the deleter may be called from any thread, without the GIL"
    ),
    "producer.c_exchange_api": (
        f"{HEADER}: type(x).__dlpack_c_exchange_api__ (a 'dlpack_exchange_api' capsule)"
    ),
}


def _rule(name: str) -> tuple[str, str]:
    """A probe's result name and its clause."""
    return name, _CLAUSES[name]


# ---------------------------------------------------------------------------------------
# Probes


def probe_device(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.dlpack_device")
    x = _make(make)
    try:
        answer = x.__dlpack_device__()
    except Exception as exc:
        return _result(name, "fail", f"__dlpack_device__() raised {_err(exc)}", clause)
    if not isinstance(answer, tuple) or len(answer) != 2:
        return _result(name, "fail", f"__dlpack_device__() returned {answer!r}", clause)
    kind, index = answer
    problems = []
    if not isinstance(kind, int) or isinstance(kind, bool) or int(kind) not in DEVICE_TYPES:
        problems.append(f"device type {kind!r} is not a DLDeviceType value")
    if not isinstance(index, int) or isinstance(index, bool):
        problems.append(f"device id {index!r} is not an int")
    if problems:
        return _result(name, "fail", f"returned {answer!r}: " + "; ".join(problems), clause)
    try:
        info = read_capsule(_export_any(x, max_version=_MAX_VERSION))
    except Exception:
        info = None
    if info is not None and "device" in info and info["device"] != (int(kind), int(index)):
        detail = f"returned {answer!r} but the capsule says {info['device']}"
        return _result(name, "fail", detail, clause)
    return _result(name, "pass", f"returned {answer!r}", clause)


def probe_legacy(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.max_version.none")
    x = _make(make)
    try:
        capsule = _export(x)
    except BufferError as exc:
        detail = f"__dlpack__() refused ({_err(exc)}): allowed, but pre-1.0 consumers lose it"
        return _result(name, "warn", detail, clause)
    except Exception as exc:
        return _result(name, "fail", f"__dlpack__() raised {_err(exc)}", clause)
    got = capsule_name(capsule)
    if got != "dltensor":
        return _result(name, "fail", f"__dlpack__() returned a capsule named {got!r}", clause)
    return _result(name, "pass", "legacy 'dltensor' capsule", clause)


def probe_versioned(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.max_version.1")
    problems: list[tuple[Status, str]] = []
    for request in ((1, 0), (1, 3), (1, 99)):
        x = _make(make)
        try:
            capsule = _export(x, max_version=request)
        except TypeError as exc:
            problems.append(("fail", f"max_version={request}: {_err(exc)}"))
            continue
        except Exception as exc:
            problems.append(("fail", f"max_version={request} raised {_err(exc)}"))
            continue
        got = capsule_name(capsule)
        if got == "dltensor":
            problems.append(("warn", f"max_version={request} gave a legacy capsule"))
            continue
        if got != "dltensor_versioned":
            problems.append(("fail", f"max_version={request} gave a capsule named {got!r}"))
            continue
        version = read_capsule(capsule)["version"]
        if version[0] != 1:
            problems.append(("fail", f"max_version={request} gave version {version}"))
    if not problems:
        return _result(name, "pass", "versioned capsules for (1, 0), (1, 3) and (1, 99)", clause)
    status = worst(s for s, _ in problems)
    return _result(name, status, "; ".join(d for s, d in problems if s == status), clause)


def probe_older_major(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.max_version.0")
    x = _make(make)
    try:
        capsule = _export(x, max_version=(0, 8))
    except BufferError:
        return _result(name, "pass", "BufferError (legacy export not supported)", clause)
    except Exception as exc:
        return _result(name, "fail", f"max_version=(0, 8) raised {_err(exc)}", clause)
    got = capsule_name(capsule)
    if got != "dltensor":
        return _result(name, "fail", f"max_version=(0, 8) gave a capsule named {got!r}", clause)
    return _result(name, "pass", "legacy capsule", clause)


def probe_stream(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.stream")
    x = _make(make)
    if not _is_cpu(x):
        return _result(name, "skip", "not a CPU producer", clause)
    try:
        _export_any(x, stream=None, max_version=_MAX_VERSION)
    except Exception as exc:
        return _result(name, "fail", f"stream=None raised {_err(exc)}", clause)
    return _result(name, "pass", "stream=None accepted", clause)


def probe_dl_device(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.dl_device")
    x = _make(make)
    dev = _device(x)
    if dev is None:
        return _result(name, "skip", "__dlpack_device__() gave no usable device", clause)
    kwargs = {"max_version": _MAX_VERSION, "dl_device": dev}
    try:
        info = read_capsule(_export_any(x, **kwargs))
    except Exception as exc:
        return _result(name, "fail", f"{_call(kwargs)} raised {_err(exc)}", clause)
    if info.get("device") != dev:
        detail = f"{_call(kwargs)} exported on {info.get('device')}"
        return _result(name, "fail", detail, clause)
    return _result(name, "pass", f"dl_device={dev} accepted", clause)


def probe_copy_true(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.copy.true")
    x = _make(make)
    if not _is_cpu(x):
        return _result(name, "skip", "not a CPU producer", clause)
    kwargs = {"max_version": _MAX_VERSION, "copy": True}
    try:
        capsule = _export_any(x, **kwargs)
        # made while the copy is alive, so that it cannot get the copy's address
        default = _export_any(x, max_version=_MAX_VERSION)
        original = read_capsule(default)
    except Exception as exc:
        return _result(name, "fail", f"{_call(kwargs)} raised {_err(exc)}", clause)
    info = read_capsule(capsule)
    problems = []
    if _pointer(info) == _pointer(original) and info.get("data"):
        problems.append("the export shares the object's memory")
    if info["flags"] is not None and not info["flags"] & IS_COPIED:
        problems.append(f"IS_COPIED is not set (flags={info['flags']})")
    try:
        same = _same(_values(capsule), _values(default))
    except Exception as exc:
        problems.append(f"the copy could not be read: {_err(exc)}")
    else:
        if not same:
            problems.append("the copy's values differ from the object's")
    if problems:
        return _result(name, "fail", f"{_call(kwargs)}: " + "; ".join(problems), clause)
    return _result(name, "pass", "new memory, IS_COPIED set, same values", clause)


def probe_copy_false(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.copy.false")
    x = _make(make)
    kwargs = {"max_version": _MAX_VERSION, "copy": False}
    try:
        capsule = _export_any(x, **kwargs)
        info = read_capsule(capsule)
    except BufferError as exc:
        return _result(name, "warn", f"{_call(kwargs)} refused: {_err(exc)}", clause)
    except Exception as exc:
        return _result(name, "fail", f"{_call(kwargs)} raised {_err(exc)}", clause)
    # The default export is made while the first capsule is alive: a copy freed
    # before it would leave its address free for the next copy, which would look
    # like shared memory.
    try:
        default = _export_any(x, max_version=_MAX_VERSION)
        original = read_capsule(default)
    except Exception as exc:
        detail = f"{_call(kwargs)} answered, the default export raised {_err(exc)}"
        return _result(name, "fail", detail, clause)
    problems = []
    if _pointer(info) != _pointer(original):
        problems.append("the export's memory differs from a default export's made meanwhile")
    if info["flags"] is not None and info["flags"] & IS_COPIED:
        problems.append("IS_COPIED is set")
    del capsule, default
    if problems:
        return _result(name, "fail", f"{_call(kwargs)}: " + "; ".join(problems), clause)
    return _result(name, "pass", "same memory, IS_COPIED clear", clause)


def probe_fresh(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.fresh_capsule")
    x = _make(make)
    first = _export_any(x, max_version=_MAX_VERSION)
    second = _export_any(x, max_version=_MAX_VERSION)
    if first is second:
        return _result(name, "fail", "two calls returned the same capsule object", clause)
    if not _is_cpu(x):
        return _result(name, "pass", "two capsule objects (values not read off the CPU)", clause)
    values = _values(first)
    del first
    gc.collect(0)
    try:
        again = _values(second)
    except Exception as exc:
        detail = f"the second capsule could not be read after the first was released: {_err(exc)}"
        return _result(name, "fail", detail, clause)
    if not _same(values, again):
        detail = "the second capsule's values changed once the first was consumed and released"
        return _result(name, "fail", detail, clause)
    return _result(name, "pass", "two capsules, each readable on its own", clause)


_STRUCT_CHECKS = {
    "producer.struct.kind": f"{SPEC}: 'dltensor' holds a DLManagedTensor, "
    "'dltensor_versioned' a DLManagedTensorVersioned",
    "producer.struct.version": f"{HEADER}: DLManagedTensorVersioned.version.major == 1",
    "producer.struct.ndim_shape": f"{HEADER}: ndim >= 0; shape has ndim entries >= 0",
    "producer.struct.dtype": f"{HEADER}: a known (code, bits, lanes) of the exported dtype",
    "producer.struct.device": f"{SPEC}: the capsule's device is __dlpack_device__()",
    "producer.struct.strides": f"{HEADER}: strides non-NULL when ndim != 0 (from 1.2)",
    "producer.struct.byte_offset": f"{HEADER}: data + byte_offset addresses element 0",
    "producer.struct.data": f"{HEADER}: data NULL only for size 0 (where it should be NULL)",
    "producer.struct.flags": f"{HEADER}: flags hold only READ_ONLY, IS_COPIED, PADDED",
    "producer.values": f"{SPEC}: the export describes the object's elements",
}


def _check_struct(
    tally: _Tally,
    label: str,
    info: dict[str, Any],
    device: tuple[int, int] | None,
    expected: np.ndarray | None,
) -> bool:
    """Check one export's fields; True when they are sound enough to read its values."""
    sound = True
    if info["version"] is not None:
        if info["version"][0] == 1:
            tally.add("producer.struct.version", "pass")
        else:
            tally.add("producer.struct.version", "fail", f"{label}: version {info['version']}")
            return False
        flags, version = info["flags"], tuple(info["version"])
        if flags & ~KNOWN_FLAGS:
            # A newer minor version may define new bits (the minor-version rule).
            status: Status = "fail" if version <= _MAX_VERSION else "warn"
            detail = f"{label}: flag bits {flags & ~KNOWN_FLAGS:#x} unknown in 1.3"
            if status == "warn":
                detail += f" (defined by its version {version[0]}.{version[1]}?)"
            tally.add("producer.struct.flags", status, detail)
        else:
            tally.add("producer.struct.flags", "pass")
    ndim, shape, strides = info["ndim"], info.get("shape"), info.get("strides")
    if ndim < 0:
        tally.add("producer.struct.ndim_shape", "fail", f"{label}: ndim {ndim}")
        return False
    if ndim > _MAX_NDIM:
        # DLPack sets no limit: tensorbridge, which reads the rest, does.
        detail = f"{label}: ndim {ndim}, more than tensorbridge reads ({_MAX_NDIM})"
        tally.add("producer.struct.ndim_shape", "warn", detail)
        return False
    if ndim and shape is None:
        tally.add("producer.struct.ndim_shape", "fail", f"{label}: NULL shape with ndim {ndim}")
        return False
    shape = shape or ()
    if any(n < 0 for n in shape):
        tally.add("producer.struct.ndim_shape", "fail", f"{label}: shape {shape}")
        sound = False
    elif expected is not None and tuple(shape) != expected.shape:
        detail = f"{label}: shape {tuple(shape)}, expected {expected.shape}"
        tally.add("producer.struct.ndim_shape", "fail", detail)
    else:
        tally.add("producer.struct.ndim_shape", "pass")
    code, bits, lanes = info["dtype"]
    dtype = dtype_from_code(code, bits)
    if dtype is None or lanes != 1:
        tally.add("producer.struct.dtype", "fail", f"{label}: unknown dtype {info['dtype']}")
        sound = False
    elif expected is not None and dtype.name != expected.dtype.name:
        detail = f"{label}: dtype {dtype.name}, expected {expected.dtype.name}"
        tally.add("producer.struct.dtype", "fail", detail)
    else:
        tally.add("producer.struct.dtype", "pass")
    if info["device"][0] not in DEVICE_TYPES:
        tally.add("producer.struct.device", "fail", f"{label}: unknown device {info['device']}")
        sound = False
    elif device is not None and info["device"] != device:
        detail = f"{label}: device {info['device']}, __dlpack_device__() {device}"
        tally.add("producer.struct.device", "fail", detail)
    else:
        tally.add("producer.struct.device", "pass")
    version = info["version"]
    if ndim and strides is None and version is not None and version >= (1, 2):
        detail = f"{label}: NULL strides in a {version[0]}.{version[1]} export"
        tally.add("producer.struct.strides", "fail", detail)
    else:
        tally.add("producer.struct.strides", "pass")
    offset, data = int(info["byte_offset"]), int(info["data"])
    if offset >= 1 << 56 or data + offset >= 1 << 64:
        tally.add("producer.struct.byte_offset", "fail", f"{label}: byte_offset {offset}")
        sound = False
    else:
        tally.add("producer.struct.byte_offset", "pass")
    size = int(np.prod(shape)) if ndim else 1
    if data == 0 and size > 0 and offset == 0:
        tally.add("producer.struct.data", "fail", f"{label}: NULL data for {size} element(s)")
        sound = False
    elif data != 0 and size == 0:
        tally.add("producer.struct.data", "warn", f"{label}: non-NULL data for size 0")
    else:
        tally.add("producer.struct.data", "pass")
    return sound


def probe_struct(make: Callable[..., Any]) -> list[CheckResult]:
    tally = _Tally(_STRUCT_CHECKS)
    for case, x, expected in _cases(make):
        device = _device(x)
        cpu = device is not None and device[0] == int(DLDeviceType.kDLCPU)
        seen: dict[str, np.ndarray] = {}
        for kind, kwargs in (("versioned", {"max_version": _MAX_VERSION}), ("legacy", {})):
            label = f"{case or 'make()'}, {kind}"
            try:
                capsule = _export(x, **kwargs)
            except Exception:
                continue  # graded by the keyword and read-only checks
            if capsule_name(capsule) not in ("dltensor", "dltensor_versioned"):
                continue
            mismatch = peek_mismatch(capsule)
            if mismatch is not None:
                tally.add("producer.struct.kind", "fail", f"{label}: {mismatch}")
                continue
            tally.add("producer.struct.kind", "pass")
            info = read_capsule(capsule)
            if not _check_struct(tally, label, info, device, expected) or not cpu:
                continue
            try:
                values = _values(capsule)
            except Exception as exc:
                tally.add("producer.values", "fail", f"{label}: unreadable: {_err(exc)}")
                continue
            if expected is not None and not _same(values, expected):
                tally.add("producer.values", "fail", f"{label}: {values.tolist()!r:.120}")
            else:
                tally.add("producer.values", "pass")
            seen[kind] = values
        if expected is None and len(seen) == 2 and not _same(seen["versioned"], seen["legacy"]):
            tally.add("producer.values", "fail", "the legacy and versioned exports differ")
    return tally.results()


def probe_read_only(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.read_only")
    if _takes_case(make):
        x = _make(make, "read-only")
        if x is None:
            return _result(name, "skip", "make(case='read-only') is not supported", clause)
    else:
        x = _make(make)
        if getattr(getattr(x, "flags", None), "writeable", None) is not False:
            detail = "make() gives no read-only object (take case= to be asked for one)"
            return _result(name, "skip", detail, clause)
    problems: list[tuple[Status, str]] = []
    try:
        info = read_capsule(_export_any(x, max_version=_MAX_VERSION))
    except Exception as exc:
        problems.append(("fail", f"versioned export raised {_err(exc)}"))
    else:
        if info["flags"] is None:
            problems.append(("warn", "versioned export asked, a legacy capsule given"))
        elif not info["flags"] & READ_ONLY:
            problems.append(("fail", f"versioned export without READ_ONLY (flags={info['flags']})"))
    try:
        capsule = _export_any(x)
    except BufferError:
        pass
    except Exception as exc:
        problems.append(("fail", f"legacy export raised {_err(exc)}, not BufferError"))
    else:
        if capsule_name(capsule) == "dltensor":
            problems.append(("warn", "exported as a legacy capsule, which cannot say read-only"))
    if not problems:
        return _result(name, "pass", "READ_ONLY set; legacy export refused", clause)
    status = worst(s for s, _ in problems)
    return _result(name, status, "; ".join(d for s, d in problems if s == status), clause)


def _references(x: Any, base: int = 0, expected: int | None = None) -> int:
    """References to ``x`` above ``base``; when they are not ``expected``, counted
    again after a full collection (an export whose owner sits in a reference cycle
    that outlived a young collection is only freed by a full one). Called from the
    probes themselves, so that every count sees the same frames."""
    gc.collect(0)
    held = sys.getrefcount(x) - base
    if expected is not None and held != expected:
        gc.collect()
        held = sys.getrefcount(x) - base
    return held


def probe_deleter_unconsumed(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.deleter.unconsumed")
    x = _make(make)
    base = _references(x)
    capsule = _export_any(x, max_version=_MAX_VERSION)
    if _references(x) <= base:
        detail = "the export holds no reference to the object, so its release cannot be seen"
        return _result(name, "skip", detail, clause)
    del capsule
    left = _references(x, base, 0)
    if left > 0:
        detail = "dropping an unconsumed capsule did not release the object (a leak)"
        return _result(name, "fail", detail, clause)
    if left < 0:
        detail = "dropping an unconsumed capsule released more than it held (deleter twice?)"
        return _result(name, "fail", detail, clause)
    return _result(name, "pass", "released when the capsule died", clause)


def probe_deleter_once(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.deleter.once")
    x = _make(make)
    base = _references(x)
    capsule = _export_any(x, max_version=_MAX_VERSION)
    held = _references(x) - base
    if held <= 0:
        detail = "the export holds no reference to the object, so its release cannot be seen"
        return _result(name, "skip", detail, clause)
    t = tb.from_dlpack(capsule)
    del capsule
    if _references(x, base, held) != held:
        detail = "the destructor of a consumed (used_*) capsule released the object"
        return _result(name, "fail", detail, clause)
    del t
    left = _references(x, base, 0)
    if left > 0:
        detail = "the consumer called the deleter but the object was not released (a leak)"
        return _result(name, "fail", detail, clause)
    if left < 0:
        return _result(name, "fail", "the object was released more than once", clause)
    return _result(name, "pass", "released once, by the consumer's deleter call", clause)


def probe_deleter_no_gil(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.deleter.no_gil")
    x = _make(make)
    base = _references(x)
    capsule = _export_any(x, max_version=_MAX_VERSION)
    kind = capsule_name(capsule)
    if kind not in ("dltensor", "dltensor_versioned") or peek_mismatch(capsule) is not None:
        return _result(name, "skip", f"no capsule to take ({kind!r})", clause)
    held = _references(x) - base
    address = capsule_pointer(capsule, kind.encode())
    if address is None:
        return _result(name, "skip", "the capsule holds a NULL pointer", clause)
    offset = 16 if kind == "dltensor_versioned" else 56  # DLManagedTensor(Versioned).deleter
    deleter = ctypes.c_void_p.from_address(address + offset).value
    if not deleter:
        return _result(name, "skip", "NULL deleter (nothing to call)", clause)
    _testing.set_capsule_name(capsule, "used_" + kind)  # consumed: its destructor leaves it
    problem = native_call(deleter, address)
    del capsule
    if problem == "hung":
        detail = (
            f"called on a thread without a Python thread state, the deleter did not "
            f"return within {DELETER_SECONDS:g} s (a deadlock)"
        )
        return _result(name, "fail", detail, clause)
    if problem is not None:
        return _result(name, "skip", problem, clause)
    if held > 0:
        left = _references(x, base, 0)
        if left > 0:
            detail = "called without the GIL, the deleter did not release the object"
            return _result(name, "fail", detail, clause)
        if left < 0:
            return _result(name, "fail", "the object was released more than once", clause)
        return _result(name, "pass", "called without the GIL: returned, object released", clause)
    return _result(name, "pass", "called without the GIL on a thread of its own: returned", clause)


def probe_exchange_api(make: Callable[..., Any]) -> list[CheckResult]:
    name, clause = _rule("producer.c_exchange_api")
    x = _make(make)
    api = getattr(type(x), "__dlpack_c_exchange_api__", None)
    if api is None:
        if getattr(type(x), "__c_dlpack_exchange_api__", None) is not None:
            detail = "only the DLPack 1.2 attribute __c_dlpack_exchange_api__"
            return _result(name, "warn", detail, clause)
        return _result(name, "skip", "the type has no C exchange table", clause)
    if not _core.is_capsule(api) or capsule_name(api) != "dlpack_exchange_api":
        detail = f"the attribute is {type(api).__name__} {capsule_name(api)!r}"
        return _result(name, "fail", detail, clause)
    address = capsule_pointer(api, b"dlpack_exchange_api")
    if address is None:
        return _result(name, "fail", "the capsule holds a NULL pointer", clause)
    table, seen = find_table(address)
    versions = " -> ".join(f"{major}.{minor}" for major, minor in seen)
    if table is None:
        detail = f"no major-1 table (versions {versions}, following prev_api)"
        return _result(name, "fail", detail, clause)
    missing = [f for f in MANDATORY if not getattr(table, f)]
    if missing:
        return _result(name, "fail", "NULL mandatory functions: " + ", ".join(missing), clause)
    problems = []
    try:
        want = read_capsule(_export_any(x, max_version=_MAX_VERSION))
        got = read_capsule(table_from_py(table, x))
        for key in ("ndim", "dtype", "device", "shape"):
            if got.get(key) != want.get(key):
                problems.append(f"from_py: {key} {got.get(key)} vs __dlpack__ {want.get(key)}")
        if _is_cpu(x):
            values = _values(_export_any(x, max_version=_MAX_VERSION))
            if not _same(_values(table_from_py(table, x)), values):
                problems.append("from_py: values differ from __dlpack__'s")
            back = table_to_py(table, _export_any(x, max_version=_MAX_VERSION))
            if not isinstance(back, type(x)):
                problems.append(f"to_py returned a {type(back).__name__}")
            elif not _same(_values(_export_any(back, max_version=_MAX_VERSION)), values):
                problems.append("to_py: the object's values differ")
            table_stream(table, int(DLDeviceType.kDLCPU), 0)
    except Exception as exc:
        problems.append(f"a round trip raised {_err(exc)}")
    if problems:
        return _result(name, "fail", "; ".join(problems), clause)
    return _result(name, "pass", f"version {versions}; round trips", clause)


PROBES = [
    Probe(name, _CLAUSES[name], probe)
    for name, probe in [
        ("producer.dlpack_device", probe_device),
        ("producer.max_version.none", probe_legacy),
        ("producer.max_version.1", probe_versioned),
        ("producer.max_version.0", probe_older_major),
        ("producer.stream", probe_stream),
        ("producer.dl_device", probe_dl_device),
        ("producer.copy.true", probe_copy_true),
        ("producer.copy.false", probe_copy_false),
        ("producer.fresh_capsule", probe_fresh),
        ("producer.struct", probe_struct),
        ("producer.read_only", probe_read_only),
        ("producer.deleter.unconsumed", probe_deleter_unconsumed),
        ("producer.deleter.once", probe_deleter_once),
        ("producer.deleter.no_gil", probe_deleter_no_gil),
        ("producer.c_exchange_api", probe_exchange_api),
    ]
]
