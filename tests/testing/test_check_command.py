# SPDX-License-Identifier: Apache-2.0
"""``tensorbridge check``: an expression's producer or consumer graded in child
processes that evaluate the expression themselves; exit status 1 on a failure, 2 on an
expression that cannot be checked; ``--all`` for every installed framework."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from needs import needs

from tensorbridge._cli import main
from tensorbridge._cli.interrupts import Interrupted


def check(capsys, *args):
    status = main(["check", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_producer_expression(capsys):
    status, out, _ = check(capsys, "tb.asarray([[1.0, 2.0], [3.0, 4.0]])")
    assert status == 0, out
    assert out.startswith("DLPack producer conformance of tb.asarray([[1.0, 2.0], [3.0, 4.0]]):")
    assert "FAIL" not in out
    assert "producer.isolation" not in out  # evaluated in the child processes


def test_a_function_of_no_arguments_is_the_make(capsys):
    status, out, _ = check(capsys, "lambda: tb.asarray([1.0, 2.0])", "--json")
    report = json.loads(out)
    assert status == 0 and report["ok"] is True
    assert report["name"] == "lambda: tb.asarray([1.0, 2.0])"
    assert "producer.isolation" not in {r["name"] for r in report["results"]}


def test_a_named_function_taking_case_is_asked_for_every_case(capsys):
    status, out, _ = check(capsys, "testing.subjects:tensorbridge_tensor", "--json")
    report = json.loads(out)
    assert status == 0 and report["counts"] == {"pass": 24, "skip": 0, "warn": 0, "fail": 0}
    values = next(r for r in report["results"] if r["name"] == "producer.values")
    # 21 cases, versioned and legacy, but for the read-only one's refused legacy export
    assert values["detail"] == "41 export(s) checked"


def test_a_consumer_expression(capsys):
    status, out, _ = check(capsys, "--consumer", "tb.from_dlpack", "--json")
    report = json.loads(out)
    assert status == 0
    assert report["kind"] == "consumer" and report["counts"]["fail"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["np.ones"], "cannot be called without arguments"),
        (["np.ndarray"], "np.ndarray is a type, not a producer object"),
        (["tb.Tensor"], "tb.Tensor is a type, not a producer object"),
        (["3"], "has no __dlpack__ and is not callable"),
        (["np.nope"], "AttributeError"),
        (["--consumer", "np.arange(3)"], "not a callable"),
        (["lambda: 3"], "returned a int, which has no __dlpack__"),
    ],
)
def test_an_expression_that_cannot_be_checked_is_exit_status_2(capsys, args, message):
    status, out, err = check(capsys, *args)
    assert status == 2
    assert out == ""
    assert err.startswith("tensorbridge check: could not build the target: ")
    assert message in err


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--markdown", "np.ones(3)"],
        ["--all", "np.ones(3)"],
        ["--frameworks", "numpy", "x"],
        ["--frameworks", "", "x"],
        ["--all", "--markdown", "--frameworks", "numpy"],
        ["--timeout", "0", "np.ones(3)"],
        ["--timeout", "inf", "np.ones(3)"],
        ["--timeout", "nan", "np.ones(3)"],
    ],
)
def test_bad_arguments_are_exit_status_2(capsys, args):
    with pytest.raises(SystemExit) as info:
        main(["check", *args])
    assert info.value.code == 2


def test_all_of_some_frameworks(capsys):
    status, out, _ = check(capsys, "--all", "--frameworks", "numpy,tensorbridge", "--json")
    data = json.loads(out)
    assert status == 0
    assert list(data["frameworks"]) == ["numpy", "tensorbridge"]
    assert data["frameworks"]["tensorbridge"]["producer"]["ok"] is True
    # The known bugs of frameworks not graded have no status.
    assert {b["status"] for b in data["known_bugs"]} == {None}


def test_all_as_text_ends_with_the_tables(capsys):
    status, out, _ = check(capsys, "--all", "--frameworks", "tensorbridge")
    assert status == 0
    assert "producer check" in out and "consumer check" in out
    assert out.rstrip().endswith("s")  # "1 frameworks graded in 0.9 s"


def test_an_unknown_framework_is_exit_status_2(capsys):
    status, _, err = check(capsys, "--all", "--frameworks", "numpy,nope")
    assert status == 2 and "unknown framework(s) nope" in err


def test_an_error_inside_the_function_is_its_own(capsys):
    status, out, err = check(capsys, 'lambda: np.ones("x")')
    assert status == 2 and out == ""
    assert "TypeError: 'str' object cannot be interpreted as an integer" in err
    assert "cannot be called without arguments" not in err


@pytest.mark.parametrize("frameworks", [",", "", " , "])
def test_frameworks_naming_nothing_is_exit_status_2(capsys, frameworks):
    status, out, err = check(capsys, "--all", "--frameworks", frameworks)
    assert status == 2 and out == ""
    assert "names no framework" in err


def test_frameworks_none_of_them_installed_is_exit_status_2(capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "dlpack" else real(name, *a)
    )
    status, out, err = check(capsys, "--all", "--frameworks", "pydlpack")
    assert status == 2 and out == ""
    assert "none of pydlpack is installed here" in err


def test_a_framework_that_cannot_be_imported_is_not_graded(capsys, monkeypatch, tmp_path):
    # The children take this process's sys.path: this pyarrow is theirs.
    (tmp_path / "pyarrow.py").write_text("raise ImportError('broken pyarrow (test)')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pyarrow", raising=False)
    status, out, err = check(capsys, "--all", "--frameworks", "pyarrow,tensorbridge", "--json")
    assert status == 1
    assert "pyarrow could not be imported" in err and "broken pyarrow (test)" in err
    assert list(json.loads(out)["frameworks"]) == ["tensorbridge"]


@needs("torch")
def test_torch_fails_and_its_abort_is_a_recorded_failure():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-m", "tensorbridge", "check", "--consumer", "torch.from_dlpack"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 1, result.stderr  # the command itself ran to its end
    line = next(x for x in result.stdout.splitlines() if "consumer.negative_strides" in x)
    assert "FAIL" in line and "SIGABRT" in line
    command = [sys.executable, "-m", "tensorbridge", "check", "torch.arange(12.0).reshape(3, 4)"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 1
    assert "FAIL  producer.copy.true" in result.stdout  # IS_COPIED not set


@needs("jax")
def test_both_spellings_of_a_jax_consumer_get_the_same_grades(capsys):
    # Both with JAX's 64-bit types on, as `tensorbridge inspect` does.
    grades = []
    for expr in ("jax.dlpack.from_dlpack", "jax.dlpack:from_dlpack"):
        _, out, _ = check(capsys, "--consumer", expr, "--json")
        grades.append({r["name"]: r["status"] for r in json.loads(out)["results"]})
    assert grades[0] == grades[1]
    assert grades[0]["consumer.dtypes"] == "pass"


def _ended(pid: int) -> bool:
    """Whether the process ``pid`` has ended (killed; a zombie until reaped)."""
    for _ in range(1000):
        try:
            stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            # Gone, or reaped between the open and the read (ESRCH).
            return True
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return True
        time.sleep(0.01)
    return False


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="needs /proc")
def test_ctrl_c_during_all_kills_the_running_children_at_once(capsys, ctrl_c):
    from tensorbridge.testing import _isolate

    pids: list[int] = []

    def interrupt() -> None:
        for _ in range(120 * 100):
            with _isolate._LIVE_LOCK:
                pids.extend(p.pid for p in _isolate._LIVE)
            if pids:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(Interrupted) as info:
            main(["check", "--all", "--frameworks", "numpy,tensorbridge"])
        # Killed without waiting for them: by now each has ended.
        assert pids and all(_ended(pid) for pid in pids)
    finally:
        # Once the grading threads have stopped (`Cancelled`), children may start again.
        for _ in range(120 * 100):
            if not any(t.name.startswith("ThreadPoolExecutor") for t in threading.enumerate()):
                break
            time.sleep(0.01)
        _isolate.uncancel()
    # What the console entry point writes, in one line, before it exits with 130.
    assert info.value.command == "tensorbridge check"
    assert re.fullmatch(r"stopping \d+ running checks", info.value.what)


def test_the_help_says_expr_is_code_that_is_run_and_what_timeout_bounds(capsys):
    with pytest.raises(SystemExit) as info:
        main(["check", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert info.value.code == 0
    assert "EXPR is Python code, run as written" in out
    assert "importing the framework and running EXPR" in out
    assert "jax_enable_x64" in out and "130 on Ctrl-C" in out
