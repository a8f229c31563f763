"""The broker side of one accepted AMQP connection: engine events in, broker operations out.

Producers (links where the peer sends) route each delivery and answer Accepted when the message is
routed and, if durable, confirmed (on disk, and every confirmation condition holds). Consumers (links
where the peer receives) are `LinkConsumer`s registered on a queue; the queue pushes messages to them
while they have credit. A link to an address a service is registered for (management, the mirror
target) is answered and fed by that service instead.

Dispositions we owe producers are collected per session and sent as ranges once per loop turn, so a
burst of transfers costs one disposition frame, not one each.

A link to the `amqp:coordinator` target controls local transactions (transactions.py): a transfer or
a disposition carrying a `TransactionalState` works in the transaction it names, and a discharge
commits (Accepted once the commit is confirmed) or rolls back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

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
    Declare,
    Declared,
    Detach,
    End,
    Error,
    Open,
    Rejected,
    Source,
    Target,
    TransactionalState,
)
from .duplicates import duplicate_id
from .errors import BrokerError, InvalidField, NotAllowed, NotFound, ResourceLimitExceeded, Unauthorized
from .inbound_attach import Subscription, Termini
from .inbound_links import Controller, LinkConsumer, Producer
from .inbound_sasl import ServerSasl, mechanisms
from .message import MessageView
from .message_fields import matcher
from .queues import MessageRef, StoredMessage
from .services import Answer, OutgoingLink, ServiceLink
from .spool import Judge, SpooledDelivery
from .transactions import CAPABILITIES, TXN_ID, Transaction, Transactions, UnknownTransaction, control
from .usage import MESSAGE_OVERHEAD, Usage

if TYPE_CHECKING:
    from .config.model import Acceptor
    from .server import Server
    from .services import Services

log = logging.getLogger("broker.inbound")

DEFAULT_MAX_MESSAGE_SIZE = 100 * 1024 * 1024


class Socket(Protocol):
    """The endpoint's I/O side."""

    def mark_dirty(self) -> None: ...
    def write_out(self) -> None: ...


def open_properties(server: Server) -> dict[Any, Any]:
    """What our open frame says of us: the product, and under an HA policy where else to connect
    (`failover-server-list`, as Qpid JMS and our failover client read it): the active members of its
    cluster once it knows them (quorum voting), else its static partners."""
    properties: dict[Any, Any] = {Symbol("product"): "amqp-mirror"}
    members = server.failover_servers  # a cluster's live members, when it knows them
    partners = [(c.host, c.port) for c in server.config.ha_partners()] if members is None else members
    if partners:
        properties[Symbol("failover-server-list")] = [
            {Symbol("network-host"): host, Symbol("port"): port, Symbol("scheme"): "amqp"}
            for host, port in partners
        ]
    return properties


class BrokerEndpoint:
    """Handler for one accepted connection."""

    def __init__(self, server: Server, acceptor: Acceptor, services: Services, io: Socket, name: str) -> None:
        self.server = server
        self.outcomes = server.outcomes
        self.acceptor = acceptor
        self.services = services
        self.io = io
        self.name = name  # the remote address, for log lines
        self.writable = True
        secure = server.config.security_enabled
        self.conn = Connection(
            self,
            server=True,
            container_id=server.node_id,
            sasl_mechanisms=mechanisms(secure, scram=not server.user_store.hashed_users),
            allow_no_sasl=not secure,
            max_frame_size=acceptor.max_frame_size,
            idle_timeout_ms=acceptor.amqp_idle_timeout,
            open_properties=open_properties(server),
            partials=self._partial,
        )
        self.termini = Termini(server, acceptor, services)
        self.sasl = ServerSasl(server, name, acceptor.name)
        self.consumers: dict[int, LinkConsumer] = {}  # by id(link)
        self.pending_accepts: dict[Session, list[int]] = {}
        # transactional sends to settle with their transaction's Accepted, by session and encoded state
        self.pending_enlisted: dict[tuple[Session, bytes], list[int]] = {}
        self.transactions = Transactions(server)
        self.blocked: set[int] = set()  # id() of producer links waiting for room before more credit
        self.closed = False
        self.closed_by_peer = False  # the client closed the connection (an orderly close, not a failure)

    # ----------------------------------------------------------------------------------- plumbing

    @property
    def user(self) -> str | None:
        return self.conn.user

    @property
    def credit_window(self) -> int:
        return self.acceptor.amqp_credits

    @property
    def cluster_member(self) -> bool:
        return self.sasl.cluster

    def mark_dirty(self) -> None:
        self.io.mark_dirty()

    def write_out(self) -> None:
        self.io.write_out()

    def before_flush(self) -> None:
        """Turn the accepts collected this loop turn into ranged dispositions."""
        if self.pending_enlisted:
            enlisted, self.pending_enlisted = self.pending_enlisted, {}
            for (session, state), ids in enlisted.items():
                self._settle_ranges(session, ids, state)
        if not self.pending_accepts:
            return
        pending, self.pending_accepts = self.pending_accepts, {}
        for session, ids in pending.items():
            self._settle_ranges(session, ids, ACCEPTED_BYTES)

    def _settle_ranges(self, session: Session, ids: list[int], state: bytes) -> None:
        if session.ended_locally:
            return
        ids.sort()
        first = last = ids[0]
        for i in ids[1:]:
            if i == last + 1:
                last = i
                continue
            self.conn.settle_incoming(session, first, last, state)
            first = last = i
        self.conn.settle_incoming(session, first, last, state)

    def accept_later(self, session: Session, delivery_id: int) -> None:
        session.incoming_unsettled.pop(delivery_id, None)
        ids = self.pending_accepts.get(session)
        if ids is None:
            self.pending_accepts[session] = [delivery_id]
            self.mark_dirty()
        else:
            ids.append(delivery_id)

    def reject(self, session: Session, delivery_id: int, settled: bool, error: BrokerError) -> None:
        log.info("%s: message rejected: %s", self.name, error.description)
        if settled:
            return
        session.incoming_unsettled.pop(delivery_id, None)
        state = Rejected(error=Error(condition=error.condition, description=error.description))
        self.conn.settle_incoming(session, delivery_id, delivery_id, state.encode_amqp())
        self.mark_dirty()

    # ------------------------------------------------------------------------------------ SASL

    def on_sasl_init(self, conn: Connection, mechanism: str, response: bytes | None) -> None:
        self.sasl.init(conn, mechanism, response)

    def on_sasl_response(self, conn: Connection, response: bytes) -> None:
        self.sasl.response(conn, response)

    def on_sasl_mechanisms(self, conn: Connection, offered: list[str]) -> None:  # client side only
        pass

    def on_sasl_challenge(self, conn: Connection, challenge: bytes) -> None:  # client side only
        pass

    def on_sasl_outcome(self, conn: Connection, code: int) -> None:  # client side only
        pass

    # ---------------------------------------------------------------------------- open / begin

    def on_open(self, conn: Connection, open_: Open) -> None:
        conn.accept_open()

    def on_begin(self, session: Session, begin: Begin) -> None:
        self.conn.begin(session)

    def on_end(self, session: Session, end: End) -> None:
        for link in list(session.local_links.values()):
            self.consumer_gone(link, closed=False)
            if link.reply_deferred and not link.closed_locally:
                self.conn.detach(link, closed=False)  # the deferred answer goes before our End
        self.pending_accepts.pop(session, None)
        for key in [k for k in self.pending_enlisted if k[0] is session]:
            del self.pending_enlisted[key]

    def on_close(self, conn: Connection, close: Close) -> None:
        self.closed_by_peer = True
        self.connection_lost()

    # -------------------------------------------------------------------------------------- attach

    def on_attach(self, link: Link, attach: Attach) -> None:
        try:
            if link.is_sender:
                self._attach_consumer(link, attach)
            else:
                self._attach_producer(link, attach)
        except BrokerError as exc:
            level = logging.WARNING if isinstance(exc, Unauthorized) else logging.INFO
            log.log(level, "%s: attach of %r refused: %s", self.name, link.name, exc.description)
            self._refuse(link, attach, exc.condition, exc.description)
        except errors.FrameTooLarge as exc:
            # Our answer does not fit the peer's max-frame-size: refuse the link rather than send a frame
            # the peer cannot take (what the answer set up for it goes again).
            self.consumer_gone(link, closed=False)
            link.context = None
            log.info("%s: attach of %r refused: %s", self.name, link.name, exc.description)
            self._refuse(link, attach, exc.condition, exc.description)

    def _refuse(self, link: Link, attach: Attach, condition: str, description: str) -> None:
        # A refused attach is answered with a null terminus, then detached with the error (part 2.6.3).
        # The peer's other terminus is echoed when it fits its max-frame-size; when it does not, the name
        # alone (and when not even that fits, FrameTooLarge closes the connection).
        reply = Attach(
            name=link.name, snd_settle_mode=attach.snd_settle_mode, rcv_settle_mode=attach.rcv_settle_mode
        )
        if link.is_sender:
            reply.target = attach.target
        else:
            reply.source = attach.source
        try:
            self.conn.attach(link.session, reply, link)
        except errors.FrameTooLarge:
            self.conn.attach(link.session, Attach(name=link.name), link)
        self.conn.detach(link, closed=True, condition=condition, description=description)
        self.mark_dirty()

    def _attach_producer(self, link: Link, attach: Attach) -> None:
        target = attach.target
        if isinstance(target, Coordinator):
            self._attach_controller(link, attach)
            return
        address = target.address if isinstance(target, Target) else None
        service = self.services.at(address) if address else None
        if address and service is not None:
            answer = service.attach(self, link, attach, address)
            link.context = ServiceLink(service, answer)
            self._answer_producer(link, attach, answer)
            return
        address, routing_type, queue = self.termini.producer(self.user, target)
        a = self.acceptor
        link.context = Producer(address, routing_type, a.amqp_credits, a.amqp_low_credits, queue)
        self._answer_producer(link, attach, Answer(None, None, 0))
        self._replenish(link, a.amqp_credits, a.amqp_low_credits, address)

    def _attach_controller(self, link: Link, attach: Attach) -> None:
        """A transaction controller: the coordinator answers with what it offers (local transactions)."""
        a = self.acceptor
        link.context = Controller(a.amqp_credits, a.amqp_low_credits)
        reply = Attach(
            name=link.name,
            snd_settle_mode=attach.snd_settle_mode,
            rcv_settle_mode=0,
            source=attach.source,
            target=Coordinator(capabilities=list(CAPABILITIES)),
        )
        self._answer_producer(link, attach, Answer(reply, None, a.amqp_credits))

    def _answer_producer(self, link: Link, attach: Attach, answer: Answer) -> None:
        reply = answer.reply
        if reply is None:
            reply = Attach(
                name=link.name,
                snd_settle_mode=attach.snd_settle_mode,
                rcv_settle_mode=0,
                source=attach.source,
                target=attach.target,
            )
        if not reply.max_message_size:  # a service's link (a mirror's) is bounded too
            reply.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        link.max_message_size = reply.max_message_size
        self.conn.attach(link.session, reply, link)
        if answer.credit_window:
            self.conn.flow(link, credit=answer.credit_window)
        self.mark_dirty()

    def _attach_consumer(self, link: Link, attach: Attach) -> None:
        source_address = attach.source.address if isinstance(attach.source, Source) else None
        service = self.services.sender_at(source_address)
        if service is not None and source_address is not None:
            self.conn.attach(link.session, service.attach_sender(self, link, attach, source_address), link)
            self.mark_dirty()
            return
        chosen = self.termini.consumer(
            self.user, link.name, self.conn.container_id_remote(), attach.source, attach.desired_capabilities
        )
        queue, source = chosen.queue, chosen.source
        presettled = attach.snd_settle_mode == 1
        consumer = LinkConsumer(
            self, self.outcomes, link, queue, presettled, chosen.subscription, chosen.browse
        )
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
        queue.add_consumer(consumer, matcher(chosen.selector), chosen.browse)
        self.mark_dirty()

    # ---------------------------------------------------------------------------------- transfer

    def on_delivery(
        self, link: Link, delivery_id: int, tag: bytes, settled: bool, payload: bytes, message_format: int
    ) -> None:
        producer = link.context
        if not isinstance(producer, Producer):
            if isinstance(producer, ServiceLink):
                self._service_delivery(link, producer, delivery_id, settled, payload)
            elif isinstance(producer, Controller):
                self._control(link, producer, delivery_id, settled, payload)
            return
        state = link.delivery_state
        if state is not None and isinstance(state, TransactionalState):
            try:
                self._transactional_send(link, producer, delivery_id, settled, payload, state)
            finally:
                if link.credit <= producer.credit_low and not link.closed_locally:
                    self._replenish(link, producer.credit_window, producer.credit_low, producer.address)
            return
        session = link.session
        srv = self.server
        address = producer.address
        try:
            if srv.persistence.full:
                raise ResourceLimitExceeded("the broker's disk is full: the message cannot be stored")
            view = MessageView(payload)
            view.all_sections()  # checks every section's framing: a truncated message is refused, not stored
            if address is None:
                address = self._relay_address(producer, view)
                service = self.services.at_exact(address)
                if service is not None:
                    service.on_delivery(self, link, None, delivery_id, settled, payload)
                    return
            dup = duplicate_id(view) if self.acceptor.amqp_duplicate_detection else None
            if dup is not None and srv.duplicates.seen(address, dup):
                self._duplicate(address, dup, session, delivery_id, settled)
                return
            if producer.queue is None:
                msg = srv.router.route(address, payload, view, connection_id=self.conn.container_id_remote())
            else:
                msg = self._route_to_queue(address, producer.queue, payload, view)
            if dup is not None and msg is not None:
                srv.duplicates.remember(address, dup, msg.id)
        except (DecodeError, IndexError, ValueError) as exc:
            self.reject(
                session, delivery_id, settled, BrokerError(errors.DECODE_ERROR, f"malformed message: {exc}")
            )
            return
        except BrokerError as exc:
            self.reject(session, delivery_id, settled, exc)
            return
        finally:
            if link.credit <= producer.credit_low and not link.closed_locally:
                self._replenish(link, producer.credit_window, producer.credit_low, address)
        if settled:
            return
        if msg is not None and msg.durable:
            srv.persistence.confirm(
                lambda: self.accept_later(session, delivery_id),
                on_fail=lambda error: self._not_stored(session, delivery_id, msg, dup, error),
                message_id=msg.id,
            )
        else:
            self.accept_later(session, delivery_id)

    # ------------------------------------------------------------------------------- transactions

    def _control(
        self, link: Link, controller: Controller, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        """A declare or a discharge on a coordinator link."""
        session = link.session
        try:
            request = control(payload)
            if isinstance(request, Declare):
                tx = self.transactions.declare(link, request)
                if not settled:
                    self._settle(session, delivery_id, Declared(tx.txn_id).encode_amqp())
                return
            tx = self.transactions.discharge(request)
        except (DecodeError, IndexError, ValueError, TypeError) as exc:
            self.reject(
                session, delivery_id, settled, BrokerError(errors.DECODE_ERROR, f"malformed control: {exc}")
            )
            return
        except BrokerError as exc:
            self.reject(session, delivery_id, settled, exc)
            return
        finally:
            if link.credit <= controller.credit_low and not link.closed_locally:
                self.conn.flow(link, credit=controller.credit_window)
                self.mark_dirty()

        def discharged() -> None:
            # Accepted once what the discharge wrote is durable (and replicated, past sync mirrors); the
            # consumers' deliveries it settled are settled with it, as Artemis settles them at commit.
            if self.closed:
                return
            for o in tx.unsettled():
                o_session = o.link.session
                if not request.fail and not o_session.ended_locally:
                    self.conn.update_outgoing(o_session, o.delivery_id, o.delivery_id, True, None)
            if not settled:
                self._settle(session, delivery_id, ACCEPTED_BYTES)

        self.server.persistence.confirm(discharged)

    def _settle(self, session: Session, delivery_id: int, state: bytes) -> None:
        if self.closed or session.ended_locally:
            return
        session.incoming_unsettled.pop(delivery_id, None)
        self.conn.settle_incoming(session, delivery_id, delivery_id, state)
        self.mark_dirty()

    def _transactional_send(
        self,
        link: Link,
        producer: Producer,
        delivery_id: int,
        settled: bool,
        payload: bytes,
        state: TransactionalState,
    ) -> None:
        """A send in a transaction: checked now, kept by the transaction until the discharge, settled at
        once with the transaction's Accepted. A send refused here is Rejected and dooms the transaction."""
        session = link.session
        srv = self.server
        tx: Transaction | None = None
        try:
            tx = self.transactions.find(state.txn_id)
            if srv.persistence.full:
                raise ResourceLimitExceeded("the broker's disk is full: the message cannot be stored")
            view = MessageView(payload)
            view.all_sections()
            address = producer.address
            if address is None:
                address = self._relay_address(producer, view)
                if self.services.at_exact(address) is not None:
                    raise NotAllowed(f"address {address} takes no transactional message")
            addr = srv.addresses.get(address)
            if addr is not None and addr.usage.refuses(len(payload) + MESSAGE_OVERHEAD):
                addr.usage.refused += 1
                raise ResourceLimitExceeded(f"address {address} is full")
            dup = duplicate_id(view) if self.acceptor.amqp_duplicate_detection else None
            self.transactions.add_send(
                tx, address, producer.queue, payload, dup, self.conn.container_id_remote()
            )
        except (DecodeError, IndexError, ValueError) as exc:
            error = BrokerError(errors.DECODE_ERROR, f"malformed message: {exc}")
            if tx is not None:
                tx.fail(f"a send was refused: {error.description}")
            self.reject(session, delivery_id, settled, error)
            return
        except BrokerError as exc:
            if tx is not None and not isinstance(exc, UnknownTransaction):
                tx.fail(f"a send was refused: {exc.description}")
            self.reject(session, delivery_id, settled, exc)
            return
        if not settled:
            session.incoming_unsettled.pop(delivery_id, None)
            key = (session, _enlisted_state(tx))
            ids = self.pending_enlisted.get(key)
            if ids is None:
                self.pending_enlisted[key] = [delivery_id]
                self.mark_dirty()
            else:
                ids.append(delivery_id)

    def _enlist(
        self,
        session: Session,
        delivery_id: int,
        link: Link,
        ref: MessageRef,
        state: TransactionalState,
        settled: bool,
    ) -> None:
        """A consumer's transactional outcome: the message stays acquired until the discharge. An unknown
        transaction detaches the consumer (what it holds goes back)."""
        try:
            tx = self.transactions.find(state.txn_id)
        except UnknownTransaction as exc:
            consumer = link.context
            if isinstance(consumer, LinkConsumer) and not consumer.closed:
                log.info("%s: consumer %r detached: %s", self.name, link.name, exc.description)
                consumer.kick(exc.condition, exc.description)
            return
        if state.outcome is None:
            return  # enlisted without an outcome yet: the delivery is still the consumer's
        del session.outgoing_unsettled[delivery_id]
        self.transactions.add_outcome(tx, ref, state.outcome, link, delivery_id, settled)
        if not settled:  # said back, unsettled: settled when the commit is confirmed (as Artemis does)
            self.conn.update_outgoing(session, delivery_id, delivery_id, False, state.encode_amqp())
            self.mark_dirty()

    def _duplicate(self, address: str, dup: bytes, session: Session, delivery_id: int, settled: bool) -> None:
        """A retried send (its `_AMQ_DUPL_ID` was routed before): done already. Accepted once what is
        persisted so far (the original among it) is durable, and not routed again."""
        duplicates = self.server.duplicates
        duplicates.rejected += 1
        if duplicates.rejected == 1 or duplicates.rejected % 1000 == 0:
            log.warning(
                "AMQ222059: Duplicate message detected on %s (id %r) - message will not be routed "
                "(%d so far)",
                address,
                dup[:64],
                duplicates.rejected,
            )
        if not settled:
            # The original may be in a batch the disk still refuses: then this repeat is refused with it
            # (never Accepted for a message that was not kept), and the client's next retry is stored.
            self.server.persistence.confirm(
                lambda: self.accept_later(session, delivery_id),
                on_fail=lambda error: self._refuse_unstored(session, delivery_id, error),
            )

    def _not_stored(
        self, session: Session, delivery_id: int, msg: StoredMessage, dup: bytes | None, error: BrokerError
    ) -> None:
        """The journal could not take the message (a full disk, or its record): take it back, forget its
        duplicate id (a retry with that id must be stored), and refuse the send with the reason."""
        self.server.router.rollback(msg)
        if dup is not None:
            self.server.duplicates.forget(msg.address, dup)
        self._refuse_unstored(session, delivery_id, error)

    def _refuse_unstored(self, session: Session, delivery_id: int, error: BrokerError) -> None:
        if self.closed or session.ended_locally:
            return
        self.reject(session, delivery_id, False, error)

    def _replenish(self, link: Link, window: int, low: int, address: str | None) -> None:
        """Top a producer's credit up, unless an address it sends to (BLOCK, full) or the disk has no
        room: then once there is. What was already granted is taken (Artemis does the same)."""
        budget = self.server.budget
        full = self._full_address(link, address)
        if self.closed or (full is None and not budget.no_room):
            self.conn.flow(link, credit=window)
            self.mark_dirty()
            return
        key = id(link)
        if key in self.blocked:
            return
        self.blocked.add(key)

        def retry() -> None:
            if key not in self.blocked:
                return  # woken by the address and the budget both: once is enough
            self.blocked.discard(key)
            if not self.closed and not link.closed_locally and link.credit <= low:
                self._replenish(link, window, low, address)

        if full is not None:
            full.wait(retry)
        budget.wait(retry)

    def _full_address(self, link: Link, address: str | None) -> Usage | None:
        """The usage of a BLOCK address this producer's next credit could reach that has no room. A
        named link reaches its address; an anonymous-relay link every address it has sent to, whatever
        address its last message had: one credit carries a message to any of them, so it waits while
        any of them is full (Artemis holds an anonymous producer only by the global limit, and a full
        BLOCK address then takes whatever it sends)."""
        producer = link.context
        addresses = self.server.addresses
        names: Iterable[str] = ()
        if isinstance(producer, Producer) and producer.address is None:
            names = producer.checked
        elif address:
            names = (address,)
        for name in names:
            addr = addresses.get(name)
            if addr is not None and addr.usage.policy == "BLOCK" and addr.usage.over(0):
                return addr.usage
        return None

    def _partial(
        self, link: Link, delivery_id: int, tag: bytes, settled: bool, first: bytes, fmt: int
    ) -> SpooledDelivery:
        """A delivery of several frames, kept as they arrive (spooled past amqpMinLargeMessageSize). A
        producer's is judged as it grows: refused (Rejected) once its address would refuse its size, or
        while the disk is past its limits and it has to be written there. A service's link (a mirror's)
        is refused only when its delivery cannot be spooled, by detaching it: its source sends it again."""
        producer = link.context
        judge: Judge | None = None

        def refuse(partial: SpooledDelivery, error: BrokerError) -> None:
            if isinstance(producer, Producer):
                self.reject(link.session, partial.delivery_id, partial.settled, error)
            elif not link.closed_locally and not self.closed:
                log.warning("%s: link %r detached: %s", self.name, link.name, error.description)
                self.conn.detach(link, closed=True, condition=error.condition, description=error.description)
                self.mark_dirty()

        if isinstance(producer, Producer):
            judge = self._judge_partial(producer)
        threshold = self.acceptor.amqp_min_large_message_size
        return SpooledDelivery(
            self.server.spool, threshold, judge, refuse, delivery_id, tag, settled, first, fmt
        )

    def _judge_partial(self, producer: Producer) -> Judge:
        server = self.server
        address = producer.address

        def judge(size: int, on_disk: bool) -> BrokerError | None:
            if on_disk and server.budget.no_room:
                return ResourceLimitExceeded("the broker's disk is full: the delivery cannot be spooled")
            addr = server.addresses.get(address) if address is not None else None
            if addr is not None and addr.usage.refuses(size + MESSAGE_OVERHEAD):
                return ResourceLimitExceeded(f"address {address} is full")
            return None

        return judge

    def _route_to_queue(self, address: str, queue: str, payload: bytes, view: MessageView) -> StoredMessage:
        """A fully qualified target's message, to its one queue; refused when that queue is gone (a
        message that reached no queue must not be reported as delivered)."""
        sender = self.conn.container_id_remote()
        msg = self.server.router.route(address, payload, view, only_queues=[queue], connection_id=sender)
        if msg is None:
            raise NotFound(f"queue {queue} on address {address} no longer exists")
        return msg

    def _relay_address(self, producer: Producer, view: MessageView) -> str:
        """The address an anonymous-relay link's message goes to: its `to`, checked once per address."""
        to = view.to
        if not to:
            raise InvalidField("anonymous sender's message has no 'to' address")
        address, routing_type = self.termini.strip_prefix(to)
        served = self.services.at_exact(address) is not None
        if address not in producer.checked:  # both checks once per address, not once per message
            if not served:
                self.termini.check_reachable(address)
            self.server.check(self.user, address, "send")
            producer.checked.add(address)
        if not served and address not in self.server.addresses:
            self.termini.ensure_address(
                self.user, address, routing_type or self.termini.routing_type((), address)
            )
        return address

    def _service_delivery(
        self, link: Link, sl: ServiceLink, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        sl.service.on_delivery(self, link, sl.state, delivery_id, settled, payload)
        if link.credit <= sl.credit_low and not link.closed_locally and not sl.paused:
            if self.server.budget.no_room:  # a mirror's events wait too, rather than fill the disk
                self._replenish(link, sl.credit_window, sl.credit_low, None)
                return
            self.conn.flow(link, credit=sl.credit_window)
            # Out now, not at the end of this loop turn: one turn can apply thousands of deliveries (a
            # mirror's catch-up), and the remote must not sit idle waiting for credit meanwhile.
            self.io.write_out()

    # ------------------------------------------------------------------------------------ flow

    def on_flow(self, link: Link) -> None:
        consumer = link.context
        if isinstance(consumer, LinkConsumer):
            props = link.flow_properties
            txn_id = props.get(TXN_ID) if props else None
            if txn_id is None:
                consumer.txn = None
            else:  # a transactional acquisition (part 4.4.3): what the link gets now is the transaction's
                try:
                    consumer.txn = self.transactions.find(txn_id)
                except UnknownTransaction as exc:
                    log.info("%s: consumer %r detached: %s", self.name, link.name, exc.description)
                    consumer.kick(exc.condition, exc.description)
                    return
            consumer.feed(self.outcomes.is_expired)  # a browser reads on, a consumer has the queue dispatch
            if link.drain and link.credit > 0:
                self.conn.drain_complete(link)
                self.mark_dirty()
        elif isinstance(consumer, OutgoingLink):
            consumer.on_flow()

    def on_session_flow(self, session: Session) -> None:
        for link in session.local_links.values():
            c = link.context
            if isinstance(c, LinkConsumer) and c.can_take():
                c.feed(self.outcomes.is_expired)

    def resume(self) -> None:
        """The socket drained its write buffer: feed consumers again."""
        for c in list(self.consumers.values()):
            if c.can_take():
                c.feed(self.outcomes.is_expired)

    # ----------------------------------------------------------------------------------- outcomes

    def on_disposition(
        self, session: Session, role: bool, first: int, last: int, settled: bool, state: Any
    ) -> None:
        if not role:
            for i in _ids(first, last, session.incoming_unsettled):
                session.incoming_unsettled.pop(i, None)
            return
        unsettled = session.outgoing_unsettled
        outcomes = self.outcomes
        confirm: list[int] = []
        for i in _ids(first, last, unsettled):
            entry = unsettled.get(i)
            if entry is None:
                continue
            ref = entry[1]
            if not isinstance(ref, MessageRef) or ref.consumer is None:
                unsettled.pop(i, None)
                sender = entry[0].context
                if isinstance(sender, OutgoingLink) and (settled or state is not None):
                    sender.settled(ref, state)
                continue
            if state is None and not settled:
                continue
            if type(state) is TransactionalState:
                self._enlist(session, i, entry[0], ref, state, settled)
                continue
            del unsettled[i]
            outcomes.apply(ref, state)
            if not settled:
                confirm.append(i)
        if confirm:
            # The client waits for our settlement (rcv-settle-mode second): settle once the ack is confirmed.
            def settle() -> None:
                if self.conn.closed or session.ended_locally:
                    return  # the session is gone: its channel may already belong to a new one
                for i in confirm:
                    self.conn.update_outgoing(session, i, i, True, None)
                self.mark_dirty()

            self.server.persistence.confirm(settle)

    # ------------------------------------------------------------------------------------ detach

    def on_detach(self, link: Link, detach: Detach) -> None:
        closed = bool(detach.closed)
        self.consumer_gone(link, closed=closed)
        # Answer once every ack and settlement made on this link is confirmed: a client that waits for
        # the detach then knows its acks are durable.
        link.reply_deferred = True

        def reply() -> None:
            if not self.conn.closed and not link.session.ended_locally:
                self.conn.detach(link, closed=closed)
                self.mark_dirty()

        self.server.persistence.confirm(reply)

    def consumer_gone(self, link: Link, closed: bool, failed: bool = False) -> None:
        """The link stopped consuming: what it held goes back to its queue. Counted as a delivery when
        the connection `failed` (it may have been processed), not when the client let go of it in an
        orderly way (a detach, an end, a close): Artemis's rule."""
        consumer = link.context
        if isinstance(consumer, OutgoingLink):
            link.context = None
            consumer.detached()
            return
        if isinstance(consumer, Controller):  # its transactions not yet discharged roll back
            link.context = None
            self.transactions.controller_gone(link)
            return
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
            self.outcomes.requeue_all(refs, counted=failed)
        srv, sub = self.server, consumer.subscription
        if (
            not q.consumers
            and q.name in srv.queues
            and (
                sub in (Subscription.VOLATILE, Subscription.TEMPORARY)
                or (sub == Subscription.DURABLE and closed)
            )
        ):
            srv.delete_queue(q.name)

    def connection_lost(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.conn.discard_partials()
        failed = not self.closed_by_peer  # its socket went, or we closed it with an error
        for session in list(self.conn.sessions.values()):
            for link in list(session.local_links.values()):
                self.consumer_gone(link, closed=False, failed=failed)
        self.pending_accepts.clear()
        self.pending_enlisted.clear()


def _enlisted_state(tx: Transaction) -> bytes:
    """The state a transactional send is settled with: Accepted into its transaction."""
    return TransactionalState(tx.txn_id, Accepted()).encode_amqp()


def _ids(first: int, last: int, present: dict[int, Any]) -> list[int]:
    """Delivery ids in [first, last] that we track (a hostile range must not cost 2^32 steps)."""
    if last < first:
        return []
    if last - first <= 64 or last - first < len(present):
        return [i for i in range(first, last + 1) if i in present]
    return sorted(i for i in present if first <= i <= last)
