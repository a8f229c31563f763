"""The engine's link and session state: what one end of each knows, updated only by the connection.

Deliberately without a reference back to the connection: the owner of a link knows its connection, and
this module stays below `connection.py` (no import loop).
"""

from __future__ import annotations

from typing import Any

from . import errors
from .performatives import Attach, Flow

MAX_WINDOW = 2**31 - 1
UINT_MAX = 2**32 - 1


class Link:
    """One end of a link on our side. `is_sender` is *our* role."""

    __slots__ = (
        "attach",
        "available",
        "closed_locally",
        "closed_remotely",
        "context",
        "credit",
        "delivery_count",
        "delivery_state",
        "drain",
        "flow_properties",
        "handle",
        "is_sender",
        "max_message_size",
        "name",
        "partial",
        "remote_attach",
        "remote_handle",
        "reply_deferred",
        "session",
    )

    def __init__(self, session: Session, name: str, handle: int, is_sender: bool) -> None:
        self.session = session
        self.name = name
        self.handle = handle
        self.is_sender = is_sender
        self.remote_handle: int | None = None
        self.attach: Attach | None = None  # what we sent
        self.remote_attach: Attach | None = None
        self.delivery_count = 0
        self.credit = 0  # sender: credit granted by the peer; receiver: credit we granted
        self.available = 0
        self.drain = False
        self.max_message_size = 0  # 0: no limit
        self.closed_locally = False
        self.closed_remotely = False
        self.partial: Any = None  # receiver: the delivery being assembled (transfers.Partial)
        # receiver: the state the peer's transfer gave the delivery being handed over (a transactional
        # send's `TransactionalState`); None for an ordinary one
        self.delivery_state: Any = None
        # sender: the properties of the peer's last flow on this link (a receiver acquiring in a
        # transaction names it there, `txn-id`: part 4.4.3)
        self.flow_properties: dict[Any, Any] | None = None
        self.reply_deferred = False  # the handler answers the peer's detach itself (e.g. once durable)
        self.context: Any = None  # the handler's object for this link

    def __repr__(self) -> str:
        return f"<Link {self.name!r} {'sender' if self.is_sender else 'receiver'} h={self.handle}>"


class Session:
    __slots__ = (
        "channel",
        "context",
        "ended_locally",
        "ended_remotely",
        "incoming_unsettled",
        "links_by_name",
        "links_by_remote_handle",
        "local_links",
        "next_handle",
        "next_incoming_id",
        "next_outgoing_id",
        "outgoing_unsettled",
        "remote_channel",
        "remote_incoming_window",
        "remote_next_incoming_id",
    )

    def __init__(self, channel: int) -> None:
        self.channel = channel
        self.remote_channel: int | None = None
        self.next_outgoing_id = 0
        self.next_incoming_id = 0
        self.remote_incoming_window = MAX_WINDOW
        self.remote_next_incoming_id = 0
        self.links_by_remote_handle: dict[int, Link] = {}
        self.links_by_name: dict[tuple[str, bool], Link] = {}
        self.local_links: dict[int, Link] = {}
        self.next_handle = 0
        # delivery-id -> (link, opaque) for deliveries we sent and the peer has not settled
        self.outgoing_unsettled: dict[int, tuple[Link, Any]] = {}
        # delivery-id -> link for deliveries we received unsettled
        self.incoming_unsettled: dict[int, Link] = {}
        self.ended_locally = False
        self.ended_remotely = False
        self.context: Any = None

    def can_send(self) -> bool:
        return self.remote_incoming_window > 0

    # ------------------------------------------------------------------------------------- links

    def new_link(self, name: str, is_sender: bool) -> Link:
        """A link of ours on this session, with the lowest free handle."""
        h = self.next_handle
        while h in self.local_links:
            h += 1
        self.next_handle = h + 1
        link = Link(self, name, h, is_sender)
        self.links_by_name[(name, is_sender)] = link
        self.local_links[h] = link
        return link

    def forget_link(self, link: Link) -> None:
        """Undo `new_link` for a link whose attach was never sent."""
        self.local_links.pop(link.handle, None)
        self.links_by_name.pop((link.name, link.is_sender), None)
        self.next_handle = min(self.next_handle, link.handle)

    def link_for_remote(self, handle: int) -> Link:
        """The link the peer calls `handle` (a protocol error if it names none)."""
        link = self.links_by_remote_handle.get(handle)
        if link is not None:
            return link
        for link in self.local_links.values():
            if link.remote_handle == handle:
                self.links_by_remote_handle[handle] = link
                return link
        raise errors.ProtocolError(errors.UNATTACHED_HANDLE, f"handle {handle} is not attached")

    def drop_link_if_done(self, link: Link) -> None:
        """Forget a link detached by both ends: its handles and name may be used again."""
        if link.closed_locally and link.closed_remotely:
            self.local_links.pop(link.handle, None)
            if link.remote_handle is not None and self.links_by_remote_handle.get(link.remote_handle) is link:
                del self.links_by_remote_handle[link.remote_handle]
            if self.links_by_name.get((link.name, link.is_sender)) is link:
                del self.links_by_name[(link.name, link.is_sender)]

    # -------------------------------------------------------------------------------------- flow

    def apply_flow(self, flow: Flow) -> Link | None:
        """The peer's flow: its window, and the credit or delivery count of the link it names (returned)."""
        remote_next_in = flow.next_incoming_id if flow.next_incoming_id is not None else 0
        self.remote_incoming_window = remote_next_in + flow.incoming_window - self.next_outgoing_id
        if flow.handle is None:
            return None
        link = self.link_for_remote(flow.handle)
        if link.is_sender:
            dc = flow.delivery_count if flow.delivery_count is not None else 0
            link.credit = max(0, dc + (flow.link_credit or 0) - link.delivery_count)
            link.drain = bool(flow.drain)
            link.flow_properties = flow.properties
        else:
            if flow.delivery_count is not None:
                link.delivery_count = flow.delivery_count
            link.available = flow.available or 0
        return link

    def flow_state(
        self, link: Link | None, drain: bool = False, properties: dict[Any, Any] | None = None
    ) -> Flow:
        """Our flow: the session's window and, for `link`, its credit, delivery count and `properties`."""
        f = Flow(
            next_incoming_id=self.next_incoming_id,
            incoming_window=MAX_WINDOW,
            next_outgoing_id=self.next_outgoing_id,
            outgoing_window=MAX_WINDOW,
        )
        if link is not None:
            f.handle = link.handle
            f.delivery_count = link.delivery_count
            f.link_credit = link.credit
            f.drain = drain or link.drain or None
            if link.is_sender:
                f.available = link.available
            f.properties = properties
        return f
