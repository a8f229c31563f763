"""What an accepted connection speaks, and who takes it: AMQP, or an HTTP upgrade into AMQP.

An acceptor reads a connection's first bytes, as Artemis's acceptors do: AMQP's header hands the
connection to the server straight away (the detector steps aside: `set_protocol`, nothing in between);
an HTTP request is read to its blank line and, if it is an upgrade this acceptor may answer
(http_upgrade.py), answered with 101 and handed to the server it names (`activemqServerName`: this
server, or a colocated backup of this process registered in `Routes`), over WebSocket frames
(`WebSocketStream`) or, after Artemis's activemq-remoting upgrade, as it is. Anything else is refused
with an HTTP status and a line saying why. A connection that has said nothing that decides within
`handshake-timeout` seconds is closed (AMQ224088, as Artemis).

The client side of both upgrades (`ClientUpgrading`) is here too: broker connections use it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .http_upgrade import (
    ClientUpgrade,
    Refusal,
    Upgrade,
    UpgradeFailed,
    UpgradeRequest,
    content_length,
    head_end,
    parse_request,
    sniff_http,
    switching,
)
from .websocket import (
    DEFAULT_MAX_PAYLOAD,
    NORMAL,
    PONG,
    FrameReader,
    WebSocketError,
    binary_frames,
    close_frame,
    frame,
)

if TYPE_CHECKING:
    from .config.model import Acceptor

log = logging.getLogger("broker.upgrade")

# What takes a connection for a server: given the acceptor it came to, the protocol that will speak
# AMQP on it (None: the server takes no connection now).
Serve = Callable[["Acceptor"], "asyncio.Protocol | None"]

CLIENT_MAX_PAYLOAD = 64 * 1024 * 1024  # the largest frame a broker connection reads from a server
CLIENT_UPGRADE_TIMEOUT = 30.0  # seconds a connector waits for the 101, as Artemis's connector


class Routes:
    """The servers this process serves on one server's acceptors, by name: the server itself, and
    each colocated backup that registered (`add`) to take the connections that name it."""

    def __init__(self, main: str) -> None:
        self.main = main
        self.backups: dict[str, Serve] = {}

    def add(self, name: str, serve: Serve) -> None:
        if name == self.main:
            raise ValueError(f"{name} is the main server's own name")
        self.backups[name] = serve

    def remove(self, name: str) -> None:
        self.backups.pop(name, None)

    def choose(self, request: UpgradeRequest, acceptor: Acceptor) -> str | None:
        """Which server takes `request` on `acceptor`: None for the main one, else a backup's name;
        `Refusal` when no server here may take it."""
        if request.kind is Upgrade.REMOTING and not acceptor.http_upgrade:
            raise Refusal(
                403,
                f"acceptor {acceptor.name} is not an HTTP upgrade endpoint for activemq-remoting "
                "(httpUpgradeEnabled=true makes it one)",
            )
        if request.endpoint is not None and request.endpoint != acceptor.name:
            raise Refusal(
                404, f"no HTTP upgrade endpoint {request.endpoint} here: this is acceptor {acceptor.name}"
            )
        name = request.server_name
        if name is None or name == self.main:
            return None
        if name in self.backups:
            return name
        backups = f"; colocated backups: {', '.join(sorted(self.backups))}" if self.backups else ""
        raise Refusal(404, f"no server named {name} in this process (server: {self.main}{backups})")


class Detecting(asyncio.Protocol):
    """A new connection until its first bytes say what it speaks; then the server's protocol has it."""

    def __init__(self, acceptor: Acceptor, routes: Routes, serve: Serve) -> None:
        self.acceptor = acceptor
        self.routes = routes
        self.serve = serve  # the main server's protocol for this acceptor
        self.transport: Any = None
        self.peer = "?"
        self.buffer = bytearray()
        self.http: bool | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        timeout = self.acceptor.handshake_timeout
        if timeout > 0:
            self.timer = asyncio.get_running_loop().call_later(timeout, self._timed_out)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.http is None:
            self.http = sniff_http(self.buffer)
            if self.http is None:
                return
            if not self.http:
                self._plain()
                return
        try:
            end = head_end(self.buffer)
            if end < 0:
                return
            request = parse_request(bytes(self.buffer[:end]))
            backup = self.routes.choose(request, self.acceptor)
            serve = self.serve if backup is None else self.routes.backups[backup]
            inner = serve(self.acceptor)
            if inner is None:
                raise Refusal(503, f"server {backup or self.routes.main} takes no connection now")
        except Refusal as refusal:
            self._refuse(refusal)
            return
        self._upgraded(request, inner, bytes(self.buffer[end:]), backup or self.routes.main)

    def connection_lost(self, exc: Exception | None) -> None:
        self._settled()

    def _plain(self) -> None:
        self._settled()
        if self.acceptor.http_upgrade:
            log.warning(
                "AMQ951121: acceptor %s: closed %s, which spoke AMQP without an HTTP upgrade: this "
                "acceptor is an HTTP upgrade endpoint (httpUpgradeEnabled=true)",
                self.acceptor.name,
                self.peer,
            )
            self.transport.close()
            return
        inner = self.serve(self.acceptor)
        if inner is None:
            self.transport.abort()
            return
        _hand_over(self.transport, inner, bytes(self.buffer))

    def _upgraded(self, request: UpgradeRequest, inner: asyncio.Protocol, rest: bytes, server: str) -> None:
        self._settled()
        transport = self.transport
        transport.write(switching(request))
        log.debug(
            "acceptor %s: %s upgraded to %s for server %s",
            self.acceptor.name,
            self.peer,
            request.kind,
            server,
        )
        if request.kind is Upgrade.WEBSOCKET:
            limit = self.acceptor.websocket_max_payload or max(
                DEFAULT_MAX_PAYLOAD, self.acceptor.max_frame_size
            )
            _hand_over(
                transport, WebSocketStream(inner, client=False, max_payload=limit, name=self.peer), rest
            )
        else:
            _hand_over(transport, inner, rest)

    def _refuse(self, refusal: Refusal) -> None:
        self._settled()
        level = logging.WARNING if refusal.status in (403, 404, 503) else logging.INFO
        log.log(
            level,
            "AMQ951120: acceptor %s: HTTP request from %s refused: %d %s",
            self.acceptor.name,
            self.peer,
            refusal.status,
            refusal.why,
        )
        self.transport.write(refusal.response())
        self.transport.close()

    def _timed_out(self) -> None:
        self.timer = None
        log.error(
            'AMQ224088: Timeout (%d seconds) on acceptor "%s" during protocol handshake with %s '
            "has occurred.",
            self.acceptor.handshake_timeout,
            self.acceptor.name,
            self.peer,
        )
        self.transport.abort()

    def _settled(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def _hand_over(transport: Any, protocol: asyncio.Protocol, rest: bytes) -> None:
    """`protocol` has the connection from now on, starting with the bytes already read."""
    transport.set_protocol(protocol)
    protocol.connection_made(transport)
    if rest and not transport.is_closing():
        protocol.data_received(rest)


class WebSocketStream(asyncio.Protocol):
    """AMQP's bytes in WebSocket binary frames, between a transport and the protocol that speaks AMQP,
    which sees a `FramedTransport` as its transport. Pings are answered; a close is answered and ends
    the connection; a framing error closes it with its code."""

    def __init__(self, inner: asyncio.Protocol, *, client: bool, max_payload: int, name: str) -> None:
        self.inner = inner
        self.client = client  # a client masks what it writes and reads unmasked frames
        self.reader = FrameReader(masked=not client, max_payload=max_payload)
        self.name = name
        self.transport: Any = None
        self.closing = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        framed: Any = FramedTransport(self)  # duck-typed as the transports it stands for
        self.inner.connection_made(framed)

    def data_received(self, data: bytes) -> None:
        try:
            got = self.reader.feed(data)
        except WebSocketError as exc:
            log.warning("AMQ951122: WebSocket connection %s closed: %s", self.name, exc.reason)
            self.close(exc.code, exc.reason)
            return
        for ping in got.pings:
            if not self.closing:
                self.transport.write(frame(PONG, ping, masked=self.client))
        if got.data:
            self.inner.data_received(got.data)
        if got.close is not None:
            code, _ = got.close
            self.close(NORMAL if code in (1005, 1006) else code, "")

    def eof_received(self) -> bool | None:
        return None  # the transport closes; the inner protocol hears of it in connection_lost

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def write(self, data: bytes) -> None:
        if not self.closing and data:
            self.transport.write(binary_frames(data, masked=self.client))

    def close(self, code: int = NORMAL, reason: str = "") -> None:
        """Say goodbye with a close frame (once) and close the connection once it is written."""
        if self.closing:
            return
        self.closing = True
        if not self.transport.is_closing():
            self.transport.write(close_frame(code, reason, masked=self.client))
            self.transport.close()


class FramedTransport:
    """The transport the AMQP side of a `WebSocketStream` writes to: its bytes go out as binary frames,
    its close as a WebSocket close."""

    def __init__(self, stream: WebSocketStream) -> None:
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data)

    def close(self) -> None:
        self.stream.close(NORMAL)

    def abort(self) -> None:
        self.stream.closing = True
        self.stream.transport.abort()

    def is_closing(self) -> bool:
        return self.stream.closing or bool(self.stream.transport.is_closing())

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.stream.transport.get_extra_info(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.stream.transport.set_write_buffer_limits(high=high, low=low)

    def get_write_buffer_size(self) -> int:
        return int(self.stream.transport.get_write_buffer_size())

    def pause_reading(self) -> None:
        self.stream.transport.pause_reading()

    def resume_reading(self) -> None:
        self.stream.transport.resume_reading()


class ClientUpgrading(asyncio.Protocol):
    """A connector's HTTP upgrade: the request on connect, then the 101 checked, then `inner` has the
    connection (over WebSocket frames, or as it is after activemq-remoting). `failed` hears why it did
    not switch (a refusal with its status and line, a bad answer, a silent server, a closed socket)."""

    def __init__(
        self, inner: asyncio.Protocol, upgrade: ClientUpgrade, failed: Callable[[str], None]
    ) -> None:
        self.inner = inner
        self.upgrade = upgrade
        self.failed = failed
        self.transport: Any = None
        self.buffer = bytearray()
        self.head_end = -1
        self.done = False
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(self.upgrade.request())
        self.timer = asyncio.get_running_loop().call_later(CLIENT_UPGRADE_TIMEOUT, self._timed_out)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.head_end < 0:
            try:
                self.head_end = head_end(self.buffer)
            except Refusal:
                self._fail(f"HTTP upgrade: an answer with a head over {len(self.buffer)} bytes")
                return
            if self.head_end < 0:
                return
        head = bytes(self.buffer[: self.head_end])
        rest = bytes(self.buffer[self.head_end :])
        try:
            self.upgrade.check(head, rest)
        except UpgradeFailed as exc:
            if len(rest) < min(content_length(head), 1024):
                return  # the refusal's line is still coming
            self._fail(
                f"HTTP upgrade to {self.upgrade.kind} refused by {self.upgrade.host}:{self.upgrade.port}: "
                f"{exc}"
            )
            return
        self._settle()
        if self.upgrade.kind is Upgrade.WEBSOCKET:
            name = f"{self.upgrade.host}:{self.upgrade.port}"
            stream = WebSocketStream(self.inner, client=True, max_payload=CLIENT_MAX_PAYLOAD, name=name)
            _hand_over(self.transport, stream, rest)
        else:
            _hand_over(self.transport, self.inner, rest)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done:
            self._fail(f"connection closed during the HTTP upgrade{f': {exc}' if exc else ''}")

    def _timed_out(self) -> None:
        self.timer = None
        self._fail(
            f"HTTP upgrade: no answer from {self.upgrade.host}:{self.upgrade.port} within "
            f"{CLIENT_UPGRADE_TIMEOUT:.0f} s"
        )

    def _fail(self, why: str) -> None:
        if self.done:
            return
        self._settle()
        self.transport.close()
        self.failed(why)

    def _settle(self) -> None:
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
