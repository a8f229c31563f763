"""A passive server's acceptors: it accepts no client connection, and says where the active one is.

Seed 001 §1: a passive server does not accept remote connections. Rather than leave clients to a
refused connect (or a silent port), it listens on its acceptors and answers each client, after the
usual SASL exchange, with its open and a close carrying `amqp:connection:redirect` and the active
server's `network-host` and `port` (AMQP 1.0 §2.8.16), or `amqp:connection:forced` when it does not
know where the active server is. Nothing else is read or served: no server state exists yet.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from .acceptor import ssl_context
from .amqp.codec import Symbol
from .amqp.connection import Connection
from .inbound_sasl import ServerSasl, mechanisms
from .upgrade import Detecting

if TYPE_CHECKING:
    from .amqp.performatives import Close, Open
    from .config.model import Acceptor
    from .server import Server

log = logging.getLogger("broker.passive")

REDIRECT = "amqp:connection:redirect"
FORCED = "amqp:connection:forced"


def redirect_info(host: str, port: int) -> dict[Any, Any]:
    """The fields of a redirect (and of a `failover-server-list` entry): where to connect instead."""
    return {Symbol("network-host"): host, Symbol("port"): port, Symbol("scheme"): "amqp"}


class PassiveSocket(asyncio.Protocol):
    def __init__(self, server: Server, acceptor: Acceptor, active: tuple[str, int] | None) -> None:
        self.server = server
        self.acceptor = acceptor
        self.active = active
        self.transport: Any = None
        secure = server.config.security_enabled
        self.conn = Connection(
            self,
            server=True,
            container_id=server.config.name,
            sasl_mechanisms=mechanisms(secure, scram=not server.user_store.hashed_users),
            allow_no_sasl=not secure,
            max_frame_size=acceptor.max_frame_size,
        )
        self.sasl: ServerSasl | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.sasl = ServerSasl(self.server, f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer))

    def data_received(self, data: bytes) -> None:
        try:
            self.conn.receive(data)
        except Exception:  # a bad peer costs its own connection only
            self.conn.closed = True
        out = self.conn.take_output()
        if out and self.transport is not None:
            self.transport.write(out)
        if self.conn.closed and self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    # engine handler: SASL as on an active server (so a refusal says nothing to the unauthenticated)
    def on_sasl_init(self, conn: Connection, mechanism: str, response: bytes | None) -> None:
        assert self.sasl is not None
        self.sasl.init(conn, mechanism, response)

    def on_sasl_response(self, conn: Connection, response: bytes) -> None:
        assert self.sasl is not None
        self.sasl.response(conn, response)

    def on_open(self, conn: Connection, open_: Open) -> None:
        conn.accept_open()
        if self.active is None:
            conn.close(FORCED, f"{self.server.name} is a passive backup; its active server is not known")
            return
        host, port = self.active
        conn.close(
            REDIRECT, f"{self.server.name} is passive; connect to {host}:{port}", redirect_info(host, port)
        )

    def on_close(self, conn: Connection, close: Close) -> None:
        pass

    def __getattr__(self, name: str) -> Any:  # the engine's other callbacks: nothing to do while passive
        if name.startswith("on_"):
            return lambda *args: None
        raise AttributeError(name)


class PassiveListener:
    """Every acceptor of a passive server, answering with a redirect."""

    def __init__(
        self, server: Server, loop: asyncio.AbstractEventLoop, active: tuple[str, int] | None
    ) -> None:
        self.server = server
        self.loop = loop
        self.active = active
        self.servers: list[Any] = []

    async def start(self) -> None:
        for a in self.server.config.acceptors:

            def factory(a: Acceptor = a) -> Detecting:  # a WebSocket client is redirected over WebSocket
                return Detecting(a, self.server.routes, lambda a: PassiveSocket(self.server, a, self.active))

            srv: Any = await self.loop.create_server(
                factory, a.host, a.port, ssl=ssl_context(a), reuse_address=True
            )
            self.servers.append(srv)
            log.info(
                "acceptor %s passive on %s:%d: clients are sent to the active server", a.name, a.host, a.port
            )

    async def stop(self) -> None:
        for srv in self.servers:
            srv.close()
        for srv in self.servers:
            await srv.wait_closed()
        self.servers.clear()
