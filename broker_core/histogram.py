"""A histogram a part keeps of something it times or sizes (pure, no dependency, no lock).

The part that measures calls `observe` (one bisect and one increment); whoever reports reads the counts
when asked (metrics on a scrape). Written by one thread; a reader on another thread may see a count and
a sum from one observation apart, which a scrape tolerates. Bucket `i` counts the values at or below
`bounds[i]`; the last counts the values above every bound.
"""

from __future__ import annotations

from bisect import bisect_left

# Seconds from a mirror event to its target's Accepted, and of a sync mirror's wait
LATENCY_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                  30.0, 60.0, 300.0)  # fmt: skip
# Seconds one fdatasync takes
FSYNC_BOUNDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# Records in one group commit
BATCH_BOUNDS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0)


class Histogram:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> tuple[list[tuple[float, int]], int, float]:
        """((upper bound, values at or below it) per bound, then +inf; count; sum) as Prometheus reads it."""
        counts = list(self.counts)  # one copy: the writer may go on meanwhile
        total, out = 0, []
        for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
            total += n
            out.append((bound, total))
        return out, total, self.sum
