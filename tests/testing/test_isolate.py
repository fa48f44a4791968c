# SPDX-License-Identifier: Apache-2.0
"""tensorbridge.testing's child processes: a time limit that bounds every probe, even
when the library under test starts processes of its own, and no child left behind
(on a hang, at the end, on Ctrl-C); bad arguments refused before any child starts."""

from __future__ import annotations

import _thread
import math
import os
import pathlib
import subprocess
import threading
import time

import pytest
from testing import subjects as s

import tensorbridge as tb
import tensorbridge.testing as tbt
from tensorbridge.testing._isolate import Factory

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
