"""Routing: a message to the queues bound at its address, journalled in one record, then enqueued.

Invariants:
- A durable message routed to durable queues is journalled in the current batch, as one record that
  names every durable queue it went to (including any an observer added: the mirror's store-and-forward
  queue), so that after a crash it is on all of them or on none.
- An `after_durable` queue (the store-and-forward queue) gets its references only once their batch is on
  disk: otherwise a crash could leave the other data centre with something this one lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .events import Cause, Observers
from .identity import MessageIndex
from .journal import records
from .message import MessageView
from .persistence import Callback, Persistence
from .queues import MessageRef, Queue, StoredMessage
from .stats import BrokerStats
from .topology import Topology
from .vocabulary import MULTICAST

Clock = Callable[[], int]  # epoch milliseconds


class Router:
    def __init__(
        self,
        topology: Topology,
        persistence: Persistence,
        observers: Observers,
        index: MessageIndex,
        stats: BrokerStats,
        clock_ms: Clock,
        log: logging.Logger,
    ) -> None:
        self.topology = topology
        self.persistence = persistence
        self.observers = observers
        self.index = index
        self.stats = stats
        self.clock_ms = clock_ms
        self.log = log
        self._later: list[MessageRef] = []  # for after-durable queues, in journal order
        persistence.on_batch(self._hand_on_later)

    def route(
        self,
        address: str,
        payload: bytes,
        view: MessageView,
        *,
        via_mirror: bool = False,
        origin: tuple[str | None, int | None] | None = None,
        only_queues: list[str] | None = None,
        no_expiry: bool = False,
        cause: Cause | None = None,
    ) -> StoredMessage | None:
        """Route one message to the queues bound at `address`; return it (None if nothing took it)."""
        addr = self.topology.addresses.get(address)
        if addr is None or not addr.queues:
            self.stats.messages_unrouted += 1
            if addr is not None:
                addr.unrouted += 1
            return None
        targets: list[Queue] = []
        anycast: list[Queue] = []
        for q in addr.queues:
            if only_queues is not None:
                if q.name in only_queues:
                    targets.append(q)
            elif q.routing_type == MULTICAST:
                targets.append(q)
            else:
                anycast.append(q)
        if anycast:
            # Several anycast queues on one address share the messages round robin, as Artemis does.
            targets.append(anycast[addr.anycast_rr % len(anycast)])
            addr.anycast_rr += 1
        if not targets:
            addr.unrouted += 1
            return None
        h = view.header
        now_ms = self.clock_ms()
        expiry = now_ms + h.ttl if h.ttl and not no_expiry else 0
        if not expiry and not no_expiry:
            expiry = view.absolute_expiry_time
        persistence = self.persistence
        msg = StoredMessage(
            persistence.new_message_id(), address, payload, h.durable, expiry, now_ms, h.priority
        )
        msg.via_mirror = via_mirror
        if origin is not None:
            msg.origin_broker_id, msg.origin_message_id = origin
        for o in self.observers.joining:
            targets.extend(o.queues_to_join(msg, targets, cause))
        msg.live_refs += len(targets)
        durable_ids = [q.id for q in targets if q.durable and not q.temporary] if h.durable else None
        if durable_ids and persistence.enabled:
            persistence.persist(
                records.MessageAdded(
                    msg.id,
                    address,
                    tuple(durable_ids),
                    payload,
                    now_ms,
                    expiry,
                    h.priority,
                    msg.origin_broker_id,
                    msg.origin_message_id,
                    via_mirror,
                )
            )
        else:
            msg.durable = False
        addr.routed += 1
        self.stats.messages_routed += 1
        self.index.add(msg)
        for o in self.observers.routing:
            o.message_routed(msg, targets, cause)
        for q in targets:
            self._enqueue(q, MessageRef(msg, q))
        return msg

    def enqueue_internal(
        self,
        queue: Queue,
        payload: bytes,
        *,
        address: str | None = None,
        origin: tuple[str | None, int] | None = None,
    ) -> StoredMessage:
        """Put a broker-made message (a mirror event; a copy that keeps its `origin` identity, for a
        mirror's initial sync) on one internal queue, durably when the queue is."""
        now_ms = self.clock_ms()
        persistence = self.persistence
        msg = StoredMessage(persistence.new_message_id(), address or queue.address, payload, True, 0, now_ms)
        if origin is not None:
            msg.origin_broker_id, msg.origin_message_id = origin
        msg.live_refs = 1
        if queue.durable and persistence.enabled:
            persistence.persist(
                records.MessageAdded(
                    msg.id,
                    msg.address,
                    (queue.id,),
                    payload,
                    now_ms,
                    0,
                    4,
                    msg.origin_broker_id,
                    msg.origin_message_id,
                    False,
                )
            )
        else:
            msg.durable = False
        self._enqueue(queue, MessageRef(msg, queue))
        return msg

    def _enqueue(self, queue: Queue, ref: MessageRef) -> None:
        if queue.after_durable:
            # One callback per journal batch adds them all (see _hand_on_later), not one per reference.
            self._later.append(ref)
            self.persistence.schedule()  # the batch must be handed over even if nothing else is in it
        else:
            queue.enqueue(ref)

    def _hand_on_later(self) -> Callback | None:
        if not self._later:
            return None
        refs, self._later = self._later, []
        return lambda: self._enqueue_durable(refs)

    def _enqueue_durable(self, refs: list[MessageRef]) -> None:
        by_queue: dict[int, list[MessageRef]] = {}
        for ref in refs:
            by_queue.setdefault(id(ref.queue), []).append(ref)
        queues = self.topology.queues
        for qrefs in by_queue.values():
            q = qrefs[0].queue
            if queues.get(q.name) is q:  # not deleted while its batch was being written
                q.enqueue_many(qrefs)
