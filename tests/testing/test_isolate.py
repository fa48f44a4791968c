# SPDX-License-Identifier: Apache-2.0
"""tensorbridge.testing's child processes: a time limit that bounds every probe, even
when the library under test starts processes of its own, and no child left behind
(on a hang, at the end, on Ctrl-C), nor any process it started, even one that quit its
session; a child's report lines are untrusted (one that is not a message fails a
probe, never the check); bad arguments refused before any child starts."""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import functools
import math
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from typing import Any

import pytest
from testing import subjects as s

import tensorbridge as tb
import tensorbridge.testing as tbt
from tensorbridge.testing._isolate import Factory, _ChildRun

#: Seconds the tests wait for what must happen (a guard against hanging for ever).
GUARD = 120


def _gone(pid: int) -> bool:
    """Whether the process ``pid`` has ended (a zombie has; its reaping may lag)."""
    for _ in range(200):
        try:
            stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        except OSError:  # no /proc here
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        else:
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        time.sleep(0.05)
    return False


def _wait_for(path: pathlib.Path) -> int:
    for _ in range(GUARD * 20):
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} was never written")


def test_a_helper_process_of_the_library_neither_holds_the_check_nor_outlives_it(tmp_path):
    # The helper inherits the child's output pipe: the parent must not wait for its end.
    pidfile = tmp_path / "helper.pid"
    reports = []
    thread = threading.Thread(
        target=lambda: reports.append(
            tbt.check_producer(Factory("testing.subjects:spawns_helper", (str(pidfile),)))
        ),
        daemon=True,
    )
    thread.start()
    thread.join(GUARD)
    assert not thread.is_alive(), "check_producer waited for the library's helper process"
    assert reports[0].ok, str(reports[0])
    assert _gone(int(pidfile.read_text())), "the helper process outlived the check"


def test_ctrl_c_kills_the_child_in_a_hung_probe(tmp_path, ctrl_c):
    pidfile = tmp_path / "child.pid"

    def interrupt() -> None:
        _wait_for(pidfile)
        _thread.interrupt_main()

    threading.Thread(target=interrupt, daemon=True).start()
    target = Factory("testing.subjects:hangs_telling_pid", (str(pidfile),))
    with pytest.raises(KeyboardInterrupt):
        tbt.check_producer(target, timeout=GUARD)
    assert _gone(int(pidfile.read_text())), "the child hung in a probe outlived Ctrl-C"


@pytest.mark.parametrize(
    ("timeout", "error"),
    [
        (0, ValueError),
        (-1.0, ValueError),
        (math.inf, ValueError),
        (math.nan, ValueError),
        (None, TypeError),
        ("3", TypeError),
        (True, TypeError),
    ],
)
def test_a_bad_timeout_is_refused_before_any_child_starts(monkeypatch, timeout, error):
    def no_child(*args, **kwargs):
        raise AssertionError("a child was started")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    with pytest.raises(error, match="timeout must be a"):
        tbt.check_producer(s.tensorbridge_tensor, timeout=timeout)
    with pytest.raises(error, match="timeout must be a"):
        tbt.check_library(s.tensorbridge_tensor, "tensorbridge:from_dlpack", timeout=timeout)


def test_a_crash_at_exit_fails_clean_exit():
    report = tbt.check_producer(s.exits_badly)
    assert report["producer.clean_exit"].status == "fail", str(report)
    assert "exit status 3" in report["producer.clean_exit"].detail
    report = tbt.check_consumer(s.exits_badly_consumer)
    assert report["consumer.clean_exit"].status == "fail", str(report)


def test_a_consumer_lambda_runs_in_process_with_a_warning():
    report = tbt.check_consumer(lambda x: tb.from_dlpack(x))
    assert report["consumer.isolation"].status == "warn", str(report)
    assert "cannot be imported by name" in report["consumer.isolation"].detail
    assert report.ok, str(report)


def test_a_module_in_the_current_directory_does_not_shadow_the_standard_library(
    tmp_path, monkeypatch
):
    # ``python -c`` would put the current directory first on the child's sys.path.
    for name in ("json", "textwrap"):
        (tmp_path / f"{name}.py").write_text(
            f"open({str(tmp_path / 'RAN')!r}, 'a').write({name!r})\n"
            f"raise ImportError('{name}.py of the current directory was imported')\n"
        )
    monkeypatch.chdir(tmp_path)
    report = tbt.check_producer(s.tensorbridge_tensor, timeout=GUARD)
    assert not (tmp_path / "RAN").exists(), (tmp_path / "RAN").read_text()
    assert report.ok, str(report)


# ---------------------------------------------------------------------------------------
# Children that break the rules (issue 33, items 6 and 7). The targets are built in the
# child, from these functions (a Factory names them).

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not pathlib.Path("/proc/self/stat").exists(),
    reason="a child subreaper (prctl) and /proc are Linux's",
)


def _once(flag: str) -> bool:
    """True the first time of all processes (``flag`` is the file it creates)."""
    try:
        open(flag, "x").close()
    except FileExistsError:
        return False
    return True


def writes_report(data: str, flag: str, repeat: int = 1) -> Any:
    """A make() whose first call writes ``data`` ``repeat`` times on the child's report
    pipe (the first argument of ``child_main``), as a library writing on a descriptor
    it does not own would, and ends the process (lone surrogates: bytes that are not
    UTF-8)."""

    def make(case: str = "float32") -> Any:
        if _once(flag):
            chunk = data.encode(errors="surrogateescape")
            for _ in range(repeat):
                os.write(int(sys.argv[1]), chunk)
            os._exit(0)
        return s.tensorbridge_tensor(case)

    return make


def writes_report_while_built(data: str) -> Any:
    """A target whose building writes ``data`` on the report pipe (no probe runs)."""
    os.write(int(sys.argv[1]), data.encode())
    return s.tensorbridge_tensor


_QUITTERS = {
    # sleeps in a session of its own (as a compile server started with setsid)
    "setsid": "os.setsid()",
    # a daemon: its parent exits, so it is an orphan while the child still runs
    "daemon": "os.setsid()\nif os.fork(): os._exit(0)",
    # sleeps in a process group of its own, in the child's session, with an empty
    # environment (it is known by its session)
    "setpgid": "os.setpgid(0, 0)",
}


def quits_session(pidfile: str, how: str, then: str) -> Any:
    """A make() whose first call starts a helper process that quits the child's
    process group (``how``, a key of `_QUITTERS`), writes its pid to ``pidfile`` and
    sleeps; once the pid is there, the child goes on (``then`` "returns"), crashes
    (``then`` "aborts") or hangs (``then`` "hangs")."""

    def make(case: str = "float32") -> Any:
        if _once(pidfile + ".started"):
            code = f"import os, sys, time\n{_QUITTERS[how]}\n"
            code += "open(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(600)"
            env = {} if how == "setpgid" else None
            subprocess.Popen([sys.executable, "-c", code, pidfile + ".tmp"], env=env)
            _wait_for(pathlib.Path(pidfile + ".tmp"))
            os.replace(pidfile + ".tmp", pidfile)
            if then == "aborts":
                os.abort()
            if then == "hangs":
                time.sleep(GUARD * 10)
        return s.tensorbridge_tensor(case)

    return make


def waits_for(started: str, release: str) -> Any:
    """A make() whose first call writes its pid to ``started`` and waits for the file
    ``release``."""

    def make(case: str = "float32") -> Any:
        if _once(started + ".once"):
            pathlib.Path(started).write_text(str(os.getpid()))
            for _ in range(GUARD * 20):
                if os.path.exists(release):
                    break
                time.sleep(0.05)
        return s.tensorbridge_tensor(case)

    return make


def _failed(report: tbt.Report) -> list[tbt.CheckResult]:
    return [r for r in report.results if r.status == "fail"]


@functools.cache
def _names_of_a_full_run() -> list[str]:
    return [r.name for r in tbt.check_producer(s.tensorbridge_tensor).results]


_RESULT = '"result": {"name": "x", "status": "%s", "detail": "", "clause": ""}'

#: Report lines that are not messages, and what the failure says of each.
GARBLED = {
    "unknown probe": ('{"start": [0, "no-such-probe"]}', "names no probe it was given"),
    "group out of range": ('{"start": [7, "x"]}', "names no probe it was given"),
    "float group": ('{"start": [0.0, "producer.stream"]}', "names no probe it was given"),
    "bool group": ('{"start": [false, "producer.stream"]}', "names no probe it was given"),
    "list name": ('{"start": [0, []]}', "names no probe it was given"),
    "object name": ('{"done": [0, {}]}', "names no probe it was given"),
    "result of no group": ("{" + _RESULT % "pass" + ', "group": 7}', "names no group it was given"),
    "unbuilt of no group": ('{"unbuilt": 5, "detail": "x"}', "names no group it was given"),
    "result status": ("{" + _RESULT % "great" + ', "group": 0}', "holds a result of no known"),
    "result fields": ('{"result": {"name": 3}, "group": 0}', "holds no result"),
    "done of another probe": ('{"done": [0, "producer.c_exchange_api"]}', "ends a probe that is"),
    "list": ('["start", [0, "producer.stream"]]', "is not a JSON object"),
    "string": ('"end"', "is not a JSON object"),
    "no kind": ('{"hello": 1}', "is no message of the checker"),
    "two kinds": ('{"end": true, "building": 0}', "is no message of the checker"),
    "not JSON": ('{"start": [0,', "is not JSON:"),
    "not UTF-8": ('{"end": "\udcff"}', "is not JSON:"),
    "nested too deeply": ("[" * 100_000, "nests too deeply to be read"),
}


@pytest.mark.parametrize(("line", "why"), GARBLED.values(), ids=GARBLED.keys())
def test_a_report_line_that_is_not_a_message_fails_the_probe_running(tmp_path, line, why):
    target = Factory("testing.test_isolate:writes_report", (line + "\n", str(tmp_path / "wrote")))
    report = tbt.check_producer(target, timeout=GUARD)
    failed = _failed(report)
    assert len(failed) == 1, str(report)
    assert failed[0].detail.startswith(f"the child sent a report line that {why}"), str(report)
    # A new child ran the probes left.
    assert [r.name for r in report.results] == _names_of_a_full_run(), str(report)


def test_a_report_line_that_is_not_a_message_while_the_target_is_built_fails_the_start():
    target = Factory("testing.test_isolate:writes_report_while_built", ('{"start": [0, "x"]}\n',))
    report = tbt.check_producer(target, timeout=GUARD)
    assert [r.name for r in report.results] == ["producer.start"], str(report)
    detail = report.results[0].detail
    assert "the child sent a report line that names no probe it was given" in detail, detail


def test_a_report_line_without_end_is_cut_at_a_mebibyte(tmp_path):
    # 200 MiB without an end of line: the parent used to keep all of it (copied at
    # each read: 167 MB and 90 s in one run), and say nothing of it.
    target = Factory(
        "testing.test_isolate:writes_report", ("x" * 4096, str(tmp_path / "wrote"), 51200)
    )
    tracemalloc.start()
    try:
        report = tbt.check_producer(target, timeout=GUARD)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    failed = _failed(report)
    assert len(failed) == 1, str(report)
    assert failed[0].detail.startswith(
        "the child sent more than 1 MiB on its report pipe without an end of line"
    ), str(report)
    assert peak < 16 << 20, f"the parent held {peak >> 20} MiB of the line"


#: The messages of a child that ran its one probe, "p" of group 0.
_RAN = ['{"building": 0}', '{"built": 0}', '{"start": [0, "p"]}', '{"done": [0, "p"]}']


def test_report_lines_are_whole_whatever_the_reads():
    run = _ChildRun(frozenset({(0, "p")}))
    data = "".join(line + "\n" for line in _RAN).encode()
    for i in range(len(data)):
        run.feed(data[i : i + 1])
    assert run.garbled is None
    assert run.finished == [(0, "p")]


#: Messages out of turn (the child was given one probe, "p" of group 0).
OUT_OF_TURN = {
    "start unbuilt": (['{"start": [0, "p"]}'], "starts the probe 'p' out of turn"),
    "start building": (['{"building": 0}', '{"start": [0, "p"]}'], "starts the probe 'p' out"),
    "build twice": (['{"building": 0}', '{"built": 0}', '{"building": 0}'], "builds a target out"),
    "start twice": ([*_RAN, '{"start": [0, "p"]}'], "starts the probe 'p' out of turn"),
    "result unstarted": (["{" + _RESULT % "pass" + ', "group": 0}'], "is a result of no running"),
    "end twice": (['{"end": true}', '{"end": true}'], "comes after its end message"),
    "end building": (['{"building": 0}', '{"end": true}'], "ends the run while a probe or a"),
}


@pytest.mark.parametrize(("lines", "why"), OUT_OF_TURN.values(), ids=OUT_OF_TURN.keys())
def test_messages_out_of_turn_are_garbled(lines, why):
    # Each message that restarts the time limit comes once: a child cannot keep the
    # parent waiting for ever.
    run = _ChildRun(frozenset({(0, "p")}))
    for line in lines:
        run.take(line.encode())
    assert run.garbled is not None
    assert run.garbled.startswith(f"the child sent a report line that {why}"), run.garbled


_BIG = '{"group": 0, "result": {"name": "x", "status": "pass", "detail": "%s", "clause": ""}}'


@pytest.mark.parametrize(
    ("result", "count", "kept"),
    [("{" + _RESULT % "pass" + ', "group": 0}', 65, 64), (_BIG % ("d" * ((1 << 20) - 100)), 5, 4)],
    ids=["results of a probe", "bytes of results"],
)
def test_results_past_the_most_a_child_sends_are_garbled(result, count, kept):
    # 300 results of a mebibyte each were all held (302 MiB).
    run = _ChildRun(frozenset({(0, "p")}))
    for line in [*_RAN[:3], *[result] * count]:
        run.take(line.encode())
    assert run.garbled is not None
    why = "is a result past the most a child sends (64 a probe, 4 MiB in all)"
    assert run.garbled.startswith(f"the child sent a report line that {why}"), run.garbled
    assert len(run.results) == kept


def test_a_garbled_line_is_told_in_short():
    run = _ChildRun(frozenset({(0, "p")}))
    for line in [*_RAN[:3], "{" + _RESULT % ("x" * 100_000) + ', "group": 0}']:
        run.take(line.encode())
    assert run.garbled is not None
    assert "holds a result of no known status" in run.garbled
    assert len(run.garbled) < 300, run.garbled


def _zombies() -> set[int]:
    """The children of this process that ended and were not reaped."""
    found = set()
    for path in pathlib.Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            state, ppid = path.read_text().rsplit(")", 1)[1].split()[:2]
            if state == "Z" and int(ppid) == os.getpid():
                found.add(int(path.parent.name))
    return found


def _subreaper() -> int:
    value = ctypes.c_int()
    assert ctypes.CDLL(None).prctl(37, ctypes.byref(value), 0, 0, 0) == 0  # GET_CHILD_SUBREAPER
    return value.value


@linux_only
@pytest.mark.parametrize(
    ("how", "then"),
    [("setsid", "returns"), ("daemon", "returns"), ("setpgid", "returns"), ("setsid", "aborts")],
)
def test_a_helper_that_quits_the_session_does_not_outlive_the_check(tmp_path, how, then):
    pidfile = tmp_path / "helper.pid"
    subreaper, zombies = _subreaper(), _zombies()
    target = Factory("testing.test_isolate:quits_session", (str(pidfile), how, then))
    report = tbt.check_producer(target, timeout=GUARD)
    pid = int(pidfile.read_text())
    try:
        # Killed and reaped (no zombie left) by the time the check returns.
        assert not pathlib.Path(f"/proc/{pid}").exists(), f"the helper {pid} outlived the check"
    finally:
        _kill_and_reap(pid)
    details = [r.detail for r in _failed(report)]
    if then == "aborts":
        assert len(details) == 1, str(report)
        assert details[0].startswith("crashed the process (SIGABRT)"), str(report)
    else:
        assert details == [], str(report)
    assert _subreaper() == subreaper, "the process's subreaper setting was not put back"
    assert _zombies() == zombies, "processes of the run were left unreaped"


@linux_only
def test_processes_of_the_host_application_are_left_alone(tmp_path):
    # While a child runs, this process adopts orphans: one of the host's own (a
    # daemon started meanwhile), and a child the host starts meanwhile, are not the
    # run's to kill.
    started, release = tmp_path / "started", tmp_path / "release"
    target = Factory("testing.test_isolate:waits_for", (str(started), str(release)))
    reports: list[Any] = []
    thread = threading.Thread(target=lambda: reports.append(tbt.check_producer(target)))
    thread.start()
    with contextlib.ExitStack() as cleanup:
        try:
            _wait_for(started)
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            cleanup.callback(child.wait)
            cleanup.callback(child.kill)
            # One that ends during the run: its status is the host's to take.
            ended = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
            cleanup.callback(ended.wait)
            code = (
                "import os, sys, time\nif os.fork(): os._exit(0)\n"
                "open(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(600)"
            )
            subprocess.run([sys.executable, "-c", code, str(tmp_path / "daemon")], check=True)
            daemon = _wait_for(tmp_path / "daemon")
            cleanup.callback(_kill_and_reap, daemon)
            status = pathlib.Path(f"/proc/{daemon}/status").read_text()
            assert f"PPid:\t{os.getpid()}\n" in status, "the daemon was not adopted during the run"
            assert _gone(ended.pid), "the host's short child did not end during the run"
        finally:
            release.write_text("")
            thread.join(GUARD)
        assert reports[0].ok, str(reports[0])
        assert child.poll() is None, "the host's own child was killed"
        assert ended.wait() == 7, "the exit status of the host's own child was taken"
        assert os.waitpid(daemon, os.WNOHANG) == (0, 0), "the host's adopted daemon was killed"


@linux_only
def test_what_quit_the_session_is_killed_when_the_command_line_is_interrupted(tmp_path):
    # `tensorbridge check --all` on Ctrl-C: cancel_all() while other threads run checks,
    # then os._exit, so that no thread's cleanup runs.
    pidfile = tmp_path / "helper.pid"
    code = (
        "import os, sys, threading, time\n"
        "import tensorbridge.testing as tbt\n"
        "from tensorbridge.testing import _isolate\n"
        "target = _isolate.Factory('testing.test_isolate:quits_session', "
        "(sys.argv[1], 'setsid', 'hangs'))\n"
        "threading.Thread(target=tbt.check_producer, args=(target,), daemon=True).start()\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
        "_isolate.cancel_all()\n"
        "os._exit(130)\n"
    )
    done = _run_script(code, pidfile, timeout=GUARD)
    assert done.returncode == 130, done.stderr.decode()
    pid = int(pidfile.read_text())
    try:
        assert _gone(pid), f"the helper {pid} outlived the interrupted check"
    finally:
        _kill_and_reap(pid)


@linux_only
def test_a_process_forked_during_a_check_kills_what_its_own_checks_leave(tmp_path):
    # The fork inherits the count of the threads adopting orphans, but not the
    # kernel's setting: it must make the setting anew. (In a process of its own: a
    # fork of the test worker, where JAX may be loaded, warns and may deadlock.)
    started, release, pidfile = (tmp_path / name for name in ("started", "release", "pid"))
    code = (
        "import os, sys, threading, time, warnings\n"
        "import tensorbridge.testing as tbt\n"
        "from tensorbridge.testing import _isolate\n"
        "started, release, pidfile, guard = sys.argv[1:]\n"
        "waits = _isolate.Factory('testing.test_isolate:waits_for', (started, release))\n"
        "thread = threading.Thread(target=tbt.check_producer, args=(waits,))\n"
        "thread.start()\n"
        "while not os.path.exists(started): time.sleep(0.05)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)  # (a fork of threads)\n"
        "fork = os.fork()\n"
        "if fork == 0:\n"
        "    status = 3\n"
        "    try:\n"
        "        quits = _isolate.Factory('testing.test_isolate:quits_session',\n"
        "                                 (pidfile, 'setsid', 'returns'))\n"
        "        ok = tbt.check_producer(quits, timeout=float(guard)).ok\n"
        "        gone = not os.path.exists('/proc/' + open(pidfile).read())\n"
        "        status = 0 if ok and gone else 2 if not ok else 1\n"
        "    finally:\n"
        "        os._exit(status)\n"
        "_, status = os.waitpid(fork, 0)\n"
        "open(release, 'w').close()\n"
        "thread.join(float(guard))\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    try:
        done = _run_script(code, started, release, pidfile, GUARD, timeout=3 * GUARD)
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError):
            _kill_and_reap(int(pidfile.read_text()))
    assert done.returncode == 0, (
        f"the fork's check left its helper (1) or failed: {done.returncode}\n"
        + done.stderr.decode()
    )


def _run_script(code: str, *args: object, timeout: float) -> subprocess.CompletedProcess:
    """Run ``code`` in a Python process of its own (that imports this module by name,
    as the checker's children do), with ``args`` as its argv."""
    tests = str(pathlib.Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, *sys.path])}
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        timeout=timeout,
        capture_output=True,
    )


def _kill_and_reap(pid: int) -> None:
    """Kill ``pid``, and reap it if it is a child of this process."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def test_lone_surrogates_from_a_child_are_escaped_not_printed():
    # JSON's "\ud800" (or an undecodable path through os.fsdecode) was kept, and
    # printing the report raised UnicodeEncodeError in the parent.
    run = _ChildRun(frozenset({(0, "p")}))
    for line in [*_RAN[:3], _BIG % "bad \\ud800 path"]:
        run.take(line.encode())
    assert run.garbled is None
    detail = run.results[0][1].detail
    assert detail == "bad \\ud800 path"
    detail.encode("utf-8")  # printable


def test_without_os_waitid_children_are_still_run_and_reaped(monkeypatch):
    # macOS before Python 3.13 has no os.waitid: the child's end is seen by
    # Popen.poll (which reaps it) and nothing is left to sweep.
    from tensorbridge.testing import _isolate

    monkeypatch.setattr(_isolate, "_PEEKS", False)
    report = tbt.check_producer(s.exits_badly)
    assert report["producer.clean_exit"].status == "fail", str(report)
    assert "exit status 3" in report["producer.clean_exit"].detail
    assert not _isolate._LIVE
