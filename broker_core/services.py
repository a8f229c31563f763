"""Broker services at addresses: links to them are answered by the service, not routed to queues.

The composition root registers each service by address (management) or address prefix (the mirror
target, for `$ACTIVEMQ_ARTEMIS_MIRROR`); the inbound endpoint looks the address of each attach up here
and knows no service by name. A service sees the connection only through `Peer`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .amqp.connection import Connection, Link, Session
    from .amqp.performatives import Attach
    from .config.model import Acceptor
    from .errors import BrokerError


class Peer(Protocol):
    """What a service sees of the connection a link came on."""

    @property
    def conn(self) -> Connection: ...
    @property
    def user(self) -> str | None:
        """The authenticated user (None: anonymous)."""

    @property
    def name(self) -> str:
        """The remote address, for log lines."""

    @property
    def closed(self) -> bool:
        """Whether the connection is gone (its socket lost or closed)."""

    @property
    def credit_window(self) -> int:
        """The acceptor's credit for a client link (amqpCredits)."""

    @property
    def acceptor(self) -> Acceptor:
        """The acceptor the connection came through."""

    @property
    def cluster_member(self) -> bool:
        """Whether it authenticated with the cluster user and password (another server of the pair)."""

    def accept_later(self, session: Session, delivery_id: int) -> None:
        """Settle the delivery Accepted with the next output (ranges are coalesced)."""

    def reject(self, session: Session, delivery_id: int, settled: bool, error: BrokerError) -> None: ...
    def mark_dirty(self) -> None: ...
    def write_out(self) -> None:
        """Write the pending output now, not at the end of the loop turn."""


class Answer:
    """A service's answer to an attach: the reply (None: the ordinary receiving answer), the link's
    state kept for its deliveries, and the credit window to keep the peer supplied with."""

    __slots__ = ("credit_window", "reply", "state")

    def __init__(self, reply: Attach | None, state: object, credit_window: int) -> None:
        self.reply = reply
        self.state = state
        self.credit_window = credit_window


class LinkService(Protocol):
    def attach(self, peer: Peer, link: Link, attach: Attach, address: str) -> Answer:
        """Check the peer's attach to `address` and say how to answer it; raise BrokerError to refuse it."""
        ...

    def on_delivery(
        self, peer: Peer, link: Link, state: object, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        """One message for the service; settle it through `peer`. `state` is the `Answer`'s, or None for
        a message an anonymous-relay link addressed here."""


class OutgoingLink:
    """The context of a link on which a service sends (the peer receives): whom to tell of credit, of
    its deliveries' outcomes (each delivery's context, and its state) and of the link going away. (A
    holder of callbacks rather than a base class: this module is compiled, and an interpreted service
    may not subclass a compiled class.)"""

    __slots__ = ("detached", "on_flow", "settled")

    def __init__(
        self,
        on_flow: Callable[[], None],
        settled: Callable[[object, object], None],
        detached: Callable[[], None],
    ) -> None:
        self.on_flow = on_flow
        self.settled = settled
        self.detached = detached


class SenderService(Protocol):
    def attach_sender(self, peer: Peer, link: Link, attach: Attach, address: str) -> Attach:
        """Check a peer's attach to receive from `address`; set `link.context` to an `OutgoingLink` and
        return the reply attach; raise BrokerError to refuse it."""
        ...


class ServiceLink:
    """The context of a link answered by a service."""

    __slots__ = ("credit_low", "credit_window", "paused", "service", "state")

    def __init__(self, service: LinkService, answer: Answer) -> None:
        self.service = service
        self.state = answer.state
        self.credit_window = answer.credit_window
        self.credit_low = answer.credit_window // 2
        self.paused = False  # the service holds the credit back (it tops it up itself when it resumes)


class Services:
    """The services of one server, by exact address and by address prefix."""

    def __init__(self) -> None:
        self._exact: dict[str, LinkService] = {}
        self._prefixes: list[tuple[str, LinkService]] = []
        self._senders: dict[str, SenderService] = {}

    def register_sender(self, address: str, service: SenderService) -> None:
        """A service peers receive from (HA replication): links whose source is `address`."""
        self._senders[address] = service

    def sender_at(self, address: str | None) -> SenderService | None:
        return self._senders.get(address) if address and self._senders else None

    def register(self, address: str, service: LinkService) -> None:
        self._exact[address] = service

    def register_prefix(self, prefix: str, service: LinkService) -> None:
        self._prefixes.append((prefix, service))

    def at(self, address: str) -> LinkService | None:
        service = self._exact.get(address)
        if service is not None or not self._prefixes:
            return service
        for prefix, candidate in self._prefixes:
            if address.startswith(prefix):
                return candidate
        return None

    def at_exact(self, address: str) -> LinkService | None:
        """For each message of an anonymous-relay link: one dict lookup, no prefix scan (a mirror link
        must be attached to its address, never reached by relay)."""
        return self._exact.get(address)
