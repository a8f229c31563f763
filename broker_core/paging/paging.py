"""Paging: an address over its memory limit keeps its new messages in page files, not in memory.

Artemis's model (address-full-policy PAGE): once an address is over `max-size-bytes` (or the broker
over `global-max-size`), every new message for it is appended to the address's current page file, and
keeps going there, to keep each queue's order, until every queue has read back everything paged and
the address is under its limit again. A queue reads its paged references back in order (`fill`) when it
runs dry and a consumer could take more: at most `max-read-page-bytes` (or `-messages`) at a time, so
memory stays bounded however long the backlog.

Durability, without one more record per message in the journal:
- a page record is appended by the event loop (page cache), so routing never waits for the disk;
- at the end of the loop turn the journal batch carries a `PageWritten` for each page written to
  (how far it is committed, and its references per queue), and the writer thread syncs those pages
  before it writes that batch: a durable paged message is confirmed only when both are on disk, and a
  crash in between leaves page bytes that recovery cuts off (the journal never committed them);
- a cursor reads only what a finished batch made visible, so nothing is delivered, nor sent to a
  mirror, before it is durable;
- acknowledging a paged reference writes `PageAcked`; a queue that has read past a closed page and let
  go of all it read there writes `PageCompleted`, which makes its `PageAcked` records dead; a page every
  queue completed is removed (`PageRemoved`, then the file).
Memory: a paged reference costs nothing until it is read back; per page only a few counters.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from broker_core.events import Cause, Observer
from broker_core.identity import MessageIndex
from broker_core.journal.codec import encode
from broker_core.journal.records import MessageAdded, PageAcked, PageCompleted, PageRemoved, PageWritten
from broker_core.journal.segment import HEADER_SIZE
from broker_core.journal.state import LivePage
from broker_core.persistence import Callback, Persistence
from broker_core.queues import Address, MessageRef, Queue, StoredMessage, hold_ref
from broker_core.usage import Admission, Usage
from broker_core.vocabulary import AckReason

from .pagefile import PageFile, parse_page_name
from .reader import PageCorrupt, records
from .store import Page, PageCursor, PageStore

LAST_PAGE = "paging.last-page"  # meta key: page numbers are never reused
INDEXED_PAGES = 4  # pages whose records are indexed by identity at a time (see `take_unread`)


def _nothing(n: int) -> None:
    pass


def _message_id(ref: MessageRef) -> int:
    return ref.message.id


class PageIndex:
    """A page's records by identity (origin broker id, mirror id), up to `end`."""

    __slots__ = ("end", "records")

    def __init__(self) -> None:
        self.end = HEADER_SIZE
        self.records: dict[tuple[str, int], tuple[int, MessageAdded]] = {}


class Paging(Observer):
    def __init__(
        self,
        directory: Path,
        persistence: Persistence,
        index: MessageIndex,
        page_size_for: Callable[[str], int],
        log: logging.Logger,
    ) -> None:
        self.directory = directory
        self.persistence = persistence
        self.index = index
        self.page_size_for = page_size_for
        self.log = log
        self.stores: dict[str, PageStore] = {}  # by address
        self.next_page = 1
        self.on_visible: Callable[[Queue], None] = lambda queue: queue.dispatch()
        self._appended: dict[int, Page] = {}  # pages written to since the last journal batch
        # records whose batch is not on disk yet, by message id: a failed write takes them back
        self._unconfirmed: dict[int, list[tuple[Page, Queue, int]]] = {}  # (page, queue, body size)
        self._recent: list[int] = []  # the message ids of `_unconfirmed` added since the last batch
        self._indexes: OrderedDict[int, PageIndex] = OrderedDict()  # by page, least recently used first
        self.wrote: Callable[[int], None] = _nothing  # told the bytes each page record adds to the disk

    def pages_of(self, address: str) -> int:
        """How many page files the address has (management's numberOfPages)."""
        store = self.stores.get(address)
        return len(store.pages) if store is not None else 0

    # ------------------------------------------------------------------------------ routing

    def bytes_of(self, address: str) -> int:
        """Bytes of the address's page files."""
        store = self.stores.get(address)
        return sum(page.file.end for page in store.pages.values()) if store is not None else 0

    def admit(self, usage: Usage, cost: int) -> Admission:
        """What to do with a message of `cost` bytes for an address that pages or is over a limit."""
        store = self._store(usage)
        if store is not None:
            if usage.paged or usage.over(cost):
                return Admission.PAGE  # while anything is paged, new messages queue up behind it
            self._stop_appending(store)
            return Admission.MEMORY
        if not usage.over(cost):
            return Admission.MEMORY
        policy = usage.policy
        if policy == "PAGE":
            return Admission.PAGE
        if policy == "BLOCK":  # producers get no more credit (usage.may_send); what is in flight is taken
            threshold = usage.reject_threshold
            return Admission.FAIL if threshold >= 0 and usage.bytes + cost > threshold else Admission.MEMORY
        return Admission.FAIL if policy == "FAIL" else Admission.DROP

    def page(self, usage: Usage, record: MessageAdded, queues: list[Queue]) -> None:
        """Append a message's record for `queues` (all of `usage`'s address) to its current page.
        OSError (a full disk) leaves nothing behind."""
        store = self._store(usage) or self._open_store(usage)
        data = encode(record)
        page = store.current
        if page is not None and page.file.end + len(data) > store.page_size and page.file.end > HEADER_SIZE:
            self._close(store, page)  # full; if every queue was done with it, the store may be gone too
            store, page = self._store(usage) or self._open_store(usage), None
        if page is None:
            page = self._new_page(store)
        start = page.file.append(data)
        self.wrote(len(data))
        journalled = record.durable and self.persistence.enabled
        counts, durable_counts, cursors = page.counts, page.durable_counts, store.cursors
        size = len(record.body)
        for q in queues:
            qid = q.id
            counts[qid] = counts.get(qid, 0) + 1
            page.needed.add(qid)
            if journalled and q.durable and not q.temporary:
                durable_counts[qid] = durable_counts.get(qid, 0) + 1
                page.dirty = True
            q.paged += 1
            q.added += 1
            cursor = cursors.get(qid)
            if cursor is None:
                cursor = cursors[qid] = PageCursor(q, page.seq, start)
                q.pager = self
            if cursor.bytes is not None:
                cursor.bytes += size
        usage.paged += len(queues)
        if journalled:
            self._unconfirmed.setdefault(record.message_id, []).extend((page, q, size) for q in queues)
            self._recent.append(record.message_id)
        self._appended[page.seq] = page
        self.persistence.schedule()

    # ---------------------------------------------------------------------------- reading back

    def fill(self, queue: Queue, up_to: int = 0) -> bool:
        """Read the queue's next paged references into it (up to the address's max-read-page limits);
        with `up_to`, every one whose message id is at most `up_to`, and no further (see `_in_order`)."""
        store = self._store(queue.usage)
        cursor = store.cursors.get(queue.id) if store is not None else None
        if store is None or cursor is None:
            return False
        usage = queue.usage
        most = usage.read_messages if usage.read_messages > 0 and not up_to else 1 << 62
        budget = usage.read_bytes if usage.read_bytes > 0 and not up_to else 1 << 62
        got: list[MessageRef] = []
        for page in list(store.pages.values()):
            if page.seq < cursor.page:
                continue
            if page.seq > cursor.page:
                cursor.page, cursor.offset = page.seq, HEADER_SIZE
            if queue.id not in page.needed:
                if page.closed:
                    continue  # nothing of this queue's in it
                break  # the current page: later records may be this queue's
            budget = self._read(store, cursor, page, got, most, budget, up_to)
            if len(got) >= most or budget <= 0:
                break
            if not cursor.read_past(page):
                break  # the rest of this page is not visible yet
            self._maybe_complete(store, cursor, page)
        if not got:
            return False
        queue.paged -= len(got)
        usage.paged -= len(got)
        queue.restore_many(got)
        self._settle(store)
        return True

    def _read(
        self,
        store: PageStore,
        cursor: PageCursor,
        page: Page,
        got: list[MessageRef],
        most: int,
        budget: int,
        up_to: int = 0,
    ) -> int:
        """Read `page` from the cursor on, into `got`; returns what is left of the byte budget (none once
        a record past `up_to` is met: the cursor stays before it)."""
        queue, seq = cursor.queue, page.seq
        acked = cursor.acked.get(seq)
        start = len(got)
        try:
            for end, record in records(page.file, cursor.offset, page.visible):
                if up_to and record.message_id > up_to:
                    budget = 0
                    break
                cursor.offset = end
                if queue.id not in record.queue_ids or (page.recovered and not record.durable):
                    continue
                if acked and record.message_id in acked:
                    acked.discard(record.message_id)  # acknowledged while paged: counted then
                    continue
                got.append(self._reference(queue, record, seq))
                if cursor.bytes is not None:
                    cursor.bytes -= len(record.body)
                budget -= len(record.body)
                if len(got) >= most or budget <= 0:
                    break
        except PageCorrupt as exc:
            self.log.error(
                "AMQ222187: page %s of address %s is corrupt (%s); queue %s skips the rest of it",
                page.file.path.name,
                store.address,
                exc,
                queue.name,
            )
            cursor.offset = page.file.end
            cursor.bytes = None  # the rest of the page is skipped: counted again when asked
            page.closed = True
        read = len(got) - start
        if read:
            cursor.outstanding[seq] = cursor.outstanding.get(seq, 0) + read
            cursor.accounted[seq] = cursor.accounted.get(seq, 0) + read
        return budget

    def _reference(self, queue: Queue, record: MessageAdded, page: int) -> MessageRef:
        msg = StoredMessage(
            record.message_id,
            record.address,
            record.body,
            record.durable,
            record.expiry_ms,
            record.timestamp_ms,
            record.priority,
        )
        msg.origin_broker_id = record.origin_broker_id
        msg.origin_message_id = record.origin_message_id
        msg.via_mirror = record.via_mirror
        ref = MessageRef(msg, queue, page=page)
        hold_ref(ref)
        if not queue.internal and self.index.get(*self.index.identity_of(msg)) is None:
            self.index.add(msg)  # a mirrored acknowledgement finds it (one copy per identity is enough)
        return ref

    def take_unread(self, queue: Queue, origin: str, mirror_id: int) -> MessageRef | None:
        """Read back, out of order, the paged reference of `queue` to the message with that identity (a
        mirrored acknowledgement for a message still in a page); None if it is not waiting in a page."""
        store = self._store(queue.usage)
        cursor = store.cursors.get(queue.id) if store is not None else None
        if store is None or cursor is None or not queue.paged:
            return None
        for page in list(store.pages.values()):
            if page.seq < cursor.page or queue.id not in page.needed:
                continue
            found = self._find(store, page, origin, mirror_id)
            if found is None:
                continue
            offset, record = found
            if page.seq == cursor.page and offset < cursor.offset:
                return None  # read back already: in the queue or out to a consumer
            acked = cursor.acked.get(page.seq)
            if queue.id not in record.queue_ids or (acked and record.message_id in acked):
                return None
            if acked is None:
                acked = cursor.acked[page.seq] = set()
            acked.add(record.message_id)  # the cursor skips it when it gets there
            queue.paged -= 1
            store.usage.paged -= 1
            if cursor.bytes is not None:
                cursor.bytes -= len(record.body)
            cursor.outstanding[page.seq] = cursor.outstanding.get(page.seq, 0) + 1
            cursor.accounted[page.seq] = cursor.accounted.get(page.seq, 0) + 1
            return self._reference(queue, record, page.seq)
        return None

    def identity_of_unread(self, queue: Queue, message_id: int) -> tuple[str, int] | None:
        """The identity of the message with that id (its own) in a page of `queue` not read back yet:
        management names one message by its id, `take_unread` takes it by its identity."""
        store = self._store(queue.usage)
        cursor = store.cursors.get(queue.id) if store is not None else None
        if store is None or cursor is None or not queue.paged:
            return None
        for page in list(store.pages.values()):
            if page.seq < cursor.page or queue.id not in page.needed:
                continue
            index = self._indexes.get(page.seq)
            if index is None or index.end < page.file.end:
                index = self._index(store, page, index)
            for key, (_, record) in index.records.items():
                if record.message_id == message_id:
                    return key
        return None

    def _find(
        self, store: PageStore, page: Page, origin: str, mirror_id: int
    ) -> tuple[int, MessageAdded] | None:
        """The record of a page with that identity, through a small cache of page indexes (acknowledgements
        come roughly in the order of their messages, so a few pages serve a long run of them)."""
        index = self._indexes.get(page.seq)
        if index is None or index.end < page.file.end:
            index = self._index(store, page, index)
        self._indexes.move_to_end(page.seq)
        return index.records.get((origin, mirror_id))

    def _index(self, store: PageStore, page: Page, index: PageIndex | None) -> PageIndex:
        if index is None:
            index = PageIndex()
            self._indexes[page.seq] = index
            while len(self._indexes) > INDEXED_PAGES:
                self._indexes.popitem(last=False)
        node_id = self.index.node_id
        try:
            start = index.end
            # up to what is written, not only what is committed: an acknowledgement often comes in
            # the very batch that brought its message, and both are journalled in that order
            for end, record in records(page.file, start, page.file.end):
                origin = record.origin_broker_id or node_id
                mid = record.message_id if record.origin_message_id is None else record.origin_message_id
                index.records[(origin, mid)] = (start, record)
                start = index.end = end
        except PageCorrupt:
            index.end = page.file.end
        return index

    def released(self, ref: MessageRef) -> None:
        """A reference read back from a page is gone (acknowledged, expired, dropped with its queue)."""
        queue = ref.queue
        store = self._store(queue.usage)
        cursor = store.cursors.get(queue.id) if store is not None else None
        if store is None or cursor is None:
            return
        left = cursor.outstanding.get(ref.page, 0) - 1
        if left > 0:
            cursor.outstanding[ref.page] = left
            return
        cursor.outstanding.pop(ref.page, None)
        page = store.pages.get(ref.page)
        if page is not None:
            self._maybe_complete(store, cursor, page)
        self._settle(store)

    def rollback(self, message_id: int) -> None:
        """A message whose batch failed (its send is refused): its paged records count as acknowledged
        (it cannot be cut out of the middle of a page), so no queue reads it back, even after a restart."""
        for page, queue, size in self._unconfirmed.pop(message_id, ()):
            store = self._store(queue.usage)
            if store is not None and store.pages.get(page.seq) is page:
                self.ack_unread(store, page, queue, message_id, size, AckReason.KILLED)

    def ack_unread(
        self, store: PageStore, page: Page, queue: Queue, message_id: int, size: int, reason: int
    ) -> None:
        """Acknowledge a paged reference (of a body of `size` bytes) before it is read back (it is skipped
        when the cursor gets there)."""
        cursor = store.cursors.get(queue.id)
        if cursor is None:
            return
        if cursor.bytes is not None:
            cursor.bytes -= size
        acked = cursor.acked.get(page.seq)
        if acked is None:
            acked = cursor.acked[page.seq] = set()
        acked.add(message_id)
        cursor.accounted[page.seq] = cursor.accounted.get(page.seq, 0) + 1
        queue.paged -= 1
        store.usage.paged -= 1
        queue.acked += 1
        if page.durable_counts.get(queue.id) and self.persistence.enabled:
            self.persistence.persist(PageAcked(queue.id, message_id, page.seq, reason))
        self._maybe_complete(store, cursor, page)
        self._settle(store)

    # ------------------------------------------------------------------------------ page life

    def _maybe_complete(self, store: PageStore, cursor: PageCursor, page: Page) -> None:
        queue = cursor.queue
        if queue.id not in page.needed or not cursor.done_with(page):
            return
        page.needed.discard(queue.id)
        cursor.acked.pop(page.seq, None)
        cursor.accounted.pop(page.seq, None)
        if page.durable_counts.get(queue.id) and self.persistence.enabled:
            self.persistence.persist(PageCompleted(queue.id, page.seq))
        if not page.needed:
            self._remove(store, page)

    def _remove(self, store: PageStore, page: Page) -> None:
        if not page.closed:
            return  # the current page: it goes when the address stops paging or the page is full
        store.pages.pop(page.seq, None)
        self._indexes.pop(page.seq, None)
        if page.journalled and self.persistence.enabled:
            self.persistence.persist(PageRemoved(page.seq))
            self.persistence.after_durable(page.file.remove)
        else:
            page.file.remove()
        if store.empty and not store.usage.paged:
            self._drop_store(store)

    def _close(self, store: PageStore, page: Page) -> None:
        page.closed = True
        if store.current is page:
            store.current = None
        for cursor in list(store.cursors.values()):
            self._maybe_complete(store, cursor, page)
        if page.seq in store.pages and not page.needed:
            self._remove(store, page)

    def _new_page(self, store: PageStore) -> Page:
        seq = self.next_page
        self.next_page = seq + 1
        if self.persistence.enabled:
            self.persistence.set_meta(LAST_PAGE, str(seq).encode(), coalesce=True)
        page = Page(PageFile.create(self.directory, seq), store.address)
        store.pages[seq] = page
        store.current = page
        return page

    def _open_store(self, usage: Usage) -> PageStore:
        self.directory.mkdir(parents=True, exist_ok=True)
        store = PageStore(usage.address, usage, self.directory, self.page_size_for(usage.address))
        self.stores[usage.address] = store
        usage.store = store
        budget = usage.budget
        self.log.info(
            "AMQ222038: Starting paging on address '%s'; size=%d bytes (%d messages); maxSize=%d bytes "
            "(%d messages); globalSize=%d bytes (%d messages); globalMaxSize=%d bytes (%d messages)",
            usage.address,
            usage.bytes,
            usage.messages,
            usage.max_bytes,
            usage.max_messages,
            budget.bytes,
            budget.messages,
            budget.max_bytes,
            budget.max_messages,
        )
        return store

    def _settle(self, store: PageStore) -> None:
        """Leave paging as soon as everything paged was read back and the address has room again (the
        current page then closes, and goes once its last references are gone)."""
        usage = store.usage
        if store.current is not None and not usage.paged and not usage.over(0):
            self._stop_appending(store)

    def _stop_appending(self, store: PageStore) -> None:
        """Nothing is left to read back and the address is under its limits: new messages go to memory."""
        if store.current is not None:
            self._close(store, store.current)
        if store.empty and store.address in self.stores:
            self._drop_store(store)

    def _drop_store(self, store: PageStore) -> None:
        self.stores.pop(store.address, None)
        usage = store.usage
        usage.store = None
        for cursor in store.cursors.values():
            cursor.queue.pager = None
        store.cursors.clear()
        self.log.info(
            "AMQ224108: Stopped paging on address '%s'; size=%d bytes (%d messages)",
            usage.address,
            usage.bytes,
            usage.messages,
        )

    def _store(self, usage: Usage) -> PageStore | None:
        store = usage.store
        return store if isinstance(store, PageStore) else None

    # -------------------------------------------------------------------------- journal batches

    def on_batch(self) -> Callback | None:
        """The persistence's batch hook (registered by the router, after its own): as a journal batch
        is made, commit the pages written to (their `PageWritten`, synced first), and once the batch is
        on disk, let cursors read what it committed."""
        if not self._appended:
            return None
        pages, self._appended = self._appended, {}
        marks: list[tuple[Page, int]] = []
        persistence = self.persistence
        for page in pages.values():
            end = page.file.end
            if page.dirty:
                page.dirty = False
                page.journalled = True
                counts = tuple(page.durable_counts.items())
                persistence.persist_now(PageWritten(page.seq, page.address, end, counts))
                persistence.sync_first(page.file)
            marks.append((page, end))
        ids, self._recent = self._recent, []

        def written() -> None:
            self._visible(marks)
            for message_id in ids:
                self._unconfirmed.pop(message_id, None)

        return written

    def _visible(self, marks: list[tuple[Page, int]]) -> None:
        touched: dict[str, PageStore] = {}
        for page, end in marks:
            if end > page.visible:
                page.visible = end
            store = self.stores.get(page.address)
            if store is not None:
                touched[page.address] = store
        for store in touched.values():
            for cursor in list(store.cursors.values()):
                queue = cursor.queue
                if queue.consumers and not queue.waiting and queue.paged:
                    self.on_visible(queue)

    # ------------------------------------------------------------------------------ observer

    def queue_removed(self, queue: Queue, cause: Cause | None) -> None:
        store = self._store(queue.usage)
        if store is None:
            return
        store.cursors.pop(queue.id, None)
        queue.pager = None
        store.usage.paged -= queue.paged
        queue.paged = 0
        for page in list(store.pages.values()):
            if queue.id in page.needed:
                page.needed.discard(queue.id)
                if not page.needed:
                    self._remove(store, page)
        if store.empty and store.address in self.stores:
            self._drop_store(store)

    def address_removed(self, address: Address, cause: Cause | None) -> None:
        store = self.stores.get(address.name)
        if store is None:
            return
        for page in list(store.pages.values()):
            page.closed = True
            self._remove(store, page)
        if store.address in self.stores:
            self._drop_store(store)

    # ------------------------------------------------------------------------------ recovery

    def recover(
        self, pages: dict[int, LivePage], last_page: int, queues_by_id: dict[int, Queue], sync: bool
    ) -> None:
        """Reopen the pages the journal committed (cut back to it), with each queue's cursor at its first
        page not completed; remove page files it never committed."""
        on_disk: dict[int, Path] = {}
        if self.directory.is_dir():
            for path in self.directory.iterdir():
                seq = parse_page_name(path.name)
                if seq is not None:
                    on_disk[seq] = path
        self.next_page = max([last_page, *pages, *on_disk], default=0) + 1
        for seq in sorted(pages):
            self._reopen(seq, pages[seq], on_disk.pop(seq, None), queues_by_id, sync)
        for path in on_disk.values():
            self.log.info("paging: removing %s, which the journal never committed", path.name)
            path.unlink(missing_ok=True)
        for store in list(self.stores.values()):
            for page in list(store.pages.values()):
                if not page.needed:
                    self._remove(store, page)
            if store.empty and store.address in self.stores:
                self._drop_store(store)
        for queue in queues_by_id.values():
            self._in_order(queue)

    def _in_order(self, queue: Queue) -> None:
        """Put a recovered queue back in the order its messages came, the journal's references and the
        paged ones together.

        A queue's messages go to memory (the journal) or to its pages, and once an address pages, new
        messages follow into the pages until every paged one was read back: so the journal may hold
        messages that came after paged ones that were read back, still unacknowledged, when the broker
        stopped. Read back now would put them behind their younger ones; so every paged reference older
        than the youngest journalled one is read back here (those are the ones read back before the stop,
        as many as memory held then), and the queue is put in message id order, which is the order of
        routing. For a mirror's store-and-forward queue this is what keeps an acknowledgement behind its
        message on the wire after a restart."""
        refs = queue.waiting
        if not refs:
            return
        youngest = max(refs)
        if queue.paged and queue.pager is self:
            self.fill(queue, up_to=youngest)
        queue.keep_only(sorted(queue.waiting.values(), key=_message_id))

    def paged_bytes(self, queue: Queue) -> int:
        """The bodies of the queue's references waiting in page files, in bytes (after a restart, counted
        once by reading them; kept up to date from then on)."""
        store = self._store(queue.usage)
        cursor = store.cursors.get(queue.id) if store is not None else None
        if store is None or cursor is None:
            return 0
        if cursor.bytes is None:
            cursor.bytes = self._count_unread(store, cursor)
        return cursor.bytes

    def _count_unread(self, store: PageStore, cursor: PageCursor) -> int:
        """What `fill` would read back from here to the end, in bytes of bodies."""
        queue_id, total = cursor.queue.id, 0
        for page in list(store.pages.values()):
            if page.seq < cursor.page or queue_id not in page.needed:
                continue
            start = cursor.offset if page.seq == cursor.page else HEADER_SIZE
            acked = cursor.acked.get(page.seq) or set()
            try:
                for _, record in records(page.file, start, page.file.end):
                    if queue_id not in record.queue_ids or (page.recovered and not record.durable):
                        continue
                    if record.message_id not in acked:
                        total += len(record.body)
            except PageCorrupt:
                continue  # a queue skips the rest of a corrupt page (`_read`)
        return total

    def _reopen(
        self, seq: int, live: LivePage, path: Path | None, queues_by_id: dict[int, Queue], sync: bool
    ) -> None:
        written = live.written
        queues = [(queues_by_id.get(qid), count) for qid, count in written.counts]
        usage = next((q.usage for q, _ in queues if q is not None), None)
        if path is None or usage is None:
            if path is None:
                self.log.error(
                    "AMQ222186: page %d of address %s is missing: its messages are lost", seq, written.address
                )
            elif path is not None:
                path.unlink(missing_ok=True)
            if self.persistence.enabled:
                self.persistence.persist(PageRemoved(seq))
            return
        size = path.stat().st_size
        file = PageFile.reopen(path, seq, written.end, sync)
        if size > written.end:  # appended, and the crash came before the journal batch committing it
            self.log.warning(
                "page %s of address %s: cut %d bytes after offset %d (written, never committed)",
                path.name,
                written.address,
                size - written.end,
                written.end,
            )
        if file.end < written.end:
            self.log.error(
                "AMQ222187: page %s of address %s is shorter than committed (%d of %d bytes)",
                path.name,
                written.address,
                file.end,
                written.end,
            )
        page = Page(file, written.address, recovered=True)
        store = self._store(usage) or self._open_store(usage)
        store.pages[seq] = page
        for q, count in queues:
            if q is None or q.usage is not usage or q.id in live.completed or not count:
                continue
            page.counts[q.id] = page.durable_counts[q.id] = count
            page.needed.add(q.id)
            cursor = store.cursors.get(q.id)
            if cursor is None:
                cursor = store.cursors[q.id] = PageCursor(q, seq, size_known=False)
                q.pager = self
            acked = live.acks.get(q.id)
            if acked:
                cursor.acked[seq] = set(acked)
                cursor.accounted[seq] = len(acked)
            left = count - len(acked or ())
            q.paged += left
            usage.paged += left
