# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C at a terminal: every command stops with status 130 and one line that says
so, whatever a framework does with the interrupt (tensorbridge._cli.interrupts).

Each test runs the console script as a user does, on a pseudo-terminal of its own
(so the command shows its progress, as on a real one), waits for a moment it can
see (a progress line, a line EXPR prints, a child process of ``check``), and then
types Ctrl-C: the terminal sends SIGINT to the command's process group, as a key
press does. No test asserts how long anything took (the machines are shared); each
waits at most `DEADLINE` seconds for what should come, to fail rather than hang.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time

import pytest
from needs import needs

pytestmark = pytest.mark.skipif(
    not pathlib.Path("/proc/self/stat").exists(),
    reason="needs a pseudo-terminal (os.openpty) and /proc",
)

#: Seconds any one step may take before the test fails instead of hanging (a full
#: matrix imports every framework: about 10 s here).
DEADLINE = 300

NOTE = re.compile(r"tensorbridge( check)?: interrupted")


def _console_script() -> str:
    """The ``tensorbridge`` command of this interpreter's environment."""
    here = pathlib.Path(sys.executable).parent / "tensorbridge"
    found = str(here) if here.exists() else shutil.which("tensorbridge")
    if found is None:
        pytest.skip("the tensorbridge console script is not installed")
    return found


#: Runs argv[1:] as the session leader of a new session whose controlling terminal
#: is its stdin (a pseudo-terminal): what a shell does for a command it starts.
_ON_TERMINAL = (
    "import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


class Terminal:
    """The console script running on a pseudo-terminal of its own."""

    def __init__(self, *args: str, cwd: str | None = None, path: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        if path is not None:  # a folder of modules that come first
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))
        self.fd, terminal = os.openpty()
        # A terminal of 50 lines of 200 columns (a new one has no size).
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _ON_TERMINAL, _console_script(), *args],
                stdin=terminal,
                stdout=terminal,
                stderr=terminal,
                cwd=cwd,
                env=env,
            )
        finally:
            os.close(terminal)
        self.pid = self.process.pid
        self.output = ""

    def read(self, timeout: float) -> bool:
        """Read what is there within `timeout` seconds; False at the end of output."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the command closed the terminal (it ended)
            return False
        if not data:
            return False
        self.output += data.decode("utf-8", "replace")
        return True

    def wait_for(self, pattern: str) -> None:
        """Read until `pattern` (a regular expression) has been shown."""
        end = time.monotonic() + DEADLINE
        while not re.search(pattern, self.output):
            if time.monotonic() > end or not self.read(0.05):
                self.kill()
                pytest.fail(f"{pattern!r} was never shown; the terminal showed:\n{self.output}")

    def ctrl_c(self) -> None:
        """Type Ctrl-C (the terminal sends SIGINT to the foreground process group)."""
        os.write(self.fd, b"\x03")

    def finish(self) -> int:
        """Read to the end; the exit status."""
        end = time.monotonic() + DEADLINE
        while self.read(0.05):
            if time.monotonic() > end:
                self.kill()
                pytest.fail(f"the command did not stop; the terminal showed:\n{self.output}")
        try:
            status = self.process.wait(timeout=DEADLINE)
        finally:
            os.close(self.fd)
        return status

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def _checks(pid: int) -> list[int]:
    """The processes whose parent is `pid` and that run checks (not, say, the build
    an editable install starts on import)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"_isolate" in command:
            found.append(int(entry.name))
    return found


def _stopped_with_the_note(terminal: Terminal) -> None:
    status = terminal.finish()
    shown = terminal.output
    assert status == 130, shown
    notes = [line for line in re.split(r"[\r\n]+", shown) if NOTE.search(line)]
    assert len(notes) == 1, shown
    assert "Traceback" not in shown and "Exception ignored" not in shown, shown


# --------------------------------------------------------------------------
# The matrix
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "moment",
    [
        pytest.param(r"importing numpy", id="before the framework imports"),
        pytest.param(r"importing torch", id="during torch's import", marks=needs("torch")),
        pytest.param(
            r"importing tensorflow",
            id="during tensorflow's import",
            marks=needs("tensorflow", "jax"),
        ),
        pytest.param(r"(timing|probing) \w+→", id="after the imports: the exchanges"),
    ],
)
def test_ctrl_c_stops_the_matrix_and_prints_no_table(moment):
    terminal = Terminal()
    terminal.wait_for(moment)
    terminal.ctrl_c()
    _stopped_with_the_note(terminal)
    # Never a run that looks complete, with a framework missing or fewer exchanges.
    assert "frameworks:" not in terminal.output and "exchanges in" not in terminal.output


#: A framework's import that mishandles a KeyboardInterrupt, each as one was seen
#: doing it: swallowed (JAX's gc callback, during TensorFlow's import, which then
#: completed), turned into an ImportError (an import that catches everything), and
#: swallowed by code that then goes on for long (only the watchdog can end it).
MISHANDLED = {
    "swallowed": "try:\n    time.sleep(600)\nexcept KeyboardInterrupt:\n    pass\n",
    "turned into an ImportError": (
        "try:\n    time.sleep(600)\nexcept BaseException as exc:\n"
        "    raise ImportError('the native runtime failed to load') from exc\n"
    ),
    "swallowed, then a long wait": (
        "try:\n    time.sleep(600)\nexcept KeyboardInterrupt:\n    time.sleep(600)\n"
    ),
    # The kernel gives a process's SIGINT to any thread that does not block it; one
    # of a BLAS pool, say, while the main thread sleeps in C: that sleep is not
    # interrupted and Python's handler does not run (seen in CI). Blocking SIGINT on
    # the main thread makes it so every time.
    "delivered to another thread": (
        "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
        "time.sleep(600)\n"
    ),
}


@pytest.mark.parametrize("mishandled", sorted(MISHANDLED))
def test_ctrl_c_stops_the_matrix_whatever_a_framework_does_with_it(tmp_path, mishandled):
    # tvm_ffi is shadowed by a module whose import waits, and mishandles the interrupt.
    (tmp_path / "tvm_ffi.py").write_text(
        "import sys, time\nprint('tvm_ffi is importing', file=sys.stderr, flush=True)\n"
        + MISHANDLED[mishandled]
    )
    terminal = Terminal("--frameworks", "numpy,tvm_ffi", path=str(tmp_path))
    terminal.wait_for("tvm_ffi is importing")
    terminal.ctrl_c()
    _stopped_with_the_note(terminal)
    assert "frameworks:" not in terminal.output and "left out" not in terminal.output


def test_an_interrupt_a_producer_swallows_all_the_way_still_ends_with_130(tmp_path):
    # Its __dlpack__ catches the KeyboardInterrupt and raises a TypeError instead;
    # inspect reports that as the export failing, and would end with status 0.
    (tmp_path / "swallowing.py").write_text(
        "import sys, time\n"
        "class Array:\n"
        "    def __dlpack_device__(self):\n"
        "        return (1, 0)\n"
        "    def __dlpack__(self, **kwargs):\n"
        "        print('exporting', file=sys.stderr, flush=True)\n"
        "        try:\n"
        "            time.sleep(600)\n"
        "        except KeyboardInterrupt:\n"
        "            raise TypeError('no export today') from None\n"
    )
    terminal = Terminal("inspect", "swallowing.Array()", cwd=str(tmp_path))
    terminal.wait_for("exporting")
    terminal.ctrl_c()
    _stopped_with_the_note(terminal)


def test_ctrl_c_stops_the_dtype_sweep():
    terminal = Terminal("--dtypes", "--no-timing")
    terminal.wait_for(r"dtype sweep: \w+")
    terminal.ctrl_c()
    _stopped_with_the_note(terminal)
    assert "exchanges in" not in terminal.output


def test_a_second_ctrl_c_ends_it_at_once():
    terminal = Terminal()
    terminal.wait_for("importing numpy")
    terminal.ctrl_c()
    terminal.ctrl_c()
    _stopped_with_the_note(terminal)


# --------------------------------------------------------------------------
# inspect and check
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "moment"),
    [
        pytest.param(
            "(print('evaluating', flush=True), __import__('time').sleep(600))",
            "evaluating",
            id="before any import",
        ),
        pytest.param(
            "tf.constant([1.0])",
            r"importing tensorflow",
            id="during tensorflow's import",
            marks=needs("tensorflow", "jax"),
        ),
        pytest.param(
            "(jnp.ones(3), print('imported', flush=True), __import__('time').sleep(600))",
            "imported",
            id="after jax's import",
            marks=needs("jax"),
        ),
    ],
)
def test_ctrl_c_stops_inspect(expr, moment):
    terminal = Terminal("inspect", expr)
    terminal.wait_for(moment)
    terminal.ctrl_c()
    _stopped_with_the_note(terminal)
    assert "__dlpack__(" not in terminal.output


def _wait_for_children(terminal: Terminal) -> list[int]:
    end = time.monotonic() + DEADLINE
    while not (children := _checks(terminal.pid)):
        terminal.read(0.05)
        if time.monotonic() > end:
            terminal.kill()
            pytest.fail(f"no check started; the terminal showed:\n{terminal.output}")
    return children


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            ("check", "lambda: (__import__('time').sleep(600), np.ones(3))[1]"),
            id="check EXPR",
        ),
        pytest.param(("check", "--all", "--frameworks", "numpy,tensorbridge"), id="check --all"),
    ],
)
def test_ctrl_c_stops_check_and_its_children(args):
    terminal = Terminal(*args)
    children = _wait_for_children(terminal)
    terminal.ctrl_c()
    _stopped_with_the_note(terminal)
    # (check --all says "stopping N running checks" when its main thread gets there
    # before the watchdog: not asserted, a loaded machine may take longer)
    # The checks ran in sessions of their own (the terminal's Ctrl-C does not reach
    # them): the command killed them.
    for child in children:
        path = pathlib.Path(f"/proc/{child}/stat")
        for _ in range(DEADLINE * 20):
            try:
                if path.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    break
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"child {child} of the interrupted check still runs")
