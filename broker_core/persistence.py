"""The journal batch a server is building, and the confirmations that wait for it.

Records persisted during one loop turn go to the journal as one batch: one write, one fsync (group
commit). Two ways to wait for them:

- `after_durable(cb)`: `cb` runs once everything persisted so far is on disk, and every registered
  *barrier* has released it (HA replication will be one: the backup has the records too).
- `confirm(cb)`: the same, and every registered *condition* holds for what was done since the last
  confirmation (a `sync` mirror is one: the events the operation produced were accepted remotely).
  A durable send is Accepted, and a consumer's acknowledgement settled, only through `confirm`.

Barriers apply to everything the broker confirms to anyone; conditions only to what it confirms to
its own clients. The difference matters: a mirror target's Accepted must never wait for a `sync`
mirror of its own, or two brokers mirroring each other synchronously would wait for each other.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any, Protocol

from .journal import records
from .journal.journal import Journal
from .journal.writer import Syncable

Callback = Callable[[], None]

ID_RESERVATION = "ids.message.reserved"  # meta key: message ids below it may have been handed out
ID_BLOCK = 100_000


class Condition(Protocol):
    """Something a confirmation waits for besides the disk (a sync mirror; HA replication)."""

    def wait(self, release: Callback) -> bool:
        """Whether the work done since the last call must wait for this; if so, call `release()` once
        it may be confirmed (on the event loop)."""
        ...


class Persistence:
    def __init__(self, enabled: bool, log: logging.Logger) -> None:
        self.enabled = enabled  # persistence-enabled: without it nothing is journalled
        self.log = log
        self.journal: Journal | None = None
        self.meta: dict[str, bytes] = {}
        self.flushes = 0  # batches handed to the journal: what was persisted before one is in it
        self.next_message_id = 1
        self._id_ceiling = 0
        self._records: list[Any] = []
        self._callbacks: list[Callback] = []
        self._meta: dict[str, bytes | Callable[[], bytes]] = {}
        self._batch_hooks: list[Callable[[], Callback | None]] = []
        self._syncs: dict[int, Syncable] = {}
        self._conditions: list[Condition] = []
        self._barriers: list[Condition] = []
        self._scheduler: Callback | None = None
        self._scheduled = False

    # ---------------------------------------------------------------------------------- wiring

    def set_scheduler(self, schedule: Callback) -> None:
        """How to run `flush` soon (once per loop turn); without one, every persist flushes at once."""
        self._scheduler = schedule

    def add_condition(self, condition: Condition) -> None:
        self._conditions.append(condition)

    def remove_condition(self, condition: Condition) -> None:
        if condition in self._conditions:
            self._conditions.remove(condition)

    def add_barrier(self, barrier: Condition) -> None:
        self._barriers.append(barrier)

    def on_batch(self, hook: Callable[[], Callback | None]) -> None:
        """`hook()` is asked as each batch is handed over (it may add records with `persist_now`); the
        callbacks the hooks return run first once the batch is on disk, in the order the hooks were
        registered, before the batch's confirmations (and without waiting for any barrier)."""
        self._batch_hooks.append(hook)

    def persist_now(self, record: Any) -> None:
        """Add a record to the batch being handed over (from a batch hook)."""
        self._records.append(record)

    def sync_first(self, file: Syncable) -> None:
        """Make `file` durable before the batch being handed over is written (from a batch hook)."""
        self._syncs[id(file)] = file

    # ------------------------------------------------------------------------------- recording

    def pending_records(self) -> int:
        return len(self._records)

    def persist(self, record: Any) -> None:
        self._records.append(record)
        self.schedule()

    def after_durable(self, callback: Callback) -> None:
        """Run `callback` once every record persisted so far is on disk (and every barrier released it)."""
        if self._barriers:
            callback = self._gated(callback, self._barriers)
        self._callbacks.append(callback)
        self.schedule()

    def confirm(self, callback: Callback) -> None:
        """`after_durable`, and every condition holds for the work done since the last confirmation."""
        if not self._conditions:
            self.after_durable(callback)
            return
        self.after_durable(self._gated(callback, self._conditions))

    def _gated(self, callback: Callback, waits: list[Condition]) -> Callback:
        """`callback` behind a gate that opens when it has been called and every wait is released."""
        gate = _Gate(callback)
        for condition in waits:
            gate.pending += 1  # first: a condition may release at once, inside `wait`
            if not condition.wait(gate.release):
                gate.pending -= 1
        return gate.release

    def set_meta(self, key: str, value: bytes, coalesce: bool = False) -> None:
        """Persist a small fact; `coalesce` keeps only the last value per key in each journal batch."""
        self.meta[key] = value
        if not self.enabled:
            return
        if coalesce:
            self._meta[key] = value
            self.schedule()
        else:
            self.persist(records.MetaRecord(key, value))

    def set_meta_at_flush(self, key: str, value: Callable[[], bytes]) -> None:
        """A coalesced `set_meta` whose value is read when the journal batch is made: for a fact that
        moves with every message (a high-water mark), formatted once per batch, not once per message."""
        if not self.enabled:
            self.meta[key] = value()
            return
        self._meta[key] = value
        self.schedule()

    def new_message_id(self) -> int:
        mid = self.next_message_id
        self.next_message_id = mid + 1
        if mid >= self._id_ceiling:
            # Ids of non-durable messages are never journalled, yet the mirror names messages by id: a
            # restart must not hand out an id already used. Reserve blocks on disk, as Artemis does.
            self._id_ceiling = mid + ID_BLOCK
            self.set_meta(ID_RESERVATION, str(self._id_ceiling).encode(), coalesce=True)
        return mid

    # ---------------------------------------------------------------------------------- flushing

    def schedule(self) -> None:
        """Hand the batch over soon (this loop turn), even with nothing in it but a batch hook's work."""
        if self._scheduled:
            return
        if self._scheduler is None:
            self.flush()
            return
        self._scheduled = True
        self._scheduler()

    def flush(self) -> None:
        """Hand the batch to the journal: one group commit covers everything since the last one."""
        self._scheduled = False
        self.flushes += 1
        if self._meta:
            for key, value in self._meta.items():
                if callable(value):  # set_meta_at_flush: read it now
                    value = self.meta[key] = value()
                self._records.append(records.MetaRecord(key, value))
            self._meta.clear()
        firsts = []
        for hook in self._batch_hooks:
            first = hook()
            if first is not None:
                firsts.append(first)
        recs, cbs = self._records, self._callbacks
        cbs[:0] = firsts
        if not recs and not cbs:
            return
        self._records, self._callbacks = [], []
        syncs = tuple(self._syncs.values())
        self._syncs.clear()
        done = _run_all(cbs, self.log) if cbs else None
        if self.journal is None or not self.enabled:
            if done:
                done()
            return
        try:
            self.journal.append_many(recs, on_durable=done, syncs=syncs)
        except (ValueError, TypeError, OverflowError, struct.error) as exc:
            # A record that cannot be encoded must not take the rest of the batch with it.
            self.log.error("journal batch refused (%s); writing its records one by one", exc)
            for rec in recs:
                try:
                    self.journal.append_many([rec])
                except (ValueError, TypeError, OverflowError, struct.error) as bad:
                    self.log.error("record %s dropped: %s", type(rec).__name__, bad)
            self.journal.append_many([], on_durable=done)


class _Gate:
    """Calls `callback` once `release` has been called `pending + 1` times (the disk, then each wait)."""

    __slots__ = ("callback", "pending")

    def __init__(self, callback: Callback) -> None:
        self.callback = callback
        self.pending = 0

    def release(self) -> None:
        if self.pending:
            self.pending -= 1
            return
        self.callback()


def _run_all(callbacks: list[Callback], log: logging.Logger) -> Callback:
    def run() -> None:
        for cb in callbacks:
            try:
                cb()
            except Exception:  # one failing callback must not starve the others of their confirmation
                log.exception("durability callback failed")

    return run
