"""Replaying a journal directory: the read-only scan (shared with reader.py) and the repairing recovery.

The scan goes through the replay files in order and stops at the first file whose header is invalid
or the first frame that is incomplete or fails its crc. Recovery then cuts there: it truncates that
file at the end of its last valid record (or deletes it when even its header is bad) and deletes every
later file, logging what it dropped. Data after a bad frame is never guessed at.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_core.journal.codec import decode
from broker_core.journal.errors import JournalFormatError
from broker_core.journal.files import fsync_dir
from broker_core.journal.layout import Layout, plan
from broker_core.journal.records import Record
from broker_core.journal.segment import (
    Frame,
    FrameScanner,
    SegmentHeader,
    parse_compacted_name,
    parse_plain_name,
    read_file,
    unpack_header,
)
from broker_core.journal.state import LiveState


@dataclass(frozen=True, slots=True)
class Cut:
    path: Path
    offset: int  # end of the last valid record; 0 when the header itself is invalid
    dropped: int  # bytes after offset
    reason: str
    later: list[Path]  # replay files after the cut, all to be dropped


def decode_frame(frame: Frame) -> Record:
    """Decode a crc-checked frame; bytes that pass the crc but do not decode are a format error."""
    try:
        return decode(frame.record_type, frame.payload)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:  # json errors are ValueErrors
        if isinstance(exc, JournalFormatError):
            raise
        raise JournalFormatError(f"record type {frame.record_type} at offset {frame.offset}: {exc}") from exc


class ReplayScan:
    """Iterates ``(header, frame)`` over the valid frames of ``paths``; then ``cut`` says where it stopped
    early (None when every file was read to its end)."""

    def __init__(self, paths: list[Path]) -> None:
        self._paths = paths
        self.cut: Cut | None = None
        self.headers: dict[Path, SegmentHeader] = {}

    def __iter__(self) -> Iterator[tuple[SegmentHeader, Frame]]:
        for index, path in enumerate(self._paths):
            data = read_file(path)
            header = unpack_header(data)
            if isinstance(header, SegmentHeader) and header.seq != _name_seq(path):
                header = f"header sequence {header.seq} does not match the file name"
            if isinstance(header, str):
                self.cut = Cut(path, 0, len(data), header, self._paths[index + 1 :])
                return
            self.headers[path] = header
            scanner = FrameScanner(data)
            for frame in scanner:
                yield header, frame
            if scanner.problem is not None:
                end = scanner.valid_end
                self.cut = Cut(path, end, len(data) - end, scanner.problem, self._paths[index + 1 :])
                return


def _name_seq(path: Path) -> int | None:
    seq = parse_plain_name(path.name)
    if seq is not None:
        return seq
    parsed = parse_compacted_name(path.name)
    return parsed[1] if parsed else None


@dataclass(slots=True)
class RecoveryResult:
    state: LiveState
    layout: Layout
    files: dict[int, Path]  # the surviving replay files by sequence, in replay order


def recover(directory: Path, logger: logging.Logger, sync: bool = True) -> RecoveryResult:
    """Replay ``directory`` into a fresh live state, repairing it: drop compaction debris and
    superseded files, cut a torn or corrupt tail."""
    layout = plan(directory)
    for path in layout.obsolete:
        logger.info("journal %s: removing file superseded by a compaction", path.name)
    for path in layout.incomplete:
        logger.warning("journal %s: removing file of an interrupted compaction", path.name)
    _delete(layout.obsolete + layout.incomplete)
    state = LiveState(keep_records=True)
    scan = ReplayScan(layout.replay)
    for header, frame in scan:
        state.apply(decode_frame(frame), header.seq, frame.offset, frame.size)
    if scan.cut is not None:
        _apply_cut(scan.cut, logger, sync)
    files = {header.seq: path for path, header in scan.headers.items() if path.exists()}
    for seq in files:
        state.segment_total.setdefault(seq, 0)
        state.segment_live.setdefault(seq, 0)
    if sync:
        fsync_dir(directory)
    return RecoveryResult(state, layout, files)


def _apply_cut(cut: Cut, logger: logging.Logger, sync: bool) -> None:
    logger.warning(
        "journal %s: cut %d bytes after offset %d (%s)", cut.path.name, cut.dropped, cut.offset, cut.reason
    )
    _drop(cut.path, cut.offset, sync)
    for path in cut.later:
        logger.warning("journal %s: removing %d bytes after the cut", path.name, path.stat().st_size)
        _drop(path, 0, sync)


def _drop(path: Path, keep: int, sync: bool) -> None:
    """Keep the first ``keep`` bytes of ``path``. A plain segment left with nothing is deleted; files of
    the committed generation are only emptied, because its marker names them (a missing one would make
    the directory unreadable, while an empty one just cuts there again on the next open)."""
    if keep == 0 and parse_plain_name(path.name) is not None:
        path.unlink()
        return
    with path.open("r+b") as handle:
        handle.truncate(keep)
        if sync:
            os.fsync(handle.fileno())


def _delete(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
