"""Progress lines on stderr for the DR tools, timed from the command's start.

A ``Progress`` is a plain picklable object, so the export processes a reconciliation starts report in
the same format and on the same clock (the monotonic clock is system-wide). ``every`` throttles a
chatty caller (the export reports every batch of rows) to a line per so many seconds.
"""

from __future__ import annotations

import sys
import time


class Progress:
    """``progress(message)`` prints ``[   12.3s] message`` unless quiet (or throttled)."""

    def __init__(self, quiet: bool = False, started: float | None = None, every: float = 0.0) -> None:
        self.quiet = quiet
        self.started = time.monotonic() if started is None else started
        self.every = every
        self._last = float("-inf")

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        if self.quiet or now - self._last < self.every:
            return
        self._last = now
        print(f"[{now - self.started:7.1f}s] {message}", file=sys.stderr, flush=True)

    def throttled(self, every: float) -> Progress:
        """The same lines, at most one per ``every`` seconds."""
        return Progress(self.quiet, self.started, every)
