"""The session and link level of one connection (AMQP 1.0 part 2.5-2.7): channels and handles, link
credit and delivery counts, session windows, transfers in and out, dispositions.

The connection hands each session-level frame here and forwards its handler's calls (begin, attach,
flow, send_delivery, ...); what the peer does at this level is reported to a `SessionHandler`, whose
methods never need the connection itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from . import errors
from .endpoints import MAX_WINDOW, UINT_MAX, Link, Session
from .framing import FRAME_AMQP, MIN_MAX_FRAME_SIZE, frame, single_transfer_head, transfer_frames
from .performatives import Attach, Begin, Detach, End, Error, Flow
from .transfers import PartialDelivery, disposition_frame, in_memory

# How a multi-frame delivery is kept while its frames arrive: (link, delivery-id, tag, settled, the first
# frame's payload, message-format) -> the delivery.
Partials = Callable[[Link, int, bytes, bool, bytes, int], PartialDelivery]

SENDER = False  # AMQP role field values
RECEIVER = True


class SessionHandler(Protocol):
    """What the owner of a connection hears at the session and link level."""

    def on_begin(self, session: Session, begin: Begin) -> None: ...
    def on_attach(self, link: Link, attach: Attach) -> None: ...
    def on_flow(self, link: Link) -> None: ...
    def on_session_flow(self, session: Session) -> None: ...
    def on_delivery(
        self, link: Link, delivery_id: int, tag: bytes, settled: bool, payload: bytes, message_format: int
    ) -> None: ...
    def on_disposition(
        self, session: Session, role: bool, first: int, last: int, settled: bool, state: Any
    ) -> None: ...
    def on_detach(self, link: Link, detach: Detach) -> None: ...
    def on_end(self, session: Session, end: End) -> None: ...


class Sessions:
    """The sessions of one connection, and everything on them."""

    def __init__(
        self, handler: SessionHandler, out: list[bytes], channel_max: int, partials: Partials = in_memory
    ) -> None:
        self.handler = handler
        self.partials = partials
        self.out = out  # the connection's output: frames join it in order
        self.channel_max = channel_max
        self.remote_max_frame_size = MIN_MAX_FRAME_SIZE  # the peer's, once its open arrived
        self.sessions: dict[int, Session] = {}  # by our channel
        self.sessions_by_remote: dict[int, Session] = {}

    # -------------------------------------------------------------------------------- session level

    def _session(self, channel: int) -> Session:
        s = self.sessions_by_remote.get(channel)
        if s is None:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, f"no session on channel {channel}")
        return s

    def on_begin(self, channel: int, begin: Begin) -> None:
        if channel in self.sessions_by_remote:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, f"channel {channel} already in use")
        if begin.remote_channel is not None:  # the answer to a begin we sent
            s = self.sessions.get(begin.remote_channel)
            if s is None:
                raise errors.ProtocolError(errors.ILLEGAL_STATE, "begin answers an unknown channel")
        else:
            s = Session(self._free_channel())
            self.sessions[s.channel] = s
        s.remote_channel = channel
        s.next_incoming_id = begin.next_outgoing_id
        s.remote_incoming_window = begin.incoming_window
        s.remote_next_incoming_id = 0
        self.sessions_by_remote[channel] = s
        self.handler.on_begin(s, begin)

    def _free_channel(self) -> int:
        ch = 0
        while ch in self.sessions:
            ch += 1
        if ch > self.channel_max:
            raise errors.ProtocolError(errors.RESOURCE_LIMIT_EXCEEDED, "no free channel")
        return ch

    def begin(self, session: Session | None = None) -> Session:
        """Begin a session: a new one of ours, or answer the peer's (`session` from on_begin)."""
        if session is None:
            session = Session(self._free_channel())
            self.sessions[session.channel] = session
        self._emit(
            session.channel,
            Begin(
                remote_channel=session.remote_channel,
                next_outgoing_id=session.next_outgoing_id,
                incoming_window=MAX_WINDOW,
                outgoing_window=MAX_WINDOW,
                handle_max=UINT_MAX,
            ).encode_amqp(),
        )
        return session

    def end(self, session: Session, condition: str | None = None, description: str | None = None) -> None:
        if session.ended_locally:
            return
        session.ended_locally = True
        self._emit_fitted(session.channel, lambda err: End(error=err).encode_amqp(), condition, description)
        self._drop_session_if_done(session)

    def on_end(self, channel: int, end: End) -> None:
        s = self._session(channel)
        s.ended_remotely = True
        for link in list(s.local_links.values()):
            discard_partial(link)
        self.handler.on_end(s, end)
        if not s.ended_locally:
            self.end(s)
        self._drop_session_if_done(s)

    def _drop_session_if_done(self, s: Session) -> None:
        if s.ended_locally and s.ended_remotely:
            self.sessions.pop(s.channel, None)
            if s.remote_channel is not None:
                self.sessions_by_remote.pop(s.remote_channel, None)

    # ----------------------------------------------------------------------------------- link level

    def on_attach(self, channel: int, attach: Attach) -> None:
        s = self._session(channel)
        if attach.handle in s.links_by_remote_handle:
            raise errors.ProtocolError(errors.HANDLE_IN_USE, f"handle {attach.handle} already attached")
        # The peer's role is in the frame; ours is the opposite.
        is_sender = bool(attach.role)
        link = s.links_by_name.get((attach.name, is_sender))
        if link is None or link.remote_handle is not None:
            link = s.new_link(attach.name, is_sender)
        link.remote_handle = attach.handle
        link.remote_attach = attach
        s.links_by_remote_handle[attach.handle] = link
        if not is_sender:
            link.delivery_count = attach.initial_delivery_count or 0
        self.handler.on_attach(link, attach)

    def attach(self, session: Session, attach: Attach, link: Link | None = None) -> Link:
        """Send an attach: a new link of ours (`link` None) or the answer to the peer's attach.

        Raises `FrameTooLarge`, sending nothing, when the attach does not fit the peer's max-frame-size
        (long addresses, many capabilities or properties): the caller may refuse the link instead."""
        new = link is None
        if link is None:
            link = session.new_link(attach.name, not attach.role)
        attach.handle = link.handle
        attach.role = RECEIVER if not link.is_sender else SENDER
        if link.is_sender and attach.initial_delivery_count is None:
            attach.initial_delivery_count = link.delivery_count
        body = frame(session.channel, attach.encode_amqp(), FRAME_AMQP)
        if len(body) > self.remote_max_frame_size:
            if new:
                session.forget_link(link)
            what = f"attach of link {attach.name!r:.100}"
            raise errors.FrameTooLarge(what, len(body), self.remote_max_frame_size)
        link.attach = attach
        self.out.append(body)
        return link

    def detach(
        self, link: Link, closed: bool = True, condition: str | None = None, description: str | None = None
    ) -> None:
        if link.closed_locally:
            return
        if link.attach is None:
            # Never answered: a detach must follow an attach, so answer with a null terminus first (the
            # peer's source echoed if it fits; only the name if not).
            ra = link.remote_attach
            try:
                self.attach(link.session, Attach(name=link.name, source=ra.source if ra else None), link)
            except errors.FrameTooLarge:
                self.attach(link.session, Attach(name=link.name), link)
        link.closed_locally = True
        discard_partial(link)

        def detach_frame(err: Error | None) -> bytes:
            return Detach(handle=link.handle, closed=closed, error=err).encode_amqp()

        self._emit_fitted(link.session.channel, detach_frame, condition, description)
        link.session.drop_link_if_done(link)

    def on_detach(self, channel: int, detach: Detach) -> None:
        s = self._session(channel)
        link = s.link_for_remote(detach.handle)
        link.closed_remotely = True
        discard_partial(link)
        self.handler.on_detach(link, detach)
        if not link.closed_locally and not link.reply_deferred:
            self.detach(link, closed=bool(detach.closed))
        link.session.drop_link_if_done(link)

    # ------------------------------------------------------------------------------- flow control

    def on_flow(self, channel: int, flow: Flow) -> None:
        s = self._session(channel)
        link = s.apply_flow(flow)
        if link is None:
            self.handler.on_session_flow(s)
            if flow.echo:
                self._send_flow(s, None)
            return
        self.handler.on_flow(link)
        if flow.echo:
            self._send_flow(s, link)
        if s.remote_incoming_window > 0:
            self.handler.on_session_flow(s)

    def flow(
        self,
        link: Link,
        credit: int | None = None,
        drain: bool = False,
        properties: dict[Any, Any] | None = None,
    ) -> None:
        """Receiver: grant `credit` (absolute), with `properties` (a transactional acquisition's `txn-id`);
        sender: report state (e.g. after a drain)."""
        if credit is not None:
            link.credit = credit
        self._send_flow(link.session, link, drain, properties)

    def _send_flow(
        self, s: Session, link: Link | None, drain: bool = False, properties: dict[Any, Any] | None = None
    ) -> None:
        self._emit(s.channel, s.flow_state(link, drain, properties).encode_amqp())

    def drain_complete(self, link: Link) -> None:
        """Sender with nothing more to send while draining: use up the credit and say so."""
        link.delivery_count = (link.delivery_count + link.credit) % (UINT_MAX + 1)
        link.credit = 0
        self._send_flow(link.session, link, drain=True)
        link.drain = False

    # -------------------------------------------------------------------------------- deliveries

    def on_transfer(self, channel: int, f: list[Any], payload: bytes) -> None:
        s = self.sessions_by_remote.get(channel)
        if s is None:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, f"transfer on unused channel {channel}")
        n = len(f)
        handle = f[0] if n else None
        link = s.links_by_remote_handle.get(handle) if handle is not None else None
        if link is None:
            if handle is None:
                raise errors.ProtocolError(errors.INVALID_FIELD, "transfer without handle")
            link = s.link_for_remote(handle)
        if link.is_sender:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, "transfer on a link where we are the sender")
        more = n > 5 and f[5] is True
        aborted = n > 9 and f[9] is True
        partial: PartialDelivery | None = link.partial
        if partial is None:
            delivery_id = f[1] if n > 1 else None
            if delivery_id is None:
                raise errors.ProtocolError(errors.INVALID_FIELD, "first transfer without delivery-id")
            s.next_incoming_id = (delivery_id + 1) & UINT_MAX
            if link.credit <= 0:
                raise errors.ProtocolError(
                    errors.TRANSFER_LIMIT_EXCEEDED, f"transfer on {link.name!r} without credit"
                )
            link.credit -= 1
            link.delivery_count = (link.delivery_count + 1) & UINT_MAX
            tag = f[2] if n > 2 and f[2] is not None else b""
            fmt = f[3] if n > 3 and f[3] is not None else 0
            settled = n > 4 and f[4] is True
            if aborted:
                return
            link.delivery_state = f[7] if n > 7 else None
            if more:
                partial = link.partial = self.partials(link, delivery_id, tag, settled, payload, fmt)
                partial.check_size(link.name, link.max_message_size)
                return
            if not settled:
                s.incoming_unsettled[delivery_id] = link
            self.handler.on_delivery(link, delivery_id, tag, settled, payload, fmt)
            return
        if aborted:
            discard_partial(link)
            return
        partial.add(payload, n > 4 and f[4] is True)
        partial.check_size(link.name, link.max_message_size)
        if n > 7 and f[7] is not None:  # a later frame may say the state (the last one said wins)
            link.delivery_state = f[7]
        if more:
            return
        link.partial = None
        whole = b"" if partial.refused else partial.payload()
        partial.discard()
        if partial.refused:
            return  # answered already
        if not partial.settled:
            s.incoming_unsettled[partial.delivery_id] = link
        self.handler.on_delivery(
            link, partial.delivery_id, partial.tag, partial.settled, whole, partial.message_format
        )

    def discard_partials(self) -> None:
        """The connection is gone: every delivery still arriving lets go of what it holds."""
        for s in self.sessions.values():
            for link in s.local_links.values():
                discard_partial(link)

    def send_delivery(
        self,
        link: Link,
        tag: bytes,
        payload: bytes,
        settled: bool,
        context: Any = None,
        message_format: int = 0,
        state: bytes | None = None,
    ) -> int:
        """Send one message on a sender link with credit; returns its delivery-id. `state` is an encoded
        delivery state for the transfer (a transactional send's `TransactionalState`)."""
        s = link.session
        delivery_id = s.next_outgoing_id
        s.next_outgoing_id = (delivery_id + 1) & UINT_MAX
        s.remote_incoming_window -= 1
        link.credit -= 1
        link.delivery_count = (link.delivery_count + 1) & UINT_MAX
        if not settled:
            s.outgoing_unsettled[delivery_id] = (link, context)
        if message_format == 0 and state is None:
            head = single_transfer_head(
                s.channel, link.handle, delivery_id, tag, settled, len(payload), self.remote_max_frame_size
            )
            if head is not None:  # one frame: its two pieces are joined with the rest of the output
                self.out += (head, payload)
                return delivery_id
        frames = transfer_frames(
            s.channel,
            link.handle,
            delivery_id,
            tag,
            settled,
            payload,
            self.remote_max_frame_size,
            message_format,
            state,
        )
        self.out.extend(frames)
        return delivery_id

    def on_disposition(self, channel: int, f: list[Any]) -> None:
        s = self.sessions_by_remote.get(channel)
        if s is None:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, f"disposition on unused channel {channel}")
        n = len(f)
        role = bool(f[0]) if n else False
        first = f[1] if n > 1 else None
        if first is None:
            raise errors.ProtocolError(errors.INVALID_FIELD, "disposition without first")
        last = f[2] if n > 2 and f[2] is not None else first
        settled = n > 3 and f[3] is True
        state = f[4] if n > 4 else None
        self.handler.on_disposition(s, role, first, last, settled, state)

    def settle_incoming(
        self, session: Session, first: int, last: int, state_bytes: bytes | None, settled: bool = True
    ) -> None:
        """Send a disposition (settled unless said otherwise) for a range of deliveries we received."""
        self.out.append(disposition_frame(session.channel, True, first, last, state_bytes, settled))

    def update_outgoing(
        self, session: Session, first: int, last: int, settled: bool, state_bytes: bytes | None
    ) -> None:
        """Send a disposition (as sender) for deliveries we sent (e.g. settling after the peer's outcome)."""
        self.out.append(disposition_frame(session.channel, False, first, last, state_bytes, settled))

    def _emit(self, channel: int, body: bytes) -> None:
        self.out.append(frame(channel, body, FRAME_AMQP))

    def _emit_fitted(
        self,
        channel: int,
        encode: Callable[[Error | None], bytes],
        condition: str | None,
        description: str | None,
    ) -> None:
        """A detach or end with its error, the description shortened until the frame fits the peer's
        max-frame-size (an error description is free text: a refusal naming a long address must not
        become a frame the peer cannot take)."""
        self.out.append(fitted_frame(channel, encode, condition, description, self.remote_max_frame_size))


def discard_partial(link: Link) -> None:
    partial: PartialDelivery | None = link.partial
    if partial is not None:
        link.partial = None
        partial.discard()


def fitted_frame(
    channel: int,
    encode: Callable[[Error | None], bytes],
    condition: str | None,
    description: str | None,
    limit: int,
) -> bytes:
    """The frame of `encode(error)`, its description cut short when the whole would exceed `limit`."""
    if not condition:
        return frame(channel, encode(None), FRAME_AMQP)
    body = frame(channel, encode(Error(condition=condition, description=description)), FRAME_AMQP)
    if not description or len(body) <= limit:
        return body
    room = max(0, len(description) - (len(body) - limit) - 3)
    while True:  # characters are 1-4 bytes in UTF-8: cut again until it fits
        short = description[:room] + "..." if room else None
        body = frame(channel, encode(Error(condition=condition, description=short)), FRAME_AMQP)
        if len(body) <= limit or not room:
            return body
        room = max(0, room - (len(body) - limit))
