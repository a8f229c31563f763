"""Local transactions on a failover connection: sends and accepts that take effect together at commit.

Artemis's rules for a transacted session across a failover (*High Availability* 5.1-5.2), applied to
AMQP local transactions:
* a transaction lives on one connection: when that connection is lost, the broker rolls it back (the
  broker failed over to knows nothing of it). The next operation, or the commit, raises
  ``TransactionRolledBackError``; the transaction then starts afresh on the new connection, and the caller
  does its work again (received messages come back: they were not acknowledged);
* a commit cut off by the loss (sent, its outcome never came) may or may not have taken effect:
  ``TransactionInDoubtError`` (a ``TransactionRolledBackError``). Retrying the transaction is safe when
  its messages carry duplicate ids (``_AMQ_DUPL_ID``): if the first attempt was committed, the broker
  refuses the retry whole with ``amqp:transaction:rollback`` ("Duplicate message detected"), and nothing
  is stored twice;
* a commit the broker refuses (``amqp:transaction:rollback``, ``amqp:transaction:unknown-id``) raises
  ``TransactionRolledBackError`` with its condition and description.

Nothing is declared until the first operation; ``commit`` and ``rollback`` of a transaction with
nothing in it do nothing.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from proton import ConnectionException, Delivery, LinkException, Message, Sender, Timeout
from proton.handlers import TransactionHandler
from proton.reactor import Transaction
from proton.utils import BlockingConnection

from connections.failover.client import (
    FailoverConnection,
    FailoverError,
    FailoverReceiver,
    FailoverSender,
    FailoverTimeoutError,
)

log = logging.getLogger(__name__)

TRANSACTIONAL_STATE = 0x34  # proton reports a transactional-state disposition by its descriptor
ACCEPTED = 0x24
ROLLBACK = "amqp:transaction:rollback"
UNKNOWN_ID = "amqp:transaction:unknown-id"


class TransactionRolledBackError(FailoverError):
    """The transaction was rolled back (or may have been: see ``TransactionInDoubtError``); do its work
    again. ``condition`` is the broker's error condition, or ``amqp:transaction:rollback`` when the
    connection was lost."""

    def __init__(self, description: str, condition: str = ROLLBACK) -> None:
        super().__init__(f"{condition}: {description}")
        self.condition = condition
        self.description = description


class TransactionInDoubtError(TransactionRolledBackError):
    """The connection was lost after the commit was sent and before its outcome came: it may have been
    committed. Retry it with the same duplicate ids."""


class _Outcomes(TransactionHandler):
    """What the coordinator answered, for the blocking waits below."""

    def __init__(self) -> None:
        self.declared = False
        self.failed: Any = None  # the rejected declare or discharge's delivery
        self.discharged = False

    def on_transaction_declared(self, event: Any) -> None:
        self.declared = True

    def on_transaction_declare_failed(self, event: Any) -> None:
        self.failed = event.delivery

    def on_transaction_committed(self, event: Any) -> None:
        self.discharged = True

    def on_transaction_aborted(self, event: Any) -> None:
        self.discharged = True

    def on_transaction_commit_failed(self, event: Any) -> None:
        self.failed = event.delivery


class FailoverTransaction:
    """One transaction at a time on a failover connection (like a JMS transacted session)."""

    def __init__(self, owner: FailoverConnection) -> None:
        self.owner = owner
        self._txn: Transaction | None = None
        self._outcomes = _Outcomes()
        self._generation = 0  # the connection generation the current transaction was declared on
        self.committed = 0
        self.rolled_back = 0

    @property
    def active(self) -> bool:
        """Whether a transaction was declared and not yet discharged."""
        return self._txn is not None

    # -- work in the transaction -----------------------------------------------------------------------

    def send(self, sender: FailoverSender, message: Message) -> None:
        """Send ``message`` in the transaction and wait until the broker has it (it is stored at commit)."""
        txn = self._declared()
        link = sender._attached(self.owner._deadline())
        self._check_generation()
        try:
            delivery = txn.send(cast(Sender, link.link), message)
            self._wait(lambda: delivery.remote_state != 0 or delivery.settled, "send")
        except _LOST as error:
            self._lost(error)
        if delivery.remote_state == Delivery.REJECTED:  # the broker would refuse the commit: roll back now
            refused = _refused(delivery, "send")
            self.rollback()
            raise TransactionRolledBackError(
                f"a send was refused ({refused.condition}: {refused.description}): the transaction was "
                "rolled back"
            )

    def accept(self, receiver: FailoverReceiver) -> None:
        """Accept the receiver's oldest unsettled message in the transaction."""
        txn = self._declared()
        if not receiver._unsettled:
            raise FailoverError(f"receiver from {receiver.address!r}: no received message left to accept")
        link, _ = receiver._unsettled.popleft()
        if link is not receiver._link or receiver._generation != self.owner.generation:
            raise TransactionRolledBackError(  # the broker gave it back when that connection went
                "the message came over a connection that was lost: it will be delivered again"
            )
        try:
            assert link.fetcher is not None
            delivery = link.fetcher.unsettled.popleft()
            txn.accept(delivery)  # settled with the transactional Accepted (settle_before_discharge)
            self.owner._pump_current()
        except _LOST as error:
            self._lost(error)

    # -- discharge -------------------------------------------------------------------------------------

    def commit(self) -> None:
        """Commit; raises ``TransactionRolledBackError`` if it was rolled back instead,
        ``TransactionInDoubtError`` if the outcome was cut off."""
        if self._txn is None:
            return
        self._check_generation()
        txn, outcomes = self._txn, self._outcomes
        try:
            txn.commit()
            self._wait(lambda: outcomes.discharged or outcomes.failed is not None, "commit")
        except _LOST as error:
            self._txn = None
            self.owner._lost(error)
            self.rolled_back += 1
            raise TransactionInDoubtError(
                f"the connection was lost before the commit's outcome ({error}): it may have been committed"
            ) from error
        self._txn = None
        if outcomes.failed is not None:
            self.rolled_back += 1
            raise _refused(outcomes.failed, "commit")
        self.committed += 1

    def rollback(self) -> None:
        """Roll back. A transaction whose connection was lost is rolled back already: nothing to do."""
        if self._txn is None:
            return
        if self._generation != self.owner.generation:
            self._txn = None
            return
        txn, outcomes = self._txn, self._outcomes
        self._txn = None
        self.rolled_back += 1
        try:
            txn.abort()
            self._wait(lambda: outcomes.discharged or outcomes.failed is not None, "rollback")
        except _LOST as error:
            self.owner._lost(error)  # the broker rolls it back with the connection

    # -- internals -------------------------------------------------------------------------------------

    def _declared(self) -> Transaction:
        self._check_generation()
        if self._txn is not None:
            return self._txn
        while True:
            conn = self.owner._live(self.owner._deadline())
            try:
                txn = self._declare(conn)
            except _LOST as error:
                self.owner._lost(error)
                continue  # nothing was done in it: declare on the next broker
            self._txn, self._generation = txn, self.owner.generation
            return txn

    def _declare(self, conn: BlockingConnection) -> Transaction:
        self._outcomes = outcomes = _Outcomes()
        assert conn.conn is not None
        txn = conn.container.declare_transaction(conn.conn, outcomes, settle_before_discharge=True)
        self._wait(lambda: outcomes.declared or outcomes.failed is not None, "declare")
        if outcomes.failed is not None:
            raise _refused(outcomes.failed, "declare")
        return txn

    def _check_generation(self) -> None:
        """A transaction whose connection was lost was rolled back by the broker: say so (once)."""
        if self._txn is not None and self._generation != self.owner.generation:
            self._txn = None
            self.rolled_back += 1
            raise TransactionRolledBackError(
                f"the connection was lost (failed over to {self.owner.connected_uri}): the transaction "
                "was rolled back"
            )

    def _lost(self, error: BaseException) -> None:
        self._txn = None
        self.owner._lost(error)
        self.rolled_back += 1
        raise TransactionRolledBackError(
            f"the connection was lost ({error}): the transaction was rolled back"
        ) from error

    def _wait(self, done: Any, what: str) -> None:
        conn = self.owner._conn
        if conn is None:
            raise ConnectionException("no connection")
        try:
            conn.wait(done, timeout=self.owner.timeout_s, msg=f"transaction {what}")
        except Timeout as error:
            raise FailoverTimeoutError(
                f"no answer to the transaction's {what} within timeout={self.owner.config.options.timeout}ms"
            ) from error


_LOST = (ConnectionException, LinkException)


def _refused(delivery: Any, what: str) -> TransactionRolledBackError:
    condition = delivery.remote.condition
    name = condition.name if condition is not None else ROLLBACK
    description = condition.description if condition is not None else f"the {what} was rejected"
    return TransactionRolledBackError(description or f"the {what} was rejected", name)
