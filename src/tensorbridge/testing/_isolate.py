# SPDX-License-Identifier: Apache-2.0
"""Running probes where a crash or a hang of the library under test cannot hurt.

A *probe* is one function of the checker (`Probe`) that exercises the library under
test and returns its `CheckResult` objects. When the library's callable can be
imported by its qualified name in another process (``module:qualname``), the probes
run in a child process (``python -c``, the same interpreter and ``sys.path``), one
after the other; the child reports each probe's start and results on a pipe of its
own. A child that dies (a signal, an abort, an exit) fails the probe it was running
and a new child carries on with the next one; a probe that gives no answer within
``timeout`` seconds fails as hung, and its child is killed. A callable that cannot be
imported by name (a lambda, a closure, something of ``__main__``) is probed in this
process, with a warning that it could not be isolated.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import queue
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

__all__ = ["DEFAULT_TIMEOUT", "Probe", "qualified_name", "resolve", "run_probes"]

#: Seconds a probe may take before it is reported as hung.
DEFAULT_TIMEOUT = 60.0

_MARK = "\x1etensorbridge-check\x1f"

ISOLATION_CLAUSE = "tensorbridge.testing: probes that can crash run in a child process"


@dataclass(frozen=True)
class Probe:
    """One step of a check: ``func(target)`` exercises the library and returns its results.

    ``name`` names the result a crash or a hang of this probe is reported under, and
    ``clause`` the part of the standard it tests.
    """

    name: str
    clause: str
    func: Callable[[Any], list[CheckResult]]


def resolve(name: str) -> Any:
    """The object ``"module:qualname"`` names."""
    module, sep, qualname = name.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"expected 'module:qualname'; got {name!r}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


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


def _crash_detail(returncode: int, stderr: str) -> str:
    if returncode < 0:
        try:
            what = signal.Signals(-returncode).name
        except ValueError:
            what = f"signal {-returncode}"
        text = f"crashed the process ({what})"
    else:
        text = f"ended the process (exit status {returncode})"
    tail = " ".join(stderr.strip().splitlines()[-3:])
    if tail:
        text += f"; last output: {tail[-300:]}"
    return text


def _run_in_process(probes: Sequence[Probe], target: Any) -> list[CheckResult]:
    results: list[CheckResult] = []
    for probe in probes:
        results.extend(_call_probe(probe, target))
        gc.collect(0)
    return results


def _call_probe(probe: Probe, target: Any) -> list[CheckResult]:
    try:
        return list(probe.func(target))
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return [
            CheckResult(
                probe.name,
                "fail",
                f"the probe raised {type(exc).__name__}: {exc} "
                f"(at {os.path.basename(where.filename)}:{where.lineno})",
                probe.clause,
            )
        ]


def _reader(stream: Any, sink: queue.Queue[str | None]) -> None:
    for line in stream:
        sink.put(line)
    sink.put(None)


def _drain(stream: Any, tail: list[str]) -> None:
    for line in stream:
        tail.append(line)
        del tail[:-20]


def _close(proc: subprocess.Popen[str], readers: list[threading.Thread]) -> None:
    for t in readers:
        t.join(5)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _run_child(
    probes_module: str, names: Sequence[str], target: str, timeout: float
) -> tuple[list[CheckResult], list[str], str | None, int | None, str]:
    """Run probes in one child until it finishes, dies or hangs.

    Returns (results, names of the probes that finished, the probe that was running
    when it died or hung, the child's return code (None: killed as hung), stderr)."""
    request = json.dumps(
        {"module": probes_module, "names": list(names), "target": target, "path": sys.path}
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
    results: list[CheckResult] = []
    finished: list[str] = []
    current: str | None = None
    deadline = time.monotonic() + timeout
    ended = False
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            proc.wait()
            _close(proc, readers)
            return results, finished, current, None, "".join(tail)
        if line is None:
            break
        if not line.startswith(_MARK):
            continue
        message = json.loads(line[len(_MARK) :])
        if "start" in message:
            current = message["start"]
            deadline = time.monotonic() + timeout
        elif "result" in message:
            results.append(CheckResult(**message["result"]))
        elif "done" in message:
            finished.append(message["done"])
            current = None
        elif "end" in message:
            ended = True
            deadline = time.monotonic() + timeout
    try:
        rc = proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = None
    _close(proc, readers)
    if ended and current is None and rc == 0:
        return results, finished, None, 0, "".join(tail)
    return results, finished, current, rc, "".join(tail)


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

    ``isolate``: None runs them in child processes when ``target`` can be imported
    by name there, in this process (with a warning) otherwise; True and False force it.
    """
    name = qualified_name(target) if isolate is not False else None
    if name is None:
        obj = resolve(target) if isinstance(target, str) else target
        results = _run_in_process(probes, obj)
        if isolate is False:
            detail = "isolation turned off: the probes ran in this process, with no time limit"
        else:
            detail = (
                f"{target!r} cannot be imported by name in another process (a lambda, a "
                "closure, or defined in __main__), so the probes ran in this process, with "
                "no time limit: a crash would have ended it"
            )
        return [CheckResult(f"{kind}.isolation", "warn", detail, ISOLATION_CLAUSE), *results]
    by_name = {p.name: p for p in probes}
    todo = [p.name for p in probes]
    results = []
    while todo:
        got, finished, running, rc, stderr = _run_child(probes_module, todo, name, timeout)
        results.extend(got)
        done = set(finished)
        remaining = [n for n in todo if n not in done]
        if not remaining:
            if rc != 0:
                detail = (
                    "the process did not exit within the time limit after the last probe"
                    if rc is None
                    else _crash_detail(rc, stderr) + " after the last probe (at exit)"
                )
                results.append(CheckResult(f"{kind}.clean_exit", "fail", detail, ISOLATION_CLAUSE))
            break
        if rc is None:
            detail = f"hung: no answer within {timeout:g} s (the process was killed)"
        else:
            detail = _crash_detail(rc, stderr)
        if running is None and not finished:
            # It died before its first probe: importing the target failed.
            detail = f"could not start the probes: {detail}"
            results.append(CheckResult(f"{kind}.start", "fail", detail, ISOLATION_CLAUSE))
            break
        if running is None:
            # It died between two probes, freeing what the last one made.
            probe = by_name[finished[-1]]
            detail += " (while freeing what the probe made)"
        else:
            probe = by_name[running]
        results.append(CheckResult(probe.name, "fail", detail, probe.clause))
        todo = [n for n in remaining if n != probe.name]
    return results


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
    module = importlib.import_module(request["module"])
    probes = {p.name: p for p in module.PROBES}
    target = resolve(request["target"])
    for name in request["names"]:
        send({"start": name})
        for result in _call_probe(probes[name], target):
            send({"result": result.__dict__})
        gc.collect(0)
        send({"done": name})
    send({"end": True})
