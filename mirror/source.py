"""The mirror source: broker events -> filter -> store-and-forward queue -> one ordered link.

Every routed message, acknowledgement, address and queue creation or removal becomes an event on the
durable internal queue `$ACTIVEMQ_ARTEMIS_MIRROR_<connection>`; an event leaves that queue only when
the target has Accepted it. A routed message is not copied: the queue gets a reference to the same
stored message, written in the same journal record as the client's send, so the two cannot part.

Loop prevention (spec §3.2): nothing that the broker is applying *from* this mirror's own remote is
sent back to it, and a message never goes back to the broker it originated on. Each event's `Cause`
names the remote whose event the broker was applying when it happened (events.py).

With `sync="true"` the source is a confirmation condition (persistence.py): a local client's send or
acknowledgement is confirmed only once the events it produced were accepted by the target.

Order (docs/mirror.md, "Order on the wire"): events leave in the order they were made, which is message
id order, on every link and after every restart; so an acknowledgement never precedes its message. At
most `max-in-flight-events` events are out at a time, from their sending until their acceptance is on disk
here: after a crash, that is all the target can be sent again, which its duplicate cache must cover.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from broker_core.amqp.codec import enc_long
from broker_core.amqp.performatives import Accepted, Rejected
from broker_core.config.broker_connections import MIRROR_MAX_IN_FLIGHT
from broker_core.events import Cause, Observer
from broker_core.histogram import LATENCY_BOUNDS, Histogram
from broker_core.persistence import Callback
from broker_core.queues import Address, MessageRef, Queue, StoredMessage
from broker_core.usage import MESSAGE_OVERHEAD
from broker_core.vocabulary import ANYCAST, AckReason
from connections.policies import ConnectError, LinkHost, LinkRole
from connections.queue_links import RemoteConsumer
from filters.address_filter import AddressFilter

from . import wire
from .attach import check_target_answer, mirror_source_attach, remote_broker_id
from .json_shapes import AddressInfo, QueueConfiguration
from .json_shapes import RoutingType as JsonRoutingType
from .trust import REMOTE_KEY_PREFIX

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link
    from broker_core.config.model import AmqpConnection, MirrorSettings
    from broker_core.server import Server

log = logging.getLogger("broker.mirror")

_LONG_ZERO = enc_long(0)  # the body value of a postAck for id 0, cut off to make the reusable prefix

INITIAL_SYNC = "initial-sync"  # <mirror><property key="initial-sync" value="true"/></mirror>
# <mirror><property key="max-in-flight-events" value="1000"/></mirror>: events sent and not yet known
# accepted on disk here. After a crash the target may be sent all of them again, and must recognise the
# messages among them as duplicates: Artemis's duplicate cache per origin is `amqpCredits` (1,000) ids deep.
MAX_IN_FLIGHT = MIRROR_MAX_IN_FLIGHT
DEFAULT_MAX_IN_FLIGHT = 1000
# A postAck event's type right after its annotation key (sym8 "postAck"), within its first bytes: what
# tells an acknowledgement from a topology event on the way out, without decoding it
_POST_ACK_MARK = b"\xa3\x07postAck"
_MARK_WITHIN = 64


class MirrorConsumer(RemoteConsumer):
    """Feeds the store-and-forward queue to the mirror link, adding the mirror's annotations."""

    __slots__ = ("source",)

    def __init__(self, source: MirrorSource, host: LinkHost, link: Link, queue: Queue) -> None:
        super().__init__(host, link, queue)
        self.source = source

    def can_take(self) -> bool:
        source = self.source
        return source.in_flight() < source.max_in_flight and super().can_take()

    def payload(self, ref: MessageRef) -> bytes:
        source, msg = self.source, ref.message
        stats = source.stats
        stats["events_sent"] += 1
        if msg.address != source.snf:
            stats["messages_sent"] += 1
        elif msg.payload.find(_POST_ACK_MARK, 0, _MARK_WITHIN) >= 0:
            stats["acks_sent"] += 1
        return source.wire_payload(msg)


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
        self.max_in_flight = _max_in_flight(settings.properties.get(MAX_IN_FLIGHT))
        self._unjournalled = 0  # events accepted by the target, their leaving not yet on disk here
        self.installed = False
        self._unconfirmed: set[int] = set()  # sync: events of local clients' work, not yet waited for
        self._sync_waiters: dict[int, _Countdown] = {}
        self._settled: list[MessageRef] = []  # accepted or rejected, until the disposition is done
        self._post_ack_prefixes: dict[tuple[str, str, str | None, int], bytes] = {}
        self._excluded_cache: dict[str, bool] = {}
        # events queued by kind: messages (routed sends), acks (postAck), topology (address and queue
        # creations and removals); `events_queued` is their sum
        # events sent likewise (`events_sent` minus messages and acks: topology); what the target settled
        # them with; and the events the address filter (or the mirror's own exclusions) kept back
        self.stats = {
            "events_sent": 0,
            "events_accepted": 0,
            "events_queued": 0,
            "messages_queued": 0,
            "acks_queued": 0,
            "topology_queued": 0,
            "messages_sent": 0,
            "acks_sent": 0,
            "events_rejected": 0,
            "events_released": 0,
            "events_filtered": 0,
        }
        self.last_accepted = 0.0  # when the target last accepted an event (epoch seconds)
        self.latency = Histogram(LATENCY_BOUNDS)  # seconds from an event's making to its Accepted
        self.sync_wait = Histogram(LATENCY_BOUNDS)  # seconds a sync mirror held a confirmation back
        self._remote_key = f"{REMOTE_KEY_PREFIX}{self.name}"
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
        srv.add_observer(self)
        if self.settings.sync:
            srv.persistence.add_condition(self)
        self.installed = True
        if self.settings.queue_creation:
            for addr in list(srv.addresses.values()):
                self.address_added(addr, None)
            for queue in list(srv.queues.values()):
                self.queue_added(queue, None)
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
            for ref in q.refs():
                identity = srv.identity_of(ref.message)
                if identity not in seen:
                    seen.add(identity)
                    backlog.append(ref.message)
        backlog.sort(key=lambda m: m.mirror_id)
        for msg in backlog:
            copy = (msg.origin_broker_id, msg.mirror_id)  # keeps its identity: later acks match it
            srv.router.enqueue_internal(self.queue, msg.payload, address=msg.address, origin=copy)
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

    def _from_remote(self, cause: Cause | None) -> bool:
        """Whether the work comes from this mirror's remote (or any remote, before we know ours), or is
        broker work no mirror may copy: then it must not be sent."""
        if cause is None:
            return False
        applying = cause.remote_id
        if applying is None:
            return True
        remote = self.remote_id
        return remote is None or applying == remote

    def _queue_skipped(self, q: Queue) -> bool:
        return q.internal or q.temporary or q.name.startswith(wire.MIRROR_ADDRESS_PREFIX)

    def _event(self, payload: bytes, cause: Cause | None, kind: str = "topology_queued") -> None:
        assert self.queue is not None
        msg = self.server.router.enqueue_internal(self.queue, payload)
        self.stats["events_queued"] += 1
        self.stats[kind] += 1
        if cause is None and self.settings.sync:
            self._unconfirmed.add(msg.id)

    def wait(self, release: Callback) -> bool:
        """The confirmation condition of a sync mirror: the events local clients' work produced since the
        last call must be accepted by the target first."""
        if not self._unconfirmed:
            return False
        events, self._unconfirmed = self._unconfirmed, set()
        countdown = _Countdown(len(events), release, self.sync_wait)
        for message_id in events:
            self._sync_waiters[message_id] = countdown
        return True

    # ------------------------------------------------------------------------------- observer

    def address_added(self, address: Address, cause: Cause | None) -> None:
        if (
            not self.settings.queue_creation
            or cause is not None
            or address.internal
            or address.temporary
            or self._excluded(address.name)
        ):
            return
        self._event(wire.add_address_event(_address_info(address)), cause)

    def address_removed(self, address: Address, cause: Cause | None) -> None:
        if (
            not self.settings.queue_removal
            or self._from_remote(cause)
            or address.internal
            or address.temporary
            or self._excluded(address.name)
        ):
            return
        self._event(wire.delete_address_event(_address_info(address)), cause)

    def queue_added(self, queue: Queue, cause: Cause | None) -> None:
        if (
            not self.settings.queue_creation
            or self._from_remote(cause)
            or self._queue_skipped(queue)
            or self._excluded(queue.address)
        ):
            return
        self._event(wire.create_queue_event(_queue_config(queue)), cause)

    def queue_removed(self, queue: Queue, cause: Cause | None) -> None:
        if (
            not self.settings.queue_removal
            or self._from_remote(cause)
            or self._queue_skipped(queue)
            or self._excluded(queue.address)
        ):
            return
        self._event(wire.delete_queue_event(queue.address, queue.name), cause)

    def queues_to_join(self, message: StoredMessage, queues: list[Queue], cause: Cause | None) -> list[Queue]:
        """The store-and-forward queue joins a routed message: the same stored message, the same record."""
        if self._from_remote(cause):
            return []
        remote = self.remote_id
        if remote is not None and message.origin_broker_id == remote:
            return []
        if self._excluded(message.address):
            self.stats["events_filtered"] += 1
            return []
        for q in queues:
            if not self._queue_skipped(q):
                break
        else:
            return []
        assert self.queue is not None
        self.stats["events_queued"] += 1
        self.stats["messages_queued"] += 1
        if cause is None and self.settings.sync:
            self._unconfirmed.add(message.id)
        return [self.queue]

    def message_acked(self, ref: MessageRef, reason: int, cause: Cause | None) -> None:
        q = ref.queue
        if q is self.queue:  # an event left the store-and-forward queue
            return
        if (
            not self.settings.message_acknowledgements
            or reason == AckReason.REPLACED
            or self._from_remote(cause)
            or self._queue_skipped(q)
        ):
            return
        if self._excluded(q.address):
            self.stats["events_filtered"] += 1
            return
        msg = ref.message
        key = (q.address, q.name, msg.origin_broker_id, reason)
        prefix = self._post_ack_prefixes.get(key)
        if prefix is None:  # everything but the id is the same for every ack on this queue: encode it once
            sample = wire.post_ack_event(q.address, q.name, 0, msg.origin_broker_id, reason)
            prefix = sample[: -len(_LONG_ZERO)]
            if len(self._post_ack_prefixes) > 10000:
                self._post_ack_prefixes.clear()
            self._post_ack_prefixes[key] = prefix
        self._event(prefix + enc_long(msg.mirror_id), cause, "acks_queued")

    # ---------------------------------------------------------------------------- wire payload

    def wire_payload(self, msg: StoredMessage) -> bytes:
        if msg.address == self.snf:
            return msg.payload  # a control event, already in its wire form
        return wire.replicate(msg.payload, msg.mirror_id, msg.origin_broker_id, msg.address)

    # ----------------------------------------------------------------------------- link policy

    def pending(self) -> int:
        return self._pending

    def in_flight(self) -> int:
        """Events sent and not yet accepted, or accepted with their leaving not yet on disk here: after a
        crash now, what the target could be sent again (it has them, or may have)."""
        consumer = self.consumer
        out = len(consumer.inflight) if consumer is not None else 0
        return out + len(self._settled) + self._unjournalled

    def attach_all(self, conn: LinkHost) -> None:
        self.install()
        attach = mirror_source_attach(self.name, self.server.node_id, str(uuid.uuid4()))
        conn.attach(attach, LinkRole(self, self.queue))
        self._pending = 1

    def local_queue_added(self, conn: LinkHost, queue: Queue) -> None:
        pass  # queues reach the target as createQueue events, not as links

    def remote_attached(self, conn: LinkHost, link: Link) -> None:
        self._pending = 0
        answer = link.remote_attach
        assert answer is not None and self.queue is not None
        problem = check_target_answer(answer, self.server.node_id, address=self.snf)
        if problem is not None:
            raise ConnectError(problem)
        remote = str(remote_broker_id(answer))
        if remote != self.remote_id:
            self.server.set_meta(f"{REMOTE_KEY_PREFIX}{self.name}", remote.encode())
            log.info("mirror %s: target broker id %s", self.name, remote)
        consumer = MirrorConsumer(self, conn, link, self.queue)
        link.context.state = consumer
        self.consumer = consumer
        self.queue.add_consumer(consumer)
        self.queue.dispatch()

    def on_flow(self, conn: LinkHost, link: Link) -> None:
        if self.queue is not None and self.consumer is not None:
            self.queue.dispatch()

    def on_delivery(
        self, conn: LinkHost, link: Link, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        pass  # the mirror link only sends

    def on_outcome(self, conn: LinkHost, link: Link, context: Any, state: Any) -> None:
        consumer = self.consumer
        if consumer is None or not isinstance(context, MessageRef):
            return
        if consumer.inflight.pop(id(context), None) is None or context.consumer is None:
            return
        if state is not None and not isinstance(state, (Accepted, Rejected)):
            self.stats["events_released"] += 1
            self.server.outcomes.release(context, delivery_failed=False)  # released/modified: send it again
            return
        if isinstance(state, Rejected):
            self.stats["events_rejected"] += 1
            why = state.error.description if state.error else "no reason"
            log.warning(
                "mirror %s: target rejected event %d (%s); dropped", self.name, context.message.id, why
            )
        else:
            self.stats["events_accepted"] += 1
            now = self.last_accepted = time.time()
            self.latency.observe(now - context.message.timestamp_ms / 1000)
        self._settled.append(context)

    def outcomes_done(self, conn: LinkHost) -> None:
        """The events settled by one disposition leave the queue together: one journal record."""
        settled, self._settled = self._settled, []
        if not settled or self.queue is None:
            return
        self.server.outcomes.acknowledge_many(self.queue, settled)
        # they count as in flight until that record is on disk: a crash before would send them again
        done = len(settled)
        self._unjournalled += done
        self.server.persistence.after_durable(lambda: self._journalled(done))
        if self.settings.sync:
            waiters, unconfirmed = self._sync_waiters, self._unconfirmed
            for ref in settled:
                countdown = waiters.pop(ref.message.id, None)
                if countdown is not None:
                    countdown.one_done()
                else:  # accepted before any confirmation waited for it (work that confirms nothing)
                    unconfirmed.discard(ref.message.id)

    def _journalled(self, done: int) -> None:
        self._unjournalled -= done
        if self.queue is not None and self.consumer is not None:
            self.queue.dispatch()  # room in the window again

    def detached_all(self, conn: LinkHost) -> None:
        self._pending = 0
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            consumer.give_back()

    # ---------------------------------------------------------------------------------- status

    def pending_events(self) -> tuple[int, int]:
        """The events not yet accepted by the target (from their routing on, waiting for their journal
        batch, in memory, in page files or out on the link) and the bytes of their bodies: what the
        store-and-forward address holds, as its memory usage counts it, plus what its pages hold."""
        q = self.queue
        if q is None:
            return 0, 0
        usage = q.usage  # the address's: the store-and-forward queue is its only queue
        in_memory = usage.bytes - MESSAGE_OVERHEAD * usage.messages  # each counts its size plus that
        return usage.messages + q.paged, in_memory + self.server.paging.paged_bytes(q)

    def status(self) -> dict[str, Any]:
        q = self.queue
        pending, pending_bytes = self.pending_events()
        # the oldest event not yet accepted: the head of the queue, or one already out on the link
        head = q.head() if q is not None else None
        heads = [head] if head is not None else []
        if self.consumer is not None and self.consumer.inflight:
            heads.append(next(iter(self.consumer.inflight.values())))
        oldest = min((r.message.timestamp_ms for r in heads), default=None)
        return {
            "name": self.name,
            "queue": self.snf,
            "remoteBrokerId": self.remote_id,
            "pendingEvents": pending,
            "pendingBytes": pending_bytes,
            "oldestPendingAgeMs": int(time.time() * 1000) - oldest if oldest else 0,
            "eventsQueued": self.stats["events_queued"],
            "eventsQueuedByKind": {
                "messages": self.stats["messages_queued"],
                "acks": self.stats["acks_queued"],
                "topology": self.stats["topology_queued"],
            },
            "eventsSent": self.stats["events_sent"],
            "eventsAccepted": self.stats["events_accepted"],
            "eventsRejected": self.stats["events_rejected"],
            "eventsReleased": self.stats["events_released"],
            "eventsFiltered": self.stats["events_filtered"],
            "lastAcceptedAt": int(self.last_accepted * 1000),  # epoch ms, 0: never
        }


def _max_in_flight(value: str | None) -> int:
    """The property's value, checked by the configuration's reader (a whole number, at least 1)."""
    return DEFAULT_MAX_IN_FLIGHT if value is None else max(1, int(value))


class _Countdown:
    """Releases a confirmation once each of its events was accepted, and says how long that took."""

    __slots__ = ("left", "release", "started", "waits")

    def __init__(self, left: int, release: Callback, waits: Histogram) -> None:
        self.left = left
        self.release = release
        self.waits = waits
        self.started = time.perf_counter()

    def one_done(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.waits.observe(time.perf_counter() - self.started)
            self.release()


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
