"""systemd's service protocol (sd_notify), without a dependency: datagrams to $NOTIFY_SOCKET.

`READY=1` once every server is up in its role, with `STATUS=` saying which (active and accepting, or a
passive backup waiting for its primary); `STATUS=` again at every HA transition; `RELOADING=1` then
`READY=1` around a SIGHUP reload; `STOPPING=1` on SIGTERM. `WATCHDOG=1` comes from a timer of the event
loop itself, at half of `WatchdogSec`: a loop that is stuck (a long blocking call, a busy loop) misses
it, and systemd restarts the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time


def notify(*fields: str) -> bool:
    """Send `fields` (e.g. "READY=1", "STATUS=...") as one message; False when systemd is not listening."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):
        path = "\0" + path[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.connect(path)
        s.sendall("\n".join(fields).encode())
        return True
    return False


def watchdog_interval() -> float | None:
    """Half of the watchdog timeout systemd set for this process, or None without one."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return max(int(usec) / 2_000_000, 0.01)
    except ValueError:
        return None


def monotonic_usec() -> str:
    return f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}"


class Watchdog:
    """Pings systemd's watchdog from the loop, every `interval` seconds, until stopped."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self.loop = loop
        self.interval = interval
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._ping()

    def _ping(self) -> None:
        notify("WATCHDOG=1")
        self._timer = self.loop.call_later(self.interval, self._ping)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
