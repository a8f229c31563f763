"""Each queue's message rates, in and out, from its counters sampled every few seconds.

A queue counts what it added and what was acknowledged; the rate is the difference between the last two
samples over the time between them. Sampling walks the queues once per interval on the loop (a dict
lookup and two integers a queue), whether or not a page is open, so a page shows a steady recent rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from broker_core.queues import Queue

INTERVAL = 5.0  # seconds between two samples

Sample = dict[str, tuple[int, int]]  # queue name -> (added, acknowledged)


class Rates:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._previous: tuple[float, Sample] | None = None
        self._last: tuple[float, Sample] | None = None

    def sample(self, queues: Iterable[Queue]) -> None:
        self._previous = self._last
        self._last = (self.clock(), {q.name: (q.added, q.acked) for q in queues})

    def of(self, name: str) -> tuple[float, float]:
        """(messages in per second, messages acknowledged per second) between the last two samples."""
        if self._previous is None or self._last is None:
            return 0.0, 0.0
        (t0, before), (t1, after) = self._previous, self._last
        if name not in before or name not in after or t1 <= t0:
            return 0.0, 0.0
        (added0, acked0), (added1, acked1) = before[name], after[name]
        seconds = t1 - t0
        return max(0, added1 - added0) / seconds, max(0, acked1 - acked0) / seconds
