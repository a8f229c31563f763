"""max-disk-usage and min-disk-free between two scans: the bytes the broker writes count against the
room the last scan saw, and producers are blocked as soon as they would pass a limit, before the next
scan; a scan then confirms or lifts the block.

The disk is simulated (`DiskMonitor` takes the functions that look at it); the wiring is checked on
whole brokers joined in memory: what the journal and the page files write is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_core.disk import DiskMonitor, DiskSpace, room_of
from broker_core.usage import Budget
from tests.support.paging import settings
from tests.support.pair import Network

TOTAL = 100_000


class FakeDisk:
    """File systems by directory: each directory's device and how much of it is used."""

    def __init__(self, home: Path, **devices: int) -> None:
        self.home = home
        self.device = {home / d: dev for d, dev in devices.items()}
        self.used = {dev: 0 for dev in devices.values()}
        for directory in self.device:
            directory.mkdir()

    def space(self, directory: Path) -> DiskSpace:
        return DiskSpace(TOTAL, TOTAL - self.used[self.device[directory]])

    def device_of(self, directory: Path) -> int:
        return self.device[directory]


def monitor(disk: FakeDisk, max_usage: int = 50, min_free: int = -1) -> tuple[DiskMonitor, Budget, list[str]]:
    budget = Budget()
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    log = logging.getLogger(f"test.disk.{id(lines)}")
    log.addHandler(Lines())
    log.propagate = False
    log.setLevel(logging.INFO)
    directories = list(disk.device)
    return (
        DiskMonitor(directories, max_usage, min_free, budget, log, disk.space, disk.device_of),
        budget,
        lines,
    )


def test_room_is_what_a_file_system_takes_before_a_limit() -> None:
    space = DiskSpace(TOTAL, 60_000)  # 40 % used
    assert room_of(space, 50, -1) == 10_000
    assert room_of(space, -1, 55_000) == 5_000
    assert room_of(space, 50, 55_000) == 5_000  # the nearer limit
    assert room_of(space, 30, -1) < 0  # past it already


def test_bytes_written_since_the_scan_block_at_the_limit_and_a_scan_confirms(
    tmp_path: Path,
) -> None:
    disk = FakeDisk(tmp_path, journal=1)
    disk.used[1] = 40_000
    monitor_, budget, lines = monitor(disk)
    confirms: list[object] = []
    monitor_.confirm = confirms.append  # the server's: once the journal wrote what it was given
    assert not monitor_.check()
    wrote = monitor_.meter(tmp_path / "journal")
    wrote(9_000)
    assert not budget.disk_full and not confirms  # 49 %: not yet
    wrote(2_000)
    assert budget.disk_full and monitor_.estimated  # 51 %, by the estimate: blocked before any scan
    assert len(confirms) == 1 and any("AMQ222210" in line and "Estimated" in line for line in lines)
    wrote(5_000)
    assert len(confirms) == 1  # blocked already: one confirmation
    disk.used[1] = 51_000  # the writes reached the disk
    assert monitor_.check() and budget.disk_full and not monitor_.estimated  # confirmed
    assert sum("AMQ222210" in line for line in lines) == 1 and not any("AMQ221080" in line for line in lines)


def test_a_scan_lifts_a_block_the_estimate_made_when_space_was_freed_meanwhile(tmp_path: Path) -> None:
    disk = FakeDisk(tmp_path, journal=1)
    disk.used[1] = 45_000
    monitor_, budget, lines = monitor(disk)
    confirms: list[Callable[[], None]] = []
    monitor_.confirm = confirms.append
    monitor_.check()
    woken: list[str] = []
    budget.wait(lambda: woken.append("producer"))
    monitor_.meter(tmp_path / "journal")(6_000)
    assert budget.disk_full and not woken
    disk.used[1] = 30_000  # a page file was deleted, a journal compacted: the estimate was too high
    confirms[0]()  # the confirming scan
    assert not budget.disk_full and woken == ["producer"]
    assert any("AMQ221080" in line for line in lines)
    monitor_.meter(tmp_path / "journal")(6_000)  # counted from the new scan: 36 %
    assert not budget.disk_full


def test_directories_on_one_file_system_share_its_room_and_others_keep_their_own(tmp_path: Path) -> None:
    disk = FakeDisk(tmp_path, journal=1, paging=1, large=2)
    disk.used[1] = disk.used[2] = 45_000
    monitor_, budget, _ = monitor(disk)
    monitor_.confirm = lambda check: None
    monitor_.check()
    monitor_.meter(tmp_path / "journal")(3_000)
    monitor_.meter(tmp_path / "large")(4_000)  # another file system: its own 5,000
    assert not budget.disk_full
    monitor_.meter(tmp_path / "paging")(3_000)  # the journal's file system: 6,000 of its 5,000
    assert budget.disk_full


def test_min_disk_free_is_estimated_and_unknown_directories_or_a_disabled_monitor_count_nothing(
    tmp_path: Path,
) -> None:
    disk = FakeDisk(tmp_path, journal=1)
    disk.used[1] = 40_000
    monitor_, budget, _ = monitor(disk, max_usage=-1, min_free=55_000)
    monitor_.confirm = lambda check: None
    monitor_.check()
    monitor_.meter(tmp_path / "elsewhere")(50_000)
    assert not budget.disk_full
    monitor_.meter(tmp_path / "journal")(5_001)
    assert budget.disk_full
    off, budget_off, _ = monitor(disk, max_usage=-1, min_free=-1)
    off.check()
    off.meter(tmp_path / "journal")(1 << 40)
    assert not budget_off.disk_full


@pytest.mark.parametrize("persistence", [True, False])
def test_a_broker_counts_what_its_journal_and_its_page_files_write(tmp_path: Path, persistence: bool) -> None:
    """Wiring: without persistence only page files are written (the address's limit is 2,000 bytes);
    with it, the journal (the address has no limit, so nothing pages)."""
    net = Network(tmp_path)
    limits = settings(max_size=2_000) if not persistence else ""
    net.broker("dc1", persistence=persistence, settings=limits, extra="<max-disk-usage>50</max-disk-usage>")
    net.start_all()
    server = net.server("dc1")
    monitor_ = server.disk
    monitor_.space = lambda directory: DiskSpace(TOTAL, TOTAL - 40_000)
    monitor_.device = lambda directory: 1
    confirms: list[object] = []
    monitor_.confirm = confirms.append
    monitor_.check()  # 10,000 bytes of room
    client = net.client("dc1")
    sent = 0
    while not server.budget.disk_full and sent < 40:
        client.send("orders", "x" * 1_000)
        net.pump()
        sent += 1
    assert server.budget.disk_full and len(confirms) == 1  # blocked by the estimate alone
    assert 8 <= sent <= 12, sent  # about 1,100 bytes each
    assert server.queues["orders"].depth == sent  # every message taken: the block is on credit


def test_a_broker_counts_what_it_spools_of_a_large_delivery(tmp_path: Path) -> None:
    """Wiring: a delivery past amqpMinLargeMessageSize is written to its spool file frame by frame, and
    those bytes count too (no journal, no paging here)."""
    net = Network(tmp_path)
    net.broker("dc1", extra="<max-disk-usage>50</max-disk-usage>")
    net.start_all()
    server = net.server("dc1")
    server.disk.space = lambda directory: DiskSpace(TOTAL, TOTAL - 40_000)
    server.disk.device = lambda directory: 1
    server.disk.confirm = lambda check: None
    server.disk.check()  # 10,000 bytes of room
    client = net.client("dc1")
    small = client.send("orders", "x" * 9_000)
    net.pump()
    assert client.accepted(small) and not server.budget.disk_full  # one frame, never on disk
    client.send("orders", "x" * 300_000)  # three frames: past 100 KiB, spooled
    net.pump()
    assert server.budget.disk_full
