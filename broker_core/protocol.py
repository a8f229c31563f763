"""The broker side of one AMQP connection: engine events in, broker operations out.

Producers (links where the peer sends) route each delivery and answer Accepted when the message is
routed and, if durable, on disk. Consumers (links where the peer receives) are `LinkConsumer`s
registered on a queue; the queue pushes messages to them while they have credit.

Dispositions we owe producers are collected per session and sent as ranges once per loop turn, so a
burst of transfers costs one disposition frame, not one each.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from .amqp import errors
from .amqp.codec import DecodeError, Symbol
from .amqp.connection import Connection, Link, Session
from .amqp.performatives import (
    ACCEPTED_BYTES,
    Accepted,
    Attach,
    Begin,
    Close,
    Coordinator,
    Detach,
    End,
    Error,
    Modified,
    Open,
    Rejected,
    Source,
    Target,
    symbols,
)
from .errors import BrokerError
from .message import MessageView
from .queues import MessageRef, Queue, delivery_payload
from .security import SecurityError
from .security.scram import ScramServer
from .server import ANYCAST, MULTICAST, Server

if TYPE_CHECKING:
    from .config.model import Acceptor

log = logging.getLogger(__name__)

QUEUE_CAPS = {"queue", "temporary-queue"}
TOPIC_CAPS = {"topic", "temporary-topic"}
SELECTOR_FILTER = "apache.org:selector-filter:string"
DEFAULT_MAX_MESSAGE_SIZE = 100 * 1024 * 1024
MIRROR_PREFIX = "$ACTIVEMQ_ARTEMIS_MIRROR"
MIRROR_CREDIT_WINDOW = 5000
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")


class Producer:
    __slots__ = ("address", "checked", "credit_low", "credit_window", "routing_type")

    def __init__(self, address: str | None, routing_type: str | None, window: int, low: int) -> None:
        self.address = address  # None: anonymous relay, the message's `to` decides
        self.routing_type = routing_type
        self.credit_window = window
        self.credit_low = low
        self.checked: set[str] = set()  # addresses this anonymous link may send to


class MirrorLink:
    """A remote broker's mirror link into this broker."""

    __slots__ = ("credit_low", "credit_window", "remote_id")

    def __init__(self, remote_id: str, window: int, low: int) -> None:
        self.remote_id = remote_id
        self.credit_window = window
        self.credit_low = low


class LinkConsumer:
    """A queue consumer backed by a sender link of ours."""

    __slots__ = ("closed", "endpoint", "link", "presettled", "queue", "subscription", "tag")

    def __init__(
        self, endpoint: BrokerEndpoint, link: Link, queue: Queue, presettled: bool, subscription: str | None
    ) -> None:
        self.endpoint = endpoint
        self.link = link
        self.queue = queue
        self.presettled = presettled
        self.subscription = subscription  # "durable", "volatile" or None (a plain queue)
        self.tag = 0
        self.closed = False

    def can_take(self) -> bool:
        link = self.link
        return (
            link.credit > 0
            and link.session.remote_incoming_window > 0
            and not self.closed
            and self.endpoint.writable
        )

    def kick(self, condition: str, description: str) -> None:
        """The queue went away under us: detach the link with the reason."""
        ep = self.endpoint
        ep._link_gone(self.link, closed=True)
        ep.conn.detach(self.link, closed=True, condition=condition, description=description)
        ep.mark_dirty()

    def deliver(self, ref: MessageRef) -> None:
        ep = self.endpoint
        payload = delivery_payload(ref)
        self.tag += 1
        tag = self.tag.to_bytes(4, "big")
        conn = ep.conn
        if self.presettled:
            conn.send_delivery(self.link, tag, payload, True)
            ep.server.acknowledge(ref)
        else:
            conn.send_delivery(self.link, tag, payload, False, ref)
        ep.mark_dirty()


class BrokerEndpoint:
    """Handler for one accepted connection."""

    def __init__(self, server: Server, acceptor: Acceptor, io: Any, peer: str) -> None:
        self.server = server
        self.acceptor = acceptor
        self.io = io  # the socket side: mark_dirty(endpoint), close()
        self.peer = peer
        self.writable = True
        secure = server.config.security_enabled
        mechs = SCRAM_MECHANISMS + (("PLAIN",) if secure else ("ANONYMOUS", "PLAIN"))
        self.conn = Connection(
            self,
            server=True,
            container_id=server.node_id,
            sasl_mechanisms=mechs,
            allow_no_sasl=not secure,
            max_frame_size=acceptor.max_frame_size,
            idle_timeout_ms=acceptor.amqp_idle_timeout,
            open_properties={Symbol("product"): "amqp-mirror"},
        )
        self.consumers: dict[int, LinkConsumer] = {}  # by id(link)
        self.pending_accepts: dict[Session, list[int]] = {}
        self._mirror_batch: list[int] | None = None  # mirror deliveries awaiting their journal batch
        self._mirror_batch_at = -1  # the server's `flushes` when that batch was started
        self._mirror_session: Session | None = None  # and the session its deliveries came on
        self.manage_checked = False
        self.scram: ScramServer | None = None
        self.closed = False

    # ----------------------------------------------------------------------------------- plumbing

    def mark_dirty(self) -> None:
        self.io.mark_dirty(self)

    def before_flush(self) -> None:
        """Turn the accepts collected this loop turn into ranged dispositions."""
        if not self.pending_accepts:
            return
        pending, self.pending_accepts = self.pending_accepts, {}
        for session, ids in pending.items():
            if session.ended_locally:
                continue
            ids.sort()
            first = last = ids[0]
            for i in ids[1:]:
                if i == last + 1:
                    last = i
                    continue
                self.conn.settle_incoming(session, first, last, ACCEPTED_BYTES)
                first = last = i
            self.conn.settle_incoming(session, first, last, ACCEPTED_BYTES)

    def _accept_later(self, session: Session, delivery_id: int) -> None:
        session.incoming_unsettled.pop(delivery_id, None)
        ids = self.pending_accepts.get(session)
        if ids is None:
            self.pending_accepts[session] = [delivery_id]
            self.mark_dirty()
        else:
            ids.append(delivery_id)

    def _settle_one(self, session: Session, delivery_id: int, state: Any) -> None:
        session.incoming_unsettled.pop(delivery_id, None)
        self.conn.settle_incoming(session, delivery_id, delivery_id, state.encode_amqp())
        self.mark_dirty()

    # ------------------------------------------------------------------------------------ SASL

    def on_sasl_init(self, conn: Connection, mechanism: str, response: bytes | None) -> None:
        if mechanism in SCRAM_MECHANISMS:
            self.scram = ScramServer(
                mechanism,
                self.server.user_store.scram_lookup(mechanism),
                mock_secret=self.server.scram_secret,
            )
            self.on_sasl_response(conn, response or b"")
            return
        if mechanism == "ANONYMOUS" and "ANONYMOUS" in conn.sasl_mechanisms:
            conn.sasl_outcome(True, None)
            return
        if mechanism == "PLAIN":
            parts = (response or b"").split(b"\x00")
            if len(parts) == 3:
                user = parts[1].decode("utf-8", "replace")
                password = parts[2].decode("utf-8", "replace")
                if self.server.authenticate_plain(user, password) or not self.server.config.security_enabled:
                    conn.sasl_outcome(True, user)
                    log.debug("%s authenticated as %s", self.peer, user)
                    return
                log.warning("authentication failed for user %s from %s", user, self.peer)
            else:
                log.warning("malformed SASL PLAIN response from %s", self.peer)
        else:
            log.warning("SASL mechanism %s refused for %s", mechanism, self.peer)
        conn.sasl_outcome(False, None)

    def on_sasl_response(self, conn: Connection, response: bytes) -> None:
        scram = self.scram
        if scram is None:
            conn.sasl_outcome(False, None)
            return
        step = scram.step(response)
        if not step.done:
            conn.sasl_challenge(step.server_bytes)
            return
        self.scram = None
        if step.ok or not self.server.config.security_enabled:
            conn.sasl_outcome(True, step.user, step.server_bytes)
        else:
            log.warning(
                "authentication failed for user %s from %s (%s)", step.user, self.peer, scram.mechanism
            )
            conn.sasl_outcome(False, None, step.server_bytes)

    def on_sasl_outcome(self, conn: Connection, code: int) -> None:  # client side only
        pass

    # ---------------------------------------------------------------------------- open / begin

    def on_open(self, conn: Connection, open_: Open) -> None:
        conn.accept_open()

    def on_begin(self, session: Session, begin: Begin) -> None:
        self.conn.begin(session)

    def on_end(self, session: Session, end: End) -> None:
        for link in list(session.local_links.values()):
            self._link_gone(link, closed=False)
            if link.reply_deferred and not link.closed_locally:
                self.conn.detach(link, closed=False)  # the deferred answer goes before our End
        self.pending_accepts.pop(session, None)

    def on_close(self, conn: Connection, close: Close) -> None:
        self.connection_lost()

    # -------------------------------------------------------------------------------------- attach

    def on_attach(self, link: Link, attach: Attach) -> None:
        try:
            if link.is_sender:
                self._attach_consumer(link, attach)
            else:
                self._attach_producer(link, attach)
        except SecurityError as exc:
            log.warning("%s: attach of %r refused: %s", self.peer, link.name, exc)
            self._refuse(link, attach, errors.UNAUTHORIZED_ACCESS, exc.description)
        except BrokerError as exc:
            log.info("%s: attach of %r refused: %s", self.peer, link.name, exc.description)
            self._refuse(link, attach, exc.condition, exc.description)

    def _refuse(self, link: Link, attach: Attach, condition: str, description: str) -> None:
        # A refused attach is answered with a null terminus, then detached with the error (part 2.6.3).
        reply = Attach(
            name=link.name, snd_settle_mode=attach.snd_settle_mode, rcv_settle_mode=attach.rcv_settle_mode
        )
        if link.is_sender:
            reply.target = attach.target
        else:
            reply.source = attach.source
        self.conn.attach(link.session, reply, link)
        self.conn.detach(link, closed=True, condition=condition, description=description)
        self.mark_dirty()

    def _routing_type(self, caps: tuple[str, ...], address: str) -> str:
        if TOPIC_CAPS & set(caps):
            return MULTICAST
        if QUEUE_CAPS & set(caps):
            return ANYCAST
        addr = self.server.addresses.get(address)
        if addr is not None and len(addr.routing_types) == 1:
            return next(iter(addr.routing_types))
        return self.server.settings_for(address).default_address_routing_type.value

    def _strip_prefix(self, address: str) -> tuple[str, str | None]:
        a = self.acceptor
        if a.anycast_prefix and address.startswith(a.anycast_prefix):
            return address[len(a.anycast_prefix) :], ANYCAST
        if a.multicast_prefix and address.startswith(a.multicast_prefix):
            return address[len(a.multicast_prefix) :], MULTICAST
        return address, None

    def _ensure_address(self, address: str, routing_type: str) -> None:
        srv = self.server
        addr = srv.addresses.get(address)
        if addr is not None and routing_type in addr.routing_types:
            return
        if not srv.settings_for(address).auto_create_addresses:
            raise BrokerError(errors.NOT_FOUND, f"address {address} does not exist")
        srv.check(self.conn.user, address, "createAddress")
        srv.ensure_address(address, {routing_type})

    def _ensure_anycast_queue(self, address: str) -> Queue:
        srv = self.server
        q = srv.queues.get(address)
        if q is not None:
            return q
        addr = srv.addresses.get(address)
        if addr is not None:  # Artemis: an anycast consumer takes a queue bound to the address
            for bound in addr.queues:
                if bound.routing_type == ANYCAST and not bound.temporary:
                    return bound
        if not srv.settings_for(address).auto_create_queues:
            raise BrokerError(errors.NOT_FOUND, f"queue {address} does not exist")
        srv.check(self.conn.user, address, "createDurableQueue")
        return srv.create_queue(address, address, ANYCAST, auto_created=True)

    def _attach_producer(self, link: Link, attach: Attach) -> None:
        target = attach.target
        if isinstance(target, Coordinator):
            raise BrokerError(errors.NOT_IMPLEMENTED, "transactions are not supported")
        address = target.address if isinstance(target, Target) else None
        if target is not None and not isinstance(target, Target):
            raise BrokerError(errors.INVALID_FIELD, "unrecognised target")
        routing_type = None
        if isinstance(target, Target) and target.dynamic:
            raise BrokerError(errors.NOT_IMPLEMENTED, "dynamic targets are not supported")
        if address and address.startswith(MIRROR_PREFIX) and self.server.mirror_target is not None:
            self._attach_mirror(link, attach, address)
            return
        if address and address == self.server.config.management_address:
            self.server.check(self.conn.user, address, "manage")
        elif address and isinstance(target, Target):
            address, routing_type = self._strip_prefix(address)
            routing_type = routing_type or self._routing_type(symbols(target.capabilities), address)
            self.server.check(self.conn.user, address, "send")
            self._ensure_address(address, routing_type)
            if routing_type == ANYCAST:
                addr = self.server.addresses[address]
                if not any(q.routing_type == ANYCAST for q in addr.queues):
                    self._ensure_anycast_queue(address)
        a = self.acceptor
        link.context = Producer(address or None, routing_type, a.amqp_credits, a.amqp_low_credits)
        link.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        reply = Attach(
            name=link.name,
            snd_settle_mode=attach.snd_settle_mode,
            rcv_settle_mode=0,
            source=attach.source,
            target=target,
            max_message_size=DEFAULT_MAX_MESSAGE_SIZE,
        )
        self.conn.attach(link.session, reply, link)
        self.conn.flow(link, credit=a.amqp_credits)
        self.mark_dirty()

    def _attach_mirror(self, link: Link, attach: Attach, address: str) -> None:
        """A remote broker's mirror link (spec §1.3), answered or refused by the mirror target."""
        try:
            reply, remote = self.server.mirror_target.answer_link(self.conn.user, attach, address)
        except BrokerError as exc:
            log.warning("%s: mirror link %r refused: %s", self.peer, link.name, exc.description)
            self._refuse(link, attach, exc.condition, exc.description)
            return
        self.conn.attach(link.session, reply, link)
        # A mirror link carries a whole broker's traffic and catch-up backlogs: a deeper credit window
        # than a client link keeps the source streaming while this side journals (measured: bench/).
        window = max(self.acceptor.amqp_credits, MIRROR_CREDIT_WINDOW)
        link.context = MirrorLink(remote, window, window // 2)
        self.conn.flow(link, credit=window)
        log.info("%s: mirror link from broker %s attached on %s", self.peer, remote, address)
        self.mark_dirty()

    def _attach_consumer(self, link: Link, attach: Attach) -> None:
        source = attach.source
        if not isinstance(source, Source):
            raise BrokerError(errors.INVALID_FIELD, "consumer attach without a source")
        if source.filter and any(
            str(k) == SELECTOR_FILTER
            or getattr(v, "descriptor", None) == SELECTOR_FILTER
            or getattr(v, "descriptor", None) == 0x0000468C00000004
            for k, v in source.filter.items()
        ):
            raise BrokerError(errors.NOT_IMPLEMENTED, "message selectors are not supported yet")
        srv, user = self.server, self.conn.user
        subscription = None
        if source.dynamic:
            name = f"{uuid.uuid4()}"
            srv.check(user, name, "createNonDurableQueue")
            queue = srv.create_queue(name, name, ANYCAST, durable=False, temporary=True, auto_created=True)
            source = Source(address=name, dynamic=True, capabilities=source.capabilities)
            subscription = "temporary"
        else:
            if not source.address:
                raise BrokerError(errors.INVALID_FIELD, "consumer attach without a source address")
            address, routing_type = self._strip_prefix(source.address)
            if "::" in address:  # fully qualified queue name address::queue
                address, qname = address.split("::", 1)
                srv.check(user, f"{address}::{qname}", "consume")
                found = srv.queues.get(qname)
                if found is None or found.address != address:
                    raise BrokerError(errors.NOT_FOUND, f"queue {qname} on address {address} does not exist")
                queue = found
            else:
                caps = symbols(source.capabilities)
                routing_type = routing_type or self._routing_type(caps, address)
                srv.check(user, address, "consume")
                self._ensure_address(address, routing_type)
                if routing_type == ANYCAST:
                    queue = self._ensure_anycast_queue(address)
                else:
                    queue, subscription = self._subscription(link, source, address, caps)
        if 0 <= queue.max_consumers <= len(queue.consumers):
            raise BrokerError(
                errors.RESOURCE_LIMIT_EXCEEDED, f"queue {queue.name} has its maximum of consumers"
            )
        presettled = attach.snd_settle_mode == 1
        consumer = LinkConsumer(self, link, queue, presettled, subscription)
        link.context = consumer
        reply = Attach(
            name=link.name,
            snd_settle_mode=1 if presettled else 0,
            rcv_settle_mode=0,
            source=source,
            target=attach.target,
            initial_delivery_count=0,
        )
        self.conn.attach(link.session, reply, link)
        self.consumers[id(link)] = consumer
        queue.add_consumer(consumer)
        self.mark_dirty()

    def _subscription(
        self, link: Link, source: Source, address: str, caps: tuple[str, ...]
    ) -> tuple[Queue, str]:
        """Multicast consumer: its own subscription queue (durable when the terminus says so)."""
        srv, user = self.server, self.conn.user
        durable = bool(source.durable) and source.expiry_policy == "never"
        shared, global_ = "shared" in caps, "global" in caps
        container = self.conn.container_id_remote()
        base = link.name.split("|", 1)[0] if shared else link.name
        if durable:
            name = base if (shared and global_) else f"{container}.{base}"
            q = srv.queues.get(name)
            if q is not None:
                return q, "durable"
            srv.check(user, address, "createDurableQueue")
            return srv.create_queue(name, address, MULTICAST, auto_created=False), "durable"
        if shared:
            name = f"{base}:shared-volatile" if global_ else f"{container}.{base}:shared-volatile"
            q = srv.queues.get(name)
            if q is not None:
                return q, "volatile"
        else:
            name = str(uuid.uuid4())
        srv.check(user, address, "createNonDurableQueue")
        return srv.create_queue(
            name, address, MULTICAST, durable=False, temporary=True, auto_created=True
        ), "volatile"

    # ---------------------------------------------------------------------------------- transfer

    def on_delivery(
        self, link: Link, delivery_id: int, tag: bytes, settled: bool, payload: bytes, message_format: int
    ) -> None:
        producer = link.context
        session = link.session
        if isinstance(producer, MirrorLink):
            self._mirror_delivery(link, producer, delivery_id, settled, payload)
            return
        if not isinstance(producer, Producer):
            return
        srv = self.server
        try:
            view = MessageView(payload)
            view.all_sections()  # checks every section's framing: a truncated message is refused, not stored
            address = producer.address
            if address is None:
                address = view.to
                if not address:
                    raise BrokerError(errors.INVALID_FIELD, "anonymous sender's message has no 'to' address")
                address, rt = self._strip_prefix(address)
                if address not in producer.checked:
                    srv.check(self.conn.user, address, "send")
                    producer.checked.add(address)
                if address not in srv.addresses:
                    self._ensure_address(address, rt or self._routing_type((), address))
            if address == srv.config.management_address:
                self._management(view)
                msg = None
            else:
                if srv.sync_mirrors:
                    srv.mirror_capture = []
                msg = srv.route(address, payload, view)
        except (DecodeError, IndexError, ValueError) as exc:
            self._reject(session, delivery_id, settled, errors.DECODE_ERROR, f"malformed message: {exc}")
            return
        except SecurityError as exc:
            self._reject(session, delivery_id, settled, errors.UNAUTHORIZED_ACCESS, exc.description)
            return
        except BrokerError as exc:
            self._reject(session, delivery_id, settled, exc.condition, exc.description)
            return
        finally:
            waits, srv.mirror_capture = srv.mirror_capture, None  # also on the reject paths above
            if link.credit <= producer.credit_low and not link.closed_locally:
                self.conn.flow(link, credit=producer.credit_window)
                self.mark_dirty()
        if settled:
            return
        if msg is not None and msg.durable:
            accept = lambda: self._accept_later(session, delivery_id)  # noqa: E731
            if waits:  # sync mirror: confirm only once every target has accepted the event
                srv.when_mirrored(waits, accept)
            else:
                srv.after_durable(accept)
        else:
            self._accept_later(session, delivery_id)

    def _mirror_delivery(
        self, link: Link, ml: MirrorLink, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        session = link.session
        srv = self.server
        durable = srv.mirror_target.apply(ml.remote_id, payload)
        if link.credit <= ml.credit_low and not link.closed_locally:
            self.conn.flow(link, credit=ml.credit_window)
            # Out now, not at the end of this loop turn: one turn can apply thousands of deliveries,
            # and the source must not sit idle waiting for credit meanwhile.
            self.io.write_out()
        if settled:
            return
        if not durable:
            self._accept_later(session, delivery_id)
            return
        # One callback accepts every mirror delivery of a session's journal batch, not a closure each.
        batch = self._mirror_batch
        if batch is None or self._mirror_batch_at != srv.flushes or self._mirror_session is not session:
            batch = self._mirror_batch = []
            self._mirror_batch_at, self._mirror_session = srv.flushes, session
            srv.after_durable(lambda: self._accept_all(session, batch))
        batch.append(delivery_id)

    def _accept_all(self, session: Session, delivery_ids: list[int]) -> None:
        for delivery_id in delivery_ids:
            self._accept_later(session, delivery_id)

    def _management(self, view: MessageView) -> None:
        srv = self.server
        if not self.manage_checked:
            srv.check(self.conn.user, srv.config.management_address, "manage")
            self.manage_checked = True
        reply_to, reply = srv.management.handle(view)
        if reply_to and reply is not None:
            srv.route(reply_to, reply, MessageView(reply))

    def _reject(
        self, session: Session, delivery_id: int, settled: bool, condition: str, description: str
    ) -> None:
        log.info("%s: message rejected: %s", self.peer, description)
        if not settled:
            self._settle_one(
                session, delivery_id, Rejected(error=Error(condition=condition, description=description))
            )

    # ------------------------------------------------------------------------------------ flow

    def on_flow(self, link: Link) -> None:
        consumer = link.context
        if isinstance(consumer, LinkConsumer):
            q = consumer.queue
            q.dispatch(self.server.is_expired)
            if link.drain and link.credit > 0:
                self.conn.drain_complete(link)
                self.mark_dirty()

    def on_session_flow(self, session: Session) -> None:
        for link in session.local_links.values():
            c = link.context
            if isinstance(c, LinkConsumer) and c.can_take():
                c.queue.dispatch(self.server.is_expired)

    def resume(self) -> None:
        """The socket drained its write buffer: feed consumers again."""
        for c in list(self.consumers.values()):
            if c.can_take():
                c.queue.dispatch(self.server.is_expired)

    # ----------------------------------------------------------------------------------- outcomes

    def on_disposition(
        self, session: Session, role: bool, first: int, last: int, settled: bool, state: Any
    ) -> None:
        if not role:
            for i in _ids(first, last, session.incoming_unsettled):
                session.incoming_unsettled.pop(i, None)
            return
        unsettled = session.outgoing_unsettled
        srv = self.server
        confirm: list[int] = []
        if srv.sync_mirrors:
            srv.mirror_capture = []
        for i in _ids(first, last, unsettled):
            entry = unsettled.get(i)
            if entry is None:
                continue
            ref = entry[1]
            if not isinstance(ref, MessageRef) or ref.consumer is None:
                unsettled.pop(i, None)
                continue
            if state is None and not settled:
                continue
            del unsettled[i]
            apply_outcome(srv, ref, state)
            if not settled:
                confirm.append(i)
        if confirm:
            # The client waits for our settlement (rcv-settle-mode second): settle once the ack is on disk.
            def settle() -> None:
                if self.conn.closed or session.ended_locally:
                    return  # the session is gone: its channel may already belong to a new one
                for i in confirm:
                    self.conn.update_outgoing(session, i, i, True, None)
                self.mark_dirty()

            waits, srv.mirror_capture = srv.mirror_capture, None
            if waits:
                srv.when_mirrored(waits, settle)
            else:
                srv.after_durable(settle)
        else:
            srv.mirror_capture = None

    # ------------------------------------------------------------------------------------ detach

    def on_detach(self, link: Link, detach: Detach) -> None:
        closed = bool(detach.closed)
        self._link_gone(link, closed=closed)
        # Answer once every ack and settlement made on this link is on disk: a client that waits for
        # the detach then knows its acks are durable.
        link.reply_deferred = True

        def reply() -> None:
            if not self.conn.closed and not link.session.ended_locally:
                self.conn.detach(link, closed=closed)
                self.mark_dirty()

        self.server.after_durable(reply)

    def _link_gone(self, link: Link, closed: bool) -> None:
        consumer = link.context
        if not isinstance(consumer, LinkConsumer) or consumer.closed:
            return
        consumer.closed = True
        self.consumers.pop(id(link), None)
        q = consumer.queue
        q.remove_consumer(consumer)
        session = link.session
        held = [
            ctx
            for did, (lk, ctx) in list(session.outgoing_unsettled.items())
            if lk is link and session.outgoing_unsettled.pop(did, None) is not None
        ]
        refs = [r for r in held if isinstance(r, MessageRef) and r.consumer is consumer]
        if refs:
            self.server.requeue_all(refs)
        sub = consumer.subscription
        if (sub in ("volatile", "temporary") and not q.consumers and q.name in self.server.queues) or (
            sub == "durable" and closed and not q.consumers and q.name in self.server.queues
        ):
            self.server.delete_queue(q.name)

    def connection_lost(self) -> None:
        if self.closed:
            return
        self.closed = True
        for session in list(self.conn.sessions.values()):
            for link in list(session.local_links.values()):
                self._link_gone(link, closed=False)
        self.pending_accepts.clear()


def apply_outcome(server: Server, ref: MessageRef, state: Any) -> None:
    """What a consumer's outcome means for the message, with Artemis's semantics.

    Accepted (or settled without one) acknowledges; Rejected dead-letters; Modified counts a failed
    delivery only when it says so and dead-letters when undeliverable here; Released and anything else
    redelivers without counting an attempt.
    """
    if state is None or isinstance(state, Accepted):
        server.acknowledge(ref)
    elif isinstance(state, Rejected):
        server.dead_letter(ref)
    elif isinstance(state, Modified):
        server.release(
            ref, delivery_failed=bool(state.delivery_failed), undeliverable=bool(state.undeliverable_here)
        )
    else:
        server.release(ref, delivery_failed=False)


def _ids(first: int, last: int, present: dict[int, Any]) -> list[int]:
    """Delivery ids in [first, last] that we track (a hostile range must not cost 2^32 steps)."""
    if last < first:
        return []
    if last - first <= 64 or last - first < len(present):
        return [i for i in range(first, last + 1) if i in present]
    return sorted(i for i in present if first <= i <= last)
