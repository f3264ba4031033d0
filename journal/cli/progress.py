"""Progress of long work: what commands report, and a counter on a terminal."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["NO_PROGRESS", "Progress", "TerminalProgress"]


class Progress(Protocol):
    """Told when a batch of work starts, as each item is done, and when it ends."""

    def begin(self, label: str, total: int) -> None:
        """``total`` items of work described by ``label`` start."""

    def step(self) -> None:
        """One more item is done."""

    def end(self) -> None:
        """The work is over (finished or failed)."""


class _Silent:
    def begin(self, label: str, total: int) -> None:
        pass

    def step(self) -> None:
        pass

    def end(self) -> None:
        pass


NO_PROGRESS: Progress = _Silent()
"""A :class:`Progress` that shows nothing."""


class TerminalProgress:
    """A one-line counter on ``stream`` (stderr), shown only on a terminal.

    Batches of one item show nothing; the line is erased when the batch ends.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.label = ""
        self.total = 0
        self.done = 0
        self.enabled = False

    def begin(self, label: str, total: int) -> None:
        """Start counting ``total`` items under ``label``."""
        self.label, self.total, self.done = label, total, 0
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = total > 1 and callable(isatty) and bool(isatty())

    def step(self) -> None:
        """Count one more item done."""
        self.done += 1
        if self.enabled:
            self.stream.write(f"\r{self.label} {self.done}/{self.total}")
            self.stream.flush()

    def end(self) -> None:
        """Erase the counter."""
        if self.enabled:
            self.stream.write("\r" + " " * (len(self.label) + 24) + "\r")
            self.stream.flush()
