"""The active segment: writes batches of frames with one write and one fdatasync, rolls over when full.

Used only by the journal's writer thread, so it has no locks. Each record is applied to the live state
as soon as its position is known, keeping the state's byte accounting exact per segment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from broker_core.journal.files import create_segment, write_all
from broker_core.journal.records import Record
from broker_core.journal.segment import HEADER_SIZE, KIND_PLAIN, SegmentHeader, plain_name
from broker_core.journal.state import LiveState


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

    def __init__(
        self,
        data: bytes,
        records: tuple[Record, ...],
        sizes: tuple[int, ...],
        lead: int = 0,
        syncs: tuple[Syncable, ...] = (),
    ) -> None:
        self.data = data
        self.records = records
        self.sizes = sizes
        self.lead = lead
        self.syncs = syncs


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
        self.records_written = 0
        self.bytes_written = 0
        self.rolled = False  # set on each roll; the journal clears it after checking for compaction

    def open_new_segment(self) -> None:
        """Close the active segment (if any, durably) and start the next one."""
        if self._fd >= 0:
            self._sync_active()
            os.close(self._fd)
        self.seq, self.next_seq = self.next_seq, self.next_seq + 1
        path = self._directory / plain_name(self.seq)
        self._fd = create_segment(path, SegmentHeader(KIND_PLAIN, 0, self.seq), self._sync)
        self.files[self.seq] = path
        self._state.segment_total[self.seq] = 0
        self._state.segment_live[self.seq] = 0
        self._position = HEADER_SIZE
        self.rolled = True

    def write_batch(self, entries: list[Entry]) -> None:
        """Write ``entries`` in order and make them durable (one fdatasync unless a roll happened)."""
        if self._sync:
            for entry in entries:
                for file in entry.syncs:
                    file.sync()
        chunk: list[bytes] = []
        for entry in entries:
            size = len(entry.data)
            if self._position + size > self._segment_size and self._position > HEADER_SIZE:
                self._write(chunk)
                chunk = []
                self.open_new_segment()
            chunk.append(entry.data)
            self._apply(entry)
        self._write(chunk)
        self._sync_active()

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
            os.fdatasync(self._fd)
            self.fsyncs += 1
