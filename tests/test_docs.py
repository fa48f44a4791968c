# SPDX-License-Identifier: Apache-2.0
"""The README's promises: the tour runs, and CI runs the README's test command."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_readme_has_exactly_two_setup_commands():
    commands = re.findall(r"```sh\n(.*?)\n```", README, flags=re.S)
    assert len(commands) == 2
    assert commands[0].endswith(".venv/bin/tensorbridge")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```sh\n(.*?)\n```", README, flags=re.S)
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == commands[1]


def test_readme_tour_runs():
    pytest.importorskip("torch")
    block = re.search(r"```python\n(.*?)\n```", README, flags=re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    a = namespace["a"]
    assert a[0, 0] == -1  # the tour's write went through
    assert namespace["t"].strides == (4, -1)
