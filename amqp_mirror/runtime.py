"""Run servers on one event loop: start, serve, and stop gracefully on SIGTERM/SIGINT.

A `Broker` is one server plus its listeners; several can share a loop (the demo runs DC1 and DC2 side
by side; colocated backups will too). Graceful stop: stop accepting, close every connection with
`amqp:connection:forced`, hand the last journal batch over and wait until it is on disk, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable

from connections.manager import BrokerConnectionManager
from mirror.install import mirror_policies
from mirror.source import MirrorSource
from mirror.target import MirrorTarget

from broker_core import compiled
from broker_core.acceptor import Listener
from broker_core.config.model import BrokerConfig
from broker_core.handoff import DurableCallbacks
from broker_core.server import Server

log = logging.getLogger(__name__)

ACK_RETRY_INTERVAL = 0.1  # Artemis's mirror-ack-manager-retry-delay default (100 ms)


class Broker:
    """One server and its sockets on a running loop."""

    def __init__(self, config: BrokerConfig, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.config = config
        self.loop = loop or asyncio.get_event_loop()
        self.server = Server(config, log=logging.getLogger(f"broker.{config.name}"))
        self.listener: Listener | None = None
        self.connections: BrokerConnectionManager | None = None
        self._retry_timer: asyncio.TimerHandle | None = None
        self.on_started: list[Callable[[Broker], None]] = []

    async def start(self) -> None:
        durable = DurableCallbacks(self.loop)
        self.server.start(dispatch=durable.dispatch)
        self.listener = Listener(self.server, self.loop, durable)
        await self.listener.start()
        self.server.mirror_target = MirrorTarget(self.server)
        self.connections = BrokerConnectionManager(
            self.server, self.loop, self.listener.flusher, extra_factories=[mirror_policies]
        )
        self.server.management.extensions["getMirrorStatus"] = self.mirror_status
        self._retry_timer = self.loop.call_later(ACK_RETRY_INTERVAL, self._retry_acks)
        self.server.management.connections = self.connections
        self.connections.start()
        for cb in self.on_started:
            cb(self)

    def _retry_acks(self) -> None:
        self.server.mirror_target.retry_acks()
        self._retry_timer = self.loop.call_later(ACK_RETRY_INTERVAL, self._retry_acks)

    def mirror_status(self) -> dict[str, object]:
        sources = []
        if self.connections is not None:
            for c in self.connections.connections.values():
                sources += [
                    {**p.status(), "connected": c.connected}
                    for p in c.policies
                    if isinstance(p, MirrorSource)
                ]
        return {"sources": sources, "target": self.server.mirror_target.status()}

    def port(self, acceptor: str | None = None) -> int:
        assert self.listener is not None
        if acceptor is None:
            return next(iter(self.listener.bound.values()))[1]
        return self.listener.bound[acceptor][1]

    async def stop(self) -> None:
        if not self.server.started:
            return
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        if self.connections is not None:
            self.connections.stop()
        if self.listener is not None:
            self.listener.stop_accepting()
            await self.listener.close_connections()
        self.server.stop()


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def run(configs: list[BrokerConfig]) -> int:
    """Serve until SIGTERM/SIGINT; return the process exit code."""
    log.info("%s", compiled.status())
    loop = new_loop()
    asyncio.set_event_loop(loop)
    brokers = [Broker(c, loop) for c in configs]
    stop = asyncio.Event()

    def on_signal(signame: str) -> None:
        log.info("received %s: shutting down", signame)
        stop.set()

    def on_fatal(exc: BaseException) -> None:
        failed.append(f"fatal: {exc}")
        stop.set()

    failed: list[str] = []

    async def main() -> None:
        for b in brokers:
            try:
                await b.start()
                if b.listener is not None:
                    b.listener.flusher.on_fatal = on_fatal
            except (OSError, ValueError) as exc:  # a port in use, an unreadable certificate, ...
                failed.append(f"{b.config.name}: cannot start: {exc}")
                for started in brokers:
                    await started.stop()
                return
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig.name)
        tune_gc()
        _notify_systemd("READY=1")
        await stop.wait()
        _notify_systemd("STOPPING=1")
        for b in brokers:
            await b.stop()

    try:
        loop.run_until_complete(main())
    finally:
        with contextlib.suppress(Exception):
            loop.close()
    if failed:
        for line in failed:
            log.error("%s", line)
        return 1
    log.info("shutdown complete")
    return 0


def tune_gc() -> None:
    """A broker holds many long-lived objects (stored messages, queue references). With CPython's
    default thresholds the older generations are walked again and again as queues deepen, which made
    a mirror target's catch-up cost grow with its backlog. What exists after recovery is frozen out of
    collection, and collections run less often (our hot paths make few reference cycles)."""
    import gc

    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def _notify_systemd(state: str) -> None:
    """sd_notify without a dependency: one datagram to $NOTIFY_SOCKET when systemd runs us."""
    import os
    import socket

    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    if path.startswith("@"):
        path = "\0" + path[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.connect(path)
        s.sendall(state.encode())
