"""Compaction keeps exactly the live state, shrinks the files, and survives a crash at any step."""

from __future__ import annotations

import functools
import logging
import shutil
import threading
from pathlib import Path

import pytest

from broker_core.journal import Journal
from broker_core.journal.records import DeliveryCountUpdated, MessageAcked, MetaRecord, QueueRemoved
from tests.journal.helpers import ADDRESS, QUEUE_A, QUEUE_B, message, reopen, segment_files, summary

SEGMENT = 8 * 1024


def disk_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir())


def populate(journal: Journal, count: int = 300) -> None:
    """Messages on two queues; most fully acked, some half acked, some with delivery counts."""
    for rec in (ADDRESS, QUEUE_A, QUEUE_B, MetaRecord("mirror", b"v1")):
        journal.append(rec)
    for mid in range(1, count + 1):
        journal.append(message(mid))
    for mid in range(1, count + 1):
        if mid % 10:
            journal.append(MessageAcked(1, mid))
        if mid % 10 and mid % 7:
            journal.append(MessageAcked(2, mid))
    journal.append(DeliveryCountUpdated(2, 7, 3))
    journal.append(MetaRecord("mirror", b"v2"))
    journal.flush()


def open_journal(directory: Path, **options: object) -> Journal:
    journal = Journal(directory, segment_size=SEGMENT, compact_min_segments=1000, **options)  # type: ignore[arg-type]
    journal.open()
    return journal


def test_compaction_preserves_live_state_and_shrinks_disk(tmp_path: Path) -> None:
    journal = open_journal(tmp_path / "j")
    populate(journal)
    shutil.copytree(tmp_path / "j", tmp_path / "before")
    before = disk_bytes(tmp_path / "j")
    figures = journal.compact()
    journal.close()
    assert figures["bytes_after"] < figures["bytes_before"] / 4
    assert disk_bytes(tmp_path / "j") < before / 4
    expected = summary(reopen(tmp_path / "before"))
    assert summary(reopen(tmp_path / "j")) == expected
    assert expected["order"] == [m for m in range(1, 301) if m % 10 == 0 or m % 7 == 0]


def test_acks_and_appends_after_compaction(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    populate(journal)
    journal.compact()
    journal.append(MessageAcked(1, 10))  # its MessageAdded now lives in the compacted generation
    journal.append(MessageAcked(2, 10))
    journal.append(MessageAcked(2, 7))  # half-acked before compaction, re-encoded by it
    journal.append(QueueRemoved(1))
    journal.append(message(301, (2,)))
    journal.compact()  # a second generation replaces the first
    journal.close()
    state = reopen(tmp_path)
    assert 10 not in state.messages and 7 not in state.messages
    assert all(m.queue_ids == [2] for m in state.messages.values())
    assert list(state.messages)[-1] == 301
    assert state.meta == {"mirror": b"v2"}
    assert not any(p.name.startswith("compact-00000001") for p in tmp_path.iterdir())


def test_highest_ids_survive_when_everything_is_dead(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.append(QUEUE_A)
    for mid in range(1, 51):
        journal.append(message(mid, (1,)))
        journal.append(MessageAcked(1, mid))
    journal.append(QueueRemoved(1))
    journal.compact()
    journal.close()
    state = reopen(tmp_path)
    assert (state.queues, state.messages) == ({}, {})
    assert (state.max_queue_id, state.max_message_id) == (1, 50)


def test_compaction_starts_by_itself_and_bounds_disk_use(tmp_path: Path) -> None:
    journal = Journal(tmp_path, segment_size=SEGMENT, compact_min_segments=4)
    journal.open()
    journal.append(QUEUE_A)
    for mid in range(1, 2001):  # a steady stream: each message consumed soon after it arrives
        journal.append(message(mid, (1,)))
        if mid > 20:
            journal.append(MessageAcked(1, mid - 20))
    journal.close()  # waits for the writer, including a compaction triggered by the last batch
    assert journal.stats()["compactions"] >= 1
    assert disk_bytes(tmp_path) < 20 * SEGMENT  # versus about 250 KB written
    assert list(reopen(tmp_path).messages) == list(range(1981, 2001))


def test_appends_queued_during_compaction_are_written_after_it_in_order(tmp_path: Path) -> None:
    seen: list[int] = []
    journal = open_journal(tmp_path)
    populate(journal)
    compactor = threading.Thread(target=journal.compact)
    compactor.start()
    for mid in range(400, 450):
        journal.append(message(mid, (1,)), functools.partial(seen.append, mid))
    compactor.join()
    journal.close()
    assert seen == list(range(400, 450))
    assert list(reopen(tmp_path).messages)[-50:] == list(range(400, 450))


@pytest.mark.parametrize(
    "crash_point",
    ["generation-written", "generation-torn", "marker-tmp-only", "marker-written", "half-deleted"],
)
def test_a_crash_during_compaction_recovers_the_same_state(
    tmp_path: Path, crash_point: str, caplog: pytest.LogCaptureFixture
) -> None:
    journal = open_journal(tmp_path / "live")
    populate(journal)
    shutil.copytree(tmp_path / "live", tmp_path / "before")
    journal.compact()
    journal.close()
    after = tmp_path / "live"
    new_files = sorted(p for p in after.iterdir() if p.name.startswith("compact-") and p.suffix == ".jnl")
    marker = next(after.glob("compact-*.done"))
    assert len(new_files) >= 2
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "before", crashed)  # old files all still there...
    for path in new_files:  # ...plus whatever the compaction got to write
        shutil.copy(path, crashed / path.name)
    if crash_point == "generation-torn":
        last = crashed / new_files[-1].name
        last.write_bytes(last.read_bytes()[:-10])
    elif crash_point == "marker-tmp-only":
        (crashed / (marker.name + ".tmp")).write_bytes(marker.read_bytes()[:5])
    elif crash_point == "marker-written":
        shutil.copy(marker, crashed / marker.name)
    elif crash_point == "half-deleted":
        shutil.copy(marker, crashed / marker.name)
        for old in segment_files(tmp_path / "before")[::2]:
            (crashed / old.name).unlink()
    expected = summary(reopen(tmp_path / "before"))
    with caplog.at_level(logging.INFO):
        assert summary(reopen(crashed)) == expected
    committed = crash_point in ("marker-written", "half-deleted")
    leftover = "superseded by a compaction" if committed else "interrupted compaction"
    assert leftover in caplog.text
    names = {p.name for p in crashed.iterdir()}
    assert (marker.name in names) == committed
    assert all((p.name in names) == committed for p in new_files)
    assert summary(reopen(crashed)) == expected  # and the repaired directory stays that way
