"""The disk under the data directories: producers are blocked before it fills, as Artemis does.

`max-disk-usage` (percent of the file system in use, default 90; -1 turns it off) and `min-disk-free`
(bytes that must stay free; -1 off) are checked every `disk-scan-period` milliseconds on every file
system holding the journal, the page files or the large-message spool. While either is passed, no
producer gets credit (and a mirror target's links get none either); consumers, acknowledgements and the
mirror's own events go on, since they free space or are small. When space returns, producers get credit
again by themselves.

Between two scans a fast producer could fill the disk: so the bytes the broker writes there (journal
batches as they are handed to its writer, page records, spooled deliveries) are counted against the room
the last scan saw. Once they would pass a limit, producers are blocked at once, as if a scan had seen it
(`AMQ222210`), and the disk is scanned again as soon as what was written is on it: that scan confirms
the block, or lifts it (space was freed meanwhile: consumed pages, a compacted journal).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .usage import Budget

Check = Callable[[], None]


class DiskSpace(NamedTuple):
    total: int
    free: int  # available to this process (statvfs f_bavail)

    @property
    def used_percent(self) -> float:
        return 100.0 * (self.total - self.free) / self.total if self.total else 0.0


def space_of(directory: Path) -> DiskSpace:
    st = os.statvfs(directory)
    return DiskSpace(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def device_of(directory: Path) -> int:
    return os.stat(directory).st_dev


def too_full(space: DiskSpace, max_usage: int, min_free: int) -> bool:
    """Whether producers must be blocked on this file system."""
    if 0 <= max_usage < 100 and space.used_percent > max_usage:
        return True
    return min_free >= 0 and space.free < min_free


def room_of(space: DiskSpace, max_usage: int, min_free: int) -> int:
    """How many more bytes the file system takes before `too_full` (negative: past it already)."""
    room = space.free
    if 0 <= max_usage < 100:
        # used_percent > max_usage  <=>  free < total * (100 - max_usage) / 100
        room = min(room, space.free - (space.total * (100 - max_usage) + 99) // 100)
    if min_free >= 0:
        room = min(room, space.free - min_free)
    return room


class FileSystem:
    """One file system under the data directories: what the last scan saw, and what was written since."""

    __slots__ = ("directory", "room", "space", "written")

    def __init__(self, directory: Path, space: DiskSpace, room: int) -> None:
        self.directory = directory  # the first data directory on it (for log lines)
        self.space = space
        self.room = room  # bytes left before a limit, less what was written since the scan
        self.written = 0

    @property
    def estimate(self) -> DiskSpace:
        return DiskSpace(self.space.total, max(0, self.space.free - self.written))


class DiskMonitor:
    def __init__(
        self,
        directories: list[Path],
        max_usage: int,
        min_free: int,
        budget: Budget,
        log: logging.Logger,
        space: Callable[[Path], DiskSpace] = space_of,
        device: Callable[[Path], int] = device_of,
    ) -> None:
        self.directories = directories
        self.max_usage = max_usage
        self.min_free = min_free
        self.budget = budget
        self.log = log
        self.space = space
        self.device = device
        self.file_systems: dict[Path, FileSystem] = {}  # by data directory, as of the last scan
        # How to scan again once what was written is on the disk (the server: after the journal's next
        # batch); by default at once.
        self.confirm: Callable[[Check], None] = lambda check: check()
        self.estimated = False  # producers are blocked by the estimate; a scan has not confirmed it yet

    @property
    def enabled(self) -> bool:
        return 0 <= self.max_usage < 100 or self.min_free >= 0

    def meter(self, directory: Path) -> Callable[[int], None]:
        """What a writer to `directory` calls with the bytes it adds there (negative: frees)."""

        def wrote(n: int) -> None:
            self.wrote(directory, n)

        return wrote

    def wrote(self, directory: Path, n: int) -> None:
        """`n` bytes were written to `directory` (or freed there, negative) since the last scan."""
        fs = self.file_systems.get(directory)
        if fs is None:
            return
        fs.written += n
        fs.room -= n
        if fs.room < 0 and not self.budget.disk_full:
            self.budget.disk_full = self.estimated = True
            self._blocking(
                fs.directory, fs.estimate, " (Estimated: the last scan plus what was written since.)"
            )
            self.confirm(self.rescan)

    def rescan(self) -> None:
        self.check()

    def check(self) -> bool:
        """Look at the disk now; block or unblock producers; returns whether it is too full."""
        self.estimated = False
        if not self.enabled:
            return False
        full_on: tuple[Path, DiskSpace] | None = None
        by_device: dict[int, FileSystem] = {}
        file_systems: dict[Path, FileSystem] = {}
        for directory in self.directories:
            try:
                existing = _existing(directory)
                key = self.device(existing)
                fs = by_device.get(key)
                if fs is None:
                    space = self.space(existing)
                    fs = by_device[key] = FileSystem(
                        directory, space, room_of(space, self.max_usage, self.min_free)
                    )
            except OSError:
                continue
            file_systems[directory] = fs
            if full_on is None and too_full(fs.space, self.max_usage, self.min_free):
                full_on = (directory, fs.space)
        self.file_systems = file_systems
        budget = self.budget
        if full_on is not None and not budget.disk_full:
            budget.disk_full = True
            self._blocking(*full_on, "")
        elif full_on is None and budget.disk_full:
            budget.disk_full = False
            self.log.info("AMQ221080: Disk has room again; producers are unblocked")
            if not budget.no_room:
                budget.wake()
        return full_on is not None

    def _blocking(self, directory: Path, space: DiskSpace, how: str) -> None:
        self.log.warning(
            "AMQ222210: Free storage space is at %s of %s total (%s). Usage rate is %.1f%%, beyond "
            "the configured <max-disk-usage> %d%% or <min-disk-free> %s. System will start blocking "
            "producers.%s",
            _size(space.free),
            _size(space.total),
            directory,
            space.used_percent,
            self.max_usage,
            _size(self.min_free) if self.min_free >= 0 else "-1",
            how,
        )


def _existing(directory: Path) -> Path:
    """The directory, or its nearest existing parent (a data directory not made yet)."""
    while not directory.exists() and directory.parent != directory:
        directory = directory.parent
    return directory


def _size(n: int) -> str:
    value = float(n)
    if value < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"
