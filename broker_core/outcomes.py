"""What becomes of a delivered message: acknowledged, redelivered, dead-lettered or expired.

Artemis's semantics: an acknowledgement removes the reference and is journalled; a failed delivery
counts towards `max-delivery-attempts`, after which the message goes to the dead-letter address; an
expired message goes to the expiry address without its time to live. A message whose last reference
is gone leaves the identity index. A dead-letter or expiry copy carries Artemis's breadcrumbs, the
message annotations `x-opt-ORIG-ADDRESS` and `x-opt-ORIG-QUEUE` (and `x-opt-ACTUAL-EXPIRY`).
"""

from __future__ import annotations

import logging
from typing import Any

from .amqp.performatives import Accepted, Modified, Rejected
from .events import EXPIRY_COPY, Cause, Observers
from .identity import MessageIndex
from .journal import records
from .message import ACTUAL_EXPIRY, ORIG_ADDRESS, ORIG_QUEUE, MessageView
from .persistence import Persistence
from .queues import MessageRef, Queue, release_ref
from .routing import Clock, Router
from .stats import BrokerStats
from .topology import Topology
from .vocabulary import AckReason


class Outcomes:
    def __init__(
        self,
        topology: Topology,
        router: Router,
        persistence: Persistence,
        observers: Observers,
        index: MessageIndex,
        stats: BrokerStats,
        clock_ms: Clock,
        log: logging.Logger,
    ) -> None:
        self.topology = topology
        self.router = router
        self.persistence = persistence
        self.observers = observers
        self.index = index
        self.stats = stats
        self.clock_ms = clock_ms
        self.log = log

    def apply(self, ref: MessageRef, state: Any) -> None:
        """A consumer's outcome, with Artemis's semantics.

        Accepted (or settled without one) acknowledges; Rejected dead-letters; Modified counts a failed
        delivery only when it says so and dead-letters when undeliverable here; Released and anything
        else redelivers without counting an attempt.
        """
        if state is None or isinstance(state, Accepted):
            self.acknowledge(ref)
        elif isinstance(state, Rejected):
            self.dead_letter(ref)
        elif isinstance(state, Modified):
            self.release(
                ref, delivery_failed=bool(state.delivery_failed), undeliverable=bool(state.undeliverable_here)
            )
        else:
            self.release(ref, delivery_failed=False)

    def acknowledge(
        self,
        ref: MessageRef,
        reason: int = AckReason.NORMAL,
        via_mirror: bool = False,
        cause: Cause | None = None,
    ) -> None:
        q, msg = ref.queue, ref.message
        if ref.consumer is not None:
            q.take_in_flight(ref)
        q.acked += 1
        if msg.durable and q.durable and self.persistence.enabled:
            if ref.page:
                ack: Any = records.PageAcked(q.id, msg.id, ref.page, reason, via_mirror, self.clock_ms())
            else:
                ack = records.MessageAcked(q.id, msg.id, reason, via_mirror, self.clock_ms())
            self.persistence.persist(ack)  # before the release: a completed page is journalled after it
        if release_ref(ref):
            self.index.forget(msg)
        self.stats.messages_acked += 1
        for o in self.observers.all:
            o.message_acked(ref, reason, cause)

    def acknowledge_many(self, queue: Queue, refs: list[MessageRef]) -> None:
        """`acknowledge` for references of one queue settled together (the events a mirror's target
        accepted in one disposition), journalled as one `MessagesAcked` instead of one record each."""
        durable: list[int] = []
        journalled = queue.durable and self.persistence.enabled
        for ref in refs:
            msg = ref.message
            if ref.consumer is not None:
                queue.take_in_flight(ref)
            if msg.durable:
                if not ref.page:
                    durable.append(msg.id)
                elif journalled:
                    ack = records.PageAcked(
                        queue.id, msg.id, ref.page, AckReason.NORMAL, False, self.clock_ms()
                    )
                    self.persistence.persist(ack)
            if release_ref(ref):
                self.index.forget(msg)
        queue.acked += len(refs)
        self.stats.messages_acked += len(refs)
        if durable and journalled:
            self.persistence.persist(
                records.MessagesAcked(queue.id, tuple(durable), AckReason.NORMAL, False, self.clock_ms())
            )
        for ref in refs:
            for o in self.observers.all:
                o.message_acked(ref, AckReason.NORMAL, None)

    def release(self, ref: MessageRef, delivery_failed: bool, undeliverable: bool = False) -> None:
        """The consumer gave the message back: redeliver it, or dead-letter it after too many tries."""
        q = ref.queue
        q.take_in_flight(ref)
        if delivery_failed:
            ref.delivery_count += 1
            if ref.message.durable and q.durable and self.persistence.enabled:
                self.persistence.persist(
                    records.DeliveryCountUpdated(q.id, ref.message.id, ref.delivery_count)
                )
            limit = self.topology.settings_for(q.address).max_delivery_attempts
            if undeliverable or (limit >= 0 and ref.delivery_count >= limit):
                self.dead_letter(ref)
                return
        q.requeue([ref])
        q.dispatch(self.is_expired)

    def requeue_all(self, refs: list[MessageRef], persist_counts: bool = False, counted: bool = True) -> None:
        """A consumer went away: everything it held goes back, `counted` as a failed delivery (the count
        journalled with `persist_counts`), or not (the consumer let go of it in an orderly way)."""
        by_queue: dict[int, list[MessageRef]] = {}
        for ref in refs:
            ref.queue.take_in_flight(ref)
            if not counted:
                by_queue.setdefault(ref.queue.id, []).append(ref)
                continue
            ref.delivery_count += 1
            if persist_counts:
                self.persist_delivery_count(ref)
            limit = self.topology.settings_for(ref.queue.address).max_delivery_attempts
            if limit >= 0 and ref.delivery_count >= limit:
                self.dead_letter(ref)
            else:
                by_queue.setdefault(ref.queue.id, []).append(ref)
        for qrefs in by_queue.values():
            q = qrefs[0].queue
            q.requeue(qrefs)
            q.dispatch(self.is_expired)

    def roll_back(self, refs: list[MessageRef]) -> None:
        """A transaction that acquired these rolled back: each goes back to the head of its queue, in
        order, with one delivery more, journalled (so a restart keeps the count), or to its dead-letter
        address past max-delivery-attempts (Artemis's rollback of an acknowledgement)."""
        self.requeue_all(refs, persist_counts=True)

    def persist_delivery_count(self, ref: MessageRef) -> None:
        msg, q = ref.message, ref.queue
        if msg.durable and q.durable and self.persistence.enabled and not ref.page:
            self.persistence.persist(records.DeliveryCountUpdated(q.id, msg.id, ref.delivery_count))

    def dead_letter(self, ref: MessageRef, cause: Cause | None = None) -> None:
        settings = self.topology.settings_for(ref.queue.address)
        self._move(ref, settings.dead_letter_address, AckReason.KILLED, "dead-letter", cause)
        ref.queue.killed += 1
        self.stats.messages_killed += 1

    def expire(self, ref: MessageRef, cause: Cause | None = None) -> None:
        settings = self.topology.settings_for(ref.queue.address)
        self._move(ref, settings.expiry_address, AckReason.EXPIRED, "expiry", cause)
        ref.queue.expired += 1
        self.stats.messages_expired += 1

    def _move(self, ref: MessageRef, target: str | None, reason: int, what: str, cause: Cause | None) -> None:
        msg = ref.message
        if ref.consumer is not None:
            ref.queue.take_in_flight(ref)
        addresses = self.topology.addresses
        if target and target in addresses and addresses[target].queues:
            view = MessageView(msg.payload)
            # Artemis's breadcrumbs: where the copy came from (management's retryMessages reads them)
            origin: dict[str, Any] = {ORIG_ADDRESS: ref.queue.address, ORIG_QUEUE: ref.queue.name}
            if reason == AckReason.EXPIRED:  # the copy must not expire again on arrival, nor be mirrored
                origin[ACTUAL_EXPIRY] = int(self.clock_ms())  # epoch ms, a long as Artemis's
                payload = MessageView(view.with_header(_without_ttl(view))).with_message_annotations(origin)
                # Each side makes its own copy; it keeps its original's identity (as a mirrored dead
                # letter has one identity on both sides), so a mirrored acknowledgement of one side's
                # copy settles the other's, and a DR reconciliation pairs the two copies.
                identity = (msg.origin_broker_id, msg.mirror_id)
                self.router.route(
                    target, payload, MessageView(payload), no_expiry=True, cause=EXPIRY_COPY, origin=identity
                )
            else:  # a dead-letter copy is an ordinary routing, and is mirrored
                payload = view.with_message_annotations(origin)
                self.router.route(target, payload, MessageView(payload), cause=cause)
        else:
            self.log.warning(
                "message %d on queue %s dropped: no %s address with a queue (configured: %s)",
                msg.id,
                ref.queue.name,
                what,
                target,
            )
        # consumer already detached above; acknowledge without touching in_flight again
        self.acknowledge(ref, reason, cause=cause)

    def is_expired(self, ref: MessageRef) -> bool:
        """Whether `ref` expired (then it was moved to the expiry address); asked as it is dispatched."""
        if ref.queue.internal:
            return False
        exp = ref.message.expiry_ms
        if exp and exp <= self.clock_ms():
            self.expire(ref)
            return True
        return False

    def expire_scan(self) -> int:
        """Move expired waiting messages out of every queue; returns how many."""
        now_ms = self.clock_ms()
        n = 0
        for q in list(self.topology.queues.values()):
            if q.internal:
                continue  # store-and-forward events never expire (Artemis ARTEMIS-5090)
            waiting = q.refs()
            expired = [r for r in waiting if r.message.expiry_ms and r.message.expiry_ms <= now_ms]
            if not expired:
                continue
            gone = {id(r) for r in expired}
            q.keep_only([r for r in waiting if id(r) not in gone])
            for ref in expired:  # after the queue is rebuilt: an expiry copy may land on this very queue
                self.expire(ref)
            n += len(expired)
        return n


def _without_ttl(view: MessageView) -> Any:
    h = view.header
    h.ttl = None
    return h
