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
- A consumer with a selector takes only what it matches and a browser is sent copies; each looks on
  from where it last looked (`Reader`), so neither makes the others scan the queue.
- A message counts against its address's `Usage` (usage.py) while a queue of that address holds it
  (`local_refs`), and against another address's once per reference there (a store-and-forward queue);
  `release_ref` is the one way a reference lets go of a message.
- A queue whose address pages has a `pager`: `paged` references wait in page files, and `dispatch` asks
  the pager for more when the queue has run dry and a consumer could take more.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any, Protocol

from .usage import MESSAGE_OVERHEAD, Budget, Usage

# How many references a paged queue holds in memory at most while consumers with selectors find nothing
# among them, unless the address sets max-read-page-messages.
READ_AHEAD = 1000


class StoredMessage:
    __slots__ = (
        "address",
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

    @property
    def mirror_id(self) -> int:
        """The id the mirror names this message by: the origin broker's id for it, or our own."""
        origin = self.origin_message_id
        return self.id if origin is None else origin


class MessageRef:
    __slots__ = ("consumer", "delivery_count", "message", "page", "queue")

    def __init__(self, message: StoredMessage, queue: Queue, delivery_count: int = 0, page: int = 0) -> None:
        self.message = message
        self.queue = queue
        self.delivery_count = delivery_count
        self.page = page  # the page file it was read back from (0: it never was paged)
        self.consumer: Consumer | None = None


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
    """What a consumer that does not take every message sees of a queue: a selector's matches (`match`
    None: every message), and for a browser the copies it has already been sent.

    `seen[level]` is the youngest message id of that level it has looked at: every older one was
    examined (did not match, or was copied to a browser), so a look resumes past it and a reader
    examines each message once, not the whole queue per delivery; a message put back at or below the
    mark (a redelivery) lowers it."""

    __slots__ = ("match", "seen")

    def __init__(self, match: Callable[[StoredMessage], bool] | None) -> None:
        self.match = match
        self.seen = [0] * LEVELS

    def forget(self, level: int, message_id: int) -> None:
        if self.seen[level] >= message_id:
            self.seen[level] = message_id - 1


def _message_id(ref: MessageRef) -> int:
    return ref.message.id


def _match_in(messages: deque[MessageRef], reader: Reader, level: int) -> int:
    """The index of the first reference of one level past the reader's mark that it matches, or -1; the
    mark moves over every reference looked at. Ids grow from head to tail within a level, so the mark's
    place is found by bisection, not by walking from the head."""
    seen = reader.seen
    mark = seen[level]
    if not messages or messages[-1].message.id <= mark:
        return -1
    match = reader.match
    start = bisect_right(messages, mark, key=_message_id) if mark else 0
    for i, ref in enumerate(islice(messages, start, None), start):
        seen[level] = ref.message.id
        if match is None or match(ref.message):
            return i
    return -1


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
        self.readers: dict[int, Reader] = {}  # by id(consumer): the consumers with a selector
        self.browsers: list[tuple[Consumer, Reader]] = []
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
            return list(self.fifo)
        out: list[MessageRef] = []
        for level in range(LEVELS - 1, -1, -1):
            out.extend(levels[level])
        return out

    def head(self) -> MessageRef | None:
        """The reference delivered next, if any."""
        levels = self.levels
        if levels is None:
            return self.fifo[0] if self.fifo else None
        for level in range(self.top, -1, -1):
            if levels[level]:
                return levels[level][0]
        return None

    def _level(self, ref: MessageRef) -> deque[MessageRef]:
        """The deque a reference waits in (made on the first priority other than the default)."""
        if self.internal:
            return self.fifo
        level = level_of(ref.message.priority)
        if level == NORMAL:
            return self.fifo
        levels = self.levels
        if levels is None:
            levels = self.levels = [self.fifo if i == NORMAL else deque() for i in range(LEVELS)]
        if level > self.top:
            self.top = level
        return levels[level]

    def _append(self, ref: MessageRef) -> None:
        if ref.message.priority == NORMAL or self.internal:
            self.fifo.append(ref)
        else:
            self._level(ref).append(ref)

    def _pop(self) -> MessageRef:
        """Take the reference delivered next (the queue holds one)."""
        levels = self.levels
        if levels is None:
            return self.fifo.popleft()
        level = self.top
        while not levels[level]:
            level -= 1
        self.top = level if level > NORMAL else NORMAL
        return levels[level].popleft()

    def enqueue(self, ref: MessageRef) -> None:
        self._append(ref)
        self.waiting[ref.message.id] = ref
        self.added += 1
        if self.consumers or self.browsers:
            self.dispatch()

    def enqueue_many(self, refs: list[MessageRef]) -> None:
        waiting = self.waiting
        for ref in refs:
            self._append(ref)
            waiting[ref.message.id] = ref
        self.added += len(refs)
        if self.consumers or self.browsers:
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
        """Put references back (after consumer loss or release), each in its place by message id within
        its priority, as Artemis's cancel puts a reference back sorted by its sequence: a redelivered
        message goes ahead of younger ones of its priority, behind higher priorities."""
        readers = self._all_readers()
        for ref in sorted(refs, key=_message_id, reverse=True):
            ref.consumer = None
            messages = self._level(ref)
            mid = ref.message.id
            if not messages or messages[0].message.id > mid:
                messages.appendleft(ref)
            else:  # behind older references put back before it: find its place from the head
                i = 1
                n = len(messages)
                while i < n and messages[i].message.id < mid:
                    i += 1
                messages.insert(i, ref)
            self.waiting[mid] = ref
            if readers:
                level = self._level_index(ref)
                for reader in readers:
                    reader.forget(level, mid)

    def _level_index(self, ref: MessageRef) -> int:
        return NORMAL if self.internal else level_of(ref.message.priority)

    def _all_readers(self) -> list[Reader]:
        readers = list(self.readers.values())
        readers.extend(reader for _, reader in self.browsers)
        return readers

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
        self.fifo.clear()
        if self.levels is not None:
            for level in self.levels:
                level.clear()
        self.top = NORMAL
        for ref in refs:
            self._append(ref)
        self.waiting = {ref.message.id: ref for ref in refs}

    # ------------------------------------------------------------------------------------ consumers

    def add_consumer(
        self, consumer: Consumer, match: Callable[[StoredMessage], bool] | None = None, browse: bool = False
    ) -> None:
        """A consumer takes every message it is given; one with `match` only those it matches (a
        selector); a browser (`browse`) is sent a copy of each waiting message it matches, once, and
        takes none."""
        if browse:
            self.browsers.append((consumer, Reader(match)))
            return
        if match is not None:
            self.readers[id(consumer)] = Reader(match)
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            self.readers.pop(id(consumer), None)
        else:
            self.browsers = [(c, r) for c, r in self.browsers if c is not consumer]

    def dispatch(self, is_expired: Callable[[MessageRef], bool] | None = None) -> None:
        """Hand waiting messages to consumers with credit, round robin; read paged ones back as the
        queue runs dry."""
        if self.dispatching or self.paused:
            return  # re-entered from a delivery callback: the outer loop carries on
        self.dispatching = True
        try:
            if self.browsers:
                self._browse()
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
                if self.browsers:
                    self._browse()
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
            ref = self._pop()
            del waiting[ref.message.id]
            if is_expired is not None and is_expired(ref):
                continue
            self.in_flight += 1
            ref.consumer = c
            c.deliver(ref)
        return bool(consumers) and any(c.can_take() for c in consumers)

    def _dispatch_selective(self, is_expired: Callable[[MessageRef], bool] | None) -> bool:
        """As `_dispatch_waiting`, with consumers that have selectors: each takes the first waiting message
        it matches, looking on from where it last looked (its `Reader`), so a selector never makes
        another consumer scan; a consumer that found nothing sits out the rest of this round. Whether a
        consumer could still take more and has looked at everything waiting (then paged references may
        be read back for it)."""
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
        return any(c.can_take() for c in consumers)

    def _next_match(self, reader: Reader) -> tuple[deque[MessageRef], int] | None:
        """The first waiting reference past the reader's marks that it matches, highest priority first:
        its level and index there. Every reference looked at moves the mark."""
        levels = self.levels
        if levels is None:
            i = _match_in(self.fifo, reader, NORMAL)
            return None if i < 0 else (self.fifo, i)
        for level in range(self.top, -1, -1):
            i = _match_in(levels[level], reader, level)
            if i >= 0:
                return levels[level], i
        return None

    def _take_match(self, reader: Reader) -> MessageRef | None:
        found = self._next_match(reader)
        if found is None:
            return None
        messages, i = found
        ref = messages[i]
        del messages[i]
        return ref

    def _browse(self) -> None:
        """Send each browser with credit a copy of what it has not seen yet (it takes nothing)."""
        for consumer, reader in list(self.browsers):
            while consumer.can_take():
                found = self._next_match(reader)
                if found is None:
                    break
                messages, i = found
                consumer.deliver(messages[i])

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
