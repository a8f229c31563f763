"""The active segment: writes batches of frames with one write and one fdatasync, rolls over when full.

Used only by the journal's writer thread, so it has no locks. Each record is applied to the live state
as soon as its position is known, keeping the state's byte accounting exact per segment.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from broker_core.histogram import FSYNC_BOUNDS, Histogram
from broker_core.journal.files import create_segment, write_all
from broker_core.journal.records import Record
from broker_core.journal.segment import HEADER_SIZE, KIND_PLAIN, SegmentHeader, plain_name
from broker_core.journal.state import LiveState

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a write refused for room: nothing partial is kept, retry later


class NoSpace(Exception):
    """The disk is full: entries before `done` are durable; none of the bytes of the others stay."""

    def __init__(self, done: int, cause: OSError) -> None:
        super().__init__(f"{cause.strerror or cause} ({done} entries written before it)")
        self.done = done
        self.cause = cause


class Syncable(Protocol):
    """A file the entry's records commit (a page file): synced before the entry is written."""

    def sync(self) -> None: ...


@dataclass(slots=True, init=False)  # a compiled __init__ (see records.py)
class Entry:
    """One ``append`` or ``append_many``: its frames back to back, kept in one segment."""

    data: bytes
    records: tuple[Record, ...]
    sizes: tuple[int, ...]  # frame size of each record
    lead: int  # bytes before the first record's frame (a batch frame)
    syncs: tuple[Syncable, ...]
    tag: int  # the caller's number for it (the persistence's batch number: HA replication acks by it)

    def __init__(
        self,
        data: bytes,
        records: tuple[Record, ...],
        sizes: tuple[int, ...],
        lead: int = 0,
        syncs: tuple[Syncable, ...] = (),
        tag: int = 0,
    ) -> None:
        self.data = data
        self.records = records
        self.sizes = sizes
        self.lead = lead
        self.syncs = syncs
        self.tag = tag


class SegmentWriter:
    def __init__(self, directory: Path, state: LiveState, files: dict[int, Path], next_seq: int,
                 segment_size: int, sync: bool) -> None:  # fmt: skip
        self._directory = directory
        self._state = state
        self.files = files  # every file of the replay set by sequence, the active one included
        self.next_seq = next_seq
        self._segment_size = segment_size
        self._sync = sync
        self.seq = 0
        self._fd = -1
        self._position = 0
        self.fsyncs = 0
        self.fsync_seconds = Histogram(FSYNC_BOUNDS)  # read by metrics; one observation per fdatasync
        self.records_written = 0
        self.bytes_written = 0
        self.rolled = False  # set on each roll; the journal clears it after checking for compaction

    def open_new_segment(self) -> None:
        """Start the next segment, then close the active one (if any) durably. If the new one cannot be
        made (a full disk), the active one stays active."""
        seq = self.next_seq
        path = self._directory / plain_name(seq)
        try:
            fd = create_segment(path, SegmentHeader(KIND_PLAIN, 0, seq), self._sync)
        except OSError:
            path.unlink(missing_ok=True)
            raise
        if self._fd >= 0:
            self._sync_active()
            os.close(self._fd)
        self.seq, self.next_seq, self._fd = seq, seq + 1, fd
        self.files[self.seq] = path
        self._state.segment_total[self.seq] = 0
        self._state.segment_live[self.seq] = 0
        self._position = HEADER_SIZE
        self.rolled = True

    def write_batch(self, entries: list[Entry]) -> None:
        """Write ``entries`` in order and make them durable (one fdatasync unless a roll happened).
        Raises NoSpace when the disk is full (what was written of the failing chunk is cut off)."""
        if self._sync:
            for entry in entries:
                for file in entry.syncs:
                    file.sync()
        first, size = 0, 0  # the entries of the chunk being gathered, and its bytes
        for i, entry in enumerate(entries):
            n = len(entry.data)
            if self._position + size + n > self._segment_size and self._position + size > HEADER_SIZE:
                self._commit(entries, first, i)
                try:
                    self.open_new_segment()
                except OSError as exc:
                    if exc.errno not in NO_SPACE:
                        raise
                    raise NoSpace(i, exc) from exc
                first, size = i, 0
            size += n
        self._commit(entries, first, len(entries))

    def _commit(self, entries: list[Entry], first: int, end: int) -> None:
        """Write entries[first:end] at the end of the active segment, sync, then account for them."""
        if first == end:
            return
        chunk = [entry.data for entry in entries[first:end]]
        try:
            self._write(chunk)
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            os.ftruncate(self._fd, self._position)  # no partial record stays
            os.lseek(self._fd, self._position, os.SEEK_SET)
            raise NoSpace(first, exc) from exc
        self._sync_active()
        for entry in entries[first:end]:
            self._apply(entry)

    def close(self, sync: bool = True) -> None:
        if self._fd >= 0:
            if sync:
                self._sync_active()
            os.close(self._fd)
            self._fd = -1

    def _apply(self, entry: Entry) -> None:
        start = self._position + entry.lead
        self._position = self._state.apply_written(entry.records, entry.sizes, self.seq, start)
        self.records_written += len(entry.records)

    def _write(self, chunk: list[bytes]) -> None:
        if chunk:
            data = chunk[0] if len(chunk) == 1 else b"".join(chunk)
            write_all(self._fd, data)
            self.bytes_written += len(data)

    def _sync_active(self) -> None:
        if self._sync:
            started = time.perf_counter()
            os.fdatasync(self._fd)
            self.fsync_seconds.observe(time.perf_counter() - started)
            self.fsyncs += 1
