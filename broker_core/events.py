"""What the server tells its observers (the mirror, the broker connections, metrics), and why it acted.

Every event carries its `Cause`: `None` when a local client asked for it, otherwise the broker work it
is part of (applying a remote broker's mirror event, moving an expired message). Observers decide with
it, not with state of the server's: the mirror source's loop prevention is a rule over causes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .queues import Address, MessageRef, Queue, StoredMessage


class Cause:
    """Why the server does something no local client asked for.

    `remote_id` names the broker whose mirror event is being applied; None means broker work that no
    mirror may copy at all (an expiry copy, a retried mirrored ack)."""

    __slots__ = ("label", "remote_id")

    def __init__(self, label: str, remote_id: str | None = None) -> None:
        self.label = label
        self.remote_id = remote_id

    @staticmethod
    def applying(remote_id: str) -> Cause:
        return Cause("mirror", remote_id)

    def __repr__(self) -> str:
        return f"<Cause {self.label}{f' from {self.remote_id}' if self.remote_id else ''}>"


# Each side expires its own copy of a message; the mirror sends only the acknowledgement (Artemis does
# the same), so the copy on the expiry address is never mirrored.
EXPIRY_COPY: Final = Cause("expiry copy")


class Observer:
    """Broker events, named in the past tense; override what you need.

    `queues_to_join` is asked while a message is routed, before it is journalled: the queues it returns
    hold the message too, in the same journal record (the mirror's store-and-forward queue joins so)."""

    def address_added(self, address: Address, cause: Cause | None) -> None: ...
    def address_removed(self, address: Address, cause: Cause | None) -> None: ...
    def queue_added(self, queue: Queue, cause: Cause | None) -> None: ...
    def queue_removed(self, queue: Queue, cause: Cause | None) -> None: ...
    def message_routed(self, message: StoredMessage, queues: list[Queue], cause: Cause | None) -> None: ...
    def message_acked(self, ref: MessageRef, reason: int, cause: Cause | None) -> None: ...
    def queues_to_join(self, message: StoredMessage, queues: list[Queue], cause: Cause | None) -> list[Queue]:
        return []


class Observers:
    """A server's observers, with the ones routing must ask kept apart: routing runs for every message,
    so it calls only the observers that override its two hooks."""

    __slots__ = ("all", "joining", "routing")

    def __init__(self) -> None:
        self.all: list[Observer] = []
        self.joining: list[Observer] = []
        self.routing: list[Observer] = []

    def add(self, observer: Observer) -> None:
        self.all.append(observer)
        kind = type(observer)
        if kind.queues_to_join is not Observer.queues_to_join:
            self.joining.append(observer)
        if kind.message_routed is not Observer.message_routed:
            self.routing.append(observer)
