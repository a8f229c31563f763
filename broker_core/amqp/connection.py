"""A sans-I/O AMQP 1.0 connection engine, for both the accepting and the connecting side.

Bytes go in through `receive(data)`; bytes to write come out of `take_output()`. Everything the peer
does is reported by direct calls on a `Handler` (no event objects: this is the broker's hot path).
The engine owns protocol state only: headers, SASL exchange, channels and handles, link credit and
delivery counts, session windows, multi-frame delivery assembly, idle timeouts. Policy (who may
attach what, where a message goes, when to settle) belongs to the handler.

Invariants:
- Nothing is written after a Close went out; after a protocol error the engine is `closed` and ignores
  further input.
- A delivery reaches `Handler.on_delivery` once, complete (all `more` frames joined), in wire order.
- An outgoing transfer is only produced when the link has credit and the session window allows it;
  callers check `Link.credit` and `Session.can_send()` and retry on `on_flow` / `on_session_flow`.
"""

from __future__ import annotations

import logging
import struct
from typing import Any, Protocol

from . import errors
from .codec import DecodeError, decode_value, enc_list_of_encoded, enc_uint
from .framing import (
    AMQP_HEADER,
    EMPTY_FRAME,
    FRAME_AMQP,
    FRAME_SASL,
    HEADER_SIZE,
    MIN_MAX_FRAME_SIZE,
    SASL_HEADER,
    fast_disposition_fields,
    fast_transfer_fields,
    frame,
    single_transfer_head,
    transfer_frames,
    unpack_header,
)
from .performatives import (
    Attach,
    Begin,
    Close,
    Detach,
    End,
    Error,
    Flow,
    Open,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
)

log = logging.getLogger(__name__)

MAX_WINDOW = 2**31 - 1
UINT_MAX = 2**32 - 1
SENDER = False  # AMQP role field values
RECEIVER = True

_DESC_TRANSFER = b"\x00\x53\x14"
_DESC_DISPOSITION = b"\x00\x53\x15"
_DESC_FLOW = b"\x00\x53\x13"


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
        "drain",
        "handle",
        "is_sender",
        "max_message_size",
        "name",
        "partial",
        "partial_size",
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
        self.partial: Any = None  # receiver: [delivery_id, tag, settled, chunks, message_format]
        self.partial_size = 0
        self.reply_deferred = False  # the handler answers the peer's detach itself (e.g. once durable)
        self.context: Any = None  # the handler's object for this link

    @property
    def connection(self) -> Connection:
        return self.session.connection

    def __repr__(self) -> str:
        return f"<Link {self.name!r} {'sender' if self.is_sender else 'receiver'} h={self.handle}>"


class Session:
    __slots__ = (
        "channel",
        "connection",
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

    def __init__(self, connection: Connection, channel: int) -> None:
        self.connection = connection
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


class Handler(Protocol):
    """What the connection's owner hears. Every method may call back into the connection."""

    def on_sasl_init(self, conn: Connection, mechanism: str, response: bytes | None) -> None: ...
    def on_sasl_response(self, conn: Connection, response: bytes) -> None: ...
    def on_sasl_outcome(self, conn: Connection, code: int) -> None: ...
    def on_open(self, conn: Connection, open_: Open) -> None: ...
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
    def on_close(self, conn: Connection, close: Close) -> None: ...


class Connection:
    """One AMQP connection. `server=True` for accepted sockets, False for ones we open."""

    def __init__(
        self,
        handler: Handler,
        *,
        server: bool,
        container_id: str,
        sasl_mechanisms: tuple[str, ...] = ("ANONYMOUS",),
        allow_no_sasl: bool = True,
        max_frame_size: int = 131072,
        channel_max: int = 65535,
        idle_timeout_ms: int = 0,
        open_properties: dict[Any, Any] | None = None,
        offered_capabilities: tuple[str, ...] = (),
        hostname: str | None = None,
    ) -> None:
        self.handler = handler
        self.server = server
        self.container_id = container_id
        self.sasl_mechanisms = sasl_mechanisms
        self.allow_no_sasl = allow_no_sasl
        self.max_frame_size = max_frame_size
        self.channel_max = channel_max
        self.idle_timeout_ms = idle_timeout_ms
        self.open_properties = open_properties
        self.offered_capabilities = offered_capabilities
        self.hostname = hostname
        self.remote_max_frame_size = MIN_MAX_FRAME_SIZE
        self.remote_idle_timeout_ms = 0
        self.remote_open: Open | None = None
        self.sessions: dict[int, Session] = {}  # by our channel
        self.sessions_by_remote: dict[int, Session] = {}
        self.user: str | None = None
        self.sasl_done = False
        self.sasl_offered: Any = None  # client: the mechanisms the server offered
        self.sasl_additional: bytes | None = None  # client: additional-data of the outcome (SCRAM)
        self.used_sasl = False
        self.opened = False
        self.open_sent = False
        self.close_sent = False
        self.closed = False  # no more input will be processed
        self.error: Error | None = None
        self.remote_close: Close | None = None
        self._in = bytearray()
        self._out: list[bytes] = []
        self._phase = "header"  # header -> sasl -> header -> frames
        self._expect_amqp_after_sasl = False
        self.last_received = 0.0
        self.last_sent = 0.0
        self.started_at: float | None = None
        self.handshake_timeout = 10.0  # seconds from the first tick to the peer's open (Artemis's default)
        self.context: Any = None

    # -------------------------------------------------------------------------------- I/O surface

    def take_output(self) -> bytes:
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def has_output(self) -> bool:
        return bool(self._out)

    def receive(self, data: bytes) -> None:
        """Feed bytes read from the socket; protocol errors close the connection with a condition."""
        if self.closed:
            return
        self._in += data
        try:
            self._process()
        except errors.ProtocolError as exc:
            self.fail(exc.condition, exc.description)
        except DecodeError as exc:
            self.fail(errors.DECODE_ERROR, str(exc))
        except (ValueError, TypeError, OverflowError, RecursionError, IndexError, struct.error) as exc:
            # a well-formed encoding with values of the wrong type or range for their field, or sizes that
            # point past the frame
            self.fail(errors.DECODE_ERROR, f"invalid field value: {type(exc).__name__}: {exc}"[:200])

    def fail(self, condition: str, description: str) -> None:
        """Close the connection with an error (a no-op once closed)."""
        if self.closed:
            return
        log.info("closing connection from %s: %s: %s", self.container_id_remote(), condition, description)
        self.error = Error(condition=condition, description=description)
        if self._phase == "frames" and not self.close_sent:
            if not self.open_sent:
                self._send_open()
            self._emit(0, Close(error=self.error).encode_amqp())
            self.close_sent = True
        self.closed = True

    def container_id_remote(self) -> str:
        return self.remote_open.container_id if self.remote_open else "?"

    # ----------------------------------------------------------------------------------- client side

    def start_client(self, sasl: bool = True) -> None:
        """Connecting side: send the first protocol header."""
        self.used_sasl = sasl
        self._out.append(SASL_HEADER if sasl else AMQP_HEADER)
        if not sasl:
            self.sasl_done = True
            self._send_open()

    def sasl_init(self, mechanism: str, initial_response: bytes | None) -> None:
        self._emit(
            0,
            SaslInit(
                mechanism=mechanism, initial_response=initial_response, hostname=self.hostname
            ).encode_amqp(),
            FRAME_SASL,
        )

    def sasl_respond(self, response: bytes) -> None:
        self._emit(0, SaslResponse(response=response).encode_amqp(), FRAME_SASL)

    # ----------------------------------------------------------------------------------- server SASL

    def sasl_challenge(self, challenge: bytes) -> None:
        self._emit(0, SaslChallenge(challenge=challenge).encode_amqp(), FRAME_SASL)

    def sasl_outcome(self, ok: bool, user: str | None, additional: bytes | None = None) -> None:
        """Server: finish the SASL exchange; on failure the peer closes the socket."""
        self._emit(0, SaslOutcome(code=0 if ok else 1, additional_data=additional).encode_amqp(), FRAME_SASL)
        if ok:
            self.user = user
            self.sasl_done = True
            self._phase = "header"
            self._expect_amqp_after_sasl = True
        else:
            self.closed = True

    # -------------------------------------------------------------------------------- processing

    def _process(self) -> None:
        buf = self._in
        view = memoryview(buf)  # one copy out of the buffer per frame, not two
        pos = 0
        try:
            while not self.closed:
                if self._phase == "header":
                    if len(buf) - pos < 8:
                        break
                    self._on_header(bytes(buf[pos : pos + 8]))
                    pos += 8
                    continue
                if len(buf) - pos < HEADER_SIZE:
                    break
                size, doff, ftype, channel = unpack_header(buf, pos)
                if size < HEADER_SIZE or doff < 2:
                    raise errors.ProtocolError(
                        errors.FRAMING_ERROR, f"bad frame header size={size} doff={doff}"
                    )
                if size > self.max_frame_size:
                    raise errors.ProtocolError(
                        errors.FRAMING_ERROR,
                        f"frame of {size} bytes exceeds max-frame-size {self.max_frame_size}",
                    )
                if len(buf) - pos < size:
                    break
                body_start = pos + doff * 4
                end = pos + size
                if body_start > end:
                    raise errors.ProtocolError(errors.FRAMING_ERROR, "data offset beyond frame end")
                pos = end
                if ftype == FRAME_AMQP and self._phase == "frames":
                    if body_start == end:
                        continue  # an empty frame: a heartbeat
                    b = body_start
                    if end - b > 5 and buf[b + 2] == 0x14 and buf[b + 1] == 0x53 and not buf[b]:
                        # a transfer, the hot path: its payload is the only copy made
                        fast = fast_transfer_fields(buf, body_start, end)
                        if fast is not None:
                            self._on_transfer(channel, fast[0], bytes(view[fast[1] : end]))
                            continue
                    self._on_frame(channel, bytes(view[body_start:end]))
                elif ftype == FRAME_SASL and self._phase == "sasl":
                    self._on_sasl_frame(bytes(view[body_start:end]))
                else:
                    raise errors.ProtocolError(errors.FRAMING_ERROR, f"unexpected frame type {ftype}")
        finally:
            view.release()
            del buf[:pos]

    def _on_header(self, header: bytes) -> None:
        if self.server:
            if header == SASL_HEADER and not self.sasl_done:
                self.used_sasl = True
                self._out.append(SASL_HEADER)
                self._emit(
                    0,
                    SaslMechanisms(sasl_server_mechanisms=list(self.sasl_mechanisms)).encode_amqp(),
                    FRAME_SASL,
                )
                self._phase = "sasl"
                return
            if header == AMQP_HEADER and (self.sasl_done or self.allow_no_sasl):
                self._out.append(AMQP_HEADER)
                self._phase = "frames"
                return
            # Unsupported header: answer with the one we want and hang up (part 2.2).
            self._out.append(SASL_HEADER if not self.sasl_done else AMQP_HEADER)
            self.closed = True
            log.info("refused protocol header %r", header)
            return
        expected = AMQP_HEADER if (self.sasl_done or not self.used_sasl) else SASL_HEADER
        if header != expected:
            raise errors.ProtocolError(errors.FRAMING_ERROR, f"peer answered protocol header {header!r}")
        self._phase = "frames" if expected == AMQP_HEADER else "sasl"

    def _on_sasl_frame(self, body: bytes) -> None:
        perf, _ = decode_value(body, 0)
        if self.server:
            if isinstance(perf, SaslInit):
                self.handler.on_sasl_init(self, str(perf.mechanism), perf.initial_response)
            elif isinstance(perf, SaslResponse):
                self.handler.on_sasl_response(self, perf.response)
            else:
                raise errors.ProtocolError(
                    errors.FRAMING_ERROR, f"unexpected SASL frame {type(perf).__name__}"
                )
            return
        if isinstance(perf, SaslMechanisms):
            self.sasl_offered = perf.sasl_server_mechanisms
            self.handler.on_sasl_init(self, "", None)  # client: choose a mechanism now
        elif isinstance(perf, SaslChallenge):
            self.handler.on_sasl_response(self, perf.challenge)
        elif isinstance(perf, SaslOutcome):
            self.sasl_additional = perf.additional_data
            if perf.code != 0:
                self.handler.on_sasl_outcome(self, perf.code)
                self.closed = True
                return
            self.sasl_done = True
            self._phase = "header"
            self._out.append(AMQP_HEADER)
            self._send_open()
            self.handler.on_sasl_outcome(self, 0)
        else:
            raise errors.ProtocolError(errors.FRAMING_ERROR, f"unexpected SASL frame {type(perf).__name__}")

    def _on_frame(self, channel: int, body: bytes) -> None:
        head = body[:3]
        if head == _DESC_TRANSFER:  # one that `_process` could not read quickly
            fields, end = decode_value(body, 3)
            self._on_transfer(channel, fields, body[end:])
            return
        if head == _DESC_DISPOSITION:
            fields = fast_disposition_fields(body)
            if fields is None:
                fields, _ = decode_value(body, 3)
            self._on_disposition(channel, fields)
            return
        perf, _ = decode_value(body, 0)
        if isinstance(perf, Flow):
            self._on_flow(channel, perf)
        elif isinstance(perf, Attach):
            self._on_attach(channel, perf)
        elif isinstance(perf, Detach):
            self._on_detach(channel, perf)
        elif isinstance(perf, Begin):
            self._on_begin(channel, perf)
        elif isinstance(perf, End):
            self._on_end(channel, perf)
        elif isinstance(perf, Open):
            self._on_open(perf)
        elif isinstance(perf, Close):
            self._on_close(perf)
        else:
            raise errors.ProtocolError(errors.FRAMING_ERROR, f"unexpected frame body {perf!r:.80}")

    # ------------------------------------------------------------------------------ connection level

    def _on_open(self, open_: Open) -> None:
        if self.opened:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, "second open")
        if not isinstance(open_.container_id, str):
            raise errors.ProtocolError(errors.INVALID_FIELD, "open without container-id")
        self.remote_open = open_
        self.opened = True
        mfs = open_.max_frame_size if open_.max_frame_size is not None else UINT_MAX
        if mfs < MIN_MAX_FRAME_SIZE:
            raise errors.ProtocolError(errors.FRAME_SIZE_TOO_SMALL, f"max-frame-size {mfs} below 512")
        self.remote_max_frame_size = min(mfs, 1 << 30)
        self.remote_idle_timeout_ms = open_.idle_time_out or 0
        self.handler.on_open(self, open_)

    def _send_open(self) -> None:
        if self.open_sent:
            return
        self.open_sent = True
        self._emit(
            0,
            Open(
                container_id=self.container_id,
                hostname=self.hostname if not self.server else None,
                max_frame_size=self.max_frame_size,
                channel_max=self.channel_max,
                idle_time_out=self.idle_timeout_ms or None,
                offered_capabilities=list(self.offered_capabilities) or None,
                properties=self.open_properties,
            ).encode_amqp(),
        )

    def accept_open(self) -> None:
        """Server: answer the peer's open."""
        self._send_open()

    def close(self, condition: str | None = None, description: str | None = None) -> None:
        if self.close_sent:
            return
        if self._phase != "frames":
            self.closed = True
            return
        self._send_open()
        err = Error(condition=condition, description=description) if condition else None
        self._emit(0, Close(error=err).encode_amqp())
        self.close_sent = True

    def _on_close(self, close: Close) -> None:
        self.remote_close = close
        self.handler.on_close(self, close)
        if not self.close_sent:
            self._send_open()
            self._emit(0, Close().encode_amqp())
            self.close_sent = True
        self.closed = True

    # -------------------------------------------------------------------------------- session level

    def _session(self, channel: int) -> Session:
        s = self.sessions_by_remote.get(channel)
        if s is None:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, f"no session on channel {channel}")
        return s

    def _on_begin(self, channel: int, begin: Begin) -> None:
        if not self.opened:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, "begin before open")
        if channel in self.sessions_by_remote:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, f"channel {channel} already in use")
        if begin.remote_channel is not None:  # the answer to a begin we sent
            s = self.sessions.get(begin.remote_channel)
            if s is None:
                raise errors.ProtocolError(errors.ILLEGAL_STATE, "begin answers an unknown channel")
        else:
            s = Session(self, self._free_channel())
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
            session = Session(self, self._free_channel())
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
        err = Error(condition=condition, description=description) if condition else None
        self._emit(session.channel, End(error=err).encode_amqp())
        self._drop_session_if_done(session)

    def _on_end(self, channel: int, end: End) -> None:
        s = self._session(channel)
        s.ended_remotely = True
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

    def _on_attach(self, channel: int, attach: Attach) -> None:
        s = self._session(channel)
        if attach.handle in s.links_by_remote_handle:
            raise errors.ProtocolError(errors.HANDLE_IN_USE, f"handle {attach.handle} already attached")
        # The peer's role is in the frame; ours is the opposite.
        is_sender = bool(attach.role)
        link = s.links_by_name.get((attach.name, is_sender))
        if link is None or link.remote_handle is not None:
            link = Link(s, attach.name, self._free_handle(s), is_sender)
            s.links_by_name[(attach.name, is_sender)] = link
            s.local_links[link.handle] = link
        link.remote_handle = attach.handle
        link.remote_attach = attach
        s.links_by_remote_handle[attach.handle] = link
        if not is_sender:
            link.delivery_count = attach.initial_delivery_count or 0
        self.handler.on_attach(link, attach)

    def _free_handle(self, s: Session) -> int:
        h = s.next_handle
        while h in s.local_links:
            h += 1
        s.next_handle = h + 1
        return h

    def attach(self, session: Session, attach: Attach, link: Link | None = None) -> Link:
        """Send an attach: a new link of ours (`link` None) or the answer to the peer's attach."""
        if link is None:
            is_sender = not attach.role
            link = Link(session, attach.name, self._free_handle(session), is_sender)
            session.links_by_name[(attach.name, is_sender)] = link
            session.local_links[link.handle] = link
        attach.handle = link.handle
        attach.role = RECEIVER if not link.is_sender else SENDER
        if link.is_sender and attach.initial_delivery_count is None:
            attach.initial_delivery_count = link.delivery_count
        link.attach = attach
        self._emit(session.channel, attach.encode_amqp())
        return link

    def detach(
        self, link: Link, closed: bool = True, condition: str | None = None, description: str | None = None
    ) -> None:
        if link.closed_locally:
            return
        link.closed_locally = True
        if link.attach is None:
            # Never answered: a detach must follow an attach, so answer with a null terminus first.
            ra = link.remote_attach
            self.attach(link.session, Attach(name=link.name, source=ra.source if ra else None), link)
        err = Error(condition=condition, description=description) if condition else None
        self._emit(link.session.channel, Detach(handle=link.handle, closed=closed, error=err).encode_amqp())
        self._drop_link_if_done(link)

    def _on_detach(self, channel: int, detach: Detach) -> None:
        s = self._session(channel)
        link = s.links_by_remote_handle.get(detach.handle) or self._link_by_remote_handle(s, detach.handle)
        link.closed_remotely = True
        self.handler.on_detach(link, detach)
        if not link.closed_locally and not link.reply_deferred:
            self.detach(link, closed=bool(detach.closed))
        self._drop_link_if_done(link)

    def _link_by_remote_handle(self, s: Session, handle: int) -> Link:
        for link in s.local_links.values():
            if link.remote_handle == handle:
                s.links_by_remote_handle[handle] = link
                return link
        raise errors.ProtocolError(errors.UNATTACHED_HANDLE, f"handle {handle} is not attached")

    def _drop_link_if_done(self, link: Link) -> None:
        if link.closed_locally and link.closed_remotely:
            s = link.session
            s.local_links.pop(link.handle, None)
            if link.remote_handle is not None and s.links_by_remote_handle.get(link.remote_handle) is link:
                del s.links_by_remote_handle[link.remote_handle]
            if s.links_by_name.get((link.name, link.is_sender)) is link:
                del s.links_by_name[(link.name, link.is_sender)]

    # ------------------------------------------------------------------------------- flow control

    def _on_flow(self, channel: int, flow: Flow) -> None:
        s = self._session(channel)
        remote_next_in = flow.next_incoming_id if flow.next_incoming_id is not None else 0
        s.remote_incoming_window = remote_next_in + flow.incoming_window - s.next_outgoing_id
        if flow.handle is None:
            self.handler.on_session_flow(s)
            if flow.echo:
                self._send_flow(s, None)
            return
        link = s.links_by_remote_handle.get(flow.handle) or self._link_by_remote_handle(s, flow.handle)
        if link.is_sender:
            dc = flow.delivery_count if flow.delivery_count is not None else 0
            link.credit = max(0, dc + (flow.link_credit or 0) - link.delivery_count)
            link.drain = bool(flow.drain)
        else:
            if flow.delivery_count is not None:
                link.delivery_count = flow.delivery_count
            link.available = flow.available or 0
        self.handler.on_flow(link)
        if flow.echo:
            self._send_flow(s, link)
        if s.remote_incoming_window > 0:
            self.handler.on_session_flow(s)

    def flow(self, link: Link, credit: int | None = None, drain: bool = False) -> None:
        """Receiver: grant `credit` (absolute); sender: report state (e.g. after a drain)."""
        if credit is not None:
            link.credit = credit
        self._send_flow(link.session, link, drain)

    def _send_flow(self, s: Session, link: Link | None, drain: bool = False) -> None:
        f = Flow(
            next_incoming_id=s.next_incoming_id,
            incoming_window=MAX_WINDOW,
            next_outgoing_id=s.next_outgoing_id,
            outgoing_window=MAX_WINDOW,
        )
        if link is not None:
            f.handle = link.handle
            f.delivery_count = link.delivery_count
            f.link_credit = link.credit
            f.drain = drain or link.drain or None
            if link.is_sender:
                f.available = link.available
        self._emit(s.channel, f.encode_amqp())

    def drain_complete(self, link: Link) -> None:
        """Sender with nothing more to send while draining: use up the credit and say so."""
        link.delivery_count = (link.delivery_count + link.credit) % (UINT_MAX + 1)
        link.credit = 0
        self._send_flow(link.session, link, drain=True)
        link.drain = False

    # -------------------------------------------------------------------------------- deliveries

    def _on_transfer(self, channel: int, f: list[Any], payload: bytes) -> None:
        s = self.sessions_by_remote.get(channel)
        if s is None:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, f"transfer on unused channel {channel}")
        n = len(f)
        handle = f[0] if n else None
        link = s.links_by_remote_handle.get(handle) if handle is not None else None
        if link is None:
            if handle is None:
                raise errors.ProtocolError(errors.INVALID_FIELD, "transfer without handle")
            link = self._link_by_remote_handle(s, handle)
        if link.is_sender:
            raise errors.ProtocolError(errors.ILLEGAL_STATE, "transfer on a link where we are the sender")
        more = n > 5 and f[5] is True
        aborted = n > 9 and f[9] is True
        partial = link.partial
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
            if more:
                link.partial = [delivery_id, tag, settled, [payload], fmt]
                link.partial_size = len(payload)
                self._check_size(link)
                return
            if not settled:
                s.incoming_unsettled[delivery_id] = link
            self.handler.on_delivery(link, delivery_id, tag, settled, payload, fmt)
            return
        if aborted:
            link.partial = None
            link.partial_size = 0
            return
        partial[3].append(payload)
        link.partial_size += len(payload)
        if n > 4 and f[4] is True:
            partial[2] = True
        self._check_size(link)
        if more:
            return
        link.partial = None
        link.partial_size = 0
        delivery_id, tag, settled, chunks, fmt = partial
        if not settled:
            s.incoming_unsettled[delivery_id] = link
        self.handler.on_delivery(link, delivery_id, tag, settled, b"".join(chunks), fmt)

    def _check_size(self, link: Link) -> None:
        if link.max_message_size and link.partial_size > link.max_message_size:
            raise errors.ProtocolError(
                errors.MESSAGE_SIZE_EXCEEDED,
                f"message on link {link.name!r} exceeds max-message-size {link.max_message_size}",
            )

    def send_delivery(
        self,
        link: Link,
        tag: bytes,
        payload: bytes,
        settled: bool,
        context: Any = None,
        message_format: int = 0,
    ) -> int:
        """Send one message on a sender link with credit; returns its delivery-id."""
        s = link.session
        delivery_id = s.next_outgoing_id
        s.next_outgoing_id = (delivery_id + 1) & UINT_MAX
        s.remote_incoming_window -= 1
        link.credit -= 1
        link.delivery_count = (link.delivery_count + 1) & UINT_MAX
        if not settled:
            s.outgoing_unsettled[delivery_id] = (link, context)
        if message_format == 0:
            head = single_transfer_head(
                s.channel, link.handle, delivery_id, tag, settled, len(payload), self.remote_max_frame_size
            )
            if head is not None:  # one frame: its two pieces are joined with the rest of the output
                self._out += (head, payload)
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
        )
        self._out.extend(frames)
        return delivery_id

    def _on_disposition(self, channel: int, f: list[Any]) -> None:
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

    def settle_incoming(self, session: Session, first: int, last: int, state_bytes: bytes | None) -> None:
        """Send a settled disposition for a range of deliveries we received."""
        self._out.append(_disposition_frame(session.channel, True, first, last, state_bytes))

    def update_outgoing(
        self, session: Session, first: int, last: int, settled: bool, state_bytes: bytes | None
    ) -> None:
        """Send a disposition (as sender) for deliveries we sent (e.g. settling after the peer's outcome)."""
        self._out.append(_disposition_frame(session.channel, False, first, last, state_bytes, settled))

    # -------------------------------------------------------------------------------------- timers

    def tick(self, now: float) -> float | None:
        """Call periodically with a monotonic clock; returns when to call again (None: not needed)."""
        if self.closed:
            return None
        if not self.opened:
            if self.started_at is None:
                self.started_at = now
            elif self.handshake_timeout and now - self.started_at > self.handshake_timeout:
                log.info(
                    "closing connection: no AMQP open within %g s (handshake timeout)", self.handshake_timeout
                )
                self.fail(errors.RESOURCE_LIMIT_EXCEEDED, "handshake timeout")
                self.closed = True
                return None
        if self._phase != "frames":
            return None
        deadline = None
        if self.remote_idle_timeout_ms:
            interval = self.remote_idle_timeout_ms / 2000.0
            if now - self.last_sent >= interval:
                self._out.append(EMPTY_FRAME)
                self.last_sent = now
            deadline = self.last_sent + interval
        if self.idle_timeout_ms and self.last_received:
            limit = self.idle_timeout_ms / 1000.0
            if now - self.last_received > limit:
                self.fail(
                    errors.RESOURCE_LIMIT_EXCEEDED, f"local-idle-timeout expired ({self.idle_timeout_ms} ms)"
                )
                return None
            d = self.last_received + limit
            deadline = d if deadline is None else min(deadline, d)
        return deadline

    # ------------------------------------------------------------------------------------- output

    def _emit(self, channel: int, body: bytes, frame_type: int = FRAME_AMQP) -> None:
        self._out.append(frame(channel, body, frame_type))


def _disposition_frame(
    channel: int, role: bool, first: int, last: int, state: bytes | None, settled: bool = True
) -> bytes:
    fields = [b"\x41" if role else b"\x42", enc_uint(first)]
    fields.append(enc_uint(last) if last != first else b"\x40")
    fields.append(b"\x41" if settled else b"\x42")
    if state is not None:
        fields.append(state)
    return frame(channel, _DESC_DISPOSITION + enc_list_of_encoded(fields))
