"""Which failed logins to log: each (user, remote host) once, then at most once a minute with the count.

A client retrying a wrong password every second, or a backup with the wrong cluster password, would
otherwise write a line a second for as long as it runs; which user from which host is still news, said
at once. The acceptor's failed-login counter (a metric) counts every failure all the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable

INTERVAL = 60.0  # seconds between two lines about the failed logins of one (user, host)
CAPACITY = 1000  # (user, host) pairs remembered at once


class FailedLogins:
    """Which failed logins to say: each (user, remote host) once, then at most once an interval with how
    many there were since. A new pair is news and said at once. Bounded: past `capacity` pairs within
    one interval (someone trying many names), further new pairs go unsaid until older ones expire; the
    acceptor's failed-login counter counts every one all the same."""

    __slots__ = ("_said", "capacity", "clock", "interval")

    def __init__(
        self,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        capacity: int = CAPACITY,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self.capacity = capacity
        self._said: dict[tuple[str | None, str], tuple[float, int]] = {}

    def due(self, user: str | None, host: str) -> int | None:
        """None: stay quiet (this pair was said less than an interval ago); else how many of its failures
        went unsaid since its last line (0 the first time)."""
        key = (user, host)
        now = self.clock()
        said = self._said.get(key)
        if said is not None and now - said[0] < self.interval:
            self._said[key] = (said[0], said[1] + 1)
            return None
        if said is None and len(self._said) >= self.capacity:
            for old in [k for k, (at, _) in self._said.items() if now - at >= self.interval]:
                del self._said[old]
            if len(self._said) >= self.capacity:
                return None
        self._said[key] = (now, 0)
        return 0 if said is None else said[1]
