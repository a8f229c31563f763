"""The journal batch a server is building, and the confirmations that wait for it.

Records persisted during one loop turn go to the journal as one batch: one write, one fsync (group
commit). Two ways to wait for them:

- `after_durable(cb)`: `cb` runs once everything persisted so far is on disk, and every registered
  *barrier* has released it (HA replication is one: the backup has the records too).
- `confirm(cb)`: the same, and every registered *condition* holds for what was done since the last
  confirmation (a `sync` mirror is one: the events the operation produced were accepted remotely).
  A durable send is Accepted, and a consumer's acknowledgement settled, only through `confirm`.

Barriers apply to everything the broker confirms to anyone; conditions only to what it confirms to
its own clients. The difference matters: a mirror target's Accepted must never wait for a `sync`
mirror of its own, or two brokers mirroring each other synchronously would wait for each other.

A full disk (the journal refuses a batch with ENOSPC): the batch and every one after it are *held*.
A confirmation given an `on_fail` (a client's send) gets it instead, at once: the send is refused and
its message taken back (`rolled_back`), so its record is never written later. Everything else (acks,
the mirror's events, what a mirror target applied) stays held, in order, and is written by `retry`
once the disk has room; until then `full` is set and the broker takes no client sends.

A record that cannot be encoded (a bug: names are checked before anything is made) is dropped and
logged; only the send whose message it was is refused, saying so, and the rest of its batch is written.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any, Protocol

from .amqp import errors
from .errors import BrokerError, ResourceLimitExceeded
from .journal import records
from .journal.codec import encode_parts
from .journal.errors import JournalFull
from .journal.journal import Journal
from .journal.writer import Syncable

Callback = Callable[[], None]
Refusal = Callable[[BrokerError], None]  # a confirmation's `on_fail`: refuse its send with this error

ID_RESERVATION = "ids.message.reserved"  # meta key: message ids below it may have been handed out
ID_BLOCK = 100_000
_ENCODING_ERRORS = (ValueError, TypeError, OverflowError, struct.error)
# The records of a send whose batch was refused (a full disk): dropped from the held batch with it.
_WITH_MESSAGE = (records.MessageAdded, records.DuplicateIdAdded)
DISK_FULL = "the message could not be stored: the broker's disk is full"
REPEAT_REFUSED = "the message could not be stored: a send in the same journal batch was refused"


class _Batch:
    """Records and the callbacks waiting for them; `failures` are the on_fail of some callbacks, by index,
    each with the id of the message whose send it refuses (0: none named)."""

    __slots__ = ("callbacks", "failures", "records", "syncs")

    def __init__(
        self,
        records: list[Any],
        callbacks: list[Callback],
        failures: dict[int, tuple[Refusal, int]],
        syncs: tuple[Any, ...],
    ) -> None:
        self.records = records
        self.callbacks = callbacks
        self.failures = failures
        self.syncs = syncs


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
        self._failures: dict[int, tuple[Refusal, int]] = {}  # (on_fail, message id), by callback index
        self._held: list[_Batch] = []  # what a full disk handed back, in order
        self._retrying = False
        self.full = False  # the disk refused a batch: client sends are refused until `retry` succeeds
        self.rolled_back: set[int] = set()  # ids of messages whose sends failed: their records are dropped
        self.on_space: Callable[[bool], None] | None = None  # told when the disk fills and has room again
        self._meta: dict[str, bytes | Callable[[], bytes]] = {}
        self._batch_hooks: list[tuple[Callable[[], Callback | None], bool]] = []  # (hook, past barriers)
        self._syncs: dict[int, Syncable] = {}
        self._conditions: list[Condition] = []
        self._barriers: list[Condition] = []
        self._scheduler: Callback | None = None
        self._scheduled = False
        self.closed = False  # the server stopped: what is persisted after is dropped, never confirmed

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

    def remove_barrier(self, barrier: Condition) -> None:
        if barrier in self._barriers:
            self._barriers.remove(barrier)

    def on_batch(self, hook: Callable[[], Callback | None], past_barriers: bool = False) -> None:
        """`hook()` is asked as each batch is handed over (it may add records with `persist_now`); the
        callbacks the hooks return run first once the batch is on disk, in the order the hooks were
        registered, before the batch's confirmations. With `past_barriers`, the callback also waits for
        every barrier (what leaves the broker must be on the replica too); never for a condition."""
        self._batch_hooks.append((hook, past_barriers))

    def persist_now(self, record: Any) -> None:
        """Add a record to the batch being handed over (from a batch hook)."""
        self._records.append(record)

    def sync_first(self, file: Syncable) -> None:
        """Make `file` durable before the batch being handed over is written (from a batch hook)."""
        self._syncs[id(file)] = file

    # ------------------------------------------------------------------------------- recording

    def pending_records(self) -> int:
        return len(self._records)

    def held_records(self) -> int:
        """Records a full disk handed back, waiting for `retry`."""
        return sum(len(b.records) for b in self._held)

    def persist(self, record: Any) -> None:
        self._records.append(record)
        self.schedule()

    def after_durable(self, callback: Callback) -> None:
        """Run `callback` once every record persisted so far is on disk (and every barrier released it)."""
        if self._barriers:
            callback = self._gated(callback, self._barriers)
        self._callbacks.append(callback)
        self.schedule()

    def confirm(self, callback: Callback, on_fail: Refusal | None = None, message_id: int = 0) -> None:
        """`after_durable`, and every condition holds for the work done since the last confirmation.
        `on_fail(error)` runs instead if the batch cannot be written (a full disk), or if the record of
        `message_id` (the message this confirms the send of) cannot be."""
        if self._conditions:
            callback = self._gated(callback, self._conditions)
        self.after_durable(callback)
        if on_fail is not None:
            self._failures[len(self._callbacks) - 1] = (on_fail, message_id)

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

    def close(self) -> None:
        """The journal is closed (the server stopped): work that comes after (a connection closing in
        the same loop turn returns its deliveries) is dropped, and nothing waiting for it is confirmed."""
        self.closed = True
        self._records, self._callbacks, self._failures = [], [], {}
        self._meta.clear()

    def flush(self) -> None:
        """Hand the batch to the journal: one group commit covers everything since the last one."""
        self._scheduled = False
        if self.closed:
            self._records, self._callbacks, self._failures = [], [], {}
            return
        if self._meta:
            for key, value in self._meta.items():
                if callable(value):  # set_meta_at_flush: read it now
                    value = self.meta[key] = value()
                self._records.append(records.MetaRecord(key, value))
            self._meta.clear()
        firsts = []
        for hook, past_barriers in self._batch_hooks:
            first = hook()
            if first is not None:
                if past_barriers and self._barriers:
                    first = self._gated(first, self._barriers)  # before the count moves: this batch's
                firsts.append(first)
        self.flushes += 1
        recs, cbs, failures = self._records, self._callbacks, self._failures
        if firsts:
            cbs[:0] = firsts
            failures = {i + len(firsts): f for i, f in failures.items()}
        if not recs and not cbs:
            return
        self._records, self._callbacks, self._failures = [], [], {}
        batch = _Batch(recs, cbs, failures, tuple(self._syncs.values()))
        self._syncs.clear()
        if self.journal is None or not self.enabled:
            _run_all(cbs, self.log)()
            return
        if self.full or self._retrying:
            self._hold(batch)  # behind what the full disk handed back
            return
        self._write(batch)

    def _write(self, batch: _Batch) -> None:
        assert self.journal is not None
        done = _run_all(batch.callbacks, self.log) if batch.callbacks else None
        try:
            self.journal.append_many(
                batch.records,
                on_durable=done,
                syncs=batch.syncs,
                on_failed=lambda: self._no_space(batch),
                tag=self.flushes,
            )
        except JournalFull:
            self._no_space(batch)
        except _ENCODING_ERRORS as exc:
            self._unencodable(batch, exc)

    def _no_space(self, batch: _Batch) -> None:
        """The disk refused `batch` (on the loop, in batch order): hold it, refuse what can be refused."""
        if not self.full:
            self.full = True
            self.log.error(
                "AMQ222211: the journal cannot be written: the disk is full. Client sends are refused "
                "with amqp:resource-limit-exceeded; acknowledgements and mirror events are held and "
                "written once there is room"
            )
            if self.on_space is not None:
                self.on_space(True)
        self._hold(batch)

    def _hold(self, batch: _Batch, front: bool = False) -> None:
        kept = self._refuse(batch, _disk_full)
        if front:
            self._held.insert(0, kept)
        else:
            self._held.append(kept)

    def _refuse(self, batch: _Batch, refusal: Callable[[int], BrokerError | None]) -> _Batch:
        """Run the on_fail handlers (which take their messages back) that `refusal` gives an error for,
        by the message each confirms; what is left of the batch."""
        callbacks: list[Callback] = []
        failures: dict[int, tuple[Refusal, int]] = {}
        for i, callback in enumerate(batch.callbacks):
            failure = batch.failures.get(i)
            error = None if failure is None else refusal(failure[1])
            if error is None:
                if failure is not None:
                    failures[len(callbacks)] = failure
                callbacks.append(callback)
                continue
            assert failure is not None
            try:
                failure[0](error)
            except Exception:  # one failing handler must not leave the others' clients without an outcome
                self.log.exception("on_fail handler failed")
        dropped = self.rolled_back
        kept = [r for r in batch.records if not (type(r) in _WITH_MESSAGE and r.message_id in dropped)]
        return _Batch(kept, callbacks, failures, batch.syncs)

    def retry(self) -> None:
        """After a full disk: write what was held (one batch), if the disk has room now."""
        if not self.full or self._retrying or self.journal is None:
            return
        self.journal.resume()
        self._write_held()

    def _write_held(self) -> None:
        held, self._held = self._held, []
        merged = _Batch(
            [r for b in held for r in b.records],
            [cb for b in held for cb in b.callbacks],
            {},
            tuple({id(f): f for b in held for f in b.syncs}.values()),
        )
        self._retrying = True
        callbacks = merged.callbacks

        def written() -> None:
            self._retrying = False
            _run_all(callbacks, self.log)()
            if self._held:  # what was handed over meanwhile
                self._write_held()
                return
            self.full = False
            self.rolled_back.clear()
            self.log.info("AMQ221082: the journal is written again: the disk has room")
            if self.on_space is not None:
                self.on_space(False)

        def failed() -> None:
            self._retrying = False
            self._hold(merged, front=True)

        assert self.journal is not None
        try:
            self.journal.append_many(merged.records, on_durable=written, syncs=merged.syncs, on_failed=failed)
        except JournalFull:
            failed()

    def _unencodable(self, batch: _Batch, exc: Exception) -> None:
        """A record that cannot be encoded (checked up front, so a bug): it is dropped and logged, and
        only the send whose message it was is refused, with the reason (and a repeat in the same batch,
        which may repeat it); the rest of the batch is written and confirmed as usual."""
        good = []
        bad: dict[int, str] = {}  # message id -> why its record cannot be written
        for record in batch.records:
            try:
                records_encoded_size(record)
            except _ENCODING_ERRORS as why:
                self.log.error(
                    "AMQ224016: a journal record cannot be encoded, dropped: %s: %s",
                    type(record).__name__,
                    why,
                )
                if type(record) in _WITH_MESSAGE and record.message_id:
                    bad[record.message_id] = (
                        f"the message could not be stored: its journal record cannot be encoded ({why})"
                    )
                continue
            good.append(record)
        if len(good) == len(batch.records):
            raise exc  # the batch failed, not one of its records: nothing to drop, a bug to surface

        def refusal(message_id: int) -> BrokerError | None:
            if message_id in bad:
                return BrokerError(errors.INTERNAL_ERROR, bad[message_id])
            if message_id == 0 and bad:
                return BrokerError(errors.INTERNAL_ERROR, REPEAT_REFUSED)
            return None

        kept = self._refuse(_Batch(good, batch.callbacks, batch.failures, batch.syncs), refusal)
        if bad:  # their records are gone from this batch: forget them once it is written
            refused = set(bad)
            kept.callbacks.append(lambda: self.rolled_back.difference_update(refused))
        self._write(kept)


def _disk_full(_message_id: int) -> BrokerError:
    return ResourceLimitExceeded(DISK_FULL)


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


def records_encoded_size(record: Any) -> int:
    """The size of a record's frame; ValueError (and kin) when it cannot be encoded."""
    return encode_parts(record)[1]


def _run_all(callbacks: list[Callback], log: logging.Logger) -> Callback:
    def run() -> None:
        for cb in callbacks:
            try:
                cb()
            except Exception:  # one failing callback must not starve the others of their confirmation
                log.exception("durability callback failed")

    return run
