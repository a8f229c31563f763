"""The mirror target: apply a remote broker's events idempotently, then answer Accepted once durable.

- Messages: deduplicated per origin broker by id (`RecentIds`: an exact window of recent ids and a floor
  below it; the highest id is persisted), stored with their (origin broker, origin id) identity, routed
  with the cause "applying from <remote>", so that our own mirror sources do not reflect them.
- postAck: the message is found by identity on the named queue; when it is not there yet (or is out to
  a local consumer) the ack is kept as a persisted retry and tried again, a bounded number of times.
- Address/queue events: create if missing, delete if present; errors are logged, never refused.
The target always answers Accepted (an Artemis source treats Rejected as loss), once the work is on disk.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from broker_core.errors import BrokerError
from broker_core.events import Cause
from broker_core.message import MessageView
from broker_core.vocabulary import ANYCAST, MULTICAST, AckReason

from . import decode, wire

if TYPE_CHECKING:
    from broker_core.server import Server

log = logging.getLogger("broker.mirror")

ACK_RETRY_PREFIX = "mirror.ackretry."
DEDUP_PREFIX = "mirror.dedup."

# A retried acknowledgement is applied as broker work that no mirror forwards: the event it retries was
# forwarded, or not, when it first arrived.
ACK_RETRY = Cause("mirror ack retry")


class AckRetries:
    """postAcks whose message was not found yet, persisted as meta records, retried on a timer."""

    def __init__(self, server: Server, attempts: int = 5) -> None:
        self.server = server
        self.attempts = attempts
        self.tries: dict[str, int] = {}
        self.stats = {"ack_retries": 0, "acks_never_matched": 0, "acks_matched_on_retry": 0}
        for key in list(server.meta):
            if key.startswith(ACK_RETRY_PREFIX):
                self.tries[key] = 0

    def add(self, origin: str, message_id: int, queue: str, reason: int) -> None:
        key = f"{ACK_RETRY_PREFIX}{origin}|{message_id}|{queue}"
        self.server.set_meta(key, str(reason).encode())
        self.tries[key] = 0
        self.stats["ack_retries"] += 1

    def retry_all(self, apply: Callable[[str, int, str, int], bool]) -> None:
        for key in list(self.tries):
            origin, mid, queue = key[len(ACK_RETRY_PREFIX) :].split("|", 2)
            reason = int(self.server.meta.get(key, b"0") or b"0")
            if apply(origin, int(mid), queue, reason):
                self.stats["acks_matched_on_retry"] += 1
                self._drop(key)
                continue
            self.tries[key] += 1
            if self.tries[key] >= self.attempts:
                self.stats["acks_never_matched"] += 1
                log.warning(
                    "mirror: acknowledgement of message %s from %s on queue %s never matched; gave up",
                    mid,
                    origin,
                    queue,
                )
                self._drop(key)

    def _drop(self, key: str) -> None:
        del self.tries[key]
        self.server.meta.pop(key, None)
        self.server.set_meta(key, b"")  # an empty value deletes the key at recovery


class RecentIds:
    """Which ids of one origin were applied: an exact window of the latest, and a floor below it.

    Ids usually arrive in increasing order, but an Artemis source numbers a message when it is sent and
    queues it for the mirror at commit, so a transaction can deliver an older id after newer ones. The
    window (Artemis keeps `amqpCredits` ids; we keep more) recognises those; ids older than the window
    count as seen. After a restart only the persisted highest id is known, so it becomes the floor.
    """

    __slots__ = ("batch", "floor", "high", "ids", "meta_key", "order")

    WINDOW: ClassVar[int] = 20000

    def __init__(self, meta_key: str = "") -> None:
        self.meta_key = meta_key  # where the highest id is persisted
        self.batch = -1  # the journal batch (server.flushes) whose watermark record is already asked for
        self.ids: set[int] = set()
        self.order: deque[int] = deque()  # arrival order: the oldest id is evicted first
        self.floor = 0  # every id at or below this counts as seen
        self.high = 0

    def seen(self, mid: int) -> bool:
        return mid <= self.floor or mid in self.ids

    def watermark(self) -> bytes:
        return str(self.high).encode()

    def add(self, mid: int) -> None:
        if mid in self.ids:
            return
        self.ids.add(mid)
        self.order.append(mid)
        if mid > self.high:
            self.high = mid
        if len(self.order) > self.WINDOW:
            oldest = self.order.popleft()
            self.ids.discard(oldest)
            if oldest > self.floor:
                self.floor = oldest


class MirrorTarget:
    """Everything one broker does as a mirror target (shared by all incoming mirror links)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.retries = AckRetries(server)
        self.stats = {
            "messages": 0,
            "duplicates": 0,
            "events": 0,
            "acks": 0,
            "unknown_events": 0,
            "errors": 0,
        }
        self.dedup: dict[str, RecentIds] = {}
        for key, value in server.meta.items():
            if key.startswith(DEDUP_PREFIX) and value:
                self._recent(key[len(DEDUP_PREFIX) :]).floor = int(value)
        for msg in server.index.by_identity.values():
            if msg.via_mirror and msg.origin_broker_id and msg.origin_message_id is not None:
                self._recent(msg.origin_broker_id).add(msg.origin_message_id)

    def _recent(self, origin: str) -> RecentIds:
        recent = self.dedup.get(origin)
        if recent is None:
            recent = self.dedup[origin] = RecentIds(DEDUP_PREFIX + origin)
        return recent

    def status(self) -> dict[str, Any]:
        return {**self.stats, **self.retries.stats, "pendingAckRetries": len(self.retries.tries)}

    def apply(self, remote_id: str, payload: bytes) -> bool:
        """Apply one delivery from `remote_id`; returns True when it journalled something durable."""
        try:
            delivery = decode.decode_mirror_delivery(payload)
        except decode.MirrorDecodeError as exc:
            self.stats["errors"] += 1
            log.warning("mirror from %s: undecodable delivery dropped: %s", remote_id, exc)
            return False
        cause = Cause.applying(remote_id)
        try:
            if isinstance(delivery, decode.ReplicatedMessage):
                return self._message(remote_id, delivery, cause)
            if isinstance(delivery, decode.ControlEvent):
                self.stats["events"] += 1
                return self._event(remote_id, delivery, cause)
            self.stats["unknown_events"] += 1
            log.warning("mirror from %s: unknown event type %r ignored", remote_id, delivery.event_type)
            return False
        except Exception:
            self.stats["errors"] += 1
            log.exception("mirror from %s: applying a delivery failed; accepted and dropped", remote_id)
            return False

    # -------------------------------------------------------------------------------- messages

    def _message(self, remote_id: str, m: decode.ReplicatedMessage, cause: Cause) -> bool:
        origin = m.broker_id or remote_id
        recent = self.dedup.get(origin) or self._recent(origin)
        if recent.seen(m.mr_id):
            self.stats["duplicates"] += 1
            return False
        recent.add(m.mr_id)
        srv = self.server
        # One watermark record per origin per journal batch; recovery also takes the highest origin id of
        # the live messages, which covers a batch torn between its messages and this record.
        persistence = srv.persistence
        if recent.batch != persistence.flushes:
            recent.batch = persistence.flushes
            persistence.set_meta_at_flush(recent.meta_key, recent.watermark)
        address = m.address
        if address is None:
            log.warning("mirror from %s: message %d has no address; dropped", remote_id, m.mr_id)
            return True
        self.stats["messages"] += 1
        only = list(m.target_queues) if m.target_queues is not None else None
        srv.router.route(
            address,
            m.payload,
            MessageView(m.payload, m.parts, m.expiry, m.header),
            via_mirror=True,
            origin=(origin, m.mr_id),
            only_queues=only,
            cause=cause,
        )
        return True

    # ---------------------------------------------------------------------------------- events

    def _event(self, remote_id: str, ev: decode.ControlEvent, cause: Cause) -> bool:
        srv = self.server
        kind = ev.kind
        if kind == wire.POST_ACK:
            if ev.message_id is None or ev.queue is None:
                log.warning("mirror from %s: postAck without message id or queue ignored", remote_id)
                return False
            self.stats["acks"] += 1
            origin = ev.broker_id or remote_id
            if not self.ack(origin, ev.message_id, ev.queue, ev.reason, cause):
                self.retries.add(origin, ev.message_id, ev.queue, int(ev.reason))
            return True
        if kind == wire.ADD_ADDRESS:
            info = ev.address_info()
            if info.name not in srv.addresses:
                types = {rt.name for rt in info.routing_types} or {MULTICAST}
                srv.ensure_address(info.name, types, auto_created=info.auto_created, cause=cause)
            return True
        if kind == wire.DELETE_ADDRESS:
            name = ev.address_info().name if ev.body else ev.address
            if name and name in srv.addresses:
                srv.delete_address(name, force=True, cause=cause)
            return True
        if kind == wire.CREATE_QUEUE:
            qc = ev.queue_configuration()
            if qc.name not in srv.queues:
                rt = qc.routing_type.name if qc.routing_type is not None else ANYCAST
                try:
                    srv.create_queue(
                        qc.name,
                        qc.effective_address,
                        rt,
                        durable=qc.durable,
                        filter_string=qc.filter_string,
                        max_consumers=qc.max_consumers if qc.max_consumers is not None else -1,
                        auto_created=qc.auto_created,
                        cause=cause,
                    )
                except BrokerError as exc:
                    log.debug("mirror: createQueue %s ignored: %s", qc.name, exc)
            return True
        if kind == wire.DELETE_QUEUE:
            if ev.queue and ev.queue in srv.queues:
                srv.delete_queue(ev.queue, cause)
            return True
        return False

    def ack(self, origin: str, message_id: int, queue_name: str, reason: int, cause: Cause) -> bool:
        srv = self.server
        q = srv.queues.get(queue_name)
        if q is None:
            log.warning(
                "Queue %s not found on mirror target, ignoring ack for message %d", queue_name, message_id
            )
            return True
        ref = srv.index.waiting_ref(q, origin, message_id)
        if ref is not None:
            q.remove(ref)
        else:  # still in a page (a deep backlog here): read back out of order to be acknowledged
            ref = srv.paging.take_unread(q, origin, message_id)
            if ref is None:
                return False
        if reason == AckReason.EXPIRED:
            srv.outcomes.expire(ref, cause)
        else:
            srv.outcomes.acknowledge(ref, reason, via_mirror=True, cause=cause)
        return True

    def retry_acks(self) -> None:
        if not self.retries.tries:
            return

        def apply(origin: str, mid: int, queue: str, reason: int) -> bool:
            return self.ack(origin, mid, queue, reason, ACK_RETRY)

        self.retries.retry_all(apply)
