"""Messages, queues, the addresses that bind them, and the consumers that drain them.

Invariants:
- A `StoredMessage` is shared by every queue it was routed to; `live_refs` counts the queues that
  still hold it, and its journal record is dead when that reaches zero.
- A queue hands each message to one consumer at a time; a reference is either waiting in `messages`
  or in flight to exactly one consumer, never both.
- `waiting` indexes the references in `messages` by message id (a mirrored ack finds its message in
  O(1), not by scanning a deep queue), so `messages` changes only through the queue's own methods.
- Redelivered references go back to the head in their original order, so per-queue order holds for
  everything not yet delivered.
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


class Queue:
    __slots__ = (
        "_rr",
        "acked",
        "added",
        "address",
        "after_durable",
        "auto_created",
        "consumers",
        "dispatching",
        "durable",
        "expired",
        "filter_string",
        "id",
        "in_flight",
        "internal",
        "killed",
        "max_consumers",
        "messages",
        "name",
        "paged",
        "pager",
        "paused",
        "purge_on_no_consumers",
        "routing_type",
        "temporary",
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
        self.max_consumers = max_consumers
        self.auto_created = auto_created
        self.internal = internal
        self.temporary = temporary
        self.purge_on_no_consumers = purge_on_no_consumers
        self.messages: deque[MessageRef] = deque()
        self.waiting: dict[int, MessageRef] = {}
        self.consumers: list[Consumer] = []
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
        return f"<Queue {self.name!r} on {self.address!r} {self.routing_type} depth={len(self.messages)}>"

    @property
    def depth(self) -> int:
        """Messages held: waiting, paged and in flight (Artemis's MessageCount)."""
        return len(self.messages) + self.paged + self.in_flight

    def enqueue(self, ref: MessageRef) -> None:
        self.messages.append(ref)
        self.waiting[ref.message.id] = ref
        self.added += 1
        if self.consumers:
            self.dispatch()

    def enqueue_many(self, refs: list[MessageRef]) -> None:
        self.messages.extend(refs)
        waiting = self.waiting
        for ref in refs:
            waiting[ref.message.id] = ref
        self.added += len(refs)
        if self.consumers:
            self.dispatch()

    def restore(self, ref: MessageRef) -> None:
        """Append a recovered reference (at startup: no counters, no dispatch)."""
        self.messages.append(ref)
        self.waiting[ref.message.id] = ref

    def restore_many(self, refs: list[MessageRef]) -> None:
        """Append references read back from page files (counted when they were paged)."""
        self.messages.extend(refs)
        waiting = self.waiting
        for ref in refs:
            waiting[ref.message.id] = ref

    def requeue(self, refs: list[MessageRef]) -> None:
        """Put references back at the head, oldest first (after consumer loss or release)."""
        for ref in sorted(refs, key=lambda r: r.message.id, reverse=True):
            ref.consumer = None
            self.messages.appendleft(ref)
            self.waiting[ref.message.id] = ref

    def remove(self, ref: MessageRef) -> None:
        """Take one waiting reference out of the queue (to acknowledge it out of band: a mirrored ack).

        Found from the nearer end (ids grow from head to tail), so the cost is the distance from that
        end, not the depth: the other data centre consumes the oldest messages, and a catch-up applies a
        message shortly before its ack, at the newest end of a queue that may hold a deep backlog."""
        messages = self.messages
        mid = ref.message.id
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
        """Replace the waiting references with `refs` (a subset, in order)."""
        self.messages.clear()
        self.messages.extend(refs)
        self.waiting = {ref.message.id: ref for ref in refs}

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    def dispatch(self, is_expired: Callable[[MessageRef], bool] | None = None) -> None:
        """Hand waiting messages to consumers with credit, round robin; read paged ones back as the
        queue runs dry."""
        if self.dispatching or self.paused:
            return  # re-entered from a delivery callback: the outer loop carries on
        self.dispatching = True
        try:
            while self._dispatch_waiting(is_expired):
                pager = self.pager
                if pager is None or not self.paged or not pager.fill(self):
                    return
        finally:
            self.dispatching = False

    def _dispatch_waiting(self, is_expired: Callable[[MessageRef], bool] | None) -> bool:
        """Deliver what waits; whether a consumer could still take more."""
        messages, consumers = self.messages, self.consumers
        while messages and consumers:
            n = len(consumers)
            for i in range(n):
                c = consumers[(self._rr + i) % n]
                if c.can_take():
                    self._rr = (self._rr + i + 1) % n
                    break
            else:
                return False
            ref = messages.popleft()
            del self.waiting[ref.message.id]
            if is_expired is not None and is_expired(ref):
                continue
            self.in_flight += 1
            ref.consumer = c
            c.deliver(ref)
        return bool(consumers) and any(c.can_take() for c in consumers)

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
