"""The confirmation seam: a confirmation runs once its batch is on disk and every registered condition
(and barrier) released it; barriers hold every durable callback, conditions only client confirmations.
The journal's batch tap sees what was written, in order, before the batch's callbacks run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_core.journal.journal import Journal
from broker_core.journal.records import MetaRecord
from broker_core.journal.writer import Entry
from broker_core.persistence import Persistence

LOG = logging.getLogger("test.persistence")


class Gate:
    """A condition that holds what was done since its last `wait` until the test releases it."""

    def __init__(self, *, hold: bool = True, release_at_once: bool = False) -> None:
        self.hold = hold
        self.release_at_once = release_at_once
        self.waiting: list[Callable[[], None]] = []

    def wait(self, release: Callable[[], None]) -> bool:
        if not self.hold:
            return False
        if self.release_at_once:
            release()
        else:
            self.waiting.append(release)
        return True

    def release_all(self) -> None:
        waiting, self.waiting = self.waiting, []
        for release in waiting:
            release()


@pytest.fixture
def memory() -> Persistence:
    """No journal: a batch is 'on disk' as soon as it is handed over (persistence-enabled false)."""
    p = Persistence(enabled=False, log=LOG)
    p.set_scheduler(lambda: None)  # batches are handed over only when the test says
    return p


def test_without_conditions_a_confirmation_waits_for_the_batch_only(memory: Persistence) -> None:
    done: list[str] = []
    memory.confirm(lambda: done.append("confirmed"))
    assert done == []
    memory.flush()
    assert done == ["confirmed"]


def test_a_condition_holds_client_confirmations_not_durable_callbacks(memory: Persistence) -> None:
    gate = Gate()
    memory.add_condition(gate)
    done: list[str] = []
    memory.confirm(lambda: done.append("client"))
    memory.after_durable(lambda: done.append("internal"))
    memory.flush()
    assert done == ["internal"]  # on disk; the client waits for the condition too
    gate.release_all()
    assert done == ["internal", "client"]


def test_the_condition_released_first_still_waits_for_the_disk(memory: Persistence) -> None:
    gate = Gate()
    memory.add_condition(gate)
    done: list[str] = []
    memory.confirm(lambda: done.append("client"))
    gate.release_all()
    assert done == []
    memory.flush()
    assert done == ["client"]


def test_a_condition_that_releases_inside_wait_is_still_a_wait_for_the_disk(memory: Persistence) -> None:
    memory.add_condition(Gate(release_at_once=True))
    done: list[str] = []
    memory.confirm(lambda: done.append("client"))
    assert done == []
    memory.flush()
    assert done == ["client"]


def test_a_condition_with_nothing_to_wait_for_costs_nothing(memory: Persistence) -> None:
    memory.add_condition(Gate(hold=False))
    done: list[str] = []
    memory.confirm(lambda: done.append("client"))
    memory.flush()
    assert done == ["client"]


def test_every_condition_must_release(memory: Persistence) -> None:
    first, second = Gate(), Gate()
    memory.add_condition(first)
    memory.add_condition(second)
    done: list[str] = []
    memory.confirm(lambda: done.append("client"))
    memory.flush()
    second.release_all()
    assert done == []
    first.release_all()
    assert done == ["client"]


def test_a_barrier_holds_every_durable_callback(memory: Persistence) -> None:
    """A barrier (HA replication) holds what the broker owes anyone, a mirror's Accepted included."""
    replica = Gate()
    memory.add_barrier(replica)
    done: list[str] = []
    memory.after_durable(lambda: done.append("internal"))
    memory.confirm(lambda: done.append("client"))
    memory.flush()
    assert done == []
    replica.release_all()
    assert sorted(done) == ["client", "internal"]


def test_batch_hooks_run_first_and_ignore_barriers(memory: Persistence) -> None:
    """A batch hook's callback (paging's: cursors may read a committed page) needs the disk only."""
    memory.add_barrier(Gate())
    done: list[str] = []
    memory.on_batch(lambda: lambda: done.append("hook"))
    memory.after_durable(lambda: done.append("held"))
    memory.flush()
    assert done == ["hook"]


def test_a_hook_past_barriers_waits_for_them_and_never_for_a_condition(memory: Persistence) -> None:
    """The store-and-forward queue's hand-on: what leaves for the other data centre must be on the
    replica too (a barrier), but never waits for a sync mirror's condition (it would wait for itself)."""
    replica, sync_mirror = Gate(), Gate()
    memory.add_barrier(replica)
    memory.add_condition(sync_mirror)
    done: list[str] = []
    memory.on_batch(lambda: lambda: done.append("hand on"), past_barriers=True)
    memory.confirm(lambda: done.append("client"))
    memory.flush()
    assert done == []
    replica.release_all()
    assert done == ["hand on"]  # the client still waits for the mirror
    sync_mirror.release_all()
    assert done == ["hand on", "client"]


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal", fsync=False)
    j.open()
    try:
        yield j
    finally:
        j.close()


def test_the_tap_sees_each_written_batch_before_its_callbacks(journal: Journal) -> None:
    seen: list[tuple[str, object]] = []
    lock = threading.Lock()

    def tap(entries: list[Entry]) -> None:
        with lock:
            seen.append(
                ("tap", tuple(r.key for e in entries for r in e.records if isinstance(r, MetaRecord)))
            )

    journal.add_tap(tap)
    p = Persistence(enabled=True, log=LOG)
    p.journal = journal
    p.set_scheduler(lambda: None)
    p.persist(MetaRecord("a", b"1"))
    p.persist(MetaRecord("b", b"2"))
    p.after_durable(lambda: seen.append(("durable", None)))
    p.flush()
    journal.flush()
    assert seen == [("tap", ("a", "b")), ("durable", None)]


def test_work_after_close_is_dropped_and_never_confirmed(memory: Persistence) -> None:
    """A stopping server closes its journal; a connection closing in the same loop turn may still persist
    (its deliveries come back): that is dropped, not written to a closed journal (a fatal error)."""
    memory.close()
    done: list[str] = []
    memory.persist(object())
    memory.confirm(lambda: done.append("client"))
    memory.flush()
    assert done == [] and memory.pending_records() == 0
