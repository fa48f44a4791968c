# SPDX-License-Identifier: Apache-2.0
"""Progress of the matrix on stderr: one line, rewritten in place with a carriage
return and cleared at the end, shown only when stderr is a terminal (a pipe or a
file gets nothing of it)."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``progress("importing torch… 3/9")`` shows that line in place of the last.

    `stream` is read when a line is shown (default: ``sys.stderr`` at that time);
    `enabled` None means "when that stream is a terminal"."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self._stream = stream
        self._enabled = enabled
        self._shown = 0  # length of the line on screen (0: none)

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def enabled(self) -> bool:
        if self._enabled is None:
            try:
                self._enabled = bool(self.stream.isatty())
            except (AttributeError, ValueError):  # no isatty, or closed
                self._enabled = False
        return self._enabled

    def __call__(self, text: str) -> None:
        if not self.enabled:
            return
        # One screen line at most: a wrapped line cannot be rewritten with \r.
        width = max(10, self._columns() - 1)
        text = text if len(text) <= width else text[: width - 1] + "…"
        self._write("\r" + text + " " * max(0, self._shown - len(text)))
        self._shown = len(text)

    def _columns(self) -> int:
        """The width of the terminal the line is shown on (not stdout's, which is
        often redirected while progress shows)."""
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            columns = 0
        # (0: a terminal that does not know its size, as a new pseudo-terminal)
        return columns or shutil.get_terminal_size().columns

    def clear(self) -> None:
        """Remove the line (before anything else is written to the stream, and at
        the end)."""
        if self._shown:
            self._write("\r" + " " * self._shown + "\r")
            self._shown = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self._enabled = False  # the terminal went away: stop showing progress
