"""Scale-down's receiving end, and the pure decisions of its sending end (amqp_mirror/scale_down.py).

A server scaling down sends each of its queues on one link, as the cluster user, to `SCALE_DOWN_ADDRESS`
of the member it chose; the attach names the queue (name, address, routing type, durability) and the
member creates it if missing. Each delivery is one message of that queue, as the queue would deliver it
(its header's delivery count, its annotations and properties), with a delivery annotation carrying its
*scale-down id*: stable for that message of that server (its node id and message id), so a scale-down
cut short and run again stores nothing twice. The member remembers each id in the duplicate-id cache of
the queue (`address::queue`: two subscriptions of one address each take their copy) and the message's own
`_AMQ_DUPL_ID` in the address's, as a client's send would (a client redirected here that sends again is
deduplicated). A message is Accepted once it is durable here; only then does the sender remove it.

Artemis's own scale-down (ScaleDownHandler) sends copies routed to the target's queue ids, removes them
in one transaction per address, and sends the duplicate-id caches afterwards; a retry after a crash may
store a message twice there. Here each message carries its id, and a retry stores nothing twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from broker_core.amqp.codec import Symbol, encode
from broker_core.duplicates import duplicate_id
from broker_core.errors import BrokerError, InvalidField, NotAllowed, Unauthorized
from broker_core.message import DELIVERY_ANNOTATIONS, MessageView
from broker_core.queues import Queue
from broker_core.services import Answer
from broker_core.vocabulary import ANYCAST, MULTICAST

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link
    from broker_core.amqp.performatives import Attach
    from broker_core.server import Server
    from broker_core.services import Peer

log = logging.getLogger("broker.ha")

SCALE_DOWN_ADDRESS = "$amqp-mirror.scale-down"
QUEUE = Symbol("queue")
ADDRESS = Symbol("address")
ROUTING_TYPE = Symbol("routing-type")
DURABLE = Symbol("durable")
SCALE_DOWN_ID = Symbol("x-opt-amq-scale-down-id")  # a delivery annotation: for the next hop only
CREDIT_WINDOW = 1000


# ------------------------------------------------------------------------------- the sender's decisions


class Member(NamedTuple):
    """A member that answered: its node id, the group it announces, where the sender reached it."""

    node_id: str
    group_name: str | None
    host: str
    port: int


def choose_target(
    members: Sequence[Member | None], own_node_id: str, group_name: str | None
) -> Member | None:
    """The member to scale down to: the first, in the order of the connectors, that is active (answered)
    with another node id than ours and, when we have a group, announces the same group (Artemis: any
    active member without a group name, else a member of that group)."""
    for member in members:
        if member is None or member.node_id == own_node_id:
            continue
        if group_name is None or member.group_name == group_name:
            return member
    return None


def scale_down_id(node_id: str, message_id: int) -> bytes:
    """The stable id of one message of one server: the same whenever its scale-down runs again."""
    return hashlib.sha256(f"{node_id}:{message_id}".encode()).digest()[:20]


def with_scale_down_id(payload: bytes, scale_id: bytes) -> bytes:
    """The message with its scale-down id as its delivery annotations (any others are the last hop's)."""
    section = b"\x00\x53\x71" + encode({SCALE_DOWN_ID: scale_id})
    return MessageView(payload).without_delivery_annotations(section)


def queue_properties(queue: Queue) -> dict[Symbol, object]:
    return {
        QUEUE: queue.name,
        ADDRESS: queue.address,
        ROUTING_TYPE: queue.routing_type,
        DURABLE: queue.durable,
    }


# ------------------------------------------------------------------------------- the receiving end


class ScaleDownService:
    """Answers a scaling-down member's queue links and stores what they bring (a `LinkService`)."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def attach(self, peer: Peer, link: Link, attach: Attach, address: str) -> Answer:
        if not peer.cluster_member:
            raise Unauthorized("scale-down needs the cluster user and password")
        queue = self._queue(attach.properties or {})
        log.info(
            "%s: %s scales queue %s (%s, address %s) down to this server",
            self.server.name,
            peer.name,
            queue.name,
            queue.routing_type,
            queue.address,
        )
        return Answer(None, queue, CREDIT_WINDOW)

    def _queue(self, properties: Mapping[object, object]) -> Queue:
        """The queue the attach names, created as it is on the sender when it is not here."""
        name, address = properties.get(QUEUE), properties.get(ADDRESS)
        routing_type, durable = properties.get(ROUTING_TYPE), properties.get(DURABLE)
        if (
            not isinstance(name, str)
            or not isinstance(address, str)
            or routing_type not in (ANYCAST, MULTICAST)
        ):
            raise InvalidField("a scale-down link names its queue, address and routing type")
        server = self.server
        queue = server.queues.get(name)
        if queue is None:
            server.ensure_address(address, {str(routing_type)}, auto_created=False)
            return server.create_queue(name, address, str(routing_type), durable=durable is not False)
        if queue.address != address or queue.routing_type != routing_type or queue.internal:
            raise NotAllowed(
                f"queue {name} here is on address {queue.address} ({queue.routing_type}), not {address} "
                f"({routing_type})"
            )
        return queue

    def on_delivery(
        self, peer: Peer, link: Link, state: object, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        session = link.session
        queue = state
        if not isinstance(queue, Queue):
            peer.reject(session, delivery_id, settled, InvalidField("a scale-down message needs its link"))
            return
        try:
            stored = self._store(queue, payload)
        except BrokerError as exc:
            peer.reject(session, delivery_id, settled, exc)
            return

        def accept() -> None:
            if not settled and not peer.closed:
                peer.accept_later(session, delivery_id)

        if stored:
            self.server.persistence.confirm(accept)  # Accepted once durable (and the repeat's original)
        else:
            accept()

    def _store(self, queue: Queue, payload: bytes) -> bool:
        """Store one message in `queue`, once per scale-down id; whether its Accepted waits for the journal
        (a durable message, or a repeat: its original may not be on disk yet)."""
        view = MessageView(payload)
        scale_id = view.section_map(DELIVERY_ANNOTATIONS).get(SCALE_DOWN_ID)
        if not isinstance(scale_id, bytes):
            raise InvalidField("a scale-down message carries its scale-down id")
        server = self.server
        duplicates = server.duplicates
        fqqn = f"{queue.address}::{queue.name}"
        if duplicates.seen(fqqn, scale_id):
            return True  # stored by an earlier run of this scale-down
        body = view.without_delivery_annotations()
        body_view = MessageView(body)
        msg = server.route(
            queue.address,
            body,
            body_view,
            only_queues=[queue.name],
            delivery_count=view.header.delivery_count,
        )
        if msg is None:
            raise NotAllowed(f"queue {queue.name} took no message")
        duplicates.remember(fqqn, scale_id, msg.id)
        own = duplicate_id(body_view)
        if own is not None:
            duplicates.remember(queue.address, own, msg.id)
        server.stats.messages_scaled_in += 1
        return msg.durable
