"""A real full disk under a real broker process: a small tmpfs holds its data directory.

- max-disk-usage: producers get no credit past the threshold (consumers go on), and get it back by
  themselves when space returns.
- An actual ENOSPC (the threshold off): every send in flight gets an outcome, Accepted or
  amqp:resource-limit-exceeded, none is left without one; the broker stays up, consumers keep working,
  nothing Accepted is lost and nothing refused appears; writes resume by themselves when space returns,
  and a restart holds exactly what was Accepted and not consumed.
"""

from __future__ import annotations

import os
import resource
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.peers.ports import WaitTimeout, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import BackgroundSender, receive, send_all

DISK_MB = 24
ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs of the test's own (root can mount one; elsewhere the test skips, and fails in CI)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    require("a tmpfs of the test's own", result.returncode == 0, result.stderr.strip() or "mount failed")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(disk: Path, leave: int) -> Path:
    """Write a ballast file until `leave` bytes are free on `disk`."""
    ballast = disk / "ballast"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with ballast.open("ab") as f:
        f.truncate(0)
        f.write(b"\0" * max(0, free - leave))
        f.flush()
        os.fsync(f.fileno())
    return ballast


def broker_on(
    disk: Path, home: Path, extra: str, scan_ms: int = 100, acceptor_params: str = ""
) -> BrokerProcess:
    data = disk / "data"
    extra = (
        f"<journal-file-size>1048576</journal-file-size><disk-scan-period>{scan_ms}</disk-scan-period>{extra}"
    )
    xml = {"extra": extra, "addresses": ORDERS, "acceptor_params": acceptor_params}
    broker = BrokerProcess(home=home, xml_kwargs=xml)
    broker.write_config()
    text = broker.config_path.read_text()
    for kind in ("journal", "bindings", "paging", "large-messages"):
        text = text.replace(f"<{kind}-directory>data/{kind}<", f"<{kind}-directory>{data}/{kind}<")
    broker.config_path.write_text(text)
    return broker


def bodies(prefix: str, n: int, size: int) -> list[str]:
    return [f"{prefix}{i:05d}:" + "x" * size for i in range(n)]


def test_past_max_disk_usage_producers_wait_and_consumers_go_on(small_disk: Path, tmp_path: Path) -> None:
    broker = broker_on(small_disk, tmp_path / "home", "<max-disk-usage>50</max-disk-usage>").start()
    before = send_all(broker.url, "orders", bodies("a", 20, 100))
    assert set(before.values()) == {"accepted"}
    ballast = fill(small_disk, leave=DISK_MB * 1024 * 1024 // 4)  # 75 % used
    wait_until(lambda: "AMQ222210" in broker.log(), 10, "the broker to see the disk over 50 %")
    blocked = send_all(broker.url, "orders", bodies("b", 5, 100), timeout=2)
    assert set(blocked.values()) == {"none"}  # no credit: nothing could even be sent
    assert len(receive(broker.url, "orders", 20)) == 20  # consumers keep working
    ballast.unlink()
    wait_until(lambda: "AMQ221080" in broker.log(), 10, "the broker to see room again")
    after = send_all(broker.url, "orders", bodies("c", 5, 100))
    assert set(after.values()) == {"accepted"}
    assert broker.stop() == 0


def used_percent(disk: Path) -> float:
    st = os.statvfs(disk)
    return 100.0 * (st.f_blocks - st.f_bavail) / st.f_blocks


def test_a_fast_producer_is_blocked_at_max_disk_usage_between_two_scans(
    small_disk: Path, tmp_path: Path
) -> None:
    """The scan runs every 5 s (the default), far slower than one producer fills the disk: the bytes the
    broker writes are counted against the room the last scan saw, so it blocks at the threshold, not at
    its next scan (or at ENOSPC). Only what the link was granted before is taken past it."""
    window, size = 20, 64 * 1024
    ballast = fill(small_disk, leave=DISK_MB * 1024 * 1024 * 7 // 10)  # 30 % used: 4.8 MiB to the threshold
    broker = broker_on(
        small_disk,
        tmp_path / "home",
        "<max-disk-usage>50</max-disk-usage>",
        scan_ms=5000,
        acceptor_params=f"amqpCredits={window};amqpLowCredits=5",
    ).start()
    sent = bodies("m", 140, size)  # 8.75 MiB: the disk would reach about 67 %
    producer = BackgroundSender(broker.url, "orders", len(sent), sent.__getitem__)
    wait_until(lambda: producer.stalled or producer.done, 30, "the producer to be held or done")
    assert not producer.done, f"all {len(sent)} sends taken: nothing held the producer"
    assert "AMQ222210" in broker.log()
    held_at, peak = len(producer.outcomes), used_percent(small_disk)
    # 50 %, plus what the link was granted before it was held (and a journal segment's slack)
    assert peak <= 50 + 100 * (window * size + (1 << 20)) / (DISK_MB << 20), f"{peak:.1f} % used"
    with pytest.raises(WaitTimeout):  # held over a window, not just at one instant
        wait_until(
            lambda: len(producer.outcomes) > held_at or producer.credit != 0, 1.5, "a send past the hold"
        )
    ballast.unlink()  # room again: the next scan gives credit back
    wait_until(lambda: producer.done, 20, "the producer to finish after space returned")
    log = broker.log()
    assert "AMQ222211" not in log  # blocked by the limit, never by ENOSPC
    # once each: the scan that followed the estimate confirmed it; the one after the unlink lifted it
    assert log.count("AMQ222210") == 1 and log.count("AMQ221080") == 1
    assert set(producer.outcomes.values()) == {"accepted"} and len(producer.outcomes) == len(sent)
    got = [m.body for m in receive(broker.url, "orders", len(sent) + 1, timeout=1)]
    assert sorted(got) == sorted(sent)
    print(f"blocked at {peak:.1f} % used, after {held_at} of {len(sent)} sends")
    assert broker.stop() == 0


def test_an_actual_full_disk_answers_every_send_and_loses_nothing(small_disk: Path, tmp_path: Path) -> None:
    broker = broker_on(small_disk, tmp_path / "home", "<max-disk-usage>-1</max-disk-usage>").start()
    ballast = fill(small_disk, leave=3 * 1024 * 1024)
    sent = bodies("m", 800, 8 * 1024)  # 6.5 MB: more than the disk has
    outcomes = send_all(broker.url, "orders", sent, timeout=30)
    accepted = {sent[i] for i, o in outcomes.items() if o == "accepted"}
    refused = {sent[i] for i, o in outcomes.items() if o == "rejected:amqp:resource-limit-exceeded"}
    print(f"ENOSPC: {len(accepted)} accepted, {len(refused)} refused of {len(sent)}")
    assert accepted and refused
    assert len(accepted) + len(refused) == len(sent)  # every send has an outcome
    assert broker.proc is not None and broker.proc.poll() is None  # still up
    assert "AMQ222211" in broker.log()
    assert "Traceback" not in broker.log()
    got = [m.body for m in receive(broker.url, "orders", 10)]  # consumers keep working
    assert len(got) == min(10, len(accepted)) and set(got) <= accepted
    ballast.unlink()
    wait_until(lambda: "AMQ221082" in broker.log(), 15, "the journal to write again")
    later = send_all(broker.url, "orders", bodies("n", 10, 100))
    assert set(later.values()) == {"accepted"}  # resumed by itself
    assert broker.stop() == 0
    broker.start()
    rest = [m.body for m in receive(broker.url, "orders", len(sent) + 20, timeout=5)]
    assert sorted(rest) == sorted((accepted - set(got)) | set(bodies("n", 10, 100)))
    assert not set(rest) & refused
    assert broker.stop() == 0


def test_a_send_refused_on_a_full_disk_and_retried_with_its_duplicate_id_is_stored_once(
    small_disk: Path, tmp_path: Path
) -> None:
    """Once-and-only-once through a full disk: every send carries its own `_AMQ_DUPL_ID`; those the full
    disk refuses are retried with the same id until they are stored, and every send is then sent once
    more (a client unsure of its outcome); the queue drains to each message exactly once."""
    broker = broker_on(small_disk, tmp_path / "home", "<max-disk-usage>-1</max-disk-usage>").start()
    ballast = fill(small_disk, leave=3 * 1024 * 1024)
    sent = bodies("m", 800, 8 * 1024)  # 6.5 MB: more than the disk has

    def dup_id(body: str) -> dict[str, str]:
        return {"_AMQ_DUPL_ID": body[:6]}

    outcomes = send_all(broker.url, "orders", sent, timeout=30, properties=dup_id)
    refused = [sent[i] for i, o in outcomes.items() if o == "rejected:amqp:resource-limit-exceeded"]
    accepted = [sent[i] for i, o in outcomes.items() if o == "accepted"]
    assert refused and accepted and len(refused) + len(accepted) == len(sent)
    ballast.unlink()
    wait_until(lambda: "AMQ221082" in broker.log(), 15, "the journal to write again")
    retries = 0
    while refused:  # the recipe: the same message, the same id, until it is stored
        retries += 1
        assert retries <= 5, f"{len(refused)} sends still refused after {retries - 1} retries"
        again = send_all(broker.url, "orders", refused, timeout=30, properties=dup_id)
        refused = [refused[i] for i, o in again.items() if o != "accepted"]
    everything_again = send_all(broker.url, "orders", sent, timeout=30, properties=dup_id)
    assert set(everything_again.values()) == {"accepted"}  # each one a duplicate: Accepted, not stored
    got = [m.body for m in receive(broker.url, "orders", 2 * len(sent), timeout=5)]
    assert sorted(got) == sorted(sent)  # every message once: none lost to its refused try, none twice
    assert broker.stop() == 0


def test_a_write_that_fails_outright_stops_the_broker_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    broker = BrokerProcess(home=tmp_path, xml_kwargs={"addresses": ORDERS}).start()
    assert set(send_all(broker.url, "orders", bodies("a", 5, 100)).values()) == {"accepted"}
    assert broker.proc is not None
    # Files may grow no further (RLIMIT_FSIZE): the next journal write fails with EFBIG, which unlike
    # a full disk is not one to wait out.
    resource.prlimit(broker.proc.pid, resource.RLIMIT_FSIZE, (4096, 4096))
    outcomes = send_all(broker.url, "orders", bodies("b", 5, 4000), timeout=5)
    assert "accepted" not in outcomes.values()  # nothing is confirmed that could not be written
    assert broker.proc is not None
    assert broker.proc.wait(timeout=20) == 1
    log = broker.log()
    assert "journal failed, the broker cannot persist and shuts down" in log
    assert "Traceback" not in log
