"""Compaction: rewrite the live state into a new generation of segments, then drop the old files.

Crash safety comes from the order of steps (see layout.py for how recovery reads the result):

1. the caller has rolled the active segment, so every record so far is in a closed file and the
   snapshot below is exactly the state after those files (``covers_through`` = the last of them);
2. write the generation files (``HighestIds``, addresses, queues, meta, what is live of each page, then
   live messages in journal order with their delivery counts) and fdatasync each;
3. commit: write the marker atomically (tmp, fsync, rename, directory fsync);
4. only then delete the superseded files.

A crash before 3 leaves an incomplete generation that recovery deletes; a crash after 3 leaves
obsolete files that recovery deletes. Either way the live state replayed is the same.

Live messages whose references are all still live are copied byte for byte from their old segment;
only messages with dead references are decoded and re-encoded with the live queue ids.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from broker_core.journal.codec import FRAME_SIZE, TYPE_MESSAGE_ADDED, decode, encode
from broker_core.journal.files import create_segment, fsync_dir, remove_files, write_all, write_atomically
from broker_core.journal.layout import Marker, marker_name, pack_marker
from broker_core.journal.records import (
    DeliveryCountUpdated,
    DuplicateIdAdded,
    HighestIds,
    MessageAdded,
    MetaRecord,
    PageCompleted,
)
from broker_core.journal.segment import HEADER_SIZE, KIND_COMPACTED, SegmentHeader, compacted_name
from broker_core.journal.state import LiveMessage, LiveState


@dataclass(slots=True)
class CompactionPlan:
    directory: Path
    generation: int
    covers_through: int
    first_seq: int
    segment_size: int
    sync: bool
    sources: dict[int, Path]  # every file replaced by this generation, by sequence


@dataclass(slots=True)
class CompactionResult:
    marker: Marker
    files: dict[int, Path]  # the new generation's files by sequence
    bytes_before: int
    bytes_after: int
    seconds: float = 0.0
    # new homes, applied to the state only once the marker is durable
    entity_locations: dict[tuple[Any, ...], tuple[int, int]] = field(default_factory=dict)
    message_locations: list[tuple[LiveMessage, int, int, int]] = field(default_factory=list)
    segment_total: dict[int, int] = field(default_factory=dict)
    segment_live: dict[int, int] = field(default_factory=dict)


def compact(plan: CompactionPlan, state: LiveState) -> CompactionResult:
    """Write and commit a new generation; the caller then calls ``apply`` and deletes the sources.

    On failure the partial generation is removed and the exception propagates; the state is untouched.
    """
    started = time.monotonic()
    writer = _GenerationWriter(plan)
    try:
        with Sources(plan.sources) as sources:
            for item in _snapshot(state, sources):
                writer.add(*item)
        writer.finish()
        marker = Marker(plan.generation, plan.covers_through, plan.first_seq, writer.seq)
        write_atomically(plan.directory / marker_name(plan.generation), pack_marker(marker), plan.sync)
    except BaseException:
        writer.abort()
        raise
    result = writer.result
    result.marker = marker
    result.bytes_before = sum(p.stat().st_size for p in plan.sources.values())
    result.seconds = time.monotonic() - started
    return result


def apply(result: CompactionResult, state: LiveState, replaced: list[int]) -> None:
    """Point the state at the new generation after the marker is durable."""
    for seq in replaced:
        state.forget_segment(seq)
    state.locations.update(result.entity_locations)
    for message, seq, offset, size in result.message_locations:
        message.seq, message.offset, message.size, message.trimmed = seq, offset, size, False
    state.segment_total.update(result.segment_total)
    state.segment_live.update(result.segment_live)


def remove_superseded(directory: Path, paths: list[Path], older_markers: list[Path], sync: bool) -> None:
    remove_files(paths + older_markers)
    if sync:
        fsync_dir(directory)


# What the snapshot yields: (frame bytes, live key or None, the live message or None)
_Item = tuple[bytes, tuple[Any, ...] | None, LiveMessage | None]


def entity_items(state: LiveState) -> Iterator[tuple[bytes, tuple[Any, ...] | None]]:
    """The frames of everything live but the messages, with their live keys (compaction; replication)."""
    yield encode(HighestIds(*state.max_ids)), None
    for address_id, address in state.addresses.items():
        yield encode(address), ("a", address_id)
    for queue_id, queue in state.queues.items():
        yield encode(queue), ("q", queue_id)
    for key, value in state.meta.items():
        yield encode(MetaRecord(key, value)), ("m", key)
    for name, ids in state.duplicates.items():
        size = state.duplicate_sizes.get(name, len(ids))
        for duplicate_id in ids:
            yield encode(DuplicateIdAdded(name, duplicate_id, size)), ("d", name, duplicate_id)
    for seq, page in state.pages.items():
        yield encode(page.written), ("pw", seq)
        for queue_id in page.completed:
            yield encode(PageCompleted(queue_id, seq)), ("pc", seq, queue_id)
        for queue_id, acks in page.acks.items():
            for message_id, ack in acks.items():
                yield encode(ack), ("pa", seq, queue_id, message_id)


def _snapshot(state: LiveState, sources: Sources) -> Iterator[_Item]:
    for frame, key in entity_items(state):
        yield frame, key, None
    for message_id, message in state.messages.items():
        yield message_frame(message, sources), None, message
        for queue_id, count in (message.counts or {}).items():
            yield encode(DeliveryCountUpdated(queue_id, message_id, count)), None, None


def message_frame(message: LiveMessage, sources: Sources) -> bytes:
    """A live message's frame as it stands: copied byte for byte, re-encoded if some of its
    references died."""
    raw = sources.frame(message.seq, message.offset, message.size)
    if not message.trimmed:
        return raw
    record = decode(TYPE_MESSAGE_ADDED, raw[FRAME_SIZE:])
    assert isinstance(record, MessageAdded)
    return encode(replace(record, queue_ids=tuple(message.refs)))


class Sources:
    """Segment files, memory-mapped on first use so copying a live message is a slice."""

    def __init__(self, paths: dict[int, Path]) -> None:
        self._paths = paths
        self._maps: dict[int, mmap.mmap] = {}

    def __enter__(self) -> Sources:
        return self

    def __exit__(self, *_exc: object) -> None:
        for mapped in self._maps.values():
            mapped.close()

    def frame(self, seq: int, offset: int, size: int) -> bytes:
        mapped = self._maps.get(seq)
        if mapped is None:
            with self._paths[seq].open("rb") as handle:
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            self._maps[seq] = mapped
        return mapped[offset : offset + size]


class _GenerationWriter:
    """Packs frames into generation files of about ``segment_size`` bytes each."""

    def __init__(self, plan: CompactionPlan) -> None:
        self._plan = plan
        self.seq = plan.first_seq - 1
        self._fd = -1
        self._buffer = bytearray()
        self._position = 0
        self.result = CompactionResult(Marker(0, 0, 0, 0), {}, 0, 0)

    def add(self, data: bytes, key: tuple[Any, ...] | None, message: LiveMessage | None) -> None:
        if self._fd < 0 or (self._position + len(data) > self._plan.segment_size and self._buffer):
            self._next_file()
        offset = self._position
        self._buffer += data
        self._position += len(data)
        result, size = self.result, len(data)
        result.segment_total[self.seq] += size
        if key is not None:
            result.entity_locations[key] = (self.seq, size)
        if message is not None:
            result.message_locations.append((message, self.seq, offset, size))
        if key is not None or message is not None:
            result.segment_live[self.seq] += size
        if len(self._buffer) >= 1 << 20:
            write_all(self._fd, self._buffer)
            self._buffer.clear()

    def finish(self) -> None:
        if self._fd < 0:
            self._next_file()
        self._close_file()
        if self._plan.sync:  # the files' directory entries must be durable before the marker is
            fsync_dir(self._plan.directory)

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        remove_files(list(self.result.files.values()))

    def _next_file(self) -> None:
        if self._fd >= 0:
            self._close_file()
        self.seq += 1
        path = self._plan.directory / compacted_name(self._plan.generation, self.seq)
        header = SegmentHeader(KIND_COMPACTED, self._plan.generation, self.seq)
        # record the path before creating it, so abort() removes it even if creation fails midway
        self.result.files[self.seq] = path
        self._fd = create_segment(path, header, sync=False)
        self._position = HEADER_SIZE
        self.result.segment_total[self.seq] = 0
        self.result.segment_live[self.seq] = 0

    def _close_file(self) -> None:
        write_all(self._fd, self._buffer)
        self._buffer.clear()
        self.result.bytes_after += self._position
        if self._plan.sync:
            os.fdatasync(self._fd)
        os.close(self._fd)
        self._fd = -1
