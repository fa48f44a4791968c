# SPDX-License-Identifier: Apache-2.0
"""Running probes where a crash or a hang of the library under test cannot hurt.

A *probe* is one function of the checker (`Probe`) that exercises the library under
test and returns its `CheckResult` objects. When the library's callable can be
imported by its qualified name in another process (``module:qualname``), or is a
`Factory` (a function of that kind and its arguments, called there to build it), the
probes run in a child process (``python -c``, the same interpreter and
``sys.path``), one after the other; the child reports each probe's start and
results on a pipe of its own. A child that dies (a signal, an abort, an exit) fails
the probe it was running and a new child carries on with the next one; a probe that
gives no answer within ``timeout`` seconds fails as hung.
A callable that cannot be imported by name (a lambda, a closure, something of
``__main__``) is probed in this process, with a warning that it could not be isolated
(``isolate=True`` refuses it instead).

Every child runs in a session of its own, so that it and whatever processes the
library starts (a compile server, a pool of workers) are killed together, as one
process group, when it ends, hangs or the parent is interrupted. On Linux the parent
also adopts the orphans of its children's descendants while they run (a child
subreaper), so a helper that left the session (``setsid``: a daemon) is killed and
reaped when its child ends too (`_Adoption`, `_kill_orphans`). The parent never
waits for the end of a pipe (a helper holding it open would make it wait for ever):
it polls the pipes and the child's status, with the time limit. What a child reports
is untrusted: a line that is not a message it may send then fails the probe running
(`_ChildRun`), never the parent.

Several `Group` of probes (a library's producer and consumer checks) can share the
child processes (`run_groups`), so a framework that takes seconds to import is
imported once, not once per role.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import itertools
import json
import math
import numbers
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensorbridge.testing._report import STATUSES, CheckResult

__all__ = [
    "DEFAULT_TIMEOUT",
    "STARTUP_SECONDS",
    "Factory",
    "Group",
    "Probe",
    "check_timeout",
    "child_main",
    "qualified_name",
    "resolve",
    "run_groups",
    "run_probes",
]

#: Seconds a probe may take before it is reported as hung.
DEFAULT_TIMEOUT = 60.0

#: Seconds a child may take to start (Python, NumPy and the checker imported) before
#: its first message, whatever the probes' ``timeout``: a slow start under load is not
#: a hung probe.
STARTUP_SECONDS = 60.0

#: How often the parent looks whether the child ended while its pipes are still open
#: (a process the library started may hold them).
_POLL_SECONDS = 0.1

#: Seconds `cancel_all` gives to killing what the runs left that quit the children's
#: sessions (the command line exits right after it).
_CANCEL_SECONDS = 0.3


@dataclass
class _Live:
    """A child running probes: the environment entry that marks what its run starts
    (None: this process adopts no orphans), and whether those were killed already (by
    `cancel_all` or the child's thread, whichever came first: ``lock``)."""

    entry: bytes | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    swept: bool = False


#: The children running probes now (of every thread), none reaped yet (so no other
#: process has their ids), and whether `cancel_all` has stopped them (then no other
#: starts).
_LIVE: dict[subprocess.Popen[bytes], _Live] = {}
_LIVE_LOCK = threading.Lock()
_CANCELLED = threading.Event()


class Cancelled(Exception):
    """The checks were stopped by `cancel_all` (a Ctrl-C in another thread)."""


def cancel_all() -> int:
    """Kill every running child with its process group at once, and what their runs
    left that quit their sessions (for at most `_CANCEL_SECONDS`: a process exiting
    next runs no thread's cleanup), reaping none of the children, and start no other
    until `uncancel`; the number killed. For a Ctrl-C while other threads run checks:
    their checks raise `Cancelled`."""
    with _LIVE_LOCK:  # a child in _LIVE is not reaped: its ids are its own
        _CANCELLED.set()
        live = list(_LIVE.items())
        for proc, _ in live:
            _kill_group(proc)
    deadline = time.monotonic() + _CANCEL_SECONDS
    for proc, marked in live:
        _sweep(proc, marked, deadline)
    return len(live)


def uncancel() -> None:
    """Let children start again after `cancel_all`."""
    _CANCELLED.clear()


ISOLATION_CLAUSE = "tensorbridge.testing: probes that can crash run in a child process"


@dataclass(frozen=True)
class Probe:
    """One step of a check: ``func(target)`` exercises the library and returns its results.

    ``name`` identifies the probe (unique in its list) and names the result a crash or
    a hang of it is reported under, unless ``check`` names that result (several
    probes of one check: the detail then starts with the probe's name); ``clause`` is
    the part of the standard it tests.
    """

    name: str
    clause: str
    func: Callable[[Any], list[CheckResult]]
    check: str | None = None

    def failed(self, detail: str) -> CheckResult:
        """The result of this probe when it crashed or hung the process."""
        if self.check is None:
            return CheckResult(self.name, "fail", detail, self.clause)
        return CheckResult(self.check, "fail", f"{self.name}: {detail}", self.clause)


def resolve(name: str) -> Any:
    """The object ``"module:qualname"`` names."""
    module, sep, qualname = name.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"expected 'module:qualname'; got {name!r}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Factory:
    """A target built in each process that probes it: ``resolve(function)(*args)``.

    For what cannot be imported by name but can be rebuilt from text (the command
    line's expressions). ``args`` must be JSON values. Called, a Factory builds its
    target and calls it with the arguments given.
    """

    function: str
    args: tuple[Any, ...] = ()

    def build(self) -> Any:
        """The target: the function called with the arguments."""
        return resolve(self.function)(*self.args)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.build()(*args, **kwargs)


def qualified_name(obj: Any) -> str | None:
    """``"module:qualname"`` under which another process finds ``obj``, or None.

    A string is taken as such a name already."""
    if isinstance(obj, str):
        return obj
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module == "__main__" or "<" in qualname:
        return None
    name = f"{module}:{qualname}"
    try:
        found = resolve(name)
    except Exception:
        return None
    return name if found is obj or found == obj else None


def _spec(target: Any) -> Any:
    """How a child process finds the target (None: it cannot)."""
    if isinstance(target, Factory):
        return {"function": target.function, "args": list(target.args)}
    return qualified_name(target)


def _build(spec: Any) -> Any:
    if isinstance(spec, dict):
        return Factory(spec["function"], tuple(spec["args"])).build()
    return resolve(spec)


def _here(target: Any) -> Any:
    """The target, in this process."""
    if isinstance(target, Factory):
        return target.build()
    return resolve(target) if isinstance(target, str) else target


@dataclass(frozen=True)
class Group:
    """Probes of one role (``kind``: "producer", "consumer") run on one target.

    ``module`` is the module whose ``PROBES`` list holds ``probes`` (the child
    imports it to find them)."""

    kind: str
    module: str
    probes: Sequence[Probe]
    target: Any


#: Lines of a dying child's stderr that say why (kept even when more output follows).
_WHY = re.compile(
    r"what\(\):|terminate called|Fatal Python error|Check failed|\w(Error|Exception): "
)


def _crash_detail(returncode: int, stderr: str) -> str:
    if returncode < 0:
        try:
            what = signal.Signals(-returncode).name
        except ValueError:
            what = f"signal {-returncode}"
        text = f"crashed the process ({what})"
    else:
        text = f"ended the process (exit status {returncode})"
    lines = [line.strip() for line in stderr.strip().splitlines()]
    why = [line for line in lines if _WHY.search(line)][:3]
    if why:
        return f"{text}: {' '.join(why)[:300]}"
    tail = " ".join(lines[-3:])
    if tail:
        text += f"; last output: {tail[-300:]}"
    return text


def _call_probe(probe: Probe, target: Any) -> list[CheckResult]:
    try:
        return list(probe.func(target))
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return [
            probe.failed(
                f"the probe raised {type(exc).__name__}: {exc} "
                f"(at {os.path.basename(where.filename)}:{where.lineno})"
            )
        ]


class _Output:
    """What the child wrote on fds 1 and 2: the first five lines that say why it died
    (a C++ exception's message comes before its stack frames), then the last 20."""

    def __init__(self) -> None:
        self.why: list[str] = []
        self.tail: deque[str] = deque(maxlen=20)
        self.partial = b""

    def feed(self, data: bytes) -> None:
        self.partial += data
        *lines, self.partial = self.partial.split(b"\n")
        if len(self.partial) > 1 << 16:  # a line without end: keep its start
            lines.append(self.partial[:4096])
            self.partial = b""
        for raw in lines:
            line = raw.decode(errors="replace") + "\n"
            if len(self.why) < 5 and _WHY.search(line):
                self.why.append(line)
            else:
                self.tail.append(line)

    def text(self) -> str:
        return "".join([*self.why, *self.tail, self.partial.decode(errors="replace")])


#: A probe in a run of several groups: (group index, probe name).
_Key = tuple[int, str]


#: The longest line the parent reads from a child's report pipe: a message is one line
#: of JSON, of a few hundred bytes as a rule. A child that sends more without an end
#: of line is stopped, so no more of it is held.
_MESSAGE_BYTES = 1 << 20

#: The kinds of message a child sends, each the one key of its kind in a JSON object.
_KINDS = ("building", "built", "unbuilt", "start", "result", "done", "end")

#: The fields of a result message, all strings.
_RESULT_FIELDS = ("name", "status", "detail", "clause")

#: The most results a child may send for one probe, and in all (bytes of their lines):
#: a probe makes a few dozen short ones; more is a library writing on the pipe.
_PROBE_RESULTS = 64
_RESULT_BYTES = 4 << 20


class _Garbled(Exception):
    """A report line that is not a message the child may send then (says why)."""


def _expect(condition: bool, why: str) -> None:
    if not condition:
        raise _Garbled(why)


def _parse(line: bytes) -> tuple[str, dict[str, Any]]:
    """The kind of message a report line is, and the message."""
    try:
        message = json.loads(line)
    except ValueError:
        raise _Garbled("is not JSON") from None
    except RecursionError:
        raise _Garbled("nests too deeply to be read") from None
    _expect(isinstance(message, dict), "is not a JSON object")
    kinds = [kind for kind in _KINDS if kind in message]
    _expect(len(kinds) == 1, f"is no message of the checker (one key of {', '.join(_KINDS)})")
    return kinds[0], message


def _result(fields: Any) -> CheckResult:
    """The result a message holds."""
    _expect(
        isinstance(fields, dict)
        and sorted(fields) == sorted(_RESULT_FIELDS)
        and all(isinstance(value, str) for value in fields.values()),
        f"holds no result (an object of the strings {', '.join(_RESULT_FIELDS)})",
    )
    _expect(
        fields["status"] in STATUSES,
        f"holds a result of no known status ({fields['status'][:80]!r})",
    )
    printable = {name: _printable(value) for name, value in fields.items()}
    return CheckResult(**printable)  # type: ignore[arg-type]  # (the status: checked)


def _printable(text: str) -> str:
    """text with lone surrogates (JSON's "\\ud800", an undecodable path through
    os.fsdecode) escaped: printing them raised UnicodeEncodeError in the parent."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass
class _ChildRun:
    """What one child process did before it ended.

    Its report lines are untrusted (the library under test runs in the child, and may
    write on any descriptor): `feed` cuts them in linear time and holds at most
    `_MESSAGE_BYTES` of a line, and a line that is not JSON, names a group or probe
    the child was not given, or comes out of turn (a probe started twice, a result
    while no probe runs) stops the child as garbled: the probe running fails, or
    between probes the one before, or the run (`run_groups`). A child starts each
    group and probe once, so its messages cannot restart the time limit for ever."""

    #: the probes the child was given
    todo: frozenset[_Key] = frozenset()
    results: list[tuple[int, CheckResult]] = field(default_factory=list)
    finished: list[_Key] = field(default_factory=list)
    #: groups whose target could not be built, with why
    unbuilt: dict[int, str] = field(default_factory=dict)
    #: the probe running when it died or hung (None: between probes)
    running: _Key | None = None
    #: the group whose target was being built when it died or hung (None: none)
    building: int | None = None
    #: the groups and probes it started, and whether it sent its end message
    built: set[int] = field(default_factory=set)
    started: set[_Key] = field(default_factory=set)
    ended: bool = False
    #: the child's return code (None: it was killed, as hung or garbled)
    returncode: int | None = None
    #: why it was killed when it sent something that is not a message
    garbled: str | None = None
    #: seconds it was given for the step it did not finish (when hung)
    limit: float = 0.0
    stderr: str = ""
    #: the start of a report line whose end has not come yet, and its length
    partial: list[bytes] = field(default_factory=list)
    partial_bytes: int = 0
    #: the results of the probe running, and the bytes of every result line
    probe_results: int = 0
    result_bytes: int = 0

    def feed(self, data: bytes) -> bool:
        """Take the messages ``data`` ends (with what came before it); True when one
        starts a new time limit."""
        if self.garbled is not None:
            return False
        *lines, rest = data.split(b"\n")
        if lines:
            lines[0] = b"".join([*self.partial, lines[0]])
            self.partial, self.partial_bytes = [], 0
        fresh = False
        for line in lines:
            fresh = self.take(line) or fresh
        self.partial.append(rest)
        self.partial_bytes += len(rest)
        if self.partial_bytes > _MESSAGE_BYTES and self.garbled is None:
            self.garbled = (
                f"the child sent more than {_MESSAGE_BYTES >> 20} MiB on its report pipe "
                f"without an end of line (a message is a short line of JSON): "
                f"{b''.join(self.partial)[:80]!r}"
            )
        return fresh

    def take(self, line: bytes) -> bool:
        """Record one message of the child; True when it starts a new time limit."""
        if self.garbled is not None:
            return False
        try:
            kind, message = _parse(line)
            if kind == "result":
                self.result_bytes += len(line)
            return self._take(kind, message)
        except _Garbled as exc:
            self.garbled = f"the child sent a report line that {exc}: {line[:80]!r}"
            return False

    def _take(self, kind: str, message: dict[str, Any]) -> bool:
        _expect(not self.ended, "comes after its end message")
        value = message[kind]
        idle = self.running is None and self.building is None
        if kind == "building":
            _expect(idle and self._group(value) not in self.built, "builds a target out of turn")
            self.building = value
            self.built.add(value)
        elif kind == "built":
            _expect(self._group(value) == self.building, "names a target not being built")
            self.building = None
        elif kind == "unbuilt":
            _expect(self._group(value) == self.building, "names a target not being built")
            _expect(isinstance(message.get("detail"), str), "gives no detail (a string)")
            self.unbuilt[value] = _printable(message["detail"])
        elif kind == "start":
            key = self._probe(value)
            _expect(
                idle and key not in self.started and key[0] in self.built,
                f"starts the probe {key[1]!r} out of turn",
            )
            self.running = key
            self.started.add(key)
            self.probe_results = 0
        elif kind == "result":
            group = self._group(message.get("group"))
            _expect(
                self.running is not None and self.running[0] == group,
                "is a result of no running probe",
            )
            self.probe_results += 1
            _expect(
                self.probe_results <= _PROBE_RESULTS and self.result_bytes <= _RESULT_BYTES,
                f"is a result past the most a child sends ({_PROBE_RESULTS} a probe, "
                f"{_RESULT_BYTES >> 20} MiB in all)",
            )
            self.results.append((group, _result(value)))
        elif kind == "done":
            key = self._probe(value)
            _expect(key == self.running, "ends a probe that is not running")
            self.finished.append(key)
            self.running = None
        else:
            _expect(idle, "ends the run while a probe or a build runs")
            self.ended = True
        return kind in ("building", "start", "end")

    def _group(self, value: Any) -> int:
        """The group a message names: one the child was given probes of."""
        _expect(
            type(value) is int and any(index == value for index, _ in self.todo),
            "names no group it was given",
        )
        return int(value)

    def _probe(self, value: Any) -> _Key:
        """The probe a message names (``[group, name]``): one the child was given."""
        # Typed before the look-up: a list or an object there is unhashable.
        _expect(
            isinstance(value, list)
            and len(value) == 2
            and type(value[0]) is int
            and type(value[1]) is str
            and (value[0], value[1]) in self.todo,
            "names no probe it was given",
        )
        return (value[0], value[1])

    def detail(self) -> str:
        """Why the child ended before finishing its probes."""
        if self.garbled is not None:
            return self.garbled
        if self.returncode is None:
            return f"hung: no answer within {self.limit:g} s (the process was killed)"
        return _crash_detail(self.returncode, self.stderr)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child and every process still in its process group; reap none. The
    caller makes sure the child is not reaped yet (no other process has its ids)."""
    if proc.returncode is not None:  # reaped (without os.waitid): its ids are free
        return
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    # Not proc.kill(): it reaps a child that ended, freeing its ids.
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)


def _status(pid: int) -> int | None:
    """The return code of a child that ended, left unreaped (None: it runs), so that
    its ids stay its own until the processes its run left are killed."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped by another (a host calling os.wait())
        return -signal.SIGKILL
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _ended(pid: int, deadline: float | None) -> bool:
    """Wait, until ``deadline`` (None: for ever), for a child to end, without reaping
    it; whether it did."""
    if deadline is None:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        return True
    pause = 0.001
    while _status(pid) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    return True


def _child_status(proc: subprocess.Popen[bytes]) -> int | None:
    """`_status` of the child; where os.waitid is missing (macOS before Python
    3.13), Popen.poll, which reaps it (no orphans are adopted there to sweep)."""
    return _status(proc.pid) if _PEEKS else proc.poll()


def _child_ended(proc: subprocess.Popen[bytes], deadline: float | None) -> bool:
    """`_ended` of the child (Popen.wait, which reaps, without os.waitid)."""
    if _PEEKS:
        return _ended(proc.pid, deadline)
    try:
        proc.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        return False
    return True


#: Whether a child's end can be seen without reaping it (os.waitid with WNOWAIT).
_PEEKS = hasattr(os, "waitid") and hasattr(os, "WNOWAIT")


def _end_child(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child, its process group and what its run left (`_sweep`), then reap
    it: the child last, out of `_LIVE` first (so `cancel_all` signals no other
    process that has its id)."""
    try:
        _kill_group(proc)
        _child_ended(proc, None)
        _sweep(proc, _LIVE[proc], None)
    finally:
        with _LIVE_LOCK:
            _LIVE.pop(proc, None)
        proc.wait()


def _sweep(proc: subprocess.Popen[bytes], live: _Live, deadline: float | None) -> None:
    """Kill what the run of the child ``proc`` (ended or killed) left, until
    ``deadline`` (None: for ever): in the first of the threads that try (its own,
    `cancel_all`'s) that gets to the end."""
    if live.entry is None:
        return
    timeout = -1 if deadline is None else max(deadline - time.monotonic(), 0)
    if not live.lock.acquire(timeout=timeout):
        return
    try:
        if not live.swept and _ended(proc.pid, deadline):
            live.swept = _kill_orphans(proc.pid, live.entry, deadline)
    finally:
        live.lock.release()


#: prctl(2) options (Linux 3.4+): make the calling process the parent of its
#: descendants' orphans (a "child subreaper") instead of PID 1; read whether it is one.
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


class _Adoption:
    """While open, this process adopts the orphans of its descendants (Linux: a child
    subreaper; entering says whether it does), so that what a child's helpers left
    when they quit its session (``setsid``: daemons, compile servers) can be found and
    killed when the child ends. The setting is the process's, not the thread's: it is
    made when the first of the threads running children enters, and put back as it
    was when the last leaves (a host application's orphans go to PID 1 again)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        #: the setting before the first holder (None: no subreaper here)
        self.before: int | None = None

    def __enter__(self) -> bool:
        with self.lock:
            if self.holders == 0:
                self.before = _become_subreaper()
            self.holders += 1
            return self.before is not None

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.holders -= 1
            if self.holders == 0 and self.before == 0:
                _prctl(_PR_SET_CHILD_SUBREAPER, 0)


_ADOPTION = _Adoption()


def _forked() -> None:
    """In a process forked from this one: no child of its own runs, and it is no
    subreaper (the kernel does not pass that on), whatever the threads of its parent
    were doing (their locks may have been held)."""
    global _ADOPTION, _LIVE, _LIVE_LOCK, _CANCELLED
    _ADOPTION = _Adoption()
    _LIVE = {}
    _LIVE_LOCK = threading.Lock()
    _CANCELLED = threading.Event()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _prctl(option: int, arg: int) -> int:
    """prctl(2): 0 when done (-1: refused, or no prctl here)."""
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return -1
    prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    return int(prctl(option, arg, 0, 0, 0))


def _become_subreaper() -> int | None:
    """Make this process a child subreaper; its setting before (None: it cannot be)."""
    if not sys.platform.startswith("linux"):
        return None
    before = ctypes.c_int()
    if _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.addressof(before)) != 0:
        return None
    if _prctl(_PR_SET_CHILD_SUBREAPER, 1) != 0:
        return None
    return before.value


#: The environment variable a child (and so every process it starts, unless given
#: another environment) carries, whose value names its run (`_kill_orphans`).
_RUN_VARIABLE = "TENSORBRIDGE_CHECK_RUN"
_RUNS = itertools.count()


def _stat(pid: int) -> list[bytes]:
    """The fields of /proc/<pid>/stat after the command's name (state, ppid, pgrp,
    session...); none when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()
    except OSError:
        return []


def _carries(pid: int, entry: bytes) -> bool:
    """Whether the environment the process started with holds ``entry``."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:  # gone, a zombie (an empty file), or another user's
        return False


def _children() -> list[tuple[int, int, int]]:
    """This process's children (its own and those it adopted): the pid, process
    group and session of each."""
    me = os.getpid()
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    found = []
    for pid in map(int, names):
        fields = _stat(pid)
        if len(fields) >= 4 and int(fields[1]) == me:
            found.append((pid, int(fields[2]), int(fields[3])))
    return found


def _left_by(child: int, entry: bytes, marks: set[int]) -> list[int]:
    """The processes this one adopted from the run whose ``child`` is gone: those
    whose environment holds the run's ``entry`` (inherited even by the helpers that
    quit the child's session), and those in a session or process group of the run,
    or leading one (a zombie whose daemon lives on). ``marks`` holds the run's ids
    (the child's, then those of each process found) from round to round: an id is no
    other process's while one of its processes is left, and a host application's
    own processes carry none of these marks."""
    children = [c for c in _children() if c[0] != child]
    found = set()
    for pid, group, session in children:
        if _carries(pid, entry):
            found.add(pid)
            marks.update((group, session))
    grew = True
    while grew:
        grew = False
        for pid, group, session in children:
            if pid not in found and marks & {pid, group, session}:
                found.add(pid)
                marks.update((group, session))
                grew = True
    return sorted(found)


def _kill_orphans(child: int, entry: bytes, deadline: float | None) -> bool:
    """Kill the processes a run left (`_left_by`), round after round (the orphans of
    those killed are adopted in turn), until ``deadline`` (None: for ever); whether
    none is left. Nothing is reaped before the end (a zombie keeps its ids, which no
    new process then takes and `_left_by` matches): then those killed are, unless
    the deadline came first (the child is the caller's to reap). One this process may
    not signal (it changed its user) is spared."""
    handled: set[int] = set()
    killed: list[int] = []
    marks = {child}
    while pids := [pid for pid in _left_by(child, entry, marks) if pid not in handled]:
        handled.update(pids)
        for pid in pids:
            # A pid gone (another reaped it) or spared is not waited for.
            with contextlib.suppress(PermissionError, ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        if not all(_ended(pid, deadline) for pid in killed):
            return False
    for pid in killed:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return True


def _read(fd: int) -> bytes:
    """What a readable pipe holds (b"": its end)."""
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return b""


def _watch(
    proc: subprocess.Popen[bytes], report: int, request: bytes, todo: Sequence[_Key], timeout: float
) -> _ChildRun:
    """Send the request, then follow the child's messages until it ends, hangs past
    its time limit or sends garbage (then the caller kills it)."""
    assert proc.stdin is not None and proc.stdout is not None
    run = _ChildRun(frozenset(todo))
    output = _Output()
    stdin, out = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(stdin, False)
    poller = select.poll()
    poller.register(stdin, select.POLLOUT)
    for fd in (out, report):
        poller.register(fd, select.POLLIN)
    reading = {out, report}
    pending = memoryview(request)
    run.limit = max(timeout, STARTUP_SECONDS)
    deadline = time.monotonic() + run.limit

    def consume(fd: int) -> None:
        nonlocal deadline
        data = _read(fd)
        if not data:
            poller.unregister(fd)
            reading.discard(fd)
        elif fd == out:
            output.feed(data)
        elif run.feed(data):
            run.limit = timeout
            deadline = time.monotonic() + timeout

    while run.garbled is None:
        code = _child_status(proc)
        if code is not None:
            # What it wrote before it ended is in the pipes; a helper of the library
            # may go on writing, so the drain is bounded.
            for _ in range(64):
                ready = [fd for fd, _ in poller.poll(0) if fd in reading]
                if not ready:
                    break
                for fd in ready:
                    consume(fd)
            if run.garbled is None:
                run.returncode = code
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break  # hung
        if not reading and not pending:  # both pipes ended: the child is exiting
            _child_ended(proc, time.monotonic() + min(left, _POLL_SECONDS))
            continue
        for fd, _ in poller.poll(min(left, _POLL_SECONDS) * 1000):
            if fd == stdin:
                try:
                    pending = pending[os.write(stdin, pending) :]
                except BlockingIOError:
                    continue
                except OSError:  # it died before reading: its status says how
                    pending = pending[:0]
                if not pending:
                    poller.unregister(stdin)
                    proc.stdin.close()
            elif fd in reading:
                consume(fd)
    run.stderr = output.text()
    return run


def _run_child(groups: Sequence[Group], todo: Sequence[_Key], timeout: float) -> _ChildRun:
    """Run the probes ``todo`` in one child until it finishes, dies or hangs; the
    child and its process group are gone when this returns or raises."""
    request = json.dumps(
        {
            "groups": [{"module": g.module, "target": _spec(g.target)} for g in groups],
            "todo": [list(key) for key in todo],
            "path": sys.path,
            "parent": os.getpid(),
        }
    ).encode()
    run = f"{os.getpid()}.{next(_RUNS)}"
    with _ADOPTION as adopting:
        proc, report = _start_child(run, adopting)
        try:
            return _watch(proc, report, request, todo, timeout)
        finally:
            try:
                _end_child(proc)
            finally:  # even when a Ctrl-C stops the waits
                os.close(report)
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        with contextlib.suppress(OSError):
                            stream.close()


def _start_child(run: str, adopting: bool) -> tuple[subprocess.Popen[bytes], int]:
    """A child that runs probes (`child_main`), marked as of ``run`` in its
    environment, in a session of its own (in `_LIVE`; ``adopting``: its run's orphans
    come to this process); the end of its report pipe we read."""
    report_read, report_write = os.pipe()
    # ``-c`` puts the current directory first on sys.path, where a file of it would
    # shadow the standard library (and the frameworks): -P keeps it off (3.11+), and
    # before 3.11 the code drops it before any import. The parent's sys.path is the
    # child's from then on (`child_main`).
    code = "from tensorbridge.testing._isolate import child_main; child_main()"
    if sys.version_info >= (3, 11):
        command = [sys.executable, "-P", "-c", code]
    else:
        command = [sys.executable, "-c", "import sys; del sys.path[0]; " + code]
    try:
        with _LIVE_LOCK:
            if _CANCELLED.is_set():
                raise Cancelled("the checks were stopped")
            proc = subprocess.Popen(
                [*command, str(report_write)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,  # the library's output, for a crash's detail
                pass_fds=(report_write,),
                start_new_session=True,
                env={**os.environ, _RUN_VARIABLE: run},
            )
            _LIVE[proc] = _Live(f"{_RUN_VARIABLE}={run}".encode() if adopting else None)
    except BaseException:
        os.close(report_read)
        raise
    finally:
        os.close(report_write)
    return proc, report_read


def _isolation_warning(kind: str, target: Any) -> CheckResult:
    if target is None:
        detail = "isolation turned off: the probes ran in this process, with no time limit"
    else:
        detail = (
            f"{target!r} cannot be imported by name in another process (a lambda, a "
            "closure, or defined in __main__), so the probes ran in this process, with "
            "no time limit: a crash would have ended it"
        )
    return CheckResult(f"{kind}.isolation", "warn", detail, ISOLATION_CLAUSE)


def _run_here(groups: Sequence[Group], isolate: bool | None) -> list[list[CheckResult]]:
    out = []
    for group in groups:
        named = isolate is False or _spec(group.target) is not None
        results = [_isolation_warning(group.kind, None if named else group.target)]
        obj = _here(group.target)
        for probe in group.probes:
            results.extend(_call_probe(probe, obj))
            gc.collect(0)  # the checks that count releases collect fully themselves
        out.append(results)
    return out


def check_timeout(timeout: Any) -> float:
    """``timeout`` as seconds, refused unless a positive, finite number (before any
    child starts: the limit is what bounds every probe)."""
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(
            f"timeout must be a number of seconds (int or float); got "
            f"{type(timeout).__name__} {timeout!r}"
        )
    seconds = float(timeout)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"timeout must be a positive, finite number of seconds (the time limit of "
            f"each probe); got {timeout!r}"
        )
    return seconds


def run_groups(
    groups: Sequence[Group], *, isolate: bool | None = None, timeout: float = DEFAULT_TIMEOUT
) -> list[list[CheckResult]]:
    """Run every group's probes on its target; the results of each group.

    ``isolate``: None runs them in child processes (shared by the groups) when every
    target can be found there by name, in this process (with a warning) otherwise;
    True runs them in child processes or raises `ValueError` (a target that cannot
    be found by name), False runs them in this process. ``timeout``: seconds each
    probe may take (a positive, finite number)."""
    timeout = check_timeout(timeout)
    if isolate not in (None, True, False):
        raise TypeError(f"isolate must be None, True or False; got {isolate!r}")
    unnamed = [g.target for g in groups if _spec(g.target) is None]
    if isolate is True and unnamed:
        raise ValueError(
            f"isolate=True needs a target another process can find by name (a function "
            f"of a module, a 'module:qualname' string, or a Factory); {unnamed[0]!r} has "
            "none (a lambda, a closure, or defined in __main__): define it at the top "
            "level of a module, or pass isolate=None to run it in this process"
        )
    if isolate is False or unnamed:
        return _run_here(groups, isolate)
    by_key = {(i, p.name): p for i, g in enumerate(groups) for p in g.probes}
    todo: list[_Key] = [(i, p.name) for i, g in enumerate(groups) for p in g.probes]
    results: list[list[CheckResult]] = [[] for _ in groups]
    while todo:
        run = _run_child(groups, todo, timeout)
        for index, result in run.results:
            results[index].append(result)
        for index, detail in run.unbuilt.items():
            kind = groups[index].kind
            detail = f"could not build the target: {detail}"
            results[index].append(CheckResult(f"{kind}.start", "fail", detail, ISOLATION_CLAUSE))
        done = set(run.finished)
        remaining = [k for k in todo if k not in done and k[0] not in run.unbuilt]
        if not remaining:
            if run.returncode != 0:
                index = run.finished[-1][0] if run.finished else 0
                if run.garbled is not None:
                    detail = run.garbled
                elif run.returncode is None:
                    detail = "the process did not exit within the time limit after the last probe"
                else:
                    detail = f"{run.detail()} after the last probe (at exit)"
                kind = groups[index].kind
                results[index].append(
                    CheckResult(f"{kind}.clean_exit", "fail", detail, ISOLATION_CLAUSE)
                )
            break
        detail = run.detail()
        if run.building is not None or (run.running is None and not run.finished):
            # It died before a group's first probe: importing the checker or building
            # the target failed.
            index = run.building if run.building is not None else remaining[0][0]
            detail = f"could not start the probes: {detail}"
            kind = groups[index].kind
            results[index].append(CheckResult(f"{kind}.start", "fail", detail, ISOLATION_CLAUSE))
            todo = [k for k in remaining if k[0] != index]
            continue
        if run.running is None:
            # It died between two probes, freeing what the last one made.
            key = run.finished[-1]
            detail += " (while freeing what the probe made)"
        else:
            key = run.running
        results[key[0]].append(by_key[key].failed(detail))
        todo = [k for k in remaining if k != key]
    return results


def run_probes(
    kind: str,
    probes_module: str,
    probes: Sequence[Probe],
    target: Any,
    *,
    isolate: bool | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> list[CheckResult]:
    """Run ``probes`` (all registered in ``probes_module.PROBES``) on ``target``;
    ``isolate`` and ``timeout`` as for `run_groups`."""
    group = Group(kind, probes_module, probes, target)
    return run_groups([group], isolate=isolate, timeout=timeout)[0]


def _die_with_parent(parent: int) -> None:
    """End this process when the parent that started it dies: it runs in a session of
    its own, so a Ctrl-C or a kill of the parent would not reach it (Linux: the
    kernel's parent-death signal; elsewhere only a parent already gone is seen)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)


def child_main() -> None:
    """The child's side: read the request on stdin, run the probes, report each step
    on the pipe whose number is the first argument (one JSON object per line)."""
    report = int(sys.argv[1])
    os.set_inheritable(report, False)  # not into the processes the library starts
    request = json.loads(sys.stdin.read())
    _die_with_parent(request["parent"])

    def send(message: dict[str, Any]) -> None:
        data = memoryview((json.dumps(message) + "\n").encode())
        while data:
            data = data[os.write(report, data) :]

    for entry in reversed(request["path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    groups = request["groups"]
    probes: dict[int, dict[str, Probe]] = {}
    targets: dict[int, Any] = {}
    for index, name in request["todo"]:
        if index not in probes:
            group = groups[index]
            module = importlib.import_module(group["module"])
            probes[index] = {p.name: p for p in module.PROBES}
            send({"building": index})
            try:
                targets[index] = _build(group["target"])
            except Exception as exc:
                send({"unbuilt": index, "detail": f"{type(exc).__name__}: {exc}"})
            send({"built": index})
            # What is alive now (the library, its modules) is left out of later
            # collections, so that the full ones the checks make stay quick.
            gc.collect()
            gc.freeze()
        if index not in targets:
            continue
        send({"start": [index, name]})
        for result in _call_probe(probes[index][name], targets[index]):
            send({"group": index, "result": result.__dict__})
        gc.collect()
        send({"done": [index, name]})
    send({"end": True})
