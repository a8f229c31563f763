"""The disk under the data directories: producers are blocked before it fills, as Artemis does.

`max-disk-usage` (percent of the file system in use, default 90; -1 turns it off) and `min-disk-free`
(bytes that must stay free; -1 off) are checked every `disk-scan-period` milliseconds on every file
system holding the journal or the page files. While either is passed, no producer gets credit (and a
mirror target's links get none either); consumers, acknowledgements and the mirror's own events go on,
since they free space or are small. When space returns, producers get credit again by themselves.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .usage import Budget


class DiskSpace(NamedTuple):
    total: int
    free: int  # available to this process (statvfs f_bavail)

    @property
    def used_percent(self) -> float:
        return 100.0 * (self.total - self.free) / self.total if self.total else 0.0


def space_of(directory: Path) -> DiskSpace:
    st = os.statvfs(directory)
    return DiskSpace(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def too_full(space: DiskSpace, max_usage: int, min_free: int) -> bool:
    """Whether producers must be blocked on this file system."""
    if 0 <= max_usage < 100 and space.used_percent > max_usage:
        return True
    return min_free >= 0 and space.free < min_free


class DiskMonitor:
    def __init__(
        self,
        directories: list[Path],
        max_usage: int,
        min_free: int,
        budget: Budget,
        log: logging.Logger,
        space: Callable[[Path], DiskSpace] = space_of,
    ) -> None:
        self.directories = directories
        self.max_usage = max_usage
        self.min_free = min_free
        self.budget = budget
        self.log = log
        self.space = space

    @property
    def enabled(self) -> bool:
        return 0 <= self.max_usage < 100 or self.min_free >= 0

    def check(self) -> bool:
        """Look at the disk now; block or unblock producers; returns whether it is too full."""
        full_on: tuple[Path, DiskSpace] | None = None
        for directory in self.directories:
            try:
                space = self.space(_existing(directory))
            except OSError:
                continue
            if too_full(space, self.max_usage, self.min_free):
                full_on = (directory, space)
                break
        budget = self.budget
        if full_on is not None and not budget.disk_full:
            directory, space = full_on
            budget.disk_full = True
            self.log.warning(
                "AMQ222210: Free storage space is at %s of %s total (%s). Usage rate is %.1f%%, beyond "
                "the configured <max-disk-usage> %d%% or <min-disk-free> %s. System will start blocking "
                "producers.",
                _size(space.free),
                _size(space.total),
                directory,
                space.used_percent,
                self.max_usage,
                _size(self.min_free) if self.min_free >= 0 else "-1",
            )
        elif full_on is None and budget.disk_full:
            budget.disk_full = False
            self.log.info("AMQ221080: Disk has room again; producers are unblocked")
            if not budget.no_room:
                budget.wake()
        return full_on is not None


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
