"""Routing: a message to the queues bound at its address, journalled in one record, then enqueued.

Invariants:
- A durable message routed to durable queues is journalled in the current batch, as one record that
  names every durable queue it went to (including any an observer added: the mirror's store-and-forward
  queue), so that after a crash it is on all of them or on none.
- An `after_durable` queue (the store-and-forward queue) gets its references only once their batch is on
  disk: otherwise a crash could leave the other data centre with something this one lost.
- An address over its memory limits follows its full policy (usage.py): its queues' share of a message
  goes to the address's page file instead (paging/), or the send is refused, or dropped; a mirror's
  store-and-forward queue pages on its own. The decision is made before any state changes, so a refusal
  leaves nothing behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .errors import ResourceLimitExceeded
from .events import Cause, Observers
from .identity import MessageIndex
from .journal import records
from .message import MessageView
from .paging.paging import Paging
from .persistence import Callback, Persistence
from .queues import Address, MessageRef, Queue, StoredMessage, hold_ref, release_ref
from .stats import BrokerStats
from .topology import Topology, check_name
from .usage import Admission, Usage
from .vocabulary import MULTICAST

Clock = Callable[[], int]  # epoch milliseconds
UNROUTED_EVERY_MS = 60_000  # AMQ951020 again for one address at most this often


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
        paging: Paging,
    ) -> None:
        self.topology = topology
        self.persistence = persistence
        self.observers = observers
        self.index = index
        self.stats = stats
        self.clock_ms = clock_ms
        self.log = log
        self.paging = paging
        self._later: list[MessageRef] = []  # for after-durable queues, in journal order
        self._no_address_said_ms = -UNROUTED_EVERY_MS
        # In this order: what a batch enqueues late must be in its queue before that queue's pages of
        # the same batch become readable (which could otherwise overtake it).
        # the store-and-forward queue's events leave for the other data centre: only once a replica
        # has them too, or a failover could leave the other data centre ahead of this one
        persistence.on_batch(self._hand_on_later, past_barriers=True)
        persistence.on_batch(paging.on_batch)

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
        connection_id: str | None = None,
        delivery_count: int = 0,
        visible_when_durable: bool = False,
    ) -> StoredMessage | None:
        """Route one message to the queues bound at `address`; return it (None if nothing took it).
        `visible_when_durable`: its queues get it only once its journal batch is on disk (a committed
        transaction's messages: no consumer sees what a crash could take back).

        A queue with a filter takes only what its filter matches, unless `only_queues` names it (the
        sender chose the queue). `connection_id`: the sending connection's container id, which a no-local
        subscription's filter compares. `delivery_count`: the deliveries the message had elsewhere (a
        scale-down brings it here).

        Raises ResourceLimitExceeded when the address is full and its policy is FAIL (or a page cannot
        be written); a DROP address drops the message (counted) and returns None."""
        addr = self.topology.addresses.get(address)
        if addr is None or not addr.queues:
            self._unrouted(address, addr)
            return None
        h = view.header
        now_ms = self.clock_ms()
        expiry = now_ms + h.ttl if h.ttl and not no_expiry else 0
        if not expiry and not no_expiry:
            expiry = view.absolute_expiry_time
        targets: list[Queue] = []
        anycast: list[Queue | None] = []  # every anycast queue in order; None where its filter refuses
        probe: StoredMessage | None = None  # what queue filters see, made for the first one
        for q in addr.queues:
            taken = True
            if q.filter is not None and only_queues is None:
                if probe is None:
                    probe = StoredMessage(0, address, payload, h.durable, expiry, now_ms, h.priority)
                    probe.connection_id = connection_id
                taken = q.filter(probe)
            if only_queues is not None:
                if q.name in only_queues:
                    targets.append(q)
            elif q.routing_type == MULTICAST:
                if taken:
                    targets.append(q)
            else:
                anycast.append(q if taken else None)
        if anycast:
            # Several anycast queues on one address share the messages round robin, as Artemis does: from
            # the position after the last one that took a message, the next whose filter matches.
            n = len(anycast)
            for step in range(n):
                i = (addr.anycast_rr + step) % n
                chosen = anycast[i]
                if chosen is not None:
                    targets.append(chosen)
                    addr.anycast_rr = i + 1
                    break
        if not targets:
            self._unrouted(address, addr)
            return None
        persistence = self.persistence
        msg = StoredMessage(
            persistence.new_message_id(), address, payload, h.durable, expiry, now_ms, h.priority
        )
        msg.via_mirror = via_mirror
        msg.connection_id = connection_id
        if origin is not None:
            if origin[0] is not None:
                check_name(origin[0], "origin broker")
            msg.origin_broker_id, msg.origin_message_id = origin
        usage = addr.usage
        admission = Admission.MEMORY
        if usage.store is not None or usage.over(msg.cost):
            admission = self._admit(addr, msg)
            if admission == Admission.DROP:
                return None
            if admission == Admission.PAGE:
                self._page(usage, msg, targets, fail=True)
        memory = targets if admission == Admission.MEMORY else []
        joined: list[Queue] = []
        for o in self.observers.joining:
            joined.extend(o.queues_to_join(msg, targets, cause))
        for q in joined:  # a store-and-forward queue pages on its own address (a copy of the record)
            if not self._pages(q, msg):
                memory = [*memory, q]
        durable = h.durable and persistence.enabled
        durable_ids = [q.id for q in memory if q.durable and not q.temporary] if durable else None
        if durable_ids:
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
        elif not (durable and admission == Admission.PAGE):
            msg.durable = False
        addr.routed += 1
        self.stats.messages_routed += 1
        if admission == Admission.MEMORY:
            self.index.add(msg)
        for o in self.observers.routing:
            o.message_routed(msg, targets, cause)
        if delivery_count and durable_ids:
            for queue_id in durable_ids:
                persistence.persist(records.DeliveryCountUpdated(queue_id, msg.id, delivery_count))
        for q in memory:
            ref = MessageRef(msg, q, delivery_count)
            hold_ref(ref)
            if visible_when_durable:
                self._later.append(ref)
                persistence.schedule()
            else:
                self._enqueue(q, ref)
        return msg

    def _unrouted(self, name: str, addr: Address | None) -> None:
        """A message that matched no queue is dropped, as Artemis does; counted, and said once per address
        (then at most once a minute with the count): a plain AMQP client's first sends to an address
        auto-created multicast with no subscription land here, and nobody would know."""
        self.stats.messages_unrouted += 1
        now = self.clock_ms()
        if addr is None:
            if now - self._no_address_said_ms >= UNROUTED_EVERY_MS:
                self._no_address_said_ms = now
                self.log.warning(
                    "AMQ951020: a message sent to %r was dropped: there is no such address", name
                )
            return
        addr.unrouted += 1
        if addr.unrouted > 1 and now - addr.unrouted_said_ms < UNROUTED_EVERY_MS:
            return
        since = addr.unrouted - addr.unrouted_said
        addr.unrouted_said, addr.unrouted_said_ms = addr.unrouted, now
        self.log.warning(
            "AMQ951020: %d message(s) sent to address %r matched no queue and were dropped (%d in all on "
            "this address). A multicast address keeps messages only for its subscriptions: to keep them "
            "for a later consumer, send with the 'queue' capability (or the anycast prefix), or define "
            "the queue in <addresses>",
            since,
            name,
            addr.unrouted,
        )

    def _admit(self, addr: Address, msg: StoredMessage) -> Admission:
        admission = self.paging.admit(addr.usage, msg.cost)
        if admission == Admission.FAIL:
            addr.usage.refused += 1
            raise ResourceLimitExceeded(f"address {addr.name} is full")
        if admission == Admission.DROP:
            usage = addr.usage
            usage.dropped += 1
            self.stats.messages_dropped += 1
            if usage.dropped == 1 or usage.dropped % 10000 == 0:
                self.log.warning(
                    "AMQ222039: Messages sent to address '%s' are being dropped; size is currently: "
                    "%d bytes; max-size-bytes: %d (%d dropped so far)",
                    addr.name,
                    usage.bytes,
                    usage.max_bytes,
                    usage.dropped,
                )
        return admission

    def _pages(self, queue: Queue, msg: StoredMessage) -> bool:
        """Whether `msg` went to the page file of `queue`'s address (a store-and-forward queue: it pages
        or holds the message, never refuses it)."""
        usage = queue.usage
        if usage.store is None and not usage.over(msg.cost):
            return False
        return self.paging.admit(usage, msg.cost) == Admission.PAGE and self._page(usage, msg, [queue])

    def _page(self, usage: Usage, msg: StoredMessage, queues: list[Queue], fail: bool = False) -> bool:
        """Write `msg` for `queues` (all on `usage`'s address) to its page file. A page that cannot be
        written refuses the send (`fail`), or leaves the queues to hold the message in memory."""
        record = records.MessageAdded(
            msg.id,
            msg.address,
            tuple(q.id for q in queues),
            msg.payload,
            msg.timestamp_ms,
            msg.expiry_ms,
            msg.priority,
            msg.origin_broker_id,
            msg.origin_message_id,
            msg.via_mirror,
            msg.durable,
        )
        try:
            self.paging.page(usage, record, queues)
        except OSError as exc:
            self.log.error("AMQ222188: cannot write a page of address %s: %s", usage.address, exc)
            if fail:
                raise ResourceLimitExceeded(
                    f"address {usage.address} is full and its page cannot be written"
                ) from exc
            return False
        return True

    def enqueue_internal(
        self,
        queue: Queue,
        payload: bytes,
        *,
        address: str | None = None,
        origin: tuple[str | None, int] | None = None,
    ) -> StoredMessage:
        """Put a broker-made message (a mirror event; a copy that keeps its `origin` identity, for a
        mirror's initial sync) on one internal queue, durably when the queue is; it pages with the queue's
        address (which always pages: usage.py)."""
        now_ms = self.clock_ms()
        persistence = self.persistence
        msg = StoredMessage(persistence.new_message_id(), address or queue.address, payload, True, 0, now_ms)
        if origin is not None:
            msg.origin_broker_id, msg.origin_message_id = origin
        durable = queue.durable and persistence.enabled
        msg.durable = durable
        if self._pages(queue, msg):
            return msg
        if durable:
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
        ref = MessageRef(msg, queue)
        hold_ref(ref)
        self._enqueue(queue, ref)
        return msg

    def rollback(self, msg: StoredMessage) -> None:
        """Take back a message whose journal write failed (its send is refused): out of every queue it
        waits in, out of its pages, and its record dropped from the batch still to be written. A copy
        already delivered to a consumer cannot be called back (it was never confirmed to its producer)."""
        self.persistence.rolled_back.add(msg.id)
        topology = self.topology
        addr = topology.addresses.get(msg.address)
        internal = [q for q in topology.queues.values() if q.internal]  # store-and-forward queues
        queues = [*(addr.queues if addr is not None else ()), *internal]
        for q in queues:
            ref = q.waiting.get(msg.id)
            if ref is not None and ref.message is msg:
                q.remove(ref)
                release_ref(ref)
        self.paging.rollback(msg.id)
        self.index.forget(msg)

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
        rolled_back = self.persistence.rolled_back
        for ref in refs:
            if rolled_back and ref.message.id in rolled_back:
                release_ref(ref)  # its send failed on a full disk: it never was
                continue
            by_queue.setdefault(id(ref.queue), []).append(ref)
        queues = self.topology.queues
        for qrefs in by_queue.values():
            q = qrefs[0].queue
            if queues.get(q.name) is q:  # not deleted while its batch was being written
                q.enqueue_many(qrefs)
            else:
                for ref in qrefs:
                    if release_ref(ref):
                        self.index.forget(ref.message)
