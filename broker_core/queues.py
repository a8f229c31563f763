"""Messages, queues, the addresses that bind them, and the consumers that drain them.

Invariants:
- A `StoredMessage` is shared by every queue it was routed to; `live_refs` counts the queues that
  still hold it, and its journal record is dead when that reaches zero.
- A queue hands each message to one consumer at a time; a reference is either waiting (in its priority
  level) or in flight to exactly one consumer, never both.
- Waiting references are delivered highest priority first (0-9; a header above 9 counts as 9), oldest
  first within a priority, as Artemis's priority list does; a queue that never saw a priority other than
  the default keeps one deque. An internal queue (the mirror's store-and-forward) keeps routing order.
- `waiting` indexes the waiting references by message id (a mirrored ack finds its message in O(1), not
  by scanning a deep queue), so the levels change only through the queue's own methods.
- Redelivered references go back to their place by message id within their priority (Artemis's
  addSorted), so per-priority order holds for everything not yet delivered.
- A consumer with a selector takes only what it matches and a browser is sent copies (when it gives
  credit); each has its own list of what it has not looked at (`Reader`), so neither makes the others
  scan the queue.
- A message counts against its address's `Usage` (usage.py) while a queue of that address holds it
  (`local_refs`), and against another address's once per reference there (a store-and-forward queue);
  `release_ref` is the one way a reference lets go of a message.
- A queue whose address pages has a `pager`: `paged` references wait in page files, and `dispatch` asks
  the pager for more when the queue has run dry and a consumer could take more.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from .usage import MESSAGE_OVERHEAD, Budget, Usage

# How many references a paged queue holds in memory at most while consumers with selectors find nothing
# among them, unless the address sets max-read-page-messages.
READ_AHEAD = 1000


class StoredMessage:
    __slots__ = (
        "address",
        "connection_id",
        "cost",
        "durable",
        "expiry_ms",
        "id",
        "live_refs",
        "local_refs",
        "origin_broker_id",
        "origin_message_id",
        "payload",
        "priority",
        "timestamp_ms",
        "via_mirror",
    )

    def __init__(
        self,
        id: int,
        address: str,
        payload: bytes,
        durable: bool,
        expiry_ms: int,
        timestamp_ms: int,
        priority: int = 4,
    ) -> None:
        self.id = id
        self.address = address
        self.payload = payload
        self.durable = durable
        self.expiry_ms = expiry_ms
        self.timestamp_ms = timestamp_ms
        self.priority = priority
        self.live_refs = 0
        self.local_refs = 0  # references on queues of its own address (the rest: store-and-forward)
        self.cost = len(payload) + MESSAGE_OVERHEAD  # what it holds in memory, as usage.py counts
        self.origin_broker_id: str | None = None
        self.origin_message_id: int | None = None
        self.via_mirror = False
        self.connection_id: str | None = None  # the sending connection's container id (no-local filters)

    @property
    def mirror_id(self) -> int:
        """The id the mirror names this message by: the origin broker's id for it, or our own."""
        origin = self.origin_message_id
        return self.id if origin is None else origin


class MessageRef:
    __slots__ = ("consumer", "delivery_count", "hole", "message", "page", "queue")

    def __init__(self, message: StoredMessage, queue: Queue, delivery_count: int = 0, page: int = 0) -> None:
        self.message = message
        self.queue = queue
        self.delivery_count = delivery_count
        self.page = page  # the page file it was read back from (0: it never was paged)
        self.consumer: Consumer | None = None
        # Taken out of the middle of its level by a consumer with a selector: it stays there, skipped,
        # until it reaches the head (or the level is compacted), and a redelivery revives it in place.
        self.hole = False


def hold_ref(ref: MessageRef) -> None:
    """Count a new reference against the memory of its queue's address (see usage.py)."""
    msg, queue = ref.message, ref.queue
    msg.live_refs += 1
    if queue.address == msg.address:
        msg.local_refs += 1
        if msg.local_refs == 1:
            queue.usage.add(msg.cost)
    else:
        queue.usage.add(msg.cost)


def release_ref(ref: MessageRef) -> bool:
    """The reference lets go of its message (acknowledged, expired, dropped with its queue); returns
    whether that was the message's last reference."""
    msg, queue = ref.message, ref.queue
    msg.live_refs -= 1
    if queue.address == msg.address:
        msg.local_refs -= 1
        if msg.local_refs == 0:
            queue.usage.sub(msg.cost)
    else:
        queue.usage.sub(msg.cost)
    if ref.page:
        pager = queue.pager
        if pager is not None:
            pager.released(ref)
    return msg.live_refs <= 0


def delivery_payload(ref: MessageRef) -> bytes:
    """The bytes to send for a reference: the stored message, its header rewritten on redelivery."""
    payload = ref.message.payload
    if not ref.delivery_count:
        return payload
    from .message import MessageView  # the hot path (first delivery) never pays for this import

    view = MessageView(payload)
    header = view.header
    header.delivery_count = ref.delivery_count
    header.first_acquirer = False
    return view.with_header(header)


class Pager(Protocol):
    """A queue's page files (paging/): references read back on demand, and told when they are gone."""

    def fill(self, queue: Queue) -> bool:
        """Read the queue's next paged references into it; whether any came."""
        ...

    def released(self, ref: MessageRef) -> None: ...


class Consumer(Protocol):
    """The protocol side of a consumer: a sender link on some connection."""

    def can_take(self) -> bool: ...
    def deliver(self, ref: MessageRef) -> None: ...
    def kick(self, condition: str, description: str) -> None:
        """The queue went away: stop consuming and close the link with the reason."""


LEVELS = 10  # message priorities 0-9, as Artemis keeps them (a higher header value counts as 9)
NORMAL = 4  # the header's default


def level_of(priority: int) -> int:
    """The queue level of a header priority (0-255 on the wire): Artemis caps it at 9."""
    return priority if priority < LEVELS else LEVELS - 1


class Reader:
    """What a consumer that does not take every message sees of a queue: the references it has not looked
    at yet, by level (the queue adds each new or redelivered one), and what it takes or is sent a copy
    of (`match`, a selector; None: everything). A consumer with a selector looks at each message once,
    however long it waits, so no consumer ever scans the queue for another."""

    __slots__ = ("match", "pending", "size")

    def __init__(self, match: Callable[[StoredMessage], bool] | None) -> None:
        self.match = match
        self.pending: list[deque[MessageRef]] = [deque() for _ in range(LEVELS)]
        self.size = 0  # references in `pending`, some perhaps gone since (dropped when looked at)


def _message_id(ref: MessageRef) -> int:
    return ref.message.id


def _insert_sorted(messages: deque[MessageRef], ref: MessageRef) -> None:
    """Put `ref` back in message id order, looking from the head (a redelivery is among the oldest)."""
    mid = ref.message.id
    if not messages or messages[0].message.id > mid:
        messages.appendleft(ref)
        return
    i, n = 1, len(messages)
    while i < n and messages[i].message.id < mid:
        i += 1
    messages.insert(i, ref)


class Queue:
    __slots__ = (
        "_rr",
        "acked",
        "added",
        "address",
        "after_durable",
        "auto_created",
        "browsers",
        "consumers",
        "dispatching",
        "durable",
        "expired",
        "fifo",
        "filter",
        "filter_string",
        "holes",
        "id",
        "in_flight",
        "internal",
        "killed",
        "levels",
        "max_consumers",
        "name",
        "paged",
        "pager",
        "paused",
        "purge_on_no_consumers",
        "readers",
        "routing_type",
        "temporary",
        "top",
        "usage",
        "waiting",
        "watchers",
    )

    def __init__(
        self,
        id: int,
        name: str,
        address: str,
        routing_type: str,
        *,
        durable: bool = True,
        filter_string: str | None = None,
        max_consumers: int = -1,
        auto_created: bool = False,
        internal: bool = False,
        temporary: bool = False,
        purge_on_no_consumers: bool = False,
    ) -> None:
        self.id = id
        self.name = name
        self.address = address
        self.routing_type = routing_type
        self.durable = durable
        self.filter_string = filter_string
        # what a message must match to enter (the queue's <filter>; set by Topology, which parses it)
        self.filter: Callable[[StoredMessage], bool] | None = None
        self.max_consumers = max_consumers
        self.auto_created = auto_created
        self.internal = internal
        self.temporary = temporary
        self.purge_on_no_consumers = purge_on_no_consumers
        # Waiting references by priority, highest first, oldest first within one: `fifo` is the level
        # of the default priority, and the only one of a queue that never saw another priority (the
        # common case pays one comparison per message); `levels` appears with the first other priority.
        # An internal queue (the mirror's store-and-forward) stays in routing order, as Artemis keeps it.
        self.fifo: deque[MessageRef] = deque()
        self.levels: list[deque[MessageRef]] | None = None
        self.top = NORMAL  # no level above it holds a reference
        self.waiting: dict[int, MessageRef] = {}
        self.consumers: list[Consumer] = []
        self.holes = 0  # references taken out of the middle of a level, still in it (MessageRef.hole)
        self.readers: dict[int, Reader] = {}  # by id(consumer): the consumers with a selector
        self.browsers: list[tuple[Consumer, Reader]] = []
        self.watchers: list[Reader] = []  # the readers of both
        self.in_flight = 0
        self.added = self.acked = self.expired = self.killed = 0
        self.dispatching = False
        self.after_durable = False  # references are added only once their journal batch is on disk
        self.usage = Usage(address, Budget())  # the address's, once bound (Topology.bind)
        self.pager: Pager | None = None
        self.paged = 0  # references waiting in page files
        self.paused = False  # management's pause: messages are kept and counted, none is delivered
        self._rr = 0

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} on {self.address!r} {self.routing_type} depth={len(self.waiting)}>"

    @property
    def depth(self) -> int:
        """Messages held: waiting, paged and in flight (Artemis's MessageCount)."""
        return len(self.waiting) + self.paged + self.in_flight

    # ------------------------------------------------------------------------- the waiting references

    def refs(self) -> list[MessageRef]:
        """The waiting references in delivery order: highest priority first, oldest first within one."""
        levels = self.levels
        if levels is None:
            out = list(self.fifo)
        else:
            out = []
            for level in range(LEVELS - 1, -1, -1):
                out.extend(levels[level])
        return [ref for ref in out if not ref.hole] if self.holes else out

    def head(self) -> MessageRef | None:
        """The reference delivered next, if any."""
        levels = self.levels
        for messages in [self.fifo] if levels is None else reversed(levels[: self.top + 1]):
            for ref in messages:
                if not ref.hole:
                    return ref
        return None

    def _level(self, ref: MessageRef) -> deque[MessageRef]:
        """The deque a reference waits in (made on the first priority other than the default)."""
        level = self._level_index(ref)
        if level == NORMAL:
            return self.fifo
        levels = self.levels
        if levels is None:
            levels = self.levels = [self.fifo if i == NORMAL else deque() for i in range(LEVELS)]
        if level > self.top:
            self.top = level
        return levels[level]

    def _level_index(self, ref: MessageRef) -> int:
        return NORMAL if self.internal else level_of(ref.message.priority)

    def _append(self, ref: MessageRef) -> None:
        if ref.message.priority == NORMAL or self.internal:
            self.fifo.append(ref)
        else:
            self._level(ref).append(ref)
        if self.watchers:
            self._tell(ref, False)

    def _pop(self) -> MessageRef:
        """Take the reference delivered next (the queue holds one)."""
        levels = self.levels
        while True:
            if levels is None:
                ref = self.fifo.popleft()
            else:
                level = self.top
                while not levels[level]:
                    level -= 1
                self.top = level if level > NORMAL else NORMAL
                ref = levels[level].popleft()
            if not ref.hole:
                return ref
            ref.hole = False  # taken by a consumer with a selector: gone from the level now
            self.holes -= 1

    def enqueue(self, ref: MessageRef) -> None:
        msg = ref.message
        if msg.priority == NORMAL and not self.watchers:  # the common case, without a call
            self.fifo.append(ref)
        else:
            self._append(ref)
        self.waiting[msg.id] = ref
        self.added += 1
        if self.consumers:
            self.dispatch()

    def enqueue_many(self, refs: list[MessageRef]) -> None:
        waiting = self.waiting
        for ref in refs:
            self._append(ref)
            waiting[ref.message.id] = ref
        self.added += len(refs)
        if self.consumers:
            self.dispatch()

    def restore(self, ref: MessageRef) -> None:
        """Append a recovered reference (at startup: no counters, no dispatch)."""
        self._append(ref)
        self.waiting[ref.message.id] = ref

    def restore_many(self, refs: list[MessageRef]) -> None:
        """Append references read back from page files (counted when they were paged)."""
        waiting = self.waiting
        for ref in refs:
            self._append(ref)
            waiting[ref.message.id] = ref

    def requeue(self, refs: list[MessageRef]) -> None:
        """Put references back (after consumer loss, a release, a rollback), each in its place by message
        id within its priority, as Artemis's addSorted does: a redelivered message goes ahead of younger
        ones of its priority, behind higher priorities. So what a client gives back in several goes (a
        rollback, then the prefetched messages it releases) is redelivered in order."""
        for ref in sorted(refs, key=_message_id, reverse=True):
            ref.consumer = None
            if ref.hole:  # still in its place in the level: it only comes back to life
                ref.hole = False
                self.holes -= 1
            else:
                _insert_sorted(self._level(ref), ref)
            self.waiting[ref.message.id] = ref
            if self.watchers:
                self._tell(ref, True)

    def remove(self, ref: MessageRef) -> None:
        """Take one waiting reference out of the queue (to acknowledge it out of band: a mirrored ack).

        Found from the nearer end of its level (ids grow from head to tail), so the cost is the distance
        from that end, not the depth: the other data centre consumes the oldest messages, and a catch-up
        applies a message shortly before its ack, at the newest end of a queue that may hold a deep
        backlog."""
        messages = self._level(ref)
        mid = ref.message.id
        if not messages:
            raise ValueError("reference not in queue")
        if mid - messages[0].message.id <= messages[-1].message.id - mid:
            messages.remove(ref)  # from the head
        else:  # from the tail: the younger references step aside and come back in order
            younger: list[MessageRef] = []
            while messages:
                r = messages.pop()
                if r is ref:
                    break
                younger.append(r)
            else:
                messages.extend(reversed(younger))
                raise ValueError("reference not in queue")
            messages.extend(reversed(younger))
        del self.waiting[mid]

    def keep_only(self, refs: list[MessageRef]) -> None:
        """Replace the waiting references with `refs` (a subset; each level keeps their order)."""
        self._clear_holes()
        self.fifo.clear()
        if self.levels is not None:
            for level in self.levels:
                level.clear()
        self.top = NORMAL
        watchers, self.watchers = self.watchers, []  # they hold these already
        for ref in refs:
            self._append(ref)
        self.watchers = watchers
        self.waiting = {ref.message.id: ref for ref in refs}

    def _clear_holes(self) -> None:
        if self.holes:
            for messages in [self.fifo] if self.levels is None else self.levels:
                for ref in messages:
                    ref.hole = False
            self.holes = 0

    def _compact(self) -> None:
        """Drop the holes from every level (when they outnumber the waiting references)."""
        for messages in [self.fifo] if self.levels is None else self.levels:
            kept = [ref for ref in messages if not ref.hole]
            if len(kept) != len(messages):
                for ref in messages:
                    ref.hole = False
                messages.clear()
                messages.extend(kept)
        self.holes = 0

    # ------------------------------------------------------------------------------------ consumers

    def add_consumer(
        self, consumer: Consumer, match: Callable[[StoredMessage], bool] | None = None, browse: bool = False
    ) -> None:
        """A consumer takes every message it is given; one with `match` only those it matches (a
        selector); a browser (`browse`) is sent a copy of each waiting message it matches, once, and
        takes none."""
        if not browse and match is None:
            self.consumers.append(consumer)
            return
        reader = Reader(match)
        for ref in self.refs():  # what waits now, in order; what comes later is told as it comes
            reader.pending[self._level_index(ref)].append(ref)
        reader.size = len(self.waiting)
        if browse:
            self.browsers.append((consumer, reader))
        else:
            self.readers[id(consumer)] = reader
            self.consumers.append(consumer)
        self.watchers.append(reader)

    def remove_consumer(self, consumer: Consumer) -> None:
        reader: Reader | None = None
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            reader = self.readers.pop(id(consumer), None)
        else:
            for c, r in self.browsers:
                if c is consumer:
                    reader = r
            self.browsers = [(c, r) for c, r in self.browsers if c is not consumer]
        if reader is not None:
            self.watchers = [r for r in self.watchers if r is not reader]
        if self.holes and not self.readers:
            self._compact()  # nobody makes holes any more: the levels hold only what waits

    def _tell(self, ref: MessageRef, redelivered: bool) -> None:
        """A reference came (or came back): every reader will look at it."""
        level = self._level_index(ref)
        live = len(self.waiting)
        for reader in self.watchers:
            pending = reader.pending[level]
            if redelivered:
                _insert_sorted(pending, ref)
            else:
                pending.append(ref)
            reader.size += 1
            if reader.size > 2 * live + 1024:  # mostly gone since: taken by others
                self._prune(reader)

    def _prune(self, reader: Reader) -> None:
        waiting = self.waiting
        size = 0
        for pending in reader.pending:
            kept = [ref for ref in pending if waiting.get(ref.message.id) is ref]
            pending.clear()
            pending.extend(kept)
            size += len(kept)
        reader.size = size

    def dispatch(self, is_expired: Callable[[MessageRef], bool] | None = None) -> None:
        """Hand waiting messages to consumers with credit, round robin; read paged ones back as the
        queue runs dry."""
        if self.dispatching or self.paused:
            return  # re-entered from a delivery callback: the outer loop carries on
        self.dispatching = True
        try:
            while True:
                if self.readers:
                    hungry = self._dispatch_selective(is_expired)
                else:
                    hungry = self._dispatch_waiting(is_expired)
                pager = self.pager
                if not hungry or pager is None or not self.paged or not self._may_read_more():
                    return
                if not pager.fill(self):
                    return
        finally:
            self.dispatching = False

    def _may_read_more(self) -> bool:
        """Whether to read paged references back: when none waits, or (consumers with selectors have
        looked at every waiting one and found nothing for them) while fewer wait than the address reads
        back at a time, as Artemis bounds what it holds in memory of a paged queue."""
        if not self.waiting:
            return True
        most = self.usage.read_messages
        return len(self.waiting) < (most if most > 0 else READ_AHEAD)

    def _dispatch_waiting(self, is_expired: Callable[[MessageRef], bool] | None) -> bool:
        """Deliver what waits; whether a consumer could still take more."""
        waiting, consumers = self.waiting, self.consumers
        while waiting and consumers:
            n = len(consumers)
            for i in range(n):
                c = consumers[(self._rr + i) % n]
                if c.can_take():
                    self._rr = (self._rr + i + 1) % n
                    break
            else:
                return False
            ref = self.fifo.popleft() if self.levels is None and not self.holes else self._pop()
            del waiting[ref.message.id]
            if is_expired is not None and is_expired(ref):
                continue
            self.in_flight += 1
            ref.consumer = c
            c.deliver(ref)
        return bool(consumers) and any(c.can_take() for c in consumers)

    def _dispatch_selective(self, is_expired: Callable[[MessageRef], bool] | None) -> bool:
        """As `_dispatch_waiting`, with consumers that have selectors: each takes the first waiting message
        it matches among those it has not looked at (its `Reader`); one that found nothing sits out the
        rest of this round. Whether a consumer could still take more (then paged references may be read
        back for it)."""
        consumers, readers = self.consumers, self.readers
        done: set[int] = set()
        while self.waiting and consumers:
            n = len(consumers)
            for i in range(n):
                c = consumers[(self._rr + i) % n]
                if id(c) not in done and c.can_take():
                    self._rr = (self._rr + i + 1) % n
                    break
            else:
                break
            reader = readers.get(id(c))
            ref = self._pop() if reader is None else self._take_match(reader)
            if ref is None:
                done.add(id(c))
                continue
            del self.waiting[ref.message.id]
            if is_expired is not None and is_expired(ref):
                continue
            self.in_flight += 1
            ref.consumer = c
            c.deliver(ref)
        if self.holes and not self.waiting:
            self._compact()
        return any(c.can_take() for c in consumers)

    def _next_match(self, reader: Reader) -> MessageRef | None:
        """The first waiting reference the reader has not looked at and matches, highest priority first;
        everything it looks at on the way is dropped from its list."""
        waiting, match, pending = self.waiting, reader.match, reader.pending
        for level in range(LEVELS - 1, -1, -1):
            refs = pending[level]
            while refs:
                ref = refs.popleft()
                reader.size -= 1
                if waiting.get(ref.message.id) is ref and (match is None or match(ref.message)):
                    return ref
        return None

    def _take_match(self, reader: Reader) -> MessageRef | None:
        """Take the next reference the reader matches out of its level: from the head, or as a hole."""
        ref = self._next_match(reader)
        if ref is None:
            return None
        messages = self._level(ref)
        if messages[0] is ref:
            messages.popleft()
            while messages and messages[0].hole:  # holes that reached the head leave with it
                messages.popleft().hole = False
                self.holes -= 1
        else:
            ref.hole = True
            self.holes += 1
            if self.holes > 64 and self.holes > len(self.waiting):
                self._compact()
        return ref

    def browse(self, consumer: Consumer) -> None:
        """Send a browser, as far as its credit goes, a copy of each waiting message it has not seen (it
        takes nothing). Asked by the browser's own flow only, as Artemis runs a browser's iterator: what
        comes later, it reads when it gives credit again."""
        for browser, reader in self.browsers:
            if browser is consumer:
                while consumer.can_take():
                    ref = self._next_match(reader)
                    if ref is None:
                        return
                    consumer.deliver(ref)

    def take_in_flight(self, ref: MessageRef) -> None:
        """A reference left the consumer (acked, rejected or requeued)."""
        self.in_flight -= 1
        ref.consumer = None


class Address:
    """An address and the queues bound to it."""

    __slots__ = (
        "anycast_rr",
        "auto_created",
        "id",
        "internal",
        "name",
        "queues",
        "routed",
        "routing_types",
        "temporary",
        "unrouted",
        "unrouted_said",
        "unrouted_said_ms",
        "usage",
    )

    def __init__(
        self,
        name: str,
        routing_types: set[str],
        *,
        id: int = 0,
        auto_created: bool = False,
        internal: bool = False,
        temporary: bool = False,
    ) -> None:
        self.name = name
        self.routing_types = routing_types
        self.id = id
        self.auto_created = auto_created
        self.internal = internal
        self.temporary = temporary  # made for a temporary (dynamic) queue: never journalled nor mirrored
        self.queues: list[Queue] = []
        self.anycast_rr = 0  # the next anycast queue to take a message, round robin
        self.routed = 0
        self.unrouted = 0
        self.unrouted_said = 0  # `unrouted` when AMQ951020 last said it (routing.py), and when
        self.unrouted_said_ms = 0
        self.usage = Usage(name, Budget())  # its settings' limits and the broker's budget (Topology)

    def __repr__(self) -> str:
        return f"<Address {self.name!r} {sorted(self.routing_types)} queues={len(self.queues)}>"


class QueueStats:
    """Counters as management reports them."""

    @staticmethod
    def of(q: Queue) -> dict[str, Any]:
        return {
            "name": q.name,
            "address": q.address,
            "routing-type": q.routing_type,
            "durable": q.durable,
            "message-count": q.depth,
            "delivering-count": q.in_flight,
            "paged-count": q.paged,
            "messages-added": q.added,
            "messages-acknowledged": q.acked,
            "messages-expired": q.expired,
            "messages-killed": q.killed,
            "consumer-count": len(q.consumers),
        }
