"""Group commit: one fsync covers every record queued meanwhile; callbacks fire once, in order."""

from __future__ import annotations

import errno
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_core.journal import Journal, JournalClosedError, JournalFailedError, iter_records
from broker_core.journal.records import MessageAcked
from tests.journal.helpers import QUEUE_A, message


@pytest.fixture
def slow_fsync(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """fdatasync that takes about as long as a real disk's (1 ms), counting calls."""
    calls: list[int] = []
    real = os.fdatasync
    pause = threading.Event()

    def fdatasync(fd: int) -> None:
        calls.append(fd)
        pause.wait(0.001)  # models disk latency, not synchronisation: nobody ever sets it
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    yield calls


def test_threads_share_fsyncs(tmp_path: Path, slow_fsync: list[int]) -> None:
    threads, per_thread = 8, 400
    fired: Counter[int] = Counter()
    order: dict[int, list[int]] = {t: [] for t in range(threads)}
    lock = threading.Lock()

    def durable(thread: int, mid: int) -> Callable[[], None]:
        def callback() -> None:
            with lock:
                fired[mid] += 1
                order[thread].append(mid)

        return callback

    with Journal(tmp_path) as journal:
        journal.open()
        journal.append(QUEUE_A)

        def producer(thread: int) -> None:
            for n in range(per_thread):
                mid = 1 + thread * per_thread + n
                journal.append(message(mid, (1,)), durable(thread, mid))

        workers = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        journal.flush()
        stats = journal.stats()
    total = threads * per_thread
    assert stats["records_written"] == total + 1
    assert stats["fsyncs"] < total / 10, stats
    assert fired == Counter(range(1, total + 1))  # each exactly once
    for thread, mids in order.items():  # per producer, in append order
        assert mids == sorted(mids), thread


def test_callbacks_run_after_the_write_in_append_order_through_dispatch(tmp_path: Path) -> None:
    handed_off: list[Callable[[], None]] = []
    seen: list[int] = []
    on_disk: list[bool] = []

    def callback(mid: int, last_record: object) -> Callable[[], None]:
        def run() -> None:
            seen.append(mid)
            on_disk.append(any(r == last_record for _, r in iter_records(tmp_path)))

        return run

    journal = Journal(tmp_path, dispatch=handed_off.append)
    journal.open()
    journal.append(QUEUE_A)
    for mid in range(1, 51):
        journal.append(message(mid, (1,)), callback(mid, message(mid, (1,))))
    journal.append_many([MessageAcked(1, 1), MessageAcked(1, 2)], callback(1000, MessageAcked(1, 2)))
    journal.flush()
    assert seen == []  # nothing runs on the writer thread when a dispatcher is given
    for run in list(handed_off):  # the "event loop" runs what was handed to it, in order
        run()
    fsyncs = journal.stats()["fsyncs"]
    journal.close()
    assert seen == [*range(1, 51), 1000]
    assert all(on_disk)
    # Whole batches are handed off at once: at most one hand-off per written batch, and every batch ends
    # with an fsync (one hand-off per callback would give 51 here, more than the few batches written).
    assert 1 <= len(handed_off) <= fsyncs < 51, (len(handed_off), fsyncs)


def test_flush_returns_when_everything_is_durable(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.open()
        journal.append(QUEUE_A)
        for mid in range(1, 201):
            journal.append(message(mid, (1,)))
        journal.flush()
        assert journal.stats()["records_written"] == 201
        assert len(list(iter_records(tmp_path))) == 201


def test_a_failing_callback_does_not_stop_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []

    def boom() -> None:
        raise RuntimeError("callback bug")

    with Journal(tmp_path) as journal:
        journal.open()
        journal.append(QUEUE_A, boom)
        journal.append(message(1, (1,)), lambda: seen.append(1))
        journal.flush()
    assert seen == [1]
    assert "on_durable callback failed" in caplog.text


def test_append_after_close_is_refused(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    with pytest.raises(JournalClosedError):
        journal.append(QUEUE_A)
    journal.open()
    journal.close()
    with pytest.raises(JournalClosedError):
        journal.append(QUEUE_A)


def test_a_failed_fsync_fails_the_journal_without_callbacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal(tmp_path)
    journal.open()

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fdatasync", broken)
    fired: list[bool] = []
    journal.append(QUEUE_A, lambda: fired.append(True))
    with pytest.raises(JournalFailedError):
        journal.flush()
    with pytest.raises(JournalFailedError):
        journal.append(QUEUE_A)
    assert fired == []
    assert "writer failed" in caplog.text
    monkeypatch.undo()
    with pytest.raises(JournalFailedError):
        journal.close()


def test_without_fsync_records_are_still_written(tmp_path: Path, slow_fsync: list[int]) -> None:
    with Journal(tmp_path, fsync=False) as journal:
        journal.open()
        journal.append(QUEUE_A)
        journal.flush()
    assert slow_fsync == []
    assert [r for _, r in iter_records(tmp_path)] == [QUEUE_A]
