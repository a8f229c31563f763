"""Live state: what the journal's records add up to, and which bytes of which segment are still live.

One class serves both recovery (replaying files) and the running journal (the writer thread applies
each record right after writing it), so that both always agree on what is live. Invariants:

* a message is live while it has at least one reference; a reference dies when it is acked or its
  queue is removed; references to queues that do not exist are dropped when the message is applied;
* every record's bytes count in ``segment_total`` of its segment, and in ``segment_live`` only while
  compaction would keep it (acks, delivery counts, removals and ``HighestIds`` are dead at once, since
  compaction re-creates their effect from this state);
* a page (paging: message bodies in page files, see records.py) is known from its first
  ``PageWritten`` until its ``PageRemoved``; its last ``PageWritten``, the ``PageCompleted`` of each
  queue and the ``PageAcked`` of queues that have not completed it are live. Page references are
  never held here one by one: a paged message costs this state nothing until it is acked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker_core.journal.records import (
    AddressAdded,
    AddressRemoved,
    DeliveryCountUpdated,
    DuplicateIdAdded,
    HighestIds,
    MessageAcked,
    MessageAdded,
    MessagesAcked,
    MetaRecord,
    PageAcked,
    PageCompleted,
    PageRemoved,
    PageWritten,
    QueueAdded,
    QueueRemoved,
    Record,
)

Location = tuple[int, int]  # segment sequence, record size (frame included)


@dataclass(slots=True)
class RecoveredMessage:
    record: MessageAdded
    queue_ids: list[int]  # the references still live, in the record's order
    delivery_counts: dict[int, int]  # by queue id, only where a count was journalled


@dataclass(slots=True)
class LivePage:
    """What the journal knows of one page file."""

    written: PageWritten  # the last one: how far the page is committed, and its references per queue
    completed: set[int] = field(default_factory=set)  # queues with no reference left in the page
    acks: dict[int, dict[int, PageAcked]] = field(default_factory=dict)  # by queue, by message id


@dataclass(slots=True)
class Recovered:
    """The live state replayed by ``Journal.open``; dicts are in journal order."""

    addresses: dict[int, AddressAdded] = field(default_factory=dict)
    queues: dict[int, QueueAdded] = field(default_factory=dict)
    messages: dict[int, RecoveredMessage] = field(default_factory=dict)
    meta: dict[str, bytes] = field(default_factory=dict)
    max_address_id: int = 0
    max_queue_id: int = 0
    max_message_id: int = 0
    pages: dict[int, LivePage] = field(default_factory=dict)
    max_page: int = 0
    duplicates: dict[str, list[bytes]] = field(default_factory=dict)  # by address, oldest first


@dataclass(slots=True, init=False)  # one per durable message: a compiled __init__ (see records.py)
class LiveMessage:
    seq: int
    offset: int
    size: int
    refs: list[int]
    counts: dict[int, int] | None
    trimmed: bool  # a reference died, so the stored record lists more queues than are live

    def __init__(
        self,
        seq: int,
        offset: int,
        size: int,
        refs: list[int],
        counts: dict[int, int] | None = None,
        trimmed: bool = False,
    ) -> None:
        self.seq = seq
        self.offset = offset
        self.size = size
        self.refs = refs
        self.counts = counts
        self.trimmed = trimmed


class LiveState:
    def __init__(self, keep_records: bool = False) -> None:
        self.addresses: dict[int, AddressAdded] = {}
        self.queues: dict[int, QueueAdded] = {}
        self.messages: dict[int, LiveMessage] = {}
        self.meta: dict[str, bytes] = {}
        self.locations: dict[tuple[Any, ...], Location] = {}  # addresses, queues, meta keys, pages
        self.max_ids = [0, 0, 0]  # address, queue, message
        self.pages: dict[int, LivePage] = {}
        self.max_page = 0
        # duplicate ids by address, oldest first (a dict keeps the order), and each address's cache size
        self.duplicates: dict[str, dict[bytes, None]] = {}
        self.duplicate_sizes: dict[str, int] = {}
        self.segment_total: dict[int, int] = {}
        self.segment_live: dict[int, int] = {}
        # recovery keeps the decoded messages to hand them to the server; the running journal does not
        self.records: dict[int, MessageAdded] | None = {} if keep_records else None
        self._apply: dict[type, Callable[[Any, int, int, int], None]] = {
            AddressAdded: self._address_added,
            AddressRemoved: self._address_removed,
            QueueAdded: self._queue_added,
            QueueRemoved: self._queue_removed,
            MessageAdded: self._message_added,
            MessageAcked: self._message_acked,
            MessagesAcked: self._messages_acked,
            DeliveryCountUpdated: self._delivery_count,
            MetaRecord: self._meta,
            HighestIds: self._highest_ids,
            PageWritten: self._page_written,
            PageAcked: self._page_acked,
            PageCompleted: self._page_completed,
            PageRemoved: self._page_removed,
            DuplicateIdAdded: self._duplicate_id,
        }

    def apply(self, record: Record, seq: int, offset: int, size: int) -> None:
        self.segment_total[seq] = self.segment_total.get(seq, 0) + size
        self._apply[type(record)](record, seq, offset, size)

    def apply_written(
        self, records: tuple[Record, ...], sizes: tuple[int, ...], seq: int, offset: int
    ) -> int:
        """`apply` for records written back to back from `offset`; returns where they end. The writer
        thread's path: it holds the GIL here, so a new message for one live queue is taken in line and
        an ack is a direct call."""
        messages, queues, ids, handlers = self.messages, self.queues, self.max_ids, self._apply
        live = 0
        for record, size in zip(records, sizes, strict=True):
            if type(record) is MessageAdded and len(record.queue_ids) == 1:
                mid, qid = record.message_id, record.queue_ids[0]
                if mid > ids[2]:
                    ids[2] = mid
                if qid > ids[1]:
                    ids[1] = qid
                if mid not in messages and qid in queues:
                    messages[mid] = LiveMessage(seq, offset, size, [qid])
                    live += size
                    if self.records is not None:
                        self.records[mid] = record
                    offset += size
                    continue
            if type(record) is MessageAcked:  # the other record of every message: a direct call
                self._message_acked(record, seq, offset, size)
            else:
                handlers[type(record)](record, seq, offset, size)
            offset += size
        total = sum(sizes)
        self.segment_total[seq] = self.segment_total.get(seq, 0) + total
        if live:
            self.segment_live[seq] = self.segment_live.get(seq, 0) + live
        return offset

    def live_records(self) -> int:
        return len(self.addresses) + len(self.queues) + len(self.messages) + len(self.meta)

    def recovered(self) -> Recovered:
        records = self.records or {}
        messages = {
            mid: RecoveredMessage(records[mid], list(m.refs), dict(m.counts or {}))
            for mid, m in self.messages.items()
        }
        a, q, m = self.max_ids
        pages = {
            seq: LivePage(p.written, set(p.completed), {qid: dict(acks) for qid, acks in p.acks.items()})
            for seq, p in self.pages.items()
        }
        duplicates = {address: list(ids) for address, ids in self.duplicates.items()}
        return Recovered(
            dict(self.addresses),
            dict(self.queues),
            messages,
            dict(self.meta),
            a,
            q,
            m,
            pages,
            self.max_page,
            duplicates,
        )

    def forget_segment(self, seq: int) -> None:
        self.segment_total.pop(seq, None)
        self.segment_live.pop(seq, None)

    # --- accounting ---

    def _live(self, key: tuple[Any, ...], seq: int, size: int) -> None:
        self._dead(key)
        self.locations[key] = (seq, size)
        self.segment_live[seq] = self.segment_live.get(seq, 0) + size

    def _dead(self, key: tuple[Any, ...]) -> None:
        loc = self.locations.pop(key, None)
        if loc is not None:
            self.segment_live[loc[0]] -= loc[1]

    def _bump(self, kind: int, value: int) -> None:
        if value > self.max_ids[kind]:
            self.max_ids[kind] = value

    # --- one handler per record type: (record, seq, offset, size) ---

    def _address_added(self, r: AddressAdded, seq: int, _offset: int, size: int) -> None:
        self._bump(0, r.address_id)
        self.addresses[r.address_id] = r
        self._live(("a", r.address_id), seq, size)

    def _address_removed(self, r: AddressRemoved, _seq: int, _offset: int, _size: int) -> None:
        self._bump(0, r.address_id)
        self.addresses.pop(r.address_id, None)
        self._dead(("a", r.address_id))

    def _queue_added(self, r: QueueAdded, seq: int, _offset: int, size: int) -> None:
        self._bump(1, r.queue_id)
        self.queues[r.queue_id] = r
        self._live(("q", r.queue_id), seq, size)

    def _queue_removed(self, r: QueueRemoved, _seq: int, _offset: int, _size: int) -> None:
        self._bump(1, r.queue_id)
        if self.queues.pop(r.queue_id, None) is None:
            return
        self._dead(("q", r.queue_id))
        # rare and administrative, so a scan is fine; an index per queue would cost on every message
        for mid in [mid for mid, m in self.messages.items() if r.queue_id in m.refs]:
            self._drop_ref(mid, self.messages[mid], r.queue_id)
        for seq, page in self.pages.items():
            self._drop_page_acks(seq, page, r.queue_id)
            if r.queue_id in page.completed:
                page.completed.discard(r.queue_id)
                self._dead(("pc", seq, r.queue_id))

    def _message_added(self, r: MessageAdded, seq: int, offset: int, size: int) -> None:
        # once per durable message on the writer thread: the id bumps are inlined
        ids, queues = self.max_ids, self.queues
        if r.message_id > ids[2]:
            ids[2] = r.message_id
        old = self.messages.get(r.message_id)
        if old is not None:  # written twice: the later record replaces the earlier one
            self._message_dead(r.message_id, old)
        top = max(r.queue_ids, default=0)
        if top > ids[1]:
            ids[1] = top
        refs = [q for q in r.queue_ids if q in queues]
        if not refs:
            return
        self.messages[r.message_id] = LiveMessage(seq, offset, size, refs, None, len(refs) < len(r.queue_ids))
        self.segment_live[seq] = self.segment_live.get(seq, 0) + size
        if self.records is not None:
            self.records[r.message_id] = r

    def _message_acked(self, r: MessageAcked, _seq: int, _offset: int, _size: int) -> None:
        ids = self.max_ids
        if r.queue_id > ids[1]:
            ids[1] = r.queue_id
        if r.message_id > ids[2]:
            ids[2] = r.message_id
        m = self.messages.get(r.message_id)
        if m is not None and r.queue_id in m.refs:
            self._drop_ref(r.message_id, m, r.queue_id)

    def _messages_acked(self, r: MessagesAcked, _seq: int, _offset: int, _size: int) -> None:
        self._bump(1, r.queue_id)
        if r.message_ids:
            self._bump(2, max(r.message_ids))
        messages, qid = self.messages, r.queue_id
        for mid in r.message_ids:
            m = messages.get(mid)
            if m is not None and qid in m.refs:
                self._drop_ref(mid, m, qid)

    def _delivery_count(self, r: DeliveryCountUpdated, _seq: int, _offset: int, _size: int) -> None:
        self._bump(1, r.queue_id)
        self._bump(2, r.message_id)
        m = self.messages.get(r.message_id)
        if m is not None and r.queue_id in m.refs:
            if m.counts is None:
                m.counts = {}
            m.counts[r.queue_id] = r.delivery_count

    def _meta(self, r: MetaRecord, seq: int, _offset: int, size: int) -> None:
        self.meta[r.key] = r.value
        self._live(("m", r.key), seq, size)

    def _highest_ids(self, r: HighestIds, _seq: int, _offset: int, _size: int) -> None:
        self._bump(0, r.address_id)
        self._bump(1, r.queue_id)
        self._bump(2, r.message_id)

    def _page_written(self, r: PageWritten, seq: int, _offset: int, size: int) -> None:
        if r.page > self.max_page:
            self.max_page = r.page
        page = self.pages.get(r.page)
        if page is None:
            self.pages[r.page] = LivePage(r)
        else:
            page.written = r
        self._live(("pw", r.page), seq, size)

    def _page_acked(self, r: PageAcked, seq: int, _offset: int, size: int) -> None:
        page = self.pages.get(r.page)
        if page is None or r.queue_id in page.completed or r.queue_id not in self.queues:
            return  # the page or the queue is gone, or the queue completed the page: dead at once
        acks = page.acks.get(r.queue_id)
        if acks is None:
            acks = page.acks[r.queue_id] = {}
        acks[r.message_id] = r
        self._live(("pa", r.page, r.queue_id, r.message_id), seq, size)

    def _page_completed(self, r: PageCompleted, seq: int, _offset: int, size: int) -> None:
        page = self.pages.get(r.page)
        if page is None or r.queue_id not in self.queues:
            return
        self._drop_page_acks(r.page, page, r.queue_id)
        page.completed.add(r.queue_id)
        self._live(("pc", r.page, r.queue_id), seq, size)

    def _page_removed(self, r: PageRemoved, _seq: int, _offset: int, _size: int) -> None:
        page = self.pages.pop(r.page, None)
        if page is None:
            return
        self._dead(("pw", r.page))
        for queue_id in list(page.acks):
            self._drop_page_acks(r.page, page, queue_id)
        for queue_id in page.completed:
            self._dead(("pc", r.page, queue_id))

    def _duplicate_id(self, r: DuplicateIdAdded, seq: int, _offset: int, size: int) -> None:
        ids = self.duplicates.get(r.address)
        if ids is None:
            ids = self.duplicates[r.address] = {}
        self.duplicate_sizes[r.address] = r.cache_size
        key = ("d", r.address, r.duplicate_id)
        ids.pop(r.duplicate_id, None)  # seen again: it becomes the newest
        ids[r.duplicate_id] = None
        self._live(key, seq, size)
        while len(ids) > max(r.cache_size, 0):
            oldest = next(iter(ids))
            del ids[oldest]
            self._dead(("d", r.address, oldest))

    def _drop_page_acks(self, seq: int, page: LivePage, queue_id: int) -> None:
        for message_id in page.acks.pop(queue_id, {}):
            self._dead(("pa", seq, queue_id, message_id))

    def _drop_ref(self, mid: int, m: LiveMessage, queue_id: int) -> None:
        m.refs.remove(queue_id)
        m.trimmed = True
        if m.counts:
            m.counts.pop(queue_id, None)
        if not m.refs:
            self._message_dead(mid, m)

    def _message_dead(self, mid: int, m: LiveMessage) -> None:
        del self.messages[mid]
        self.segment_live[m.seq] -= m.size
        if self.records is not None:
            self.records.pop(mid, None)
