"""Journal records as flat rows: one row per record, the columns reconciliation needs.

This module has no Spark dependency: the Spark data source, the Parquet export and the benchmark all
read through ``journal_rows``. Resolved while reading, in the broker's replay order: queue names (queues
are few) and the mirror identity of acknowledgements and delivery counts, from the send of the message
they name. For that the reader keeps the identity of every *live* message (local id -> identity and the
queues still referencing it, as the broker's replay does: a reference dies with its ack or its queue), so
its memory follows the live messages, not the journal. An ack whose message is not live at that point
(never in this journal, or already settled on every queue) keeps a null identity: an orphan. After the
records, a few ``history`` rows say what the journal may have dropped (``history``: compaction, deleted
page files), so that a missing record can be read as "never had it" where it cannot have been dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from broker_core.journal.collector import collector_paused
from broker_core.journal.layout import plan
from broker_core.journal.node_id import NODE_ID_FILE
from broker_core.journal.records import (
    AddressAdded,
    AddressRemoved,
    DeliveryCountUpdated,
    HighestIds,
    MessageAcked,
    MessageAdded,
    MessagesAcked,
    MetaRecord,
    QueueAdded,
    QueueRemoved,
)
from broker_core.paging.replay import iter_records_with_pages

from .history import Losses, history_row
from .identity import message_identity, payload_digests

# (name, Spark SQL type); the order is the row tuple's order
COLUMNS: list[tuple[str, str]] = [
    ("node_id", "string"),
    ("segment", "bigint"),
    ("offset", "bigint"),
    ("event", "string"),  # send, ack, address_create, address_delete, queue_create, queue_delete, ...
    ("message_id", "bigint"),  # the local id (sends and acks)
    ("origin_broker_id", "string"),  # as journalled: null for a locally produced message
    ("origin_message_id", "bigint"),
    ("identity_broker", "string"),  # origin, or own node id, or the origin a repair stamped; acks and
    ("identity_id", "bigint"),  # delivery counts: their message's (null when it is not live: an orphan)
    ("address", "string"),
    ("queue", "string"),  # acks and queue events
    ("queues", "array<string>"),  # sends: every queue the message was routed to
    ("ack_reason", "int"),  # 0 normal, 1 killed, 2 expired, 3 replaced; REMOVED_WITH_QUEUE
    ("via_mirror", "boolean"),  # the record came through the mirror, not from a local client
    ("timestamp_ms", "bigint"),
    ("expiry_ms", "bigint"),
    ("digest", "string"),  # sha256 of the bare message, hex
    ("size", "int"),  # bytes of the stored message
    ("repaired", "boolean"),  # carries the repair's origin annotation
    ("meta_key", "string"),
    ("meta_value", "string"),
    # the digest's first 8 bytes as a signed integer: what reconciliation reads and compares (8 bytes a
    # row, where the hex digest takes 64 and most of an export's size)
    ("digest64", "bigint"),
]
COLUMN_NAMES = [name for name, _ in COLUMNS]
# The ack_reason of a reference that died with its queue: no journal record of its own, the reader
# writes an ack row for each reference the queue's removal took (a removal the mirror may not carry:
# queue-removal="false"), so that the side reads as no longer holding it
REMOVED_WITH_QUEUE = -1
_META_KEY = COLUMN_NAMES.index("meta_key")
SCHEMA_DDL = ", ".join(f"`{name}` {kind}" for name, kind in COLUMNS)

Row = tuple[Any, ...]


def read_node_id(directory: Path) -> str:
    """The node id of the broker owning ``directory`` (its journal directory or the data directory)."""
    for candidate in (Path(directory) / NODE_ID_FILE, Path(directory) / "journal" / NODE_ID_FILE):
        if candidate.exists():
            return candidate.read_text(encoding="ascii").strip()
    raise FileNotFoundError(f"no {NODE_ID_FILE} file in {directory}")


def journal_dir(directory: Path) -> Path:
    """Accept a broker data directory (``data/``) as well as its ``journal`` directory."""
    directory = Path(directory)
    if not any(directory.glob("*.jnl")) and (directory / "journal").is_dir():
        return directory / "journal"
    return directory


def store_records(
    directory: Path, gone: Callable[[Any], None] | None = None
) -> Iterator[tuple[tuple[int, int], Any]]:
    """Every record a broker's store holds, in the broker's replay order, each with its position (file
    sequence, offset): the segments of its journal directory (or of the data directory's ``journal``),
    with the messages of its page files (``paging`` beside the journal) read as if journalled where
    their pages were committed; ``gone`` is told of the records of the page files deleted before they
    could be read. The one place that knows which files hold records: the export, the data source and
    the repair's payload lookup all read through it."""
    return iter_records_with_pages(journal_dir(directory), gone=gone)


def journal_rows(directory: Path, live: LiveMessages | None = None) -> Iterator[Row]:
    """Every record of the journal in replay order, as a row of ``COLUMNS`` (read-only); ``live`` is
    the live-message table to fill (a fresh one by default).

    The cyclic garbage collector is paused while it reads (``collector_paused``)."""
    with collector_paused():
        yield from _rows(journal_dir(directory), live)


def _rows(directory: Path, live: LiveMessages | None) -> Iterator[Row]:
    node = read_node_id(directory)
    queues: dict[int, tuple[str, str]] = {}  # queue id -> (name, address)
    live = LiveMessages() if live is None else live
    blank: list[Any] = [None] * len(COLUMNS)
    marker = plan(directory).marker
    losses = Losses(node, (marker.first_seq, marker.last_seq) if marker else None, queues)
    generation = losses.compacted or (0, -1)
    for (seg, off), rec in store_records(directory, losses.gone):
        if losses.in_generation and not generation[0] <= seg <= generation[1]:
            losses.leave_generation()
        row = list(blank)
        row[0], row[1], row[2] = node, seg, off
        if isinstance(rec, MessageAdded):
            live.add(rec.message_id, _send(row, node, rec, queues), rec.queue_ids)
            if rec.message_id > losses.top:
                losses.top = rec.message_id
        elif isinstance(rec, MessageAcked):
            _ack(row, rec.queue_id, rec.message_id, rec, queues, live)
        elif isinstance(rec, MessagesAcked):  # one row per acknowledged message, as if acked one by one
            for mid in rec.message_ids:
                yield tuple(_ack(list(row), rec.queue_id, mid, rec, queues, live))
            continue
        elif isinstance(rec, MetaRecord):
            row[3], row[19] = "meta", rec.key
            row[20] = rec.value[:256].decode("utf-8", "replace")
            losses.meta(rec.key, rec.value)
        elif isinstance(rec, QueueAdded):
            queues[rec.queue_id] = (rec.name, rec.address)
            row[3], row[9], row[10] = "queue_create", rec.address, rec.name
        elif isinstance(rec, QueueRemoved):
            name, address = queues.get(rec.queue_id, (f"#{rec.queue_id}", None))
            row[3], row[9], row[10] = "queue_delete", address, name
            losses.queue_removed(rec.queue_id)
            yield tuple(row)
            for mid, broker, ident in live.queue_removed(rec.queue_id):
                ack = list(row)
                ack[3], ack[4], ack[7], ack[8], ack[12] = "ack", mid, broker, ident, REMOVED_WITH_QUEUE
                yield tuple(ack)
            continue
        elif isinstance(rec, AddressAdded):
            row[3], row[9] = "address_create", rec.name
        elif isinstance(rec, AddressRemoved):
            row[3] = "address_delete"
        elif isinstance(rec, DeliveryCountUpdated):
            name, address = queues.get(rec.queue_id, (f"#{rec.queue_id}", None))
            row[3], row[4], row[9], row[10] = "delivery_count", rec.message_id, address, name
            row[7], row[8] = live.identity(rec.message_id)
        elif isinstance(rec, HighestIds):
            row[3], row[4] = "highest_ids", rec.message_id
            losses.top = max(losses.top, rec.message_id)
        yield tuple(row)
    yield from losses.rows(lambda key, value: history_row(node, key, value, len(COLUMNS), _META_KEY))


_NONE: tuple[None, None] = (None, None)


def _ack(
    row: list[Any],
    queue_id: int,
    message_id: int,
    rec: MessageAcked | MessagesAcked,
    queues: dict[int, tuple[str, str]],
    live: LiveMessages,
) -> list[Any]:
    name, address = queues.get(queue_id, (f"#{queue_id}", None))
    row[3], row[4], row[9], row[10] = "ack", message_id, address, name
    row[12], row[13], row[14] = rec.reason, rec.via_mirror, rec.timestamp_ms
    row[7], row[8] = live.ack(message_id, queue_id)
    return row


class LiveMessages:
    """The identity of every live message of a journal being replayed, and the queues referencing it.

    An entry is the tuple (identity broker, identity id, queue id, ...) of the queues still referencing
    the message; it is dropped when the last of them is acknowledged or removed. Broker ids are shared
    strings, so an entry costs about 200 bytes."""

    def __init__(self) -> None:
        self.entries: dict[int, tuple[Any, ...]] = {}
        self.refs: dict[int, int] = {}  # queue id -> live references (a removal scans only when > 0)
        self.brokers: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, message_id: int, identity: tuple[str, int], queue_ids: tuple[int, ...]) -> None:
        if not queue_ids:
            return
        old = self.entries.get(message_id)
        if old is not None:  # a second MessageAdded with the same id replaces the first
            self._unref(old[2:])
        broker = self.brokers.setdefault(identity[0], identity[0])
        self.entries[message_id] = (broker, identity[1], *queue_ids)
        refs = self.refs
        for q in queue_ids:
            refs[q] = refs.get(q, 0) + 1

    def identity(self, message_id: int) -> tuple[Any, Any]:
        entry = self.entries.get(message_id)
        return _NONE if entry is None else (entry[0], entry[1])

    def ack(self, message_id: int, queue_id: int) -> tuple[Any, Any]:
        """The identity of the acknowledged message (None, None when it is not live); the reference dies."""
        entry = self.entries.get(message_id)
        if entry is None:
            return _NONE
        if queue_id in entry[2:]:
            # its last reference (the usual case) needs no new tuple
            rest = () if len(entry) == 3 else tuple(q for q in entry[2:] if q != queue_id)
            self.refs[queue_id] -= len(entry) - 2 - len(rest)
            if rest:
                self.entries[message_id] = (entry[0], entry[1], *rest)
            else:
                del self.entries[message_id]
        return entry[0], entry[1]

    def queue_removed(self, queue_id: int) -> list[tuple[int, Any, Any]]:
        """The references the queue still held, (local id, identity broker, identity id): they die."""
        if not self.refs.pop(queue_id, 0):
            return []
        died = []
        for mid, entry in list(self.entries.items()):
            if queue_id in entry[2:]:
                died.append((mid, entry[0], entry[1]))
                rest = tuple(q for q in entry[2:] if q != queue_id)
                if rest:
                    self.entries[mid] = (entry[0], entry[1], *rest)
                else:
                    del self.entries[mid]
        return died

    def _unref(self, queue_ids: tuple[int, ...]) -> None:
        for q in queue_ids:
            if self.refs.get(q):
                self.refs[q] -= 1


def _send(
    row: list[Any], node: str, rec: MessageAdded, queues: dict[int, tuple[str, str]]
) -> tuple[str, int]:
    identity = message_identity(node, rec)
    row[3], row[4], row[5], row[6] = "send", rec.message_id, rec.origin_broker_id, rec.origin_message_id
    row[7], row[8], row[9] = identity[0], identity[1], rec.address
    row[11] = [queues[q][0] if q in queues else f"#{q}" for q in rec.queue_ids]
    row[13], row[14], row[15] = rec.via_mirror, rec.timestamp_ms, rec.expiry_ms
    row[16], row[21] = payload_digests(rec.body)
    row[17] = len(rec.body)
    own = rec.message_id if rec.origin_message_id is None else rec.origin_message_id
    row[18] = identity != (rec.origin_broker_id or node, own)  # the repair's stamp named another
    return identity
