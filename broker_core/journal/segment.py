"""Segment files: names, the 32-byte header, and scanning the frames of a segment's bytes.

Scanning stops at the first frame that is incomplete or fails its crc and reports where and why; it
never skips ahead to look for a later valid frame (a torn tail is cut, never guessed). A batch frame
makes the frames after it all-or-nothing: unless every one of them is valid, the scan stops at the
batch frame itself.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_core.journal.codec import FRAME, FRAME_SIZE, MAX_PAYLOAD, TYPE_BATCH, batch_length, frame_crc
from broker_core.journal.errors import JournalFormatError

MAGIC = b"AMQMJRNL"
VERSION = 1
KIND_PLAIN = 0
KIND_COMPACTED = 1
# magic, version, kind, generation, sequence, reserved (0), crc32 of the preceding 28 bytes
HEADER = struct.Struct("<8sHHIQII")
HEADER_SIZE = HEADER.size  # 32

_PLAIN_RE = re.compile(r"^segment-(\d{12})\.jnl$")
_COMPACTED_RE = re.compile(r"^compact-(\d{8})-(\d{12})\.jnl$")


def plain_name(seq: int) -> str:
    return f"segment-{seq:012d}.jnl"


def compacted_name(generation: int, seq: int) -> str:
    return f"compact-{generation:08d}-{seq:012d}.jnl"


def parse_plain_name(name: str) -> int | None:
    match = _PLAIN_RE.match(name)
    return int(match.group(1)) if match else None


def parse_compacted_name(name: str) -> tuple[int, int] | None:
    match = _COMPACTED_RE.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    kind: int
    generation: int
    seq: int


def pack_header(header: SegmentHeader) -> bytes:
    head = HEADER.pack(MAGIC, VERSION, header.kind, header.generation, header.seq, 0, 0)[:-4]
    return head + struct.pack("<I", zlib.crc32(head))


def unpack_header(data: bytes | memoryview) -> SegmentHeader | str:
    """The header, or the reason it is not valid; JournalFormatError for a newer format version."""
    if len(data) < HEADER_SIZE:
        return f"incomplete segment header ({len(data)} of {HEADER_SIZE} bytes)"
    magic, version, kind, generation, seq, _reserved, crc = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        return "bad segment magic"
    if zlib.crc32(bytes(data[: HEADER_SIZE - 4])) != crc:
        return "segment header crc mismatch"
    if version != VERSION:
        raise JournalFormatError(f"segment format version {version}; this build reads {VERSION}")
    return SegmentHeader(kind, generation, seq)


@dataclass(slots=True)
class Frame:
    offset: int  # of the frame header within the file
    size: int  # frame header + payload
    record_type: int
    payload: memoryview


class FrameScanner:
    """Iterates the valid frames of ``buf`` from ``start``; afterwards ``valid_end``/``problem`` tell
    where the valid data ends and why scanning stopped (``problem`` is None at a clean end of file)."""

    def __init__(self, buf: bytes, start: int = HEADER_SIZE) -> None:
        self._buf = buf
        self._view = memoryview(buf)
        self.valid_end = start
        self.problem: str | None = None

    def __iter__(self) -> Iterator[Frame]:
        end = len(self._buf)
        pos = self.valid_end
        while pos < end:
            frame = self._frame(pos, end)
            if frame is None:
                return
            if frame.record_type != TYPE_BATCH:
                yield frame
                pos = self.valid_end = pos + frame.size
                continue
            batch_end = frame.offset + frame.size + batch_length(frame.payload)
            if batch_end > end:
                self.problem = "batch runs past end of file"
                return
            frames, inner = [], frame.offset + frame.size
            while inner < batch_end:  # every frame of the batch is checked before any is used
                f = self._frame(inner, batch_end)
                if f is None:
                    self.problem = f"{self.problem} in the batch at offset {pos}"
                    return
                frames.append(f)
                inner += f.size
            yield from frames
            pos = self.valid_end = batch_end

    def _frame(self, pos: int, end: int) -> Frame | None:
        """The valid frame at ``pos`` ending by ``end``, or None with ``problem`` set."""
        if end - pos < FRAME_SIZE:
            self.problem = "incomplete record header"
            return None
        length, record_type, crc = FRAME.unpack_from(self._buf, pos)
        if length > MAX_PAYLOAD:
            self.problem = f"implausible record length {length}"
            return None
        stop = pos + FRAME_SIZE + length
        if stop > end:
            self.problem = "record length runs past end of file"
            return None
        payload = self._view[pos + FRAME_SIZE : stop]
        if frame_crc(record_type, payload) != crc:
            self.problem = "record crc mismatch"
            return None
        return Frame(pos, stop - pos, record_type, payload)


def read_file(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read()
