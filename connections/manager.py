"""All broker connections of one server: build them from config, start, stop, list.

The manager knows only the `LinkPolicy` interface; which policies a connection gets follows from
its child elements. It observes the server so that queues created later are matched too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_core.events import Cause, Observer
from broker_core.management import BROKER, Management

from .outbound import OutboundConnection
from .policies import LinkPolicy
from .queue_links import QueueLinks

if TYPE_CHECKING:
    from broker_core.config.model import AmqpConnection
    from broker_core.queues import Queue
    from broker_core.server import Server
    from broker_core.turn import Turn

log = logging.getLogger("broker.connections")

# Policies of other kinds (the composition root adds the mirror's): (server, connection config) -> policies.
PolicyFactory = Callable[["Server", "AmqpConnection"], list[LinkPolicy]]


class BrokerConnectionManager(Observer):
    def __init__(
        self,
        server: Server,
        loop: asyncio.AbstractEventLoop,
        turn: Turn,
        extra_factories: list[PolicyFactory] | None = None,
    ) -> None:
        self.server = server
        self.loop = loop
        self.turn = turn
        self.factories = extra_factories or []
        self.connections: dict[str, OutboundConnection] = {}
        for cfg in server.config.broker_connections:
            self.connections[cfg.name] = self._build(cfg)
        server.add_observer(self)
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        for c in self.connections.values():
            if c.config.auto_start:
                c.start()
            else:
                log.info("broker connection %s: auto-start=false, waiting for a start command", c.name)
        self._timer = self.loop.call_later(1.0, self._tick)

    def _build(self, cfg: AmqpConnection) -> OutboundConnection:
        policies: list[LinkPolicy] = [QueueLinks(self.server, link) for link in cfg.links]
        for factory in self.factories:
            policies.extend(factory(self.server, cfg))
        return OutboundConnection(self.server, cfg, self.loop, self.turn, policies)

    def replace(self, cfg: AmqpConnection | None, name: str) -> None:
        """A reload: the connection `name` stops (if there is one) and `cfg` takes its place (if given),
        started when its auto-start says so."""
        old = self.connections.pop(name, None)
        if old is not None:
            old.stop()
        if cfg is not None:
            new = self.connections[cfg.name] = self._build(cfg)
            if cfg.auto_start:
                new.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for c in self.connections.values():
            c.stop()

    def _tick(self) -> None:
        now = time.monotonic()
        for c in self.connections.values():
            c.tick(now)
        self._timer = self.loop.call_later(1.0, self._tick)

    # ------------------------------------------------------------------------------ management

    def list(self) -> list[dict[str, Any]]:
        return [c.describe() for c in self.connections.values()]

    def get(self, name: str) -> OutboundConnection:
        c = self.connections.get(name)
        if c is None:
            raise KeyError(f"no broker connection named {name!r}")
        return c

    def start_connection(self, name: str) -> None:
        self.get(name).start()
        log.info("broker connection %s started by management", name)

    def stop_connection(self, name: str) -> None:
        self.get(name).stop()
        log.info("broker connection %s stopped by management", name)

    def add_operations(self, management: Management) -> None:
        """The broker connections' rows of the management table (Artemis's names)."""
        management.add_operation(BROKER, "listBrokerConnections", lambda _, __: json.dumps(self.list()))
        management.add_operation(
            BROKER, "startBrokerConnection", lambda _, p: self.start_connection(str(p[0]))
        )
        management.add_operation(BROKER, "stopBrokerConnection", lambda _, p: self.stop_connection(str(p[0])))

    # ------------------------------------------------------------------------------- observer

    def queue_added(self, queue: Queue, cause: Cause | None) -> None:
        for c in self.connections.values():
            c.queue_added(queue)
