"""The mirror source: broker events -> filter -> store-and-forward queue -> one ordered link.

Every routed message, acknowledgement, address and queue creation or removal becomes an event on the
durable internal queue `$ACTIVEMQ_ARTEMIS_MIRROR_<connection>`; an event leaves that queue only when
the target has Accepted it. A routed message is not copied: the queue gets a reference to the same
stored message, written in the same journal record as the client's send, so the two cannot part.

Loop prevention (spec §3.2): nothing that the broker is applying *from* this mirror's own remote is
sent back to it, and a message never goes back to the broker it originated on. `server.mirror_context`
names the remote whose event is being applied while a target applies it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_core.amqp.codec import enc_long
from broker_core.amqp.performatives import Accepted, Rejected
from broker_core.queues import MessageRef, Queue, StoredMessage
from broker_core.server import ACK_REPLACED, ANYCAST, NO_MIRROR, Address, Observer
from connections.policies import ConnectError, LinkRole
from connections.queue_links import RemoteConsumer
from filters.address_filter import AddressFilter

from . import wire
from .attach import check_target_answer, mirror_source_attach, remote_broker_id
from .json_shapes import AddressInfo, QueueConfiguration
from .json_shapes import RoutingType as JsonRoutingType
from .target import ACK_RETRY_CONTEXT

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link
    from broker_core.config.model import AmqpConnection, MirrorSettings
    from broker_core.server import Server
    from connections.outbound import OutboundConnection

log = logging.getLogger("broker.mirror")

_LONG_ZERO = enc_long(0)  # the body value of a postAck for id 0, cut off to make the reusable prefix

INITIAL_SYNC = "initial-sync"  # <mirror><property key="initial-sync" value="true"/></mirror>


class MirrorConsumer(RemoteConsumer):
    """Feeds the store-and-forward queue to the mirror link, adding the mirror's annotations."""

    __slots__ = ("source",)

    def __init__(self, source: MirrorSource, conn: OutboundConnection, link: Link, queue: Queue) -> None:
        super().__init__(conn, link, queue)
        self.source = source

    def payload(self, ref: MessageRef) -> bytes:
        self.source.stats["events_sent"] += 1
        return self.source.wire_payload(ref.message)


class MirrorSource(Observer):
    """One `<mirror>` of one broker connection: an observer of the server and a link policy."""

    def __init__(self, server: Server, connection: AmqpConnection, settings: MirrorSettings) -> None:
        self.server = server
        self.name = connection.name
        self.settings = settings
        self.snf = wire.snf_name(connection.name)
        self.filter = AddressFilter.parse(settings.address_filter)
        self.queue: Queue | None = None
        self.consumer: MirrorConsumer | None = None
        self._pending = 0
        self._pending_bytes = 0  # of the events on the store-and-forward queue: kept, not summed per call
        self.installed = False
        self._sync_waiters: dict[int, Callable[[], None]] = {}
        self._settled: list[MessageRef] = []  # accepted or rejected, until the disposition is done
        self._post_ack_prefixes: dict[tuple[str, str, str | None, int], bytes] = {}
        self._excluded_cache: dict[str, bool] = {}
        self.stats = {"events_sent": 0, "events_accepted": 0, "events_queued": 0}
        self.last_accepted = 0.0  # when the target last accepted an event (epoch seconds)
        self._remote_key = f"mirror.remote.{self.name}"
        self._remote_raw: bytes | None = None
        self._remote: str | None = None

    @property
    def remote_id(self) -> str | None:
        """The target's broker id, as learnt at its last attach (persisted: loops are cut after a restart)."""
        value = self.server.meta.get(self._remote_key)
        if value is not self._remote_raw:  # read on every routed message: decode only when it changed
            self._remote_raw = value
            self._remote = value.decode() if value else None
        return self._remote

    # ------------------------------------------------------------------------------- install

    def install(self) -> None:
        """Create the store-and-forward queue, start observing, announce the existing topology."""
        if self.installed:
            return
        srv = self.server
        q = srv.queues.get(self.snf)
        if q is None:
            q = srv.create_queue(self.snf, self.snf, ANYCAST, durable=self.settings.durable, internal=True)
        q.internal = True
        q.after_durable = True
        self.queue = q
        self._pending_bytes = sum(len(r.message.payload) for r in q.messages)  # recovered events
        srv.add_observer(self)
        if self.settings.sync:
            srv.sync_mirrors += 1
        self.installed = True
        if self.settings.queue_creation:
            for addr in list(srv.addresses.values()):
                self.address_added(addr)
            for queue in list(srv.queues.values()):
                self.queue_added(queue)
        if self.settings.properties.get(INITIAL_SYNC, "false").lower() == "true":
            self._initial_sync()
        log.info(
            "mirror %s installed: store-and-forward queue %s holds %d events", self.name, self.snf, q.depth
        )

    def _initial_sync(self) -> None:
        """Opt-in: send the messages that existed before this mirror, once, oldest first.

        Artemis mirrors only routings after the mirror is installed; operators adding a mirror to a
        broker with a backlog ask for the backlog too. Each waiting message is queued as a copy that
        keeps its identity, so the target stores it under the same (origin, id) and later acks match.
        A target that already received newer messages from this broker drops these as duplicates.
        """
        srv, done_key = self.server, f"mirror.initial-sync.{self.name}"
        if srv.meta.get(done_key):
            return
        assert self.queue is not None
        seen: set[tuple[str, int]] = set()
        backlog = []
        for q in list(srv.queues.values()):
            if self._queue_skipped(q) or self._excluded(q.address):
                continue
            for ref in q.messages:
                identity = srv.identity_of(ref.message)
                if identity not in seen:
                    seen.add(identity)
                    backlog.append(ref.message)
        backlog.sort(key=lambda m: m.origin_message_id if m.origin_message_id is not None else m.id)
        for msg in backlog:
            mid = msg.origin_message_id if msg.origin_message_id is not None else msg.id
            srv.enqueue_copy(self.queue, msg, origin=(msg.origin_broker_id, mid))
            self._pending_bytes += len(msg.payload)
        srv.set_meta(done_key, b"1")
        log.info("mirror %s: initial sync queued %d existing messages", self.name, len(backlog))

    # ---------------------------------------------------------------------------------- rules

    def _excluded(self, address: str) -> bool:
        # Asked for every routed message and ack; the answer per address never changes.
        excluded = self._excluded_cache.get(address)
        if excluded is None:
            excluded = (
                address.startswith(wire.MIRROR_ADDRESS_PREFIX)
                or address.startswith(self.server.config.management_address)
                or not self.filter.matches(address)
            )
            if len(self._excluded_cache) >= 10000:
                self._excluded_cache.clear()
            self._excluded_cache[address] = excluded
        return excluded

    def _from_remote(self) -> bool:
        """True while applying an event that came from this mirror's remote (or any, before we know it)."""
        ctx = self.server.mirror_context
        if ctx is None:
            return False
        if ctx in (ACK_RETRY_CONTEXT, NO_MIRROR):
            return True
        remote = self.remote_id
        return remote is None or ctx == remote

    def _queue_skipped(self, q: Queue) -> bool:
        return q.internal or q.temporary or q.name.startswith(wire.MIRROR_ADDRESS_PREFIX)

    def _event(self, payload: bytes) -> None:
        assert self.queue is not None
        msg = self.server.enqueue_internal(self.queue, payload, durable=True)
        self.stats["events_queued"] += 1
        self._pending_bytes += len(payload)
        self._capture(msg.id)

    def _capture(self, message_id: int) -> None:
        """With sync="true", the client's operation waits for this event to be accepted remotely."""
        capture = self.server.mirror_capture
        if self.settings.sync and capture is not None:
            capture.append((self, message_id))

    def wait_for(self, message_id: int, callback: Callable[[], None]) -> None:
        self._sync_waiters[message_id] = callback

    # ------------------------------------------------------------------------------- observer

    def address_added(self, address: Address) -> None:
        if (
            not self.settings.queue_creation
            or self.server.mirror_context is not None
            or address.internal
            or address.temporary
            or self._excluded(address.name)
        ):
            return
        self._event(wire.add_address(_address_info(address)))

    def address_removed(self, address: Address) -> None:
        if (
            not self.settings.queue_removal
            or self._from_remote()
            or address.internal
            or address.temporary
            or self._excluded(address.name)
        ):
            return
        self._event(wire.delete_address(_address_info(address)))

    def queue_added(self, queue: Queue) -> None:
        if (
            not self.settings.queue_creation
            or self._from_remote()
            or self._queue_skipped(queue)
            or self._excluded(queue.address)
        ):
            return
        self._event(wire.create_queue(_queue_config(queue)))

    def queue_removed(self, queue: Queue) -> None:
        if (
            not self.settings.queue_removal
            or self._from_remote()
            or self._queue_skipped(queue)
            or self._excluded(queue.address)
        ):
            return
        self._event(wire.delete_queue(queue.address, queue.name))

    def extra_queues(self, message: StoredMessage, queues: list[Queue]) -> list[Queue]:
        if self._from_remote():
            return []
        remote = self.remote_id
        if remote is not None and message.origin_broker_id == remote:
            return []
        if self._excluded(message.address):
            return []
        for q in queues:
            if not self._queue_skipped(q):
                break
        else:
            return []
        assert self.queue is not None
        self.stats["events_queued"] += 1
        self._pending_bytes += len(message.payload)
        self._capture(message.id)
        return [self.queue]

    def message_acked(self, ref: MessageRef, reason: int) -> None:
        q = ref.queue
        if q is self.queue:  # an event left the store-and-forward queue (the only way one leaves)
            self._pending_bytes -= len(ref.message.payload)
            return
        if (
            not self.settings.message_acknowledgements
            or reason == ACK_REPLACED
            or self._from_remote()
            or self._queue_skipped(q)
            or self._excluded(q.address)
        ):
            return
        msg = ref.message
        mid = msg.origin_message_id if msg.origin_message_id is not None else msg.id
        key = (q.address, q.name, msg.origin_broker_id, reason)
        prefix = self._post_ack_prefixes.get(key)
        if prefix is None:  # everything but the id is the same for every ack on this queue: encode it once
            sample = wire.post_ack(q.address, q.name, 0, msg.origin_broker_id, wire.AckReason(reason))
            prefix = sample[: -len(_LONG_ZERO)]
            if len(self._post_ack_prefixes) > 10000:
                self._post_ack_prefixes.clear()
            self._post_ack_prefixes[key] = prefix
        self._event(prefix + enc_long(mid))

    # ---------------------------------------------------------------------------- wire payload

    def wire_payload(self, msg: StoredMessage) -> bytes:
        if msg.address == self.snf:
            return msg.payload  # a control event, already in its wire form
        mid = msg.origin_message_id if msg.origin_message_id is not None else msg.id
        return wire.replicate(msg.payload, mid, msg.origin_broker_id, msg.address)

    # ----------------------------------------------------------------------------- link policy

    def pending(self) -> int:
        return self._pending

    def attach_all(self, conn: OutboundConnection) -> None:
        self.install()
        attach = mirror_source_attach(self.name, self.server.node_id, str(uuid.uuid4()))
        conn.attach(attach, LinkRole(self, self.queue))
        self._pending = 1

    def local_queue_added(self, conn: OutboundConnection, queue: Queue) -> None:
        pass  # queues reach the target as createQueue events, not as links

    def remote_attached(self, conn: OutboundConnection, link: Link) -> None:
        self._pending = 0
        answer = link.remote_attach
        assert answer is not None and self.queue is not None
        problem = check_target_answer(answer, self.server.node_id, address=self.snf)
        if problem is not None:
            raise ConnectError(problem)
        remote = str(remote_broker_id(answer))
        if remote != self.remote_id:
            self.server.set_meta(f"mirror.remote.{self.name}", remote.encode())
            log.info("mirror %s: target broker id %s", self.name, remote)
        consumer = MirrorConsumer(self, conn, link, self.queue)
        link.context.state = consumer
        self.consumer = consumer
        self.queue.add_consumer(consumer)
        self.queue.dispatch()

    def on_flow(self, conn: OutboundConnection, link: Link) -> None:
        if self.queue is not None and self.consumer is not None:
            self.queue.dispatch()

    def on_delivery(
        self, conn: OutboundConnection, link: Link, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        pass  # the mirror link only sends

    def on_outcome(self, conn: OutboundConnection, link: Link, context: Any, state: Any) -> None:
        consumer = self.consumer
        if consumer is None or not isinstance(context, MessageRef):
            return
        if consumer.inflight.pop(id(context), None) is None or context.consumer is None:
            return
        if state is not None and not isinstance(state, (Accepted, Rejected)):
            self.server.release(context, delivery_failed=False)  # released/modified: send it again
            return
        if isinstance(state, Rejected):
            why = state.error.description if state.error else "no reason"
            log.warning(
                "mirror %s: target rejected event %d (%s); dropped", self.name, context.message.id, why
            )
        else:
            self.stats["events_accepted"] += 1
            self.last_accepted = time.time()
        self._settled.append(context)

    def outcomes_done(self, conn: OutboundConnection) -> None:
        """The events settled by one disposition leave the queue together: one journal record."""
        settled, self._settled = self._settled, []
        if not settled or self.queue is None:
            return
        self.server.acknowledge_many(self.queue, settled)
        waiters = self._sync_waiters
        if waiters:
            for ref in settled:
                waiter = waiters.pop(ref.message.id, None)
                if waiter is not None:
                    waiter()

    def detached_all(self, conn: OutboundConnection) -> None:
        self._pending = 0
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            consumer.give_back()

    # ---------------------------------------------------------------------------------- status

    def status(self) -> dict[str, Any]:
        q = self.queue
        pending = q.depth if q is not None else 0
        # the oldest event not yet accepted: the head of the queue, or one already out on the link
        heads = [q.messages[0]] if q is not None and q.messages else []
        if self.consumer is not None and self.consumer.inflight:
            heads.append(next(iter(self.consumer.inflight.values())))
        oldest = min((r.message.timestamp_ms for r in heads), default=None)
        return {
            "name": self.name,
            "queue": self.snf,
            "remoteBrokerId": self.remote_id,
            "pendingEvents": pending,
            "pendingBytes": self._pending_bytes,
            "oldestPendingAgeMs": int(time.time() * 1000) - oldest if oldest else 0,
            "eventsQueued": self.stats["events_queued"],
            "eventsSent": self.stats["events_sent"],
            "eventsAccepted": self.stats["events_accepted"],
            "lastAcceptedAt": int(self.last_accepted * 1000),  # epoch ms, 0: never
        }


def _address_info(address: Address) -> AddressInfo:
    types = tuple(JsonRoutingType[rt] for rt in sorted(address.routing_types))
    return AddressInfo(
        name=address.name,
        routing_types=types,
        auto_created=address.auto_created,
        internal=address.internal,
        id=address.id,
    )


def _queue_config(q: Queue) -> QueueConfiguration:
    return QueueConfiguration(
        name=q.name,
        id=q.id,
        address=q.address,
        routing_type=JsonRoutingType[q.routing_type],
        filter_string=q.filter_string,
        durable=q.durable,
        max_consumers=q.max_consumers,
        purge_on_no_consumers=q.purge_on_no_consumers,
        auto_created=q.auto_created,
        internal=q.internal,
    )
