"""Reading a page's records back, in chunks, each frame's crc checked."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from broker_core.journal.codec import FRAME, FRAME_SIZE, MAX_PAYLOAD, TYPE_MESSAGE_ADDED, decode, frame_crc
from broker_core.journal.records import MessageAdded

from .pagefile import PageFile

CHUNK = 1 << 20  # bytes read at a time: a few hundred 1 KiB messages, one system call


class PageCorrupt(Exception):
    """A frame of a committed page did not check out: nothing after it in the page can be trusted."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} at offset {offset}")
        self.offset = offset


def records(file: PageFile, offset: int, limit: int) -> Iterator[tuple[int, MessageAdded]]:
    """(end of the frame, record) for every frame from `offset` up to `limit`."""
    buf = b""
    base = offset  # file offset of buf[0]
    pos = offset
    while pos < limit:
        at = pos - base
        if len(buf) - at < FRAME_SIZE:
            buf, base, at = file.read(pos, min(CHUNK, limit - pos)), pos, 0
            if len(buf) < FRAME_SIZE:
                raise PageCorrupt(pos, "incomplete record header")
        length, record_type, crc = FRAME.unpack_from(buf, at)
        end = pos + FRAME_SIZE + length
        if length > MAX_PAYLOAD or end > limit:
            raise PageCorrupt(pos, f"record length {length} runs past the committed end {limit}")
        if end - base > len(buf):
            buf, base, at = file.read(pos, max(CHUNK, FRAME_SIZE + length)), pos, 0
            if end - base > len(buf):
                raise PageCorrupt(pos, "record runs past the end of the file")
        payload = memoryview(buf)[at + FRAME_SIZE : at + FRAME_SIZE + length]
        if record_type != TYPE_MESSAGE_ADDED or frame_crc(record_type, payload) != crc:
            raise PageCorrupt(pos, f"record type {record_type} or crc mismatch")
        try:
            record = decode(record_type, payload)
        except (struct.error, UnicodeDecodeError, ValueError) as exc:
            raise PageCorrupt(pos, f"undecodable record ({exc})") from exc
        assert isinstance(record, MessageAdded)
        pos = end
        yield end, record
