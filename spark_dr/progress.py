"""Progress lines on stderr for the DR tools, timed from the command's start, and a heartbeat.

A ``Progress`` is a plain picklable object, so the export processes a reconciliation starts report in
the same format and on the same clock (the monotonic clock is system-wide). ``every`` throttles a
chatty caller (the export reports every batch of rows) to a line per so many seconds.

A ``Heartbeat`` (a thread) repeats the current step every few seconds while nothing else is said,
with what Spark's status tracker knows of the jobs running then (tasks done of all, running), so a
long Spark job never leaves the operator looking at a silent terminal.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


class Progress:
    """``progress(message)`` prints ``[   12.3s] message`` unless quiet (or throttled)."""

    def __init__(self, quiet: bool = False, started: float | None = None, every: float = 0.0) -> None:
        self.quiet = quiet
        self.started = time.monotonic() if started is None else started
        self.every = every
        self._last = float("-inf")
        self.step = ""  # the last message: what the command is doing now

    def __call__(self, message: str) -> None:
        self.step = message
        now = time.monotonic()
        if self.quiet or now - self._last < self.every:
            return
        self._last = now
        print(f"[{now - self.started:7.1f}s] {message}", file=sys.stderr, flush=True)

    def beat(self, detail: str) -> None:
        """A line on the current step, which stays the current step."""
        step = self.step
        self(f"{step}: {detail}" if step else detail)
        self.step = step

    def quiet_for(self) -> float:
        """Seconds since the last line."""
        return time.monotonic() - self._last

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def throttled(self, every: float) -> Progress:
        """The same lines, at most one per ``every`` seconds."""
        return Progress(self.quiet, self.started, every)


class Heartbeat:
    """While running (a context manager), a line every ``every`` seconds of silence: the current step,
    and the running Spark jobs' tasks once ``spark`` is set (a SparkSession)."""

    def __init__(self, progress: Progress, every: float = 3.0) -> None:
        self.progress, self.every = progress, every
        self.spark: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dr-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        if not self.progress.quiet:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.every)):
            if self.progress.quiet_for() >= self.every:
                self.progress.beat(self.spark_jobs() or "still working")

    def spark_jobs(self) -> str:
        """What the status tracker says of the active jobs: tasks done of all, running; "" when none
        (or while Spark is not up)."""
        if self.spark is None:
            return ""
        try:
            tracker = self.spark.sparkContext.statusTracker()
            parts = []
            for job_id in tracker.getActiveJobsIds():
                job = tracker.getJobInfo(job_id)
                stages = [tracker.getStageInfo(s) for s in (job.stageIds if job else [])]
                stages = [s for s in stages if s is not None]
                done = sum(s.numCompletedTasks for s in stages)
                total = sum(s.numTasks for s in stages)
                running = sum(s.numActiveTasks for s in stages)
                parts.append(f"Spark job {job_id}: {done}/{total} tasks done, {running} running")
            return "; ".join(parts)
        except Exception:  # the context stopping under us: no beat rather than a traceback
            return ""
