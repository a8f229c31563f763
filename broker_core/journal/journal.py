"""The durable journal: thread-safe appends, group commit on one writer thread, recovery, compaction.

Threads: callers encode records and queue the bytes under ``_lock``; the writer thread takes the whole
queue at once, writes it with one write and makes it durable with one fdatasync (group commit: every
record queued while the previous fsync ran shares the next one), then hands all callbacks of the batch,
in append order, to ``dispatch`` in a single call. Only the writer thread touches the files and the live
state after ``open``. Compaction also runs on the writer thread, between batches; appends keep queueing
meanwhile and are written right after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from broker_core.histogram import BATCH_BOUNDS, Histogram
from broker_core.journal import compaction, replication
from broker_core.journal.codec import batch_frame, encode, encode_parts
from broker_core.journal.errors import JournalClosedError, JournalFailedError, JournalFull
from broker_core.journal.layout import marker_name
from broker_core.journal.records import Record
from broker_core.journal.recovery import recover
from broker_core.journal.replication import ReplicationSnapshot
from broker_core.journal.state import LiveState, Recovered
from broker_core.journal.writer import Entry, NoSpace, SegmentWriter, Syncable

Callback = Callable[[], None]
Dispatch = Callable[[Callback], None]
Pending = tuple[Entry, Callback | None, Callback | None]  # an entry, on durable, on failed (no space)
# Sees each batch as written and synced, on the writer thread, before its callbacks are handed over:
# the entries' bytes are exactly what is on disk (HA replication streams them to a backup from here).
BatchTap = Callable[[list[Entry]], None]

_LOG = logging.getLogger(__name__)


class Journal:
    def __init__(
        self,
        directory: Path,
        *,
        segment_size: int = 10 * 1024 * 1024,
        fsync: bool = True,
        dispatch: Dispatch | None = None,
        logger: logging.Logger | None = None,
        compact_min_segments: int = 4,
        compact_dead_ratio: float = 0.5,
    ) -> None:
        self._directory = Path(directory)
        self._segment_size = segment_size
        self._sync = fsync
        self._dispatch = dispatch
        self._log = logger or _LOG
        self._compact_min_segments = compact_min_segments
        self._compact_dead_ratio = compact_dead_ratio
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the writer waits here for appends
        self._progress = threading.Condition(self._lock)  # flush/compact/close wait here
        self._pending: list[Pending] = []
        self._appended = 0  # entries queued so far
        self._handed = 0  # entries durable, with their callbacks run or handed to ``dispatch``
        self._compact_requested = False
        self._stopping = False
        self._open = False
        self._closed = False
        self._failure: BaseException | None = None
        self._no_space: OSError | None = None  # the disk was full: appends refused until resume()
        self._writer_thread: threading.Thread | None = None
        self._state = LiveState()
        self._writer: SegmentWriter | None = None
        self._marker_generation = 0
        self._next_generation = 1
        self._compactions: list[dict[str, Any]] = []
        self._taps: list[BatchTap] = []
        self._replication_requests: list[tuple[Callable[[ReplicationSnapshot], None], BatchTap]] = []
        self._replicating = 0  # snapshots being copied: compaction waits (their files must stay)
        self.batch_records = Histogram(BATCH_BOUNDS)  # records per group commit, read by metrics
        # told (through ``dispatch``) when the writer fails for good, so the owner stops at once rather
        # than at its next append
        self.on_failure: Callable[[BaseException], None] | None = None
        # told, on the appending thread, the bytes of each append as it is queued (the disk's estimate)
        self.on_queued: Callable[[int], None] | None = None

    # --- lifecycle ---

    def open(self) -> Recovered:
        """Replay the directory (creating it if needed), repair its tail, start a new segment."""
        if self._open or self._writer_thread is not None:
            raise JournalClosedError("a Journal object can be opened once")
        self._directory.mkdir(parents=True, exist_ok=True)
        result = recover(self._directory, self._log, self._sync)
        self._state = result.state
        recovered = self._state.recovered()
        self._state.records = None  # the running journal tracks locations, not message bodies
        if result.layout.marker is not None:
            self._marker_generation = result.layout.marker.generation
        self._next_generation = result.layout.next_generation
        self._writer = SegmentWriter(
            self._directory, self._state, result.files, result.layout.next_seq, self._segment_size, self._sync
        )
        self._writer.open_new_segment()
        self._open = True
        name = f"journal-writer:{self._directory.name}"
        self._writer_thread = threading.Thread(target=self._run, name=name)
        self._writer_thread.daemon = True
        self._writer_thread.start()
        return recovered

    def close(self) -> None:
        """Write and sync everything appended so far, stop the writer thread, close the files.

        Raises JournalFailedError if the writer had failed (appends since then were not durable)."""
        with self._lock:
            if self._writer_thread is None or self._closed:
                return
            self._closed = self._stopping = True
            self._work.notify()
        self._writer_thread.join()
        if self._writer is not None:
            self._writer.close(sync=self._failure is None)
        if self._failure is not None:
            raise JournalFailedError("the journal failed before close") from self._failure

    def abandon(self) -> None:
        """Write nothing more, at once: what is queued is dropped unwritten, callbacks and all (the server
        halts: these files may be another server's now). A batch being written finishes; no close, no
        sync follows (`close()` then does nothing)."""
        with self._lock:
            self._pending = []
            self._compact_requested = False
            self._replication_requests = []
            self._closed = self._stopping = True
            self._work.notify()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def fsync(self) -> bool:
        """Whether writes are made durable (fdatasync); files the journal commits follow the same rule."""
        return self._sync

    def add_tap(self, tap: BatchTap) -> None:
        """`tap(entries)` for every batch written from now on (writer thread; it must not block long)."""
        self._taps.append(tap)

    def start_replication(self, ready: Callable[[ReplicationSnapshot], None], tap: BatchTap) -> None:
        """Between two batches on the writer thread: roll the active segment, capture the live state, pause
        compaction, hand the snapshot to `ready` (through dispatch), and `tap` every batch from then on."""
        with self._lock:
            self._check_usable()
            self._replication_requests.append((ready, tap))
            self._work.notify()

    def stop_replication(self, tap: BatchTap) -> None:
        """The backup is gone: no more tapping."""
        with self._lock:
            if tap in self._taps:
                self._taps.remove(tap)

    def snapshot_copied(self) -> None:
        """The snapshot's files were read: compaction may go on (the tap carries on regardless)."""
        with self._lock:
            self._replicating = max(0, self._replicating - 1)

    # --- appending ---

    def append(self, rec: Record, on_durable: Callback | None = None) -> None:
        """Queue ``rec``; ``on_durable`` runs (through ``dispatch``) once it is on disk. Never blocks."""
        data = encode(rec)
        self._enqueue(Entry(data, (rec,), (len(data),)), on_durable, None)

    def append_many(
        self,
        recs: Iterable[Record],
        on_durable: Callback | None = None,
        syncs: tuple[Syncable, ...] = (),
        on_failed: Callback | None = None,
        tag: int = 0,
    ) -> None:
        """Queue several records, written contiguously in one segment, with one callback for all; the
        `syncs` (page files) are made durable before the batch is written. If the disk is full, none of
        them is written and `on_failed` runs instead (through ``dispatch``), as it does for every append
        queued behind them; appends then raise JournalFull until `resume()`."""
        records = tuple(recs)
        pieces: list[bytes] = [b""]  # the batch frame's place
        sizes: list[int] = []
        for r in records:
            parts, size = encode_parts(r)
            pieces += parts
            sizes.append(size)
        lead = 0
        if len(records) > 1:  # all or nothing after a crash: an ack never survives without its mirror event
            pieces[0] = batch_frame(sum(sizes))
            lead = len(pieces[0])
        self._enqueue(Entry(b"".join(pieces), records, tuple(sizes), lead, syncs, tag), on_durable, on_failed)

    def _enqueue(self, entry: Entry, on_durable: Callback | None, on_failed: Callback | None) -> None:
        with self._lock:
            self._check_usable()
            if self._no_space is not None:
                raise JournalFull(f"journal {self._directory}: no space left ({self._no_space.strerror})")
            self._pending.append((entry, on_durable, on_failed))
            self._appended += 1
            self._work.notify()
        if self.on_queued is not None:
            self.on_queued(len(entry.data))

    @property
    def full(self) -> bool:
        return self._no_space is not None

    def resume(self) -> None:
        """Take appends again after a full disk (the caller retries what was handed back)."""
        with self._lock:
            self._no_space = None

    def flush(self) -> None:
        """Block until everything appended so far is durable and its callbacks were handed over."""
        with self._lock:
            target = self._appended
            self._wait_for(lambda: self._handed >= target)

    def compact(self) -> dict[str, Any]:
        """Compact now (on the writer thread) and wait for it; returns the compaction's figures."""
        with self._lock:
            done = len(self._compactions)
            self._compact_requested = True
            self._work.notify()
            self._wait_for(lambda: len(self._compactions) > done)
            return self._compactions[-1]

    def stats(self) -> dict[str, Any]:
        state, writer = self._state, self._writer
        total = sum(list(state.segment_total.values()))
        live = sum(list(state.segment_live.values()))
        return {
            "segments": len(writer.files) if writer else 0,
            "bytes": total,
            "live_bytes": live,
            "live_records": state.live_records(),
            "live_messages": len(state.messages),
            "fsyncs": writer.fsyncs if writer else 0,
            "records_written": writer.records_written if writer else 0,
            "bytes_written": writer.bytes_written if writer else 0,
            "compactions": len(self._compactions),
            "last_compaction": self._compactions[-1] if self._compactions else None,
        }

    @property
    def fsync_seconds(self) -> Histogram | None:
        """How long each fdatasync of the active segments took (None before `open`)."""
        return self._writer.fsync_seconds if self._writer is not None else None

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise JournalFailedError("an earlier write or fsync failed") from self._failure
        if not self._open or self._stopping:
            raise JournalClosedError(f"journal {self._directory} is not open")

    def _wait_for(self, done: Callable[[], bool]) -> None:
        """Wait (holding ``_lock``) until ``done()``; raise if the journal fails or stops first."""
        while not done():
            if self._failure is not None:
                raise JournalFailedError("journal failed") from self._failure
            if not self._open:
                raise JournalClosedError(f"journal {self._directory} is not open")
            self._progress.wait()

    # --- the writer thread ---

    def _run(self) -> None:
        try:
            while self._cycle():
                pass
        except BaseException as exc:  # a failed write or fsync: nothing after it can be trusted
            self._log.critical("journal %s: writer failed (%s); the journal is closed", self._directory, exc)
            self._log.debug("journal writer failure", exc_info=True)
            with self._lock:
                self._failure = exc
                self._progress.notify_all()
            on_failure, failure = self.on_failure, exc  # `exc` is unbound once the except block ends
            if on_failure is not None and self._dispatch is not None:
                self._dispatch(lambda: on_failure(failure))
        finally:
            with self._lock:
                self._open = False
                self._progress.notify_all()

    def _cycle(self) -> bool:
        with self._lock:
            while (
                not self._pending
                and not self._stopping
                and not self._compact_requested
                and not self._replication_requests
            ):
                self._work.wait()
            if not self._pending and self._stopping and not self._compact_requested:
                return False
            batch, self._pending = self._pending, []
            target, compact_now = self._appended, self._compact_requested
            requests, self._replication_requests = self._replication_requests, []
        writer = self._writer
        assert writer is not None
        if batch:
            entries = [entry for entry, _, _ in batch]
            done, full = len(batch), None
            written = writer.records_written
            try:
                writer.write_batch(entries)
            except NoSpace as exc:
                done, full = exc.done, exc
            if writer.records_written > written:
                self.batch_records.observe(writer.records_written - written)
            if done:
                for tap in self._taps:
                    tap(entries[:done])
            callbacks = [cb for _, cb, _ in batch[:done] if cb is not None]
            if full is not None:
                callbacks += self._out_of_space(batch[done:], full)
            self._run_callbacks(callbacks)
            with self._lock:
                self._handed = max(self._handed, target)
                self._progress.notify_all()
        for ready, tap in requests:  # after this batch, before the next: the tap misses nothing
            self._begin_replication(ready, tap)
        if compact_now or (writer.rolled and self._worth_compacting() and not self._replicating):
            self._compact()
        writer.rolled = False
        return True

    def _out_of_space(self, failed: list[Pending], full: NoSpace) -> list[Callback]:
        """The disk is full: hand back the batch that failed and everything queued behind it, in order,
        and refuse appends until `resume()`."""
        with self._lock:
            failed = failed + self._pending
            self._pending = []
            self._no_space = full.cause
            self._handed = self._appended  # nothing queued is left to wait for
        self._log.error(
            "journal %s: the disk is full (%s): %d batches not written, handed back to be retried",
            self._directory,
            full.cause.strerror or full.cause,
            len(failed),
        )
        return [on_failed for _, _, on_failed in failed if on_failed is not None]

    def _begin_replication(self, ready: Callable[[ReplicationSnapshot], None], tap: BatchTap) -> None:
        writer = self._writer
        assert writer is not None
        writer.open_new_segment()  # every live message now lies in a closed file
        files = {seq: path for seq, path in writer.files.items() if seq != writer.seq}
        snapshot = replication.capture(self._state, files)
        with self._lock:
            self._replicating += 1
            self._taps.append(tap)
        self._run_callbacks([lambda: ready(snapshot)])

    def _run_callbacks(self, callbacks: list[Callback]) -> None:
        if not callbacks:
            return
        if self._dispatch is None:
            self._call_all(callbacks)
        else:  # one hand-off per batch: call_soon_threadsafe per callback would wake the loop N times
            self._dispatch(lambda: self._call_all(callbacks))

    def _call_all(self, callbacks: list[Callback]) -> None:
        for callback in callbacks:
            try:
                callback()
            except Exception:
                self._log.exception("journal %s: on_durable callback failed", self._directory)

    def _worth_compacting(self) -> bool:
        writer = self._writer
        assert writer is not None
        closed = [seq for seq in writer.files if seq != writer.seq]
        if len(closed) < self._compact_min_segments:
            return False
        total = sum(self._state.segment_total.get(seq, 0) for seq in closed)
        live = sum(self._state.segment_live.get(seq, 0) for seq in closed)
        return total > 0 and (total - live) / total > self._compact_dead_ratio

    def _compact(self) -> None:
        writer = self._writer
        assert writer is not None
        writer.open_new_segment()  # the snapshot then covers exactly the closed files
        replaced = {seq: path for seq, path in writer.files.items() if seq != writer.seq}
        generation = self._next_generation
        self._next_generation = generation + 1  # never reused, even when this attempt fails
        first_seq = writer.next_seq
        plan = compaction.CompactionPlan(
            self._directory, generation, writer.seq - 1, first_seq, self._segment_size, self._sync, replaced
        )
        try:
            result = compaction.compact(plan, self._state)
        except OSError as exc:
            self._log.error("journal %s: compaction failed (%s); keeping the old files", self._directory, exc)
            self._finish_compaction({"failed": True})
            return
        writer.next_seq = result.marker.last_seq + 1
        compaction.apply(result, self._state, list(replaced))
        for seq in replaced:
            del writer.files[seq]
        writer.files.update(result.files)
        old_marker = []
        if self._marker_generation:
            old_marker.append(self._directory / marker_name(self._marker_generation))
        self._marker_generation = generation
        try:  # the new generation is committed: left-overs are harmless, recovery removes them
            compaction.remove_superseded(self._directory, list(replaced.values()), old_marker, self._sync)
        except OSError:
            self._log.exception("journal %s: could not remove superseded files", self._directory)
        self._finish_compaction(
            {
                "generation": generation,
                "seconds": result.seconds,
                "bytes_before": result.bytes_before,
                "bytes_after": result.bytes_after,
                "live_messages": len(self._state.messages),
            }
        )
        self._log.info("journal %s: compaction %s", self._directory, self._compactions[-1])

    def _finish_compaction(self, figures: dict[str, Any]) -> None:
        with self._lock:
            self._compact_requested = False
            self._compactions.append(figures)
            self._progress.notify_all()
