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
process group, when it ends, hangs or the parent is interrupted. The parent never
waits for the end of a pipe (a helper holding it open would make it wait for ever):
it polls the pipes and the child's status, with the time limit.

Several `Group` of probes (a library's producer and consumer checks) can share the
child processes (`run_groups`), so a framework that takes seconds to import is
imported once, not once per role.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
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

from tensorbridge.testing._report import CheckResult

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

#: The children running probes now (of every thread), and whether `cancel_all` has
#: stopped them (then no other starts).
_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()
_CANCELLED = threading.Event()


class Cancelled(Exception):
    """The checks were stopped by `cancel_all` (a Ctrl-C in another thread)."""


def cancel_all() -> int:
    """Kill every running child with its process group at once, without waiting for
    them, and start no other until `uncancel`; the number killed. For a Ctrl-C while
    other threads run checks: their checks raise `Cancelled`."""
    with _LIVE_LOCK:
        _CANCELLED.set()
        live = list(_LIVE)
    for proc in live:
        if hasattr(os, "killpg"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
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


@dataclass
class _ChildRun:
    """What one child process did before it ended."""

    results: list[tuple[int, CheckResult]] = field(default_factory=list)
    finished: list[_Key] = field(default_factory=list)
    #: groups whose target could not be built, with why
    unbuilt: dict[int, str] = field(default_factory=dict)
    #: the probe running when it died or hung (None: between probes)
    running: _Key | None = None
    #: the group whose target was being built when it died or hung (None: none)
    building: int | None = None
    #: the child's return code (None: it was killed, as hung or garbled)
    returncode: int | None = None
    #: why it was killed when it sent something that is not a message
    garbled: str | None = None
    #: seconds it was given for the step it did not finish (when hung)
    limit: float = 0.0
    stderr: str = ""

    def take(self, line: bytes) -> bool:
        """Record one message of the child; True when it starts a new time limit."""
        try:
            return self._take(json.loads(line))
        except (ValueError, TypeError, KeyError, IndexError):
            self.garbled = f"the child sent a report line that is not a message: {line[:80]!r}"
            return False

    def _take(self, message: dict[str, Any]) -> bool:
        if "building" in message:
            self.building = int(message["building"])
            return True
        if "built" in message:
            self.building = None
        elif "start" in message:
            self.running = (int(message["start"][0]), str(message["start"][1]))
            return True
        elif "result" in message:
            self.results.append((int(message["group"]), CheckResult(**message["result"])))
        elif "done" in message:
            self.finished.append((int(message["done"][0]), str(message["done"][1])))
            self.running = None
        elif "unbuilt" in message:
            self.unbuilt[int(message["unbuilt"])] = str(message["detail"])
        elif "end" in message:
            return True
        else:
            raise ValueError(message)
        return False

    def detail(self) -> str:
        """Why the child ended before finishing its probes."""
        if self.garbled is not None:
            return self.garbled
        if self.returncode is None:
            return f"hung: no answer within {self.limit:g} s (the process was killed)"
        return _crash_detail(self.returncode, self.stderr)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child and every process of its session that is still alive, and reap
    the child (a process group outlives its leader, so its id is not reused while any
    of the library's helpers are left)."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:  # it left its group, or there are no groups here
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    proc.wait()


def _read(fd: int) -> bytes:
    """What a readable pipe holds (b"": its end)."""
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return b""


def _watch(proc: subprocess.Popen[bytes], report: int, request: bytes, timeout: float) -> _ChildRun:
    """Send the request, then follow the child's messages until it ends, hangs past
    its time limit or sends garbage (then the caller kills it)."""
    assert proc.stdin is not None and proc.stdout is not None
    run = _ChildRun()
    output = _Output()
    stdin, out = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(stdin, False)
    poller = select.poll()
    poller.register(stdin, select.POLLOUT)
    for fd in (out, report):
        poller.register(fd, select.POLLIN)
    reading = {out, report}
    pending = memoryview(request)
    partial = b""
    run.limit = max(timeout, STARTUP_SECONDS)
    deadline = time.monotonic() + run.limit

    def consume(fd: int) -> None:
        nonlocal partial, deadline
        data = _read(fd)
        if not data:
            poller.unregister(fd)
            reading.discard(fd)
        elif fd == out:
            output.feed(data)
        else:
            *lines, partial = (partial + data).split(b"\n")
            for line in lines:
                if run.garbled is None and run.take(line):
                    run.limit = timeout
                    deadline = time.monotonic() + timeout

    while run.garbled is None:
        code = proc.poll()
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
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(min(left, _POLL_SECONDS))
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
            )
            _LIVE.add(proc)
    except BaseException:
        os.close(report_read)
        raise
    finally:
        os.close(report_write)
    try:
        return _watch(proc, report_read, request, timeout)
    finally:
        _kill_group(proc)
        with _LIVE_LOCK:
            _LIVE.discard(proc)
        os.close(report_read)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


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
