"""The replication stream between a primary and its backup: one AMQP message per packet, on a link the
backup attaches from `REPLICATION_ADDRESS` (authenticated as the cluster user; docs/ha.md).

Each message's body is one data section: a type byte, then the packet:

- 1 hello: JSON with the primary's `nodeId`, `activationSequence` and `name`;
- 2 snapshot: journal frames of the primary's live state, in order (a chunk of them);
- 3 page: u64 page, u64 offset, then bytes of that page file from that offset;
- 4 synchronized: JSON, nothing yet (`{}`);
- 5 live: u64 tag, u32 page chunk count, each chunk (u64 page, u64 offset, u32 length, bytes), then one
  journal batch's frames;
- 6 stopping: JSON `{"failover": bool}`: the primary stops cleanly, and whether its backup should take
  over (failover-on-shutdown, forceFailover) or stay passive.

The backup settles each message Accepted once it has applied it; a live packet's tag (the primary's
batch number) tells the primary which of its confirmations the backup now covers.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

REPLICATION_ADDRESS = "$amqp-mirror.replication"

HELLO, SNAPSHOT, PAGE, SYNCHRONIZED, LIVE, STOPPING = 1, 2, 3, 4, 5, 6

_DATA = b"\x00\x53\x75\xb0"  # the data section descriptor and a vbin32
_PAGE_HEAD = struct.Struct(">QQ")
_LIVE_HEAD = struct.Struct(">QI")
_CHUNK_HEAD = struct.Struct(">QQI")


class ReplicationFormatError(ValueError):
    """A packet that is not one of ours: the link is closed."""


@dataclass(frozen=True, slots=True)
class PageChunk:
    page: int
    offset: int
    data: bytes


def message(kind: int, body: bytes) -> bytes:
    """The AMQP message carrying one packet."""
    payload = bytes((kind,)) + body
    return _DATA + struct.pack(">I", len(payload)) + payload


def hello(node_id: str, activation_sequence: int, name: str, group_name: str | None) -> bytes:
    fields = {"nodeId": node_id, "activationSequence": activation_sequence, "name": name}
    if group_name is not None:
        fields["groupName"] = group_name
    return message(HELLO, json.dumps(fields).encode())


def page(chunk: PageChunk) -> bytes:
    return message(PAGE, _PAGE_HEAD.pack(chunk.page, chunk.offset) + chunk.data)


def live(tag: int, chunks: list[PageChunk], frames: bytes) -> bytes:
    parts = [_LIVE_HEAD.pack(tag, len(chunks))]
    for c in chunks:
        parts += [_CHUNK_HEAD.pack(c.page, c.offset, len(c.data)), c.data]
    parts.append(frames)
    return message(LIVE, b"".join(parts))


def parse(payload: bytes) -> tuple[int, Any]:
    """(type, what it carries): a dict (hello, synchronized), frames (snapshot), a PageChunk (page), or
    (tag, [PageChunk], frames) (live)."""
    if not payload.startswith(_DATA) or len(payload) < 9:
        raise ReplicationFormatError("not a replication packet (one data section expected)")
    (size,) = struct.unpack_from(">I", payload, 4)
    body = memoryview(payload)[8 : 8 + size]
    if len(body) != size or not size:
        raise ReplicationFormatError("truncated replication packet")
    kind, rest = body[0], body[1:]
    if kind in (HELLO, SYNCHRONIZED, STOPPING):
        return kind, json.loads(bytes(rest))
    if kind == SNAPSHOT:
        return kind, bytes(rest)
    if kind == PAGE:
        page_no, offset = _PAGE_HEAD.unpack_from(rest, 0)
        return kind, PageChunk(page_no, offset, bytes(rest[_PAGE_HEAD.size :]))
    if kind == LIVE:
        tag, count = _LIVE_HEAD.unpack_from(rest, 0)
        pos = _LIVE_HEAD.size
        chunks = []
        for _ in range(count):
            page_no, offset, length = _CHUNK_HEAD.unpack_from(rest, pos)
            pos += _CHUNK_HEAD.size
            chunks.append(PageChunk(page_no, offset, bytes(rest[pos : pos + length])))
            pos += length
        return kind, (tag, chunks, bytes(rest[pos:]))
    raise ReplicationFormatError(f"unknown replication packet type {kind}")
