"""Sockets: asyncio listeners that feed accepted connections to the AMQP engine.

Output is written once per loop turn: protocol work marks endpoints dirty, and a single `call_soon`
flushes all of them, after the journal batch for the same turn was handed over. That keeps the number
of syscalls per message low when many messages arrive in one read.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .amqp import errors
from .journal.errors import JournalError
from .protocol import BrokerEndpoint

if TYPE_CHECKING:
    from .config.model import Acceptor
    from .handoff import DurableCallbacks
    from .server import Server

log = logging.getLogger(__name__)

HIGH_WATER = 4 * 1024 * 1024
BATCH_BETWEEN_READS = 1000  # records (measured: bench/mirror_bench.py --only catch-up --only throughput)


class Flusher:
    """Writes every dirty endpoint's output once per loop turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop, server: Server, durable: DurableCallbacks) -> None:
        self.loop = loop
        self.server = server
        self.durable = durable
        self.dirty: dict[int, Any] = {}
        self.scheduled = False
        self.on_fatal: Callable[[BaseException], None] | None = None

    def mark_dirty(self, endpoint: Any) -> None:
        self.dirty[id(endpoint)] = endpoint
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        self._hand_to_journal()
        while self.dirty:
            dirty, self.dirty = self.dirty, {}
            for ep in dirty.values():
                ep.io.write_out()

    def after_read(self) -> None:
        """After each socket read. One loop turn can bring dozens of reads (libuv reads a busy socket up to
        32 times per poll): a large batch goes to the journal now rather than at the end of the turn
        (a mirror target's batch was up to 7,000 deliveries, its last one holding up the end of a
        catch-up), and journal callbacks that are ready run now, so that what is durable is confirmed."""
        if self.server.pending_records() >= BATCH_BETWEEN_READS:
            self._hand_to_journal()
        self.durable.run()

    def _hand_to_journal(self) -> None:
        try:
            self.server.flush_pending()
        except JournalError as exc:
            # Nothing can be made durable any more: stop (Artemis's critical I/O policy), loudly.
            log.critical("journal failed, the broker cannot persist and shuts down: %s", exc)
            if self.on_fatal is not None:
                self.on_fatal(exc)


class AmqpSocket(asyncio.Protocol):
    """One accepted TCP (or TLS) connection."""

    def __init__(
        self, server: Server, acceptor: Acceptor, flusher: Flusher, registry: set[AmqpSocket]
    ) -> None:
        self.server = server
        self.acceptor = acceptor
        self.flusher = flusher
        self.registry = registry
        self.transport: asyncio.Transport | None = None
        self.endpoint: BrokerEndpoint | None = None

    # asyncio callbacks ----------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport  # uvloop transports are not asyncio classes, hence Any
        peer = transport.get_extra_info("peername")
        name = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        limit = self.acceptor.connections_allowed
        if 0 <= limit <= len(self.registry):
            log.warning(
                "acceptor %s: refusing %s, connectionsAllowed=%d reached", self.acceptor.name, name, limit
            )
            transport.abort()
            return
        transport.set_write_buffer_limits(high=HIGH_WATER)
        self.registry.add(self)
        self.endpoint = BrokerEndpoint(self.server, self.acceptor, self, name)
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
            log.exception("internal error on connection %s", ep.peer)
            conn.fail(errors.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
        if conn.error is not None and conn.closed:
            log.warning("connection %s closed: %s: %s", ep.peer, conn.error.condition, conn.error.description)
        self.flusher.mark_dirty(ep)
        self.flusher.after_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self.registry.discard(self)
        ep = self.endpoint
        if ep is not None:
            if not ep.conn.closed:
                log.info("connection %s lost%s", ep.peer, f": {exc}" if exc else "")
            ep.connection_lost()
            self.flusher.server.flush_pending()

    def pause_writing(self) -> None:
        if self.endpoint is not None:
            self.endpoint.writable = False

    def resume_writing(self) -> None:
        if self.endpoint is not None:
            self.endpoint.writable = True
            self.endpoint.resume()
            self.flusher.mark_dirty(self.endpoint)

    # the endpoint's I/O surface -----------------------------------------------------------------

    def mark_dirty(self, endpoint: Any) -> None:
        self.flusher.mark_dirty(endpoint)

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

    def tick(self, now: float) -> None:
        ep = self.endpoint
        if ep is not None and not ep.conn.closed:
            ep.conn.tick(now)
            if ep.conn.has_output() or ep.conn.closed:
                self.flusher.mark_dirty(ep)

    def close(self, condition: str, description: str) -> None:
        ep = self.endpoint
        if ep is not None:
            ep.conn.close(condition, description)
            self.flusher.mark_dirty(ep)


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

    def __init__(self, server: Server, loop: asyncio.AbstractEventLoop, durable: DurableCallbacks) -> None:
        self.server = server
        self.loop = loop
        self.flusher = Flusher(loop, server, durable)
        self.sockets: set[AmqpSocket] = set()
        self.servers: list[Any] = []  # asyncio's or uvloop's Server (whose `sockets` is a list, not a tuple)
        self.bound: dict[str, tuple[str, int]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._last_expiry_scan = time.monotonic()
        server.set_flush_scheduler(lambda: self.flusher.mark_dirty(_NullEndpoint))

    async def start(self) -> None:
        for a in self.server.config.acceptors:
            ctx = ssl_context(a)

            def factory(a: Acceptor = a) -> AmqpSocket:
                return AmqpSocket(self.server, a, self.flusher, self.sockets)

            srv: Any = await self.loop.create_server(
                factory, a.host, a.port, ssl=ctx, reuse_address=True, backlog=512
            )
            self.servers.append(srv)
            host, port = srv.sockets[0].getsockname()[:2]
            self.bound[a.name] = (host, port)
            log.info("acceptor %s listening on %s:%d%s", a.name, host, port, " (TLS)" if ctx else "")
        self._timer = self.loop.call_later(1.0, self._tick)

    def _tick(self) -> None:
        period = self.server.config.message_expiry_scan_period / 1000.0
        try:
            now = time.monotonic()
            for s in list(self.sockets):
                s.tick(now)
            if period > 0 and now - self._last_expiry_scan >= period:
                self._last_expiry_scan = now
                n = self.server.expire_scan()
                if n:
                    log.info("expired %d messages", n)
        except Exception:
            log.exception("periodic broker work failed")  # heartbeats and timeouts must keep running
        finally:
            self._timer = self.loop.call_later(min(1.0, period) if period > 0 else 1.0, self._tick)

    def stop_accepting(self) -> None:
        for srv in self.servers:
            srv.close()

    async def close_connections(self) -> None:
        for s in list(self.sockets):
            s.close(errors.CONNECTION_FORCED, "broker shutting down")
        self.flusher.flush()
        for srv in self.servers:
            await srv.wait_closed() if not srv.sockets else None
        if self._timer is not None:
            self._timer.cancel()


class _NullIO:
    def write_out(self) -> None:
        pass


class _NullEndpointType:
    io = _NullIO()


_NullEndpoint = _NullEndpointType()
