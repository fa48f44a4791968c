# SPDX-License-Identifier: Apache-2.0
"""``tensorbridge check``: an expression's producer or consumer graded in child
processes that evaluate the expression themselves; exit status 1 on a failure, 2 on an
expression that cannot be checked; ``--all`` for every installed framework."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from needs import needs

from tensorbridge._cli import main


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
