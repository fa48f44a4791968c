# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C for the command line: it stops within a second, with exit status 130 and
one line on stderr, whatever the frameworks do with the interrupt.

Python turns SIGINT into a KeyboardInterrupt wherever the main thread happens to
be, and the frameworks the command imports do not all let it through: JAX's
garbage-collection callback (``_xla_gc_callback``) reports it as unraisable and
goes on, so an import of TensorFlow that was interrupted completes; a framework's
import that catches everything turns it into an ImportError. So the console entry
point (`tensorbridge._cli.main`) replaces Python's handler with `install`'s, which

- records the interrupt (`interrupted`), so that the places that catch a
  framework's exceptions (an import that failed, a peer's exchange) tell an
  interrupt from a failure: `check` raises KeyboardInterrupt there again;
- raises KeyboardInterrupt, as Python's handler does, to stop what runs now;
- wakes a watchdog thread (started by `install`, and woken by the signal's wakeup
  descriptor, whichever thread the kernel delivered SIGINT to), which ends the
  process half a second later if it is still running (the note written first, then
  ``os._exit(130)``): a KeyboardInterrupt that was swallowed where no `check`
  follows soon, or a main thread blocked in C that never saw the signal, cannot
  keep it going;
- and, at a second Ctrl-C, ends the process at once.

KeyboardInterrupts reported as unraisable (the gc callback's) are not printed
once the interrupt is recorded. The note is written once, by whichever of the
main thread and the watchdog gets there first (`note`), to the stderr the command
started with. The console entry point also ends with 130 and the note when a Ctrl-C
was received but swallowed all the way (a producer's ``__dlpack__`` that catches it),
so a run that was interrupted never ends as if it had not been.

Called with arguments (the tests, a program embedding the command), `main` installs
nothing: the KeyboardInterrupt reaches the caller as usual.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = [
    "GRACE",
    "STATUS",
    "Interrupted",
    "check",
    "finishing",
    "install",
    "interrupted",
    "note",
]

#: The exit status of an interrupted command (128 + SIGINT, what a shell reports).
STATUS = 130
#: Seconds the watchdog gives the main thread to stop on its own after a Ctrl-C.
#: Python runs the signal handler only between bytecodes: a framework's import
#: holds the main thread in C for up to 0.4 s at a time here, so the handler runs
#: within that, and the process ends within a second in all.
GRACE = 0.5

_received = threading.Event()
_noted = threading.Lock()  # taken once, by the first note; never released
_finishing = False
_handled = False  # the Python handler ran (a second run ends the process)
#: A descriptor of the stderr the command started with, where the note goes (set
#: by `install`; the watchdog writes there whatever ``sys.stderr`` is meanwhile).
_note_fd = -1


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt whose note names the command and what was stopped
    (``tensorbridge check: interrupted: stopping 2 running checks``)."""

    def __init__(self, command: str = "tensorbridge", what: str = "") -> None:
        super().__init__(what)
        self.command = command
        self.what = what


def interrupted() -> bool:
    """Whether a Ctrl-C was received since `install`."""
    return _received.is_set()


def check() -> None:
    """Raise KeyboardInterrupt when a Ctrl-C was received (one a framework swallowed,
    or turned into another exception, is raised again here)."""
    if _received.is_set():
        raise KeyboardInterrupt


def note(command: str = "tensorbridge", what: str = "") -> None:
    """Write the one line that says the command was interrupted, once per process
    (``tensorbridge: interrupted``, with what was stopped when known), straight to a
    descriptor of the stderr the command started with: no lock another thread (or
    the interrupted code) may hold is taken, so a signal handler may call it."""
    if not _noted.acquire(blocking=False):
        return
    line = f"{command}: interrupted{': ' + what if what else ''}\n".encode()
    fd = _note_fd
    if fd < 0:
        try:
            fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            return
    with contextlib.suppress(OSError):
        os.write(fd, line)


def _end_now() -> None:
    note()
    os._exit(STATUS)


def _watchdog(wakeup: int) -> None:
    """Waits for the first Ctrl-C, then gives the main thread `GRACE` seconds.

    It learns of the Ctrl-C from the signal's wakeup descriptor, which Python's C
    handler writes to at once, on whatever thread the kernel delivered SIGINT to: in
    a process with other threads (BLAS pools, a framework's) that may not be the main
    thread, whose blocking call (a sleep, a long C loop) is then not interrupted, and
    the Python handler does not run until it returns. Without a descriptor (where
    none can be set), it waits for the Python handler instead."""
    if wakeup < 0:
        _received.wait()
    else:
        while True:
            select.select([wakeup], [], [])
            try:
                got = os.read(wakeup, 512)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                _received.wait()  # (the descriptor went away: the handler tells)
                break
            if signal.SIGINT in got:
                break
        _received.set()  # (check() raises from now on)
    time.sleep(GRACE)
    _end_now()


def _handler(signum: int, frame: FrameType | None) -> None:
    global _handled
    if _handled or _finishing:
        _end_now()  # a second Ctrl-C, or one while the output is flushed: no more waiting
    _handled = True
    _received.set()  # (the watchdog wakes, if it did not already)
    raise KeyboardInterrupt


def _quiet_unraisable(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    def hook(unraisable: Any) -> None:
        if _received.is_set() and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return  # recorded: it stops the command at the next check
        previous(unraisable)

    return hook


def finishing() -> None:
    """The command has returned: a Ctrl-C from now on (while its output is flushed)
    ends the process at once, with the note, rather than raising where nothing
    would catch it."""
    global _finishing
    _finishing = True


def install() -> None:
    """Handle Ctrl-C as this module says, for the rest of the process (the console
    entry point calls it first). The watchdog thread starts here, waiting (a thread
    started inside a signal handler could deadlock on threading's own locks). Off
    the main thread, where Python cannot set a signal handler, nothing changes."""
    global _note_fd
    if threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(OSError):
        _note_fd = os.dup(2)
    wakeup = -1
    try:
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        wakeup = read
    except (OSError, ValueError, AttributeError):
        pass  # (Windows takes a socket here: the watchdog waits for the handler)
    threading.Thread(
        target=_watchdog, args=(wakeup,), name="tensorbridge-ctrl-c", daemon=True
    ).start()
    signal.signal(signal.SIGINT, _handler)
    sys.unraisablehook = _quiet_unraisable(sys.unraisablehook)
