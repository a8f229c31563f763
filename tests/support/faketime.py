"""A broker's wall clock jumped at run time, as an NTP step or a wrong RTC would: Debian's libfaketime
(package `libfaketime`, installed by scripts/install-deps) preloaded into the broker's process, its offset
read from a file of its own that the test rewrites ("+86400": a day ahead).

What libfaketime 0.9.10 (Debian 12) does, checked on this machine:
- `DONT_FAKE_MONOTONIC=1` keeps CLOCK_MONOTONIC true: only the wall clock jumps, as a real clock step does
  (the kernel never steps the monotonic clock). Without it libfaketime fakes CLOCK_MONOTONIC too: it then
  starts at the faked wall-clock time and jumps with it, and threads' timed waits hang.
- With it, Python 3.11's `time.sleep` fails with EINVAL: it sleeps with clock_nanosleep(CLOCK_MONOTONIC,
  TIMER_ABSTIME), whose deadline libfaketime shifts by the wall clock's offset even so (a known
  libfaketime bug). The faked process loads `faketime_site/sitecustomize.py`, which
  sleeps with select() instead. Timed waits of threads, selectors, asyncio and sockets are unaffected
  (checked across jumps of +10 min and -5 min).
- `NO_FAKE_STAT=1`: file times are read as stored. Otherwise stat() reports them shifted by the current
  offset, so a file's mtime would seem to move when the clock jumps, which no real clock step does.
- `FAKETIME_CACHE_DURATION=1`: the offset file is read at most once a second (a jump takes effect within
  a second). `FAKETIME_NO_CACHE=1` reads it at every clock call: 6 us a call instead of under 1.

The broker's log timestamps come from its faked wall clock: the soak's checker maps them back with the
offsets it set (tests/support/history.py)."""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path

SITE = Path(__file__).with_name("faketime_site")  # its sitecustomize.py: time.sleep without the bug


def library() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))  # the one with pthread calls
    return found[0] if found else None


def availability() -> tuple[bool, str]:
    if library() is None:
        return False, "libfaketime is not installed (Debian package libfaketime)"
    return True, ""


class WallClock:
    """One process's wall clock: its offset from true time, set by `jump`; each setting recorded as
    (the true time it was set, the offset)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.settings: list[tuple[float, int]] = []
        self.set(0)

    def environment(self) -> dict[str, str]:
        """What a process started on this clock has in its environment (a broker's PYTHONPATH puts this
        first)."""
        lib = library()
        assert lib is not None, availability()[1]
        return {
            "LD_PRELOAD": lib,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_CACHE_DURATION": "1",
            "DONT_FAKE_MONOTONIC": "1",
            "NO_FAKE_STAT": "1",
            "PYTHONPATH": str(SITE),
        }

    def set(self, offset: int) -> None:
        """The clock is `offset` seconds off true time from now on (within the cache's second)."""
        staging = self.path.with_suffix(".new")
        staging.write_text(f"{offset:+d}\n")
        os.replace(staging, self.path)  # libfaketime never reads half a file
        self.offset = offset
        self.settings.append((time.time(), offset))
