"""Sockets: asyncio listeners that feed accepted connections to the AMQP engine.

Each accepted connection first meets `Detecting` (upgrade.py): AMQP's header hands it to an `AmqpSocket`
at once; an HTTP upgrade (WebSocket, or Artemis's activemq-remoting) is answered first, and may name a
colocated backup of this process to take it instead (`Server.routes`).

Output is written once per loop turn (turn.py): endpoint work marks a socket dirty, and the turn writes
every dirty socket after handing over the journal batch of the same turn.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Container
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .amqp import errors
from .amqp.codec import Symbol
from .endpoint import BrokerEndpoint
from .upgrade import Detecting

if TYPE_CHECKING:
    from .config.model import Acceptor
    from .server import Server
    from .services import Services
    from .turn import Turn

log = logging.getLogger(__name__)

REDIRECT = "amqp:connection:redirect"
HIGH_WATER = 4 * 1024 * 1024
TICK = 1.0  # seconds between ticks when no connection needs one sooner
MIN_TICK = 0.01  # never busier than this, whatever a peer asks for


class AmqpSocket(asyncio.Protocol):
    """One accepted TCP (or TLS) connection."""

    def __init__(
        self,
        server: Server,
        acceptor: Acceptor,
        services: Services,
        turn: Turn,
        registry: set[AmqpSocket],
        wake_by: Callable[[float], None] = lambda when: None,
    ) -> None:
        self.server = server
        self.acceptor = acceptor
        self.services = services
        self.turn = turn
        self.registry = registry
        self.wake_by = wake_by  # the listener's timer: tick again no later than this (monotonic) time
        self.timed = False  # this connection's own timers (heartbeats, idle timeout) were announced
        self.transport: asyncio.Transport | None = None
        self.endpoint: BrokerEndpoint | None = None

    # asyncio callbacks ----------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport  # uvloop transports are not asyncio classes, hence Any
        peer = transport.get_extra_info("peername")
        name = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        limit = self.acceptor.connections_allowed
        counts = self.server.stats.acceptor(self.acceptor.name)
        if 0 <= limit <= len(self.registry):
            counts.refused += 1
            log.warning(
                "acceptor %s: refusing %s, connectionsAllowed=%d reached", self.acceptor.name, name, limit
            )
            transport.abort()
            return
        counts.accepted += 1
        transport.set_write_buffer_limits(high=HIGH_WATER)
        self.registry.add(self)
        self.endpoint = BrokerEndpoint(self.server, self.acceptor, self.services, self, name)
        self.endpoint.conn.last_received = time.monotonic()
        log.debug("connection from %s on acceptor %s", name, self.acceptor.name)

    def data_received(self, data: bytes) -> None:
        ep = self.endpoint
        if ep is None:
            return
        conn = ep.conn
        conn.last_received = time.monotonic()
        try:
            conn.receive(data)
        except Exception as exc:  # a bug must cost this connection only, never the broker
            log.exception("internal error on connection %s", ep.name)
            conn.fail(errors.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
        if conn.error is not None and conn.closed:
            log.warning("connection %s closed: %s: %s", ep.name, conn.error.condition, conn.error.description)
        if not self.timed and conn.opened:  # its open set the heartbeat and idle-timeout deadlines
            self.timed = True
            deadline = conn.tick(time.monotonic())
            if deadline is not None:
                self.wake_by(deadline)
        self.turn.mark_dirty(self)
        self.turn.after_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self.registry.discard(self)
        ep = self.endpoint
        if ep is not None:
            if not ep.conn.closed:
                log.info("connection %s lost%s", ep.name, f": {exc}" if exc else "")
            ep.connection_lost()
            self.turn.hand_to_journal()

    def pause_writing(self) -> None:
        if self.endpoint is not None:
            self.endpoint.writable = False

    def resume_writing(self) -> None:
        if self.endpoint is not None:
            self.endpoint.writable = True
            self.endpoint.resume()
            self.turn.mark_dirty(self)

    # the endpoint's I/O surface -----------------------------------------------------------------

    def mark_dirty(self) -> None:
        self.turn.mark_dirty(self)

    def write_out(self) -> None:
        ep, t = self.endpoint, self.transport
        if ep is None or t is None or t.is_closing():
            return
        ep.before_flush()
        out = ep.conn.take_output()
        if out:
            t.write(out)
            ep.conn.last_sent = time.monotonic()
        if ep.conn.closed:
            t.close()
            ep.connection_lost()

    def tick(self, now: float) -> float | None:
        """Heartbeats and timeouts due now; returns when this connection needs the next tick."""
        ep = self.endpoint
        if ep is None or ep.conn.closed:
            return None
        deadline = ep.conn.tick(now)
        if ep.conn.has_output() or ep.conn.closed:
            self.turn.mark_dirty(self)
        return deadline

    def close(self, condition: str, description: str, info: dict[Any, Any] | None = None) -> None:
        ep = self.endpoint
        if ep is not None:
            ep.conn.close(condition, description, info)
            self.turn.mark_dirty(self)


def ssl_context(acceptor: Acceptor) -> ssl.SSLContext | None:
    tls = acceptor.tls
    if not tls.enabled:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert = tls.cert_path or tls.key_store_path
    key = tls.key_path
    if cert is None:
        raise ValueError(f"acceptor {acceptor.name}: sslEnabled needs sslCertPath (PEM) or keyStorePath")
    if cert.endswith((".jks", ".p12", ".pfx")):
        raise ValueError(
            f"acceptor {acceptor.name}: key store {cert} is not PEM; convert it, set sslCertPath/sslKeyPath"
        )
    for path in (cert, key, tls.ca_path or tls.trust_store_path):
        if path and not Path(path).is_file():
            raise ValueError(f"acceptor {acceptor.name}: TLS file {path} does not exist or is not a file")
    ctx.load_cert_chain(cert, key, password=tls.key_store_password)
    if tls.ca_path or tls.trust_store_path:
        ctx.load_verify_locations(tls.ca_path or tls.trust_store_path)
    if tls.need_client_auth:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class Listener:
    """All acceptors of one server, plus the timers that tick its connections."""

    def __init__(
        self, server: Server, loop: asyncio.AbstractEventLoop, turn: Turn, services: Services
    ) -> None:
        self.server = server
        self.loop = loop
        self.turn = turn
        self.services = services
        self.sockets: set[AmqpSocket] = set()
        self.servers: list[Any] = []  # asyncio's or uvloop's Server (whose `sockets` is a list, not a tuple)
        self.bound: dict[str, tuple[str, int]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._next_tick = 0.0  # monotonic time the timer fires at
        self._last_expiry_scan = time.monotonic()

    async def start(self) -> None:
        for a in self.server.config.acceptors:
            ctx = ssl_context(a)

            def factory(a: Acceptor = a) -> Detecting:
                return Detecting(a, self.server.routes, self.serve)

            srv: Any = await self.loop.create_server(
                factory, a.host, a.port, ssl=ctx, reuse_address=True, backlog=512
            )
            self.servers.append(srv)
            host, port = srv.sockets[0].getsockname()[:2]
            self.bound[a.name] = (host, port)
            log.info("acceptor %s listening on %s:%d%s", a.name, host, port, " (TLS)" if ctx else "")
        self._tick()

    def serve(self, acceptor: Acceptor) -> AmqpSocket:
        """This server's protocol for a connection on `acceptor`, once it is known to speak AMQP."""
        return AmqpSocket(self.server, acceptor, self.services, self.turn, self.sockets, self._wake_by)

    def _tick(self) -> None:
        """Heartbeats, idle timeouts and expiry scans; then the next tick, at the earliest deadline a
        connection asked for (a peer's idle-time-out can be well under a second) and within a second."""
        period = self.server.config.message_expiry_scan_period / 1000.0
        now = time.monotonic()
        next_at = now + (min(TICK, period) if period > 0 else TICK)
        try:
            for s in list(self.sockets):
                deadline = s.tick(now)
                if deadline is not None:
                    next_at = min(next_at, deadline)
            if period > 0 and now - self._last_expiry_scan >= period:
                self._last_expiry_scan = now
                n = self.server.outcomes.expire_scan()
                if n:
                    log.info("expired %d messages", n)
        except Exception:
            log.exception("periodic broker work failed")  # heartbeats and timeouts must keep running
        finally:
            self._schedule(max(next_at, now + MIN_TICK))

    def _schedule(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._next_tick = at
        self._timer = self.loop.call_later(max(0.0, at - time.monotonic()), self._tick)

    def _wake_by(self, when: float) -> None:
        """A connection needs a tick by `when`: bring the timer forward if it would fire later."""
        if self._timer is not None and when < self._next_tick:
            self._schedule(when)

    def stop_accepting(self) -> None:
        for srv in self.servers:
            srv.close()

    def close_clients(self, keep: Container[object], redirect: tuple[str, int] | None = None) -> None:
        """Close every connection but those whose engine is in `keep` (a replica's stream, while the
        server hands over to it before it stops); with `redirect`, as `amqp:connection:redirect` to that
        host and port (a scale-down's target: the clients go on there)."""
        for s in list(self.sockets):
            endpoint = s.endpoint
            if endpoint is not None and endpoint.conn in keep:
                continue
            if redirect is None:
                s.close(errors.CONNECTION_FORCED, "broker shutting down")
            else:
                host, port = redirect
                info = {Symbol("network-host"): host, Symbol("port"): port, Symbol("scheme"): "amqp"}
                s.close(REDIRECT, f"broker scaled down; connect to {host}:{port}", info)
        self.turn.flush()

    async def close_connections(self) -> None:
        for s in list(self.sockets):
            s.close(errors.CONNECTION_FORCED, "broker shutting down")
        self.turn.flush()
        for srv in self.servers:
            await srv.wait_closed() if not srv.sockets else None
        if self._timer is not None:
            self._timer.cancel()
