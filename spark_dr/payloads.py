"""The stored bytes of the messages a repair re-sends, found by identity, and the one mark it adds.

**Finding them.** A plan names each message by its mirror identity and carries the position where
reconciliation saw it (a hint). The hint is used when the record there is still that message (same
identity, same digest); otherwise, when the failed side's journal was compacted since (its files
replaced, every live message rewritten elsewhere), the journal is replayed once for every message
still missing, keeping the bodies of the wanted identities that are still live on the planned queue.
What is not found is reported, one line per message, never raised.

**The mark.** A re-sent message is the stored message with exactly one entry added to its message
annotations, ``x-opt-amqp-mirror-repair-origin`` = the identity (``stamp``): every other byte is the
stored one (header, delivery annotations, the other annotations, properties, application properties,
body, footer), so its digest (the bare message) and its header are the original's. The map's size
and count prefix grows (a map8 becomes a map32 only when it would overflow); a message without
message annotations gets a section of its own, in its place after the header and delivery
annotations. Why a mark at all: the survivor journals a client's send under its own node id and
message id; the annotation tells reconciliation, and the next repair run, which message this copy is.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.amqp.codec import DecodeError, Symbol, encode
from broker_core.journal import records
from broker_core.journal.codec import FRAME, FRAME_SIZE, decode
from broker_core.journal.errors import JournalError
from broker_core.journal.recovery import decode_frame
from broker_core.journal.segment import FrameScanner
from broker_core.message import DELIVERY_ANNOTATIONS, HEADER, MESSAGE_ANNOTATIONS, section_code, sections
from broker_core.paging.pagefile import page_name
from broker_core.paging.replay import paging_directory_of

from . import artemis_export
from .identity import REPAIR_ANNOTATION, content_key, format_identity, message_identity, repair_origin
from .rows import journal_dir, read_node_id, store_records

Say = Callable[[str], None]

_MA_DESCRIPTOR = b"\x00\x53\x72"
_U32 = struct.Struct(">I")


# ------------------------------------------------------------------------------------------ the mark


def stamp(payload: bytes, identity: str) -> bytes:
    """``payload`` with the repair annotation added to its message annotations, every other byte kept
    (unchanged when it already carries that identity). DecodeError when it is not an AMQP message."""
    origin = repair_origin(payload)
    if origin is not None and format_identity(*origin) == identity:
        return payload
    entry = encode(Symbol(REPAIR_ANNOTATION)) + encode(identity)
    parts = sections(payload)
    for code, start, end in parts:
        if code == MESSAGE_ANNOTATIONS:
            return payload[:start] + _grown_map(payload, start, end, entry) + payload[end:]
    at = next((start for code, start, _ in parts if code not in (HEADER, DELIVERY_ANNOTATIONS)), len(payload))
    return payload[:at] + _MA_DESCRIPTOR + _map_of(2, entry) + payload[at:]


def _grown_map(payload: bytes, start: int, end: int, entry: bytes) -> bytes:
    """The message annotations section at [start, end) with ``entry`` (a key and its value) appended."""
    _, vpos = section_code(payload, start)
    kind = payload[vpos]
    if kind == 0xC1:  # map8: size, count (one byte each), then the elements
        count, elements = payload[vpos + 2], payload[vpos + 3 : end]
    elif kind == 0xD1:  # map32: size, count (four bytes each)
        count, elements = _U32.unpack_from(payload, vpos + 5)[0], payload[vpos + 9 : end]
    else:
        raise DecodeError(f"message annotations at {start} are not a map")
    return payload[start:vpos] + _map_of(count + 2, elements + entry)


def _map_of(count: int, elements: bytes) -> bytes:
    if count <= 0xFF and len(elements) + 1 <= 0xFF:
        return bytes([0xC1, len(elements) + 1, count]) + elements
    return b"\xd1" + _U32.pack(len(elements) + 4) + _U32.pack(count) + elements


# ------------------------------------------------------------------------------------------ finding


@dataclass(frozen=True)
class Wanted:
    """A message to fetch: its identity, the queue it must still be live on, its digest, the hint."""

    identity: str
    queue: str
    digest: str
    hint: tuple[int, int] | None = None

    @property
    def ref(self) -> tuple[str, str]:
        return self.queue, self.identity


@dataclass
class Found:
    """Per (queue, identity): the stored message, or why it was not found; ``unreadable``: why none
    could be looked for (the journal is not there)."""

    bodies: dict[tuple[str, str], bytes] = field(default_factory=dict)
    problems: dict[tuple[str, str], str] = field(default_factory=dict)
    unreadable: str | None = None


def fetch(directory: Path, wanted: list[Wanted], side: str, say: Say, node_id: str = "") -> Found:
    """The stored bytes of every wanted message in the journal of ``side`` at ``directory``: at its
    hint when the record there is still that message, else from one replay of the journal. From an
    Artemis export (``directory`` is its file; ``node_id`` Artemis's), each message rebuilt as AMQP."""
    out = Found()
    if artemis_export.is_export(Path(directory)):
        return _from_export(Path(directory), wanted, side, node_id, out)
    directory = journal_dir(Path(directory))
    if not directory.is_dir() or not any(directory.glob("*.jnl")):
        out.unreadable = f"{side}'s journal {directory} is not here (give --journal {side}=DIR)"
        return out
    node = read_node_id(directory)
    rest = []
    pages = _Pages(paging_directory_of(directory), node)
    for w in wanted:
        body = _at_hint(directory, node, w, pages)
        if body is None:
            rest.append(w)
        else:
            out.bodies[w.ref] = body
    if rest:
        say(f"{len(rest)} of {len(wanted)} messages are no longer where the plan saw them in {side}'s "
            f"journal (it was compacted since): looking them up by identity")  # fmt: skip
        try:
            _replay(directory, node, rest, side, out)
        except JournalError as exc:  # a newer format, an inconsistent compaction: nothing to guess
            for w in rest:
                out.problems[w.ref] = f"{side}'s journal cannot be read: {exc}"
    return out


def _from_export(path: Path, wanted: list[Wanted], side: str, node_id: str, out: Found) -> Found:
    try:
        found = artemis_export.fetch_exported(path, {w.identity: w.queue for w in wanted}, node_id)
    except artemis_export.ExportError as exc:
        out.problems.update({w.ref: str(exc) for w in wanted})
        return out
    for w in wanted:
        message = found.get(w.identity)
        if message is None:
            out.problems[w.ref] = f"not live on queue {w.queue} in {side}'s Artemis export {path}"
            continue
        try:
            out.bodies[w.ref] = artemis_export.message_bytes(message)
        except artemis_export.NotRebuilt as exc:
            out.problems[w.ref] = str(exc)
    return out


def _at_hint(directory: Path, node: str, w: Wanted, pages: _Pages) -> bytes | None:
    """The message at its hint: the journal's record there, or, when that is the commit of a page (a
    paged message's position), the page file's record of it."""
    if w.hint is None:
        return None
    rec = read_record(directory, *w.hint)
    if isinstance(rec, records.PageWritten):
        return pages.body(rec, w)
    if not isinstance(rec, records.MessageAdded):
        return None
    if format_identity(*message_identity(node, rec)) != w.identity or content_key(rec.body) != w.digest:
        return None
    return rec.body


class _Pages:
    """The message records of page files, each file read once (up to what its commit names)."""

    def __init__(self, directory: Path, node: str) -> None:
        self.directory, self.node = directory, node
        self.read: dict[int, dict[str, bytes]] = {}  # page -> identity -> its body

    def body(self, written: records.PageWritten, w: Wanted) -> bytes | None:
        bodies = self.read.get(written.page)
        if bodies is None:
            bodies = self.read[written.page] = self._records(written)
        body = bodies.get(w.identity)
        return body if body is not None and content_key(body) == w.digest else None

    def _records(self, written: records.PageWritten) -> dict[str, bytes]:
        try:
            data = (self.directory / page_name(written.page)).read_bytes()[: written.end]
        except OSError:  # the page was consumed and deleted since
            return {}
        out = {}
        for frame in FrameScanner(data):
            try:
                rec = decode_frame(frame)
            except JournalError:
                break
            if isinstance(rec, records.MessageAdded):
                out[format_identity(*message_identity(self.node, rec))] = rec.body
        return out


def read_record(directory: Path, segment: int, offset: int) -> records.Record | None:
    """The record at (segment, offset) of a journal, crc-checked; None when that file is gone or holds
    no valid record there (the journal was compacted, or the position is stale)."""
    matches = sorted(Path(directory).glob(f"*{segment:012d}.jnl"))
    if not matches or offset < 0:
        return None
    try:
        with open(matches[0], "rb") as f:
            f.seek(offset)
            head = f.read(FRAME_SIZE)
            if len(head) != FRAME_SIZE:
                return None
            length, kind, crc = FRAME.unpack(head)
            payload = f.read(length) if length <= 1 << 30 else b""
        if len(payload) != length or zlib.crc32(payload, zlib.crc32(bytes([kind]))) != crc:
            return None
        return decode(kind, payload)
    except (OSError, ValueError, struct.error, JournalError):  # a stale position: anything but a record
        return None


def _replay(directory: Path, node: str, rest: list[Wanted], side: str, out: Found) -> None:
    """One replay of the journal: the last stored body of each wanted identity whose reference on its
    planned queue is still live when the journal ends."""
    wanted_ids = {w.identity for w in rest}
    queue_names: dict[int, str] = {}
    live: dict[int, tuple[str, bytes, set[int]]] = {}  # local id -> identity, body, queue ids still live
    for _, rec in store_records(directory):
        if isinstance(rec, records.QueueAdded):
            queue_names[rec.queue_id] = rec.name
        elif isinstance(rec, records.MessageAdded):
            identity = format_identity(*message_identity(node, rec))
            if identity in wanted_ids:
                live[rec.message_id] = (identity, rec.body, set(rec.queue_ids))
        elif isinstance(rec, records.MessageAcked):
            _settle(live, rec.message_id, rec.queue_id)
        elif isinstance(rec, records.MessagesAcked):
            for mid in rec.message_ids:
                _settle(live, mid, rec.queue_id)
        elif isinstance(rec, records.QueueRemoved):
            for entry in live.values():
                entry[2].discard(rec.queue_id)
    # by identity and queue: an expiry copy shares its original's identity, on another queue
    held: dict[tuple[str, str], bytes] = {}
    known: set[str] = set()
    for identity, body, queue_ids in live.values():
        if queue_ids:
            known.add(identity)
        for q in queue_ids:
            held[identity, queue_names.get(q, "")] = body
    for w in rest:
        found = held.get((w.identity, w.queue))
        why = _why_not(found, w.identity in known, w, side)
        if why is not None:
            out.problems[w.ref] = why
        elif found is not None:
            out.bodies[w.ref] = found


def _why_not(body: bytes | None, live: bool, w: Wanted, side: str) -> str | None:
    if not live:
        return f"no longer in {side}'s journal (consumed or removed there since the plan)"
    if body is None:
        return f"no longer live on queue {w.queue} in {side}'s journal (consumed there since the plan)"
    if content_key(body) != w.digest:
        return f"{side}'s journal holds other content under this identity than the plan says"
    return None


def _settle(live: dict[int, tuple[str, bytes, set[int]]], message_id: int, queue_id: int) -> None:
    entry = live.get(message_id)
    if entry is not None:
        entry[2].discard(queue_id)


__all__ = ["Found", "Wanted", "fetch", "read_record", "stamp"]
