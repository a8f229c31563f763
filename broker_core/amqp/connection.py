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
from .codec import DecodeError, decode_value
from .endpoints import UINT_MAX, Link, Session
from .framing import (
    AMQP_HEADER,
    EMPTY_FRAME,
    FRAME_AMQP,
    FRAME_SASL,
    HEADER_SIZE,
    MIN_MAX_FRAME_SIZE,
    fast_disposition_fields,
    fast_transfer_fields,
    frame,
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
from .sasl import Phase, Sasl
from .sessions import Partials, SessionHandler, Sessions, fitted_frame
from .transfers import in_memory

__all__ = ["Connection", "Handler", "Link", "Session", "SessionHandler"]

log = logging.getLogger(__name__)

SENDER = False  # AMQP role field values
RECEIVER = True

_DESC_TRANSFER = b"\x00\x53\x14"
_DESC_DISPOSITION = b"\x00\x53\x15"
_NEVER = 1 << 62  # an idle timeout that is not set


class Handler(SessionHandler, Protocol):
    """What the connection's owner hears (`SessionHandler`'s events too). Every method may call back
    into the connection.

    SASL: an accepting side hears `on_sasl_init` and `on_sasl_response` (and answers with `sasl_challenge`
    or `sasl_outcome`); a connecting side hears `on_sasl_mechanisms`, `on_sasl_challenge` and
    `on_sasl_outcome` (and answers with `sasl_init` or `sasl_respond`)."""

    def on_sasl_init(self, conn: Connection, mechanism: str, response: bytes | None) -> None: ...
    def on_sasl_response(self, conn: Connection, response: bytes) -> None: ...
    def on_sasl_mechanisms(self, conn: Connection, offered: list[str]) -> None: ...
    def on_sasl_challenge(self, conn: Connection, challenge: bytes) -> None: ...
    def on_sasl_outcome(self, conn: Connection, code: int) -> None: ...
    def on_open(self, conn: Connection, open_: Open) -> None: ...
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
        partials: Partials = in_memory,
    ) -> None:
        self.handler = handler
        self.server = server
        self.container_id = container_id
        self.max_frame_size = max_frame_size
        self.channel_max = channel_max
        self.idle_timeout_ms = idle_timeout_ms
        self.open_properties = open_properties
        self.offered_capabilities = offered_capabilities
        self.hostname = hostname
        self.remote_idle_timeout_ms = 0
        self.remote_open: Open | None = None
        self.opened = False
        self.open_sent = False
        self.close_sent = False
        self.closed = False  # no more input will be processed
        self.error: Error | None = None
        self.remote_close: Close | None = None
        self._in = bytearray()
        self._out: list[bytes] = []
        self._phase = Phase.HEADER  # then SASL, HEADER again, FRAMES; or HEADER, FRAMES without SASL
        self.sasl = Sasl(self._out, server=server, mechanisms=sasl_mechanisms, allow_no_sasl=allow_no_sasl)
        self.links = Sessions(handler, self._out, channel_max, partials)
        self.sessions = self.links.sessions  # by our channel
        self.last_received = 0.0
        self.last_sent = 0.0
        self.started_at: float | None = None
        self.handshake_timeout = 10.0  # seconds from the first tick to the peer's open (Artemis's default)
        self.context: Any = None

    @property
    def user(self) -> str | None:
        """Accepting side: the authenticated user (None: anonymous)."""
        return self.sasl.user

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
        if self._phase == Phase.FRAMES and not self.close_sent:
            if not self.open_sent:
                self._send_open()
            self._send_close(condition, description)
        self.closed = True
        self.discard_partials()

    def discard_partials(self) -> None:
        """Every delivery still arriving lets go of what it holds (the connection is gone, or failed)."""
        self.links.discard_partials()

    def container_id_remote(self) -> str:
        return self.remote_open.container_id if self.remote_open else "?"

    # ----------------------------------------------------------------------------------- client side

    def start_client(self, sasl: bool = True) -> None:
        """Connecting side: send the first protocol header."""
        self.sasl.start_client(sasl)
        if not sasl:
            self._send_open()

    def sasl_init(self, mechanism: str, initial_response: bytes | None) -> None:
        self.sasl.init(mechanism, initial_response, self.hostname)

    def sasl_respond(self, response: bytes) -> None:
        self.sasl.respond(response)

    # ----------------------------------------------------------------------------------- server SASL

    def sasl_challenge(self, challenge: bytes) -> None:
        self.sasl.challenge(challenge)

    def sasl_outcome(self, ok: bool, user: str | None, additional: bytes | None = None) -> None:
        """Server: finish the SASL exchange; on failure the peer closes the socket."""
        self.sasl.outcome(ok, user, additional)
        if ok:
            self._phase = Phase.HEADER
        else:
            self.closed = True

    # -------------------------------------------------------------------------------- processing

    def _process(self) -> None:
        buf = self._in
        view = memoryview(buf)  # one copy out of the buffer per frame, not two
        pos = 0
        try:
            while not self.closed:
                if self._phase == Phase.HEADER:
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
                if ftype == FRAME_AMQP and self._phase == Phase.FRAMES:
                    if body_start == end:
                        continue  # an empty frame: a heartbeat
                    b = body_start
                    if end - b > 5 and buf[b + 2] == 0x14 and buf[b + 1] == 0x53 and not buf[b]:
                        # a transfer, the hot path: its payload is the only copy made
                        fast = fast_transfer_fields(buf, body_start, end)
                        if fast is not None:
                            self.links.on_transfer(channel, fast[0], bytes(view[fast[1] : end]))
                            continue
                    self._on_frame(channel, bytes(view[body_start:end]))
                elif ftype == FRAME_SASL and self._phase == Phase.SASL:
                    self._on_sasl_frame(bytes(view[body_start:end]))
                else:
                    raise errors.ProtocolError(errors.FRAMING_ERROR, f"unexpected frame type {ftype}")
        finally:
            view.release()
            del buf[:pos]

    def _on_header(self, header: bytes) -> None:
        phase = self.sasl.on_header(header)
        if phase is None:
            self.closed = True
            log.info("refused protocol header %r", header)
            return
        self._phase = phase

    def _on_sasl_frame(self, body: bytes) -> None:
        perf = self.sasl.read(body)
        handler = self.handler
        if isinstance(perf, SaslInit):
            handler.on_sasl_init(self, str(perf.mechanism), perf.initial_response)
        elif isinstance(perf, SaslResponse):
            handler.on_sasl_response(self, perf.response)
        elif isinstance(perf, SaslMechanisms):
            handler.on_sasl_mechanisms(self, [str(m) for m in _as_list(perf.sasl_server_mechanisms)])
        elif isinstance(perf, SaslChallenge):
            handler.on_sasl_challenge(self, perf.challenge)
        elif isinstance(perf, SaslOutcome):
            if perf.code != 0:
                handler.on_sasl_outcome(self, perf.code)
                self.closed = True
                return
            self._phase = Phase.HEADER
            self._out.append(AMQP_HEADER)
            self._send_open()
            handler.on_sasl_outcome(self, 0)

    def _on_frame(self, channel: int, body: bytes) -> None:
        head = body[:3]
        if head == _DESC_TRANSFER:  # one that `_process` could not read quickly
            fields, end = decode_value(body, 3)
            self.links.on_transfer(channel, fields, body[end:])
            return
        if head == _DESC_DISPOSITION:
            fields = fast_disposition_fields(body)
            if fields is None:
                fields, _ = decode_value(body, 3)
            self.links.on_disposition(channel, fields)
            return
        perf, _ = decode_value(body, 0)
        links = self.links
        if isinstance(perf, Flow):
            links.on_flow(channel, perf)
        elif isinstance(perf, Attach):
            links.on_attach(channel, perf)
        elif isinstance(perf, Detach):
            links.on_detach(channel, perf)
        elif isinstance(perf, Begin):
            if not self.opened:
                raise errors.ProtocolError(errors.ILLEGAL_STATE, "begin before open")
            links.on_begin(channel, perf)
        elif isinstance(perf, End):
            links.on_end(channel, perf)
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
        self.links.remote_max_frame_size = min(mfs, 1 << 30)
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

    def close(
        self, condition: str | None = None, description: str | None = None, info: dict[Any, Any] | None = None
    ) -> None:
        """Close with an error (`info`: its fields, e.g. where an `amqp:connection:redirect` points)."""
        if self.close_sent:
            return
        if self._phase != Phase.FRAMES:
            self.closed = True
            return
        self._send_open()
        self._send_close(condition, description, info)

    def _send_close(
        self, condition: str | None, description: str | None, info: dict[Any, Any] | None = None
    ) -> None:
        def close_frame(err: Error | None) -> bytes:
            if err is not None and info:
                err.info = info
            return Close(error=err).encode_amqp()

        limit = self.links.remote_max_frame_size
        self._out.append(fitted_frame(0, close_frame, condition, description, limit))
        self.close_sent = True

    def _on_close(self, close: Close) -> None:
        self.remote_close = close
        self.handler.on_close(self, close)
        if not self.close_sent:
            self._send_open()
            self._emit(0, Close().encode_amqp())
            self.close_sent = True
        self.closed = True

    # ------------------------------------------------------- sessions and links (see sessions.py)

    def begin(self, session: Session | None = None) -> Session:
        """Begin a session: a new one of ours, or answer the peer's (`session` from on_begin)."""
        return self.links.begin(session)

    def end(self, session: Session, condition: str | None = None, description: str | None = None) -> None:
        self.links.end(session, condition, description)

    def attach(self, session: Session, attach: Attach, link: Link | None = None) -> Link:
        """Send an attach: a new link of ours (`link` None) or the answer to the peer's attach."""
        return self.links.attach(session, attach, link)

    def detach(
        self, link: Link, closed: bool = True, condition: str | None = None, description: str | None = None
    ) -> None:
        self.links.detach(link, closed, condition, description)

    def flow(
        self,
        link: Link,
        credit: int | None = None,
        drain: bool = False,
        properties: dict[Any, Any] | None = None,
    ) -> None:
        """Receiver: grant `credit` (absolute), with `properties` (a transactional acquisition's `txn-id`);
        sender: report state (e.g. after a drain)."""
        self.links.flow(link, credit, drain, properties)

    def drain_complete(self, link: Link) -> None:
        """Sender with nothing more to send while draining: use up the credit and say so."""
        self.links.drain_complete(link)

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
        """Send one message on a sender link with credit; returns its delivery-id. `state`: an encoded
        delivery state the transfer carries (a transactional send's)."""
        return self.links.send_delivery(link, tag, payload, settled, context, message_format, state)

    def settle_incoming(
        self, session: Session, first: int, last: int, state_bytes: bytes | None, settled: bool = True
    ) -> None:
        """Send a disposition (settled unless said otherwise) for a range of deliveries we received."""
        self.links.settle_incoming(session, first, last, state_bytes, settled)

    def update_outgoing(
        self, session: Session, first: int, last: int, settled: bool, state_bytes: bytes | None
    ) -> None:
        """Send a disposition (as sender) for deliveries we sent (e.g. settling after the peer's outcome)."""
        self.links.update_outgoing(session, first, last, settled, state_bytes)

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
        if self._phase != Phase.FRAMES:
            return None
        deadline = None
        # keep-alives at half the shorter idle timeout of the two sides: the peer may hold us to the
        # timeout we announced (a primary holds its replicating backup to it)
        idle = min(self.remote_idle_timeout_ms or _NEVER, self.idle_timeout_ms or _NEVER)
        if idle < _NEVER:
            interval = idle / 2000.0
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


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    if isinstance(v, (str, bytes)):
        return [v]
    return list(v)
