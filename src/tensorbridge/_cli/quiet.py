# SPDX-License-Identifier: Apache-2.0
"""Keeping the frameworks' own chatter out of the command line's output.

The command imports frameworks only to try them, and what they print when they
start is not what the user asked for. Three layers of it, each kept out its own way:

- **Python warnings and logging** (PaddlePaddle's ``UserWarning`` about ccache,
  JAX's backend search logged at INFO once Paddle has given the root logger a
  handler): ignored and disabled below CRITICAL while `quiet` runs.
- **C++ logging that reads its level from the environment** (TensorFlow's and
  XLA's ``TF_CPP_MIN_LOG_LEVEL``, Paddle's glog): `QUIET_ENVIRONMENT`, set before
  any framework is imported unless the user set it (`set_environment`).
- **C++ logging that reads nothing** (TensorFlow 2.21 writes ``oneDNN custom
  operations are on`` through Abseil's logging before that is configured, on
  CPUs where oneDNN is on by default: those with AVX-512 or AMX; no environment
  variable but the one that turns oneDNN off silences it): whatever is written to
  the process's file descriptor 2 while `quiet` runs goes to the null device.
  tensorbridge's own messages and progress go through ``sys.stderr``, which points
  at the real stderr meanwhile, so they still show; a crash of a framework still
  says where (`faulthandler` writes to the real stderr).

None of this depends on the CPU: the descriptor is redirected whatever the
frameworks would print.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import TextIO

__all__ = ["QUIET_ENVIRONMENT", "native_stderr_dropped", "quiet", "set_environment"]

#: Set before any framework is imported, unless the user set them: TensorFlow's
#: (and XLA's, in jaxlib) C++ logging, and PaddlePaddle's glog, to errors only.
QUIET_ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "3", "GLOG_minloglevel": "2"}


def set_environment() -> None:
    """Set `QUIET_ENVIRONMENT` where the user has not (inherited by the processes
    the command starts)."""
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """While the frameworks are imported and probed: their Python warnings ignored,
    their logging below CRITICAL disabled, and what their C and C++ code writes to
    the process's stderr dropped (`native_stderr_dropped`). The command line prints
    its own messages through ``sys.stderr``, never through `logging`."""
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        with warnings.catch_warnings(), native_stderr_dropped():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _on_descriptor_2(stream: object) -> bool:
    """Whether writes to `stream` end up on file descriptor 2."""
    try:
        return stream.fileno() == 2  # type: ignore[attr-defined, no-any-return]
    except (AttributeError, OSError, ValueError):  # StringIO, closed, detached, None
        return False


#: The stream ``sys.stderr`` is while `native_stderr_dropped` runs: over a descriptor
#: of its own that is pointed at the real stderr on every entry. It is never closed:
#: what caches it meanwhile (a logging handler a framework made while it was
#: imported) still reaches the real stderr afterwards.
_stand_in: TextIO | None = None


def _stand_in_for(stream: TextIO) -> TextIO:
    global _stand_in
    if _stand_in is None or _stand_in.closed:
        _stand_in = os.fdopen(
            os.dup(2),
            "w",
            encoding=getattr(stream, "encoding", None) or "utf-8",
            errors=getattr(stream, "errors", None) or "backslashreplace",
            buffering=1,
        )
    else:
        _stand_in.flush()
        os.dup2(2, _stand_in.fileno())  # the real stderr of now (a caller may move it)
    return _stand_in


@contextlib.contextmanager
def _no_interrupt() -> Iterator[None]:
    """SIGINT held back (where the platform can) while the descriptors are swapped,
    so that a KeyboardInterrupt cannot leave file descriptor 2 pointing elsewhere."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = mask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def native_stderr_dropped() -> Iterator[None]:
    """What is written to file descriptor 2 while this runs is dropped (it goes to the
    null device); ``sys.stderr``, when it wrote there, is a stand-in over the real
    stderr meanwhile (so Python code, ours included, is still heard), and
    `faulthandler` reports a crash there. Without a descriptor 2 (a closed stderr)
    nothing changes."""
    stream = sys.stderr
    with contextlib.suppress(AttributeError, OSError, ValueError):
        stream.flush()
    with _no_interrupt():
        try:
            saved = os.dup(2)
        except OSError:
            saved = -1
        if saved >= 0:
            replaced = _on_descriptor_2(stream)
            if replaced:
                sys.stderr = _stand_in_for(stream)
            sink = os.open(os.devnull, os.O_WRONLY)
            os.dup2(sink, 2)
            os.close(sink)
            handler_was_on = faulthandler.is_enabled()
            # A framework that crashes the process still says where, on the real
            # stderr (what it wrote itself before dying is dropped).
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                faulthandler.enable(file=saved)
    if saved < 0:
        yield
        return
    try:
        yield
    finally:
        with _no_interrupt():
            faulthandler.disable()
            with contextlib.suppress(AttributeError, OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if replaced:
                sys.stderr = stream
            if handler_was_on:
                with contextlib.suppress(AttributeError, OSError, ValueError, RuntimeError):
                    faulthandler.enable()  # (on sys.stderr, as it is by default)
