"""The contexts of a client's links: producers (the client sends) and queue consumers (it receives)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .queues import MessageRef, Queue, delivery_payload

if TYPE_CHECKING:
    from .amqp.connection import Connection, Link
    from .outcomes import Outcomes
    from .transactions import Transaction


class Producer:
    __slots__ = ("address", "checked", "credit_low", "credit_window", "queue", "routing_type")

    def __init__(
        self, address: str | None, routing_type: str | None, window: int, low: int, queue: str | None = None
    ) -> None:
        self.address = address  # None: anonymous relay, the message's `to` decides
        self.routing_type = routing_type
        self.queue = queue  # the one queue of a fully qualified target (address::queue), else None
        self.credit_window = window
        self.credit_low = low
        self.checked: set[str] = set()  # addresses this anonymous link may send to


class Controller:
    """A transaction controller's link to the coordinator (its declares and discharges)."""

    __slots__ = ("credit_low", "credit_window")

    def __init__(self, window: int, low: int) -> None:
        self.credit_window = window
        self.credit_low = low


class ConsumerHost(Protocol):
    """What a consumer needs of its connection's endpoint."""

    @property
    def conn(self) -> Connection: ...
    @property
    def writable(self) -> bool:
        """False while the socket's write buffer is above its high-water mark."""

    def mark_dirty(self) -> None: ...
    def consumer_gone(self, link: Link, closed: bool, failed: bool = False) -> None:
        """The link stopped consuming: leave the queue, give back what it held (counted as a delivery
        if the connection `failed`)."""


class LinkConsumer:
    """A queue consumer backed by a sender link of ours."""

    __slots__ = (
        "browse",
        "closed",
        "host",
        "link",
        "outcomes",
        "presettled",
        "queue",
        "subscription",
        "tag",
        "txn",
    )

    def __init__(
        self,
        host: ConsumerHost,
        outcomes: Outcomes,
        link: Link,
        queue: Queue,
        presettled: bool,
        subscription: str | None,
        browse: bool = False,
    ) -> None:
        self.host = host
        self.outcomes = outcomes
        self.link = link
        self.queue = queue
        self.presettled = presettled
        self.subscription = subscription  # "durable", "volatile", "temporary" or None (a plain queue)
        self.browse = browse  # sent copies: a browser acquires nothing, so its outcomes change nothing
        self.tag = 0
        self.closed = False
        self.txn: Transaction | None = None  # the receiver acquires in this transaction (its flow said so)

    def can_take(self) -> bool:
        link = self.link
        return (
            link.credit > 0
            and link.session.remote_incoming_window > 0
            and not self.closed
            and self.host.writable
        )

    def feed(self, is_expired: Callable[[MessageRef], bool]) -> None:
        """The link can take more: a browser reads on, a consumer has the queue dispatch."""
        if self.browse:
            self.queue.browse(self)
        else:
            self.queue.dispatch(is_expired)

    def kick(self, condition: str, description: str) -> None:
        """The queue went away under us: detach the link with the reason."""
        host = self.host
        host.consumer_gone(self.link, closed=True)
        host.conn.detach(self.link, closed=True, condition=condition, description=description)
        host.mark_dirty()

    def deliver(self, ref: MessageRef) -> None:
        host = self.host
        payload = delivery_payload(ref)
        self.tag += 1
        tag = self.tag.to_bytes(4, "big")
        conn = host.conn
        if self.browse:  # a copy: whatever the client says of it is ignored (no reference to settle)
            conn.send_delivery(self.link, tag, payload, self.presettled)
            host.mark_dirty()
            return
        txn = self.txn
        if txn is not None:
            if txn.ended:
                self.txn = None
            else:  # transactional acquisition: sent under the transaction, given back if it rolls back
                did = conn.send_delivery(self.link, tag, payload, self.presettled, ref, 0, txn.enlisted)
                txn.acquire(ref, self.link, did, self.presettled)
                host.mark_dirty()
                return
        if self.presettled:
            conn.send_delivery(self.link, tag, payload, True)
            self.outcomes.acknowledge(ref)
        else:
            conn.send_delivery(self.link, tag, payload, False, ref)
        host.mark_dirty()
