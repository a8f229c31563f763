"""`<sender>`, `<receiver>` and `<peer>`: links between matching local queues and the remote.

Matching is per local queue (spec §6): `queue-name` is exact equality with the queue's name; otherwise
`address-match` (broker wildcards) against the queue's *address*. Re-evaluated when queues are created.

- sender: consume the local queue, send to the remote address (= the queue's address); the local ack
  happens only on the remote's Accepted; Released redelivers, Rejected dead-letters, Modified per flags.
- receiver: receive from the remote address and route into the local address; Accepted once routed
  (and durable).
- peer: both, with the `qd.waypoint` capability on the remote terminus (a Qpid Dispatch waypoint).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from broker_core.amqp import errors
from broker_core.amqp.codec import DecodeError, Symbol
from broker_core.amqp.performatives import (
    ACCEPTED_BYTES,
    Attach,
    Error,
    Rejected,
    Source,
    Target,
)
from broker_core.config.model import LinkKind, LinkSettings
from broker_core.message import MessageView
from broker_core.queues import MessageRef, Queue, delivery_payload
from filters.wildcard import matcher_for

from .policies import LinkHost, LinkRole

if TYPE_CHECKING:
    from broker_core.amqp.connection import Connection, Link
    from broker_core.server import Server

log = logging.getLogger("broker.connections")

WAYPOINT = Symbol("qd.waypoint")
CREDIT_WINDOW = 1000
CREDIT_LOW = 300
WRITE_EVERY = 128  # deliveries


class RemoteConsumer:
    """A local queue consumer whose deliveries go out on one of our sender links."""

    __slots__ = ("engine", "host", "inflight", "link", "queue", "tag")

    def __init__(self, host: LinkHost, link: Link, queue: Queue) -> None:
        engine = host.conn
        assert engine is not None, "a consumer is made when its link is answered"
        self.host = host
        self.engine = engine  # the AMQP connection the link is on
        self.link = link
        self.queue = queue
        self.inflight: dict[int, MessageRef] = {}
        self.tag = 0

    def can_take(self) -> bool:
        link = self.link
        return (
            link.credit > 0
            and link.session.remote_incoming_window > 0
            and self.host.conn is self.engine
            and not link.closed_locally
        )

    def payload(self, ref: MessageRef) -> bytes:
        return delivery_payload(ref)

    def deliver(self, ref: MessageRef) -> None:
        payload = self.payload(ref)
        self.tag += 1
        self.inflight[id(ref)] = ref
        self.engine.send_delivery(self.link, self.tag.to_bytes(4, "big"), payload, False, ref)
        if self.tag % WRITE_EVERY == 0:
            self.host.write_out()  # a long dispatch reaches the remote in slices, not at the end of the turn
        self.host.mark_dirty()

    def kick(self, condition: str, description: str) -> None:
        """The local queue was deleted: stop consuming it and close the link."""
        self.give_back()
        if not self.link.closed_locally and self.host.conn is self.engine:
            self.engine.detach(self.link, closed=True, condition=condition, description=description)
            self.host.mark_dirty()

    def give_back(self) -> None:
        """The connection is gone: leave the queue; what was in flight goes back, no attempt counted."""
        self.queue.remove_consumer(self)
        refs = [r for r in self.inflight.values() if r.consumer is self]
        self.inflight.clear()
        for r in refs:
            r.queue.take_in_flight(r)
        if refs:
            self.queue.requeue(refs)


class QueueLinks:
    """One `<sender>`, `<receiver>` or `<peer>` element of a broker connection."""

    def __init__(self, server: Server, settings: LinkSettings) -> None:
        self.server = server
        self.settings = settings
        self.kind = settings.kind
        self.matcher = matcher_for(settings.address_match) if settings.address_match else None
        self._pending = 0
        self.links: dict[tuple[str, bool], Link] = {}  # (queue name, is_sender) -> link
        self.consumers: dict[str, RemoteConsumer] = {}
        # messages per local queue, across reconnects: received from the remote; sent on links now gone
        # (a live link's are its consumer's tag: counted as they go, read by `sent`)
        self.received: dict[str, int] = {}
        self._sent_before: dict[str, int] = {}

    def matches(self, queue: Queue) -> bool:
        if queue.internal or queue.temporary:
            return False
        if self.settings.queue_name:
            return queue.name == self.settings.queue_name
        return self.matcher is not None and self.matcher.matches(queue.address)

    def pending(self) -> int:
        return self._pending

    def install(self) -> None:
        pass  # nothing to do before the remote is there

    # ---------------------------------------------------------------------------------- attach

    def attach_all(self, conn: LinkHost) -> None:
        self.links.clear()
        self.consumers.clear()
        for q in list(self.server.queues.values()):
            self.local_queue_added(conn, q)

    def local_queue_added(self, conn: LinkHost, queue: Queue) -> None:
        if not self.matches(queue):
            return
        if self.kind in (LinkKind.SENDER, LinkKind.PEER) and (queue.name, True) not in self.links:
            self._attach(conn, queue, sender=True)
        if self.kind in (LinkKind.RECEIVER, LinkKind.PEER) and (queue.name, False) not in self.links:
            self._attach(conn, queue, sender=False)

    def _attach(self, conn: LinkHost, queue: Queue, sender: bool) -> None:
        caps = [WAYPOINT] if self.kind is LinkKind.PEER else None
        name = f"{queue.address}:{uuid.uuid4()}"
        if sender:
            attach = Attach(
                name=name,
                role=False,
                snd_settle_mode=0,
                rcv_settle_mode=0,
                source=Source(address=queue.address),
                target=Target(address=queue.address, capabilities=caps),
            )
        else:
            attach = Attach(
                name=name,
                role=True,
                snd_settle_mode=0,
                rcv_settle_mode=0,
                source=Source(address=queue.address, capabilities=caps),
                target=Target(address=queue.address),
            )
        link = conn.attach(attach, LinkRole(self, queue))
        self.links[(queue.name, sender)] = link
        self._pending += 1

    def remote_attached(self, conn: LinkHost, link: Link) -> None:
        self._pending = max(0, self._pending - 1)
        role: LinkRole = link.context
        queue = role.queue
        assert queue is not None
        if link.is_sender:
            consumer = RemoteConsumer(conn, link, queue)
            role.state = consumer
            self.consumers[queue.name] = consumer
            queue.add_consumer(consumer)
        else:
            _engine(conn).flow(link, credit=CREDIT_WINDOW)
            conn.mark_dirty()

    # ------------------------------------------------------------------------------- traffic

    def on_flow(self, conn: LinkHost, link: Link) -> None:
        role: LinkRole = link.context
        if link.is_sender and role.queue is not None and isinstance(role.state, RemoteConsumer):
            role.queue.dispatch(self.server.outcomes.is_expired)
            if link.drain and link.credit > 0 and not role.queue.waiting:
                _engine(conn).drain_complete(link)
                conn.mark_dirty()

    def on_delivery(
        self, conn: LinkHost, link: Link, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        role: LinkRole = link.context
        queue = role.queue
        assert queue is not None
        session, engine = link.session, _engine(conn)  # the delivery came on the connection as it is now
        try:
            view = MessageView(payload)
            view.all_sections()
            msg = self.server.router.route(queue.address, payload, view)
            self.received[queue.name] = self.received.get(queue.name, 0) + 1
        except (DecodeError, ValueError) as exc:
            # a malformed message from the remote is refused, not retried forever by reconnecting
            log.warning("receiver link %s: malformed message rejected: %s", link.name, exc)
            if not settled:
                error = Error(condition=errors.DECODE_ERROR, description=str(exc)[:200])
                engine.settle_incoming(session, delivery_id, delivery_id, Rejected(error=error).encode_amqp())
                conn.mark_dirty()
            return
        if link.credit <= CREDIT_LOW:
            engine.flow(link, credit=CREDIT_WINDOW)
        conn.mark_dirty()
        if settled:
            return

        def accept() -> None:
            if conn.conn is engine and not link.closed_locally:
                session.incoming_unsettled.pop(delivery_id, None)
                engine.settle_incoming(session, delivery_id, delivery_id, ACCEPTED_BYTES)
                conn.mark_dirty()

        if msg is not None and msg.durable:
            self.server.persistence.confirm(accept)
        else:
            accept()

    def on_outcome(self, conn: LinkHost, link: Link, context: Any, state: Any) -> None:
        consumer = link.context.state
        if not isinstance(context, MessageRef) or not isinstance(consumer, RemoteConsumer):
            return
        if consumer.inflight.pop(id(context), None) is None or context.consumer is None:
            return
        self.server.outcomes.apply(context, state)

    def outcomes_done(self, conn: LinkHost) -> None:
        pass  # each outcome was applied as it came

    def detached_all(self, conn: LinkHost) -> None:
        """Connection gone: unacknowledged messages go back to their queues (no attempt counted)."""
        self._pending = 0
        for name, consumer in self.consumers.items():
            self._sent_before[name] = self._sent_before.get(name, 0) + consumer.tag
            consumer.give_back()
        self.consumers.clear()
        self.links.clear()

    def sent(self) -> dict[str, int]:
        """Messages sent to the remote per local queue, since the broker started."""
        out = dict(self._sent_before)
        for name, consumer in self.consumers.items():
            out[name] = out.get(name, 0) + consumer.tag
        return out


def _engine(host: LinkHost) -> Connection:
    """The AMQP connection of a link event: it came on the connection as it is now."""
    engine = host.conn
    assert engine is not None
    return engine
