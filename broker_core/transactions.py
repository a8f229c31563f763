"""Local transactions (AMQP 1.0 part 4): what one connection's transactions hold until they are
discharged, and what a commit and a rollback do.

A controller attaches a link to the `amqp:coordinator` target and declares transactions on it; any link
of the connection then works in one by naming it in a `TransactionalState`:

- a transactional send is checked as it arrives (decoded, its address resolved and allowed, its
  duplicate id looked up) and kept in memory, counted against `global-max-size`, until the discharge.
  Nothing of it is routed, journalled or mirrored before;
- a transactional outcome (an acknowledgement) keeps its message acquired (in flight, out of every other
  consumer's reach) until the discharge;
- commit: every send is routed and every outcome applied in one call, within one loop turn, so every
  record the commit makes (messages, acknowledgements, duplicate ids, mirror events) goes to the journal
  in one batch, which a crash leaves whole or not at all. The routed messages reach their queues only
  once that batch is on disk (and on a replicating backup); the discharge is Accepted once it is
  confirmed (`persistence.confirm`: on disk, replicated, past sync mirrors);
- rollback (a discharge with `fail`, a commit that cannot be done, the coordinator link or the
  connection gone): the sends are dropped, and each acquired message goes back to its queue with one
  delivery more (journalled), past `max-delivery-attempts` to its dead-letter address; a delivery its
  consumer still holds unsettled stays with that consumer, one delivery more, as Artemis does.

As on Artemis, a transaction with a send refused, or a send whose `_AMQ_DUPL_ID` was already stored,
can only roll back: its commit is refused with `amqp:transaction:rollback` saying why (a retried
transaction whose first attempt was committed is ignored whole). A restart or a failover knows none of
a connection's transactions: what was not committed is gone, and a client naming one is told
`amqp:transaction:unknown-id`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .amqp import errors
from .amqp.codec import Symbol
from .amqp.endpoints import Link
from .amqp.performatives import Accepted, Declare, Discharge, TransactionalState
from .errors import BrokerError, NotFound
from .message import MessageView, section_value
from .queues import MessageRef, release_ref
from .usage import MESSAGE_OVERHEAD

if TYPE_CHECKING:
    from .server import Server

log = logging.getLogger("broker.transactions")

# What the coordinator offers (part 4.5.1): local transactions, several at once on a session, one across
# sessions (a transaction belongs to the connection). Not distributed or promotable ones.
CAPABILITIES = (
    Symbol("amqp:local-transactions"),
    Symbol("amqp:multi-txns-per-ssn"),
    Symbol("amqp:multi-ssns-per-txn"),
)
DISK_FULL = "the broker's disk is full"
AMQP_VALUE = 0x77  # the body section a control message carries its declare or discharge in
TXN_ID = "txn-id"  # the key of a flow's properties that acquires in a transaction (part 4.4.3)
ACCEPTED = Accepted()


class UnknownTransaction(BrokerError):
    def __init__(self, txn_id: object) -> None:
        super().__init__(errors.TRANSACTION_UNKNOWN_ID, f"unknown transaction {_show(txn_id)}")


class RolledBack(BrokerError):
    """The transaction was rolled back instead of committed; the description says why."""

    def __init__(self, description: str) -> None:
        super().__init__(errors.TRANSACTION_ROLLBACK, description)


def control(payload: bytes) -> Declare | Discharge:
    """The declare or discharge a controller's message carries as its amqp-value body."""
    view = MessageView(payload)
    for code, start, _ in view.all_sections():
        if code == AMQP_VALUE:
            body = section_value(payload, start)
            if isinstance(body, (Declare, Discharge)):
                return body
            break
    raise BrokerError(errors.DECODE_ERROR, "a coordinator takes a declare or a discharge as amqp-value body")


class _Send:
    """A transactional send, checked and kept until the discharge."""

    __slots__ = ("address", "connection_id", "cost", "dup", "payload", "queue")

    def __init__(
        self, address: str, queue: str | None, payload: bytes, dup: bytes | None, connection_id: str | None
    ) -> None:
        self.address = address
        self.queue = queue  # a fully qualified target's one queue (address::queue), else None
        self.payload = payload
        self.dup = dup
        self.connection_id = connection_id  # the sender's container id: no-local subscriptions compare it
        self.cost = len(payload) + MESSAGE_OVERHEAD


class _Outcome:
    """A transactional outcome of a delivery the broker sent: the message stays acquired until then."""

    __slots__ = ("delivery_id", "link", "outcome", "ref", "settled")

    def __init__(self, ref: MessageRef, outcome: object, link: Link, delivery_id: int, settled: bool) -> None:
        self.ref = ref
        self.outcome = outcome
        self.link = link
        self.delivery_id = delivery_id
        self.settled = settled  # by the consumer: if not, the broker settles it when the commit is confirmed


class Transaction:
    __slots__ = (
        "acquired",
        "controller",
        "ended",
        "enlisted",
        "failure",
        "held",
        "outcomes",
        "sends",
        "txn_id",
    )

    def __init__(self, txn_id: bytes, controller: Link) -> None:
        self.txn_id = txn_id
        self.controller = controller  # the coordinator link that declared it: it rolls back if that goes
        self.sends: list[_Send] = []
        self.outcomes: list[_Outcome] = []
        # deliveries sent under it to a receiver acquiring in it (part 4.4.3): (reference, link, delivery id)
        self.acquired: list[tuple[MessageRef, Link, int]] = []
        self.failure: str | None = None  # why it can only roll back now (the first reason)
        self.held = 0  # bytes of its sends, held against global-max-size
        self.ended = False  # discharged, or rolled back with its controller
        self.enlisted = TransactionalState(txn_id).encode_amqp()  # the state of a transfer under it

    def fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason

    def acquire(self, ref: MessageRef, link: Link, delivery_id: int, settled: bool) -> None:
        """`ref` was sent under this transaction to a receiver acquiring in it: a rollback gives it back
        (if its delivery is still unsettled). Sent settled, its acceptance is the transaction's too."""
        if settled:
            self.outcomes.append(_Outcome(ref, ACCEPTED, link, delivery_id, True))
        else:
            self.acquired.append((ref, link, delivery_id))

    def unsettled(self) -> list[_Outcome]:
        """Its outcomes whose deliveries the consumer left for the broker to settle."""
        return [o for o in self.outcomes if not o.settled]


class Transactions:
    """The transactions of one connection."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.active: dict[bytes, Transaction] = {}
        self._next = 0

    def declare(self, controller: Link, request: Declare) -> Transaction:
        if request.global_id is not None:
            raise BrokerError(errors.NOT_IMPLEMENTED, "distributed transactions are not supported")
        self._next += 1
        tx = Transaction(self._next.to_bytes(8, "big"), controller)
        self.active[tx.txn_id] = tx
        self.server.stats.transactions_declared += 1
        return tx

    def find(self, txn_id: object) -> Transaction:
        tx = self.active.get(txn_id) if isinstance(txn_id, bytes) else None
        if tx is None:
            raise UnknownTransaction(txn_id)
        return tx

    # ------------------------------------------------------------------------------ in a transaction

    def add_send(
        self,
        tx: Transaction,
        address: str,
        queue: str | None,
        payload: bytes,
        dup: bytes | None,
        connection_id: str | None = None,
    ) -> None:
        """Keep a checked send for the commit. A duplicate id already stored dooms the transaction."""
        srv = self.server
        if dup is not None and srv.duplicates.seen(address, dup):
            srv.duplicates.rejected += 1
            log.warning(
                "AMQ222059: Duplicate message detected on %s (id %r) in transaction %s - the "
                "transaction will be rolled back",
                address,
                dup[:64],
                _show(tx.txn_id),
            )
            tx.fail(f"Duplicate message detected on {address} (id {dup[:64]!r}): the transaction is ignored")
            return
        send = _Send(address, queue, payload, dup, connection_id)
        tx.sends.append(send)
        tx.held += send.cost
        srv.budget.hold(send.cost)

    def add_outcome(
        self, tx: Transaction, ref: MessageRef, outcome: object, link: Link, delivery_id: int, settled: bool
    ) -> None:
        tx.outcomes.append(_Outcome(ref, outcome, link, delivery_id, settled))

    # -------------------------------------------------------------------------------------- discharge

    def discharge(self, request: Discharge) -> Transaction:
        """Commit or roll back (`fail`) the transaction; returns it. RolledBack when a commit could not be
        done (it was rolled back instead). The caller confirms a commit, and answers once it is."""
        tx = self.find(request.txn_id)
        del self.active[tx.txn_id]
        tx.ended = True
        if request.fail:
            self._roll_back(tx, discharged=True)
            return tx
        self._commit(tx)
        return tx

    def _commit(self, tx: Transaction) -> None:
        srv = self.server
        why = tx.failure or self._refusal(tx)
        if why is not None:
            self._roll_back(tx, discharged=True)
            raise self._refused(tx, why)
        router, duplicates = srv.router, srv.duplicates
        routed = []
        try:
            for send in tx.sends:
                msg = router.route(
                    send.address,
                    send.payload,
                    MessageView(send.payload),
                    only_queues=None if send.queue is None else [send.queue],
                    visible_when_durable=True,
                    connection_id=send.connection_id,
                )
                if msg is None:
                    if send.queue is not None:  # a message that reached no queue must not be reported sent
                        raise NotFound(f"queue {send.queue} on address {send.address} no longer exists")
                    continue
                routed.append((msg, send))
                if send.dup is not None:
                    duplicates.remember(send.address, send.dup, msg.id)
        except BrokerError as exc:  # a page that cannot be written: nothing of the commit is kept
            for msg, send in routed:
                router.rollback(msg)
                if send.dup is not None:
                    duplicates.forget(send.address, send.dup)
            self._roll_back(tx, discharged=True)
            raise self._refused(tx, exc.description) from exc
        self._release_held(tx)
        outcomes = srv.outcomes
        for o in tx.outcomes:
            if self._alive(o.ref):
                outcomes.apply(o.ref, o.outcome)
        srv.stats.transactions_committed += 1

    def _refused(self, tx: Transaction, why: str) -> RolledBack:
        log.info(
            "AMQ951130: the commit of transaction %s (%d sends, %d acknowledgements) was refused, it was "
            "rolled back: %s",
            _show(tx.txn_id),
            len(tx.sends),
            len(tx.outcomes),
            why,
        )
        return RolledBack(f"the transaction was rolled back: {why}")

    def _refusal(self, tx: Transaction) -> str | None:
        """Why the commit cannot be done, checked before anything changes: a full disk, an address that
        would refuse its share of the sends (FAIL), a duplicate id another commit stored meanwhile."""
        srv = self.server
        if not tx.sends:
            return None
        if srv.persistence.full:
            return DISK_FULL
        costs: dict[str, int] = {}
        for send in tx.sends:
            costs[send.address] = costs.get(send.address, 0) + send.cost
            if send.dup is not None and srv.duplicates.seen(send.address, send.dup):
                return f"Duplicate message detected on {send.address} (id {send.dup[:64]!r})"
        for address, cost in costs.items():
            addr = srv.addresses.get(address)
            if addr is not None and addr.queues and addr.usage.refuses(cost):
                return f"address {address} is full"
        return None

    def _roll_back(self, tx: Transaction, discharged: bool) -> None:
        """Drop the sends; give back what the transaction acquired. `discharged`: the controller asked for
        it (a delivery its consumer still holds unsettled stays with it), else the controller is gone."""
        srv = self.server
        self._release_held(tx)
        back: list[MessageRef] = []
        for o in tx.outcomes:
            ref = o.ref
            if not self._alive(ref):
                continue
            link = o.link
            if discharged and not o.settled and _holds(link, ref):
                ref.delivery_count += 1
                srv.outcomes.persist_delivery_count(ref)
                link.session.outgoing_unsettled[o.delivery_id] = (link, ref)
            else:
                back.append(ref)
        for ref, link, delivery_id in tx.acquired:  # acquired and still unsettled: given back too
            unsettled = link.session.outgoing_unsettled
            entry = unsettled.get(delivery_id)
            if entry is not None and entry[1] is ref:
                del unsettled[delivery_id]
                if self._alive(ref):
                    back.append(ref)
        if back:
            srv.outcomes.roll_back(back)
        srv.stats.transactions_rolled_back += 1

    def _release_held(self, tx: Transaction) -> None:
        if tx.held:
            self.server.budget.release(tx.held)
            tx.held = 0

    def _alive(self, ref: MessageRef) -> bool:
        """Whether the acquired reference's queue is still there; if not, the reference goes with it."""
        q = ref.queue
        if self.server.queues.get(q.name) is q:
            return True
        if release_ref(ref):
            self.server.index.forget(ref.message)
        return False

    # ------------------------------------------------------------------------------------ going away

    def controller_gone(self, controller: Link) -> None:
        """A coordinator link detached (or its session ended, or the connection went): its transactions
        roll back."""
        gone = [t for t in self.active.values() if t.controller is controller]
        for tx in gone:
            del self.active[tx.txn_id]
            tx.ended = True
            self._roll_back(tx, discharged=False)
        busy = [t for t in gone if t.sends or t.outcomes or t.acquired]
        if busy:  # what a failover leaves in doubt on the client's side: rolled back here
            log.info(
                "AMQ951131: %d transaction(s) left open when their coordinator link or connection went were "
                "rolled back (%d sends dropped, %d messages given back)",
                len(busy),
                sum(len(t.sends) for t in busy),
                sum(len(t.outcomes) for t in busy),
            )


def _holds(link: Link, ref: MessageRef) -> bool:
    """Whether the consumer link that was sent `ref` is still attached and consuming."""
    consumer = ref.consumer
    return (
        consumer is not None
        and link.context is consumer
        and not link.closed_locally
        and not link.closed_remotely
        and not link.session.ended_locally
    )


def _show(txn_id: object) -> str:
    return txn_id.hex() if isinstance(txn_id, bytes) else repr(txn_id)[:40]
