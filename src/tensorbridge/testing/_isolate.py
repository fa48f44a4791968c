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
gives no answer within ``timeout`` seconds fails as hung, and its child is killed.
A callable that cannot be imported by name (a lambda, a closure, something of
``__main__``) is probed in this process, with a warning that it could not be isolated.

Several `Group` of probes (a library's producer and consumer checks) can share the
child processes (`run_groups`), so a framework that takes seconds to import is
imported once, not once per role.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tensorbridge.testing._report import CheckResult

__all__ = [
    "DEFAULT_TIMEOUT",
    "Factory",
    "Group",
    "Probe",
    "child_main",
    "qualified_name",
    "resolve",
    "run_groups",
    "run_probes",
]

#: Seconds a probe may take before it is reported as hung.
DEFAULT_TIMEOUT = 60.0

_MARK = "\x1etensorbridge-check\x1f"

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


def _reader(stream: Any, sink: queue.Queue[str | None]) -> None:
    for line in stream:
        sink.put(line)
    sink.put(None)


def _drain(stream: Any, tail: list[str]) -> None:
    """Keep the last 20 lines of a stream in ``tail``, after the first five that say
    why it died (a C++ exception's message comes before its stack frames)."""
    why = 0
    for line in stream:
        if why < 5 and _WHY.search(line):
            tail.insert(why, line)
            why += 1
            continue
        tail.append(line)
        del tail[why : max(why, len(tail) - 20)]


def _close(proc: subprocess.Popen[str], readers: list[threading.Thread]) -> None:
    for t in readers:
        t.join(5)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


#: A probe in a run of several groups: (group index, probe name).
_Key = tuple[int, str]


@dataclass
class _ChildRun:
    """What one child process did before it ended."""

    results: list[tuple[int, CheckResult]]
    finished: list[_Key]
    #: groups whose target could not be built, with why
    unbuilt: dict[int, str]
    #: the probe running when it died or hung (None: between probes)
    running: _Key | None
    #: the group whose target was being built when it died or hung (None: none)
    building: int | None
    #: the child's return code (None: killed as hung)
    returncode: int | None
    stderr: str


def _run_child(groups: Sequence[Group], todo: Sequence[_Key], timeout: float) -> _ChildRun:
    """Run the probes ``todo`` in one child until it finishes, dies or hangs."""
    request = json.dumps(
        {
            "groups": [{"module": g.module, "target": _spec(g.target)} for g in groups],
            "todo": [list(key) for key in todo],
            "path": sys.path,
        }
    )
    code = "from tensorbridge.testing._isolate import child_main; child_main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(request)
    proc.stdin.close()
    lines: queue.Queue[str | None] = queue.Queue()
    tail: list[str] = []
    readers = [
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, tail), daemon=True),
    ]
    for t in readers:
        t.start()
    run = _ChildRun([], [], {}, None, None, None, "")
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            proc.wait()
            _close(proc, readers)
            run.stderr = "".join(tail)
            return run
        if line is None:
            break
        if not line.startswith(_MARK):
            continue
        message = json.loads(line[len(_MARK) :])
        if "building" in message:
            run.building = message["building"]
            deadline = time.monotonic() + timeout
        elif "built" in message:
            run.building = None
        elif "start" in message:
            run.running = (message["start"][0], message["start"][1])
            deadline = time.monotonic() + timeout
        elif "result" in message:
            run.results.append((message["group"], CheckResult(**message["result"])))
        elif "done" in message:
            run.finished.append((message["done"][0], message["done"][1]))
            run.running = None
        elif "unbuilt" in message:
            run.unbuilt[message["unbuilt"]] = message["detail"]
        elif "end" in message:
            deadline = time.monotonic() + timeout
    try:
        run.returncode = proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _close(proc, readers)
    run.stderr = "".join(tail)
    return run


def _isolation_warning(kind: str, target: Any, isolate: bool | None) -> CheckResult:
    if isolate is False:
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
        results = [_isolation_warning(group.kind, group.target, isolate)]
        obj = _here(group.target)
        for probe in group.probes:
            results.extend(_call_probe(probe, obj))
            gc.collect(0)
        out.append(results)
    return out


def run_groups(
    groups: Sequence[Group], *, isolate: bool | None = None, timeout: float = DEFAULT_TIMEOUT
) -> list[list[CheckResult]]:
    """Run every group's probes on its target; the results of each group.

    ``isolate``: None runs them in child processes (shared by the groups) when every
    target can be found there by name, in this process (with a warning) otherwise;
    True and False force it."""
    if isolate is False or any(_spec(g.target) is None for g in groups):
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
                detail = (
                    "the process did not exit within the time limit after the last probe"
                    if run.returncode is None
                    else _crash_detail(run.returncode, run.stderr) + " after the last probe"
                    " (at exit)"
                )
                kind = groups[index].kind
                results[index].append(
                    CheckResult(f"{kind}.clean_exit", "fail", detail, ISOLATION_CLAUSE)
                )
            break
        if run.returncode is None:
            detail = f"hung: no answer within {timeout:g} s (the process was killed)"
        else:
            detail = _crash_detail(run.returncode, run.stderr)
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
    """Run ``probes`` (all registered in ``probes_module.PROBES``) on ``target``.

    ``isolate``: None runs them in child processes when ``target`` can be found by
    name there, in this process (with a warning) otherwise; True and False force it.
    """
    group = Group(kind, probes_module, probes, target)
    return run_groups([group], isolate=isolate, timeout=timeout)[0]


def child_main() -> None:
    """The child's side: read the request on stdin, run the probes, report on stdout."""
    request = json.loads(sys.stdin.read())
    out = os.dup(1)
    os.dup2(2, 1)  # whatever the library prints goes to stderr, not into the protocol
    sys.stdout = sys.stderr

    def send(message: dict[str, Any]) -> None:
        os.write(out, (_MARK + json.dumps(message) + "\n").encode())

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
        if index not in targets:
            continue
        send({"start": [index, name]})
        for result in _call_probe(probes[index][name], targets[index]):
            send({"group": index, "result": result.__dict__})
        gc.collect(0)
        send({"done": [index, name]})
    send({"end": True})
