"""Operations for the runtime's servers: metrics endpoints, web consoles, systemd, reload, mirror lines.

The runtime makes one `Operations` for all the servers of its process, starts it once they are up,
calls `reload()` on SIGHUP and `stopping()` on SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker_core.config.model import HaKind, HaRole
from broker_core.ha.states import Event, State

from ..console import Console
from . import systemd
from .endpoint import MetricsEndpoint
from .metrics import BrokerCollector, Failovers
from .node import Node
from .reload import log_report, reload_broker
from .watch import MirrorWatch

log = logging.getLogger("amqp_mirror.ops")


class Operations:
    def __init__(self, loop: asyncio.AbstractEventLoop, nodes: list[Node]) -> None:
        self.loop = loop
        self.nodes = nodes
        self.failovers = {node.name: Failovers() for node in nodes}
        self.endpoints = [
            MetricsEndpoint(node, BrokerCollector(node, self.failovers[node.name]))
            for node in nodes
            if node.config.metrics.enabled
        ]
        self.consoles = [Console(node, loop) for node in nodes if node.config.console is not None]
        self.watch = MirrorWatch(loop, nodes)
        self._ready_sent = False
        interval = systemd.watchdog_interval()
        self.watchdog = systemd.Watchdog(loop, interval) if interval else None
        for node in nodes:
            if node.ha is not None:
                node.ha.on_transition.append(self._transition_hook(node))

    async def start_endpoints(self) -> None:
        """Before the servers start: a passive backup is scraped, answers /healthz and shows its console."""
        for endpoint in self.endpoints:
            await endpoint.start()
        for console in self.consoles:
            await console.start()

    def started(self) -> None:
        """Every server is up in its role: systemd hears READY=1 (a primary with wait-for-activation:
        once it is active), and the watchdog starts."""
        self.watch.start()
        if self.watchdog is not None:
            self.watchdog.start()
        self._ready_sent = not self._awaiting_activation()
        systemd.notify(*(("READY=1",) if self._ready_sent else ()), f"STATUS={self.status_line()}")

    def _awaiting_activation(self) -> bool:
        """A shared-store primary with wait-for-activation (the default) is started once it is active."""
        return any(
            node.ha is not None
            and node.ha.policy.kind == HaKind.SHARED_STORE
            and node.ha.role == HaRole.PRIMARY
            and node.ha.policy.wait_for_activation
            and not node.active()
            for node in self.nodes
        )

    def status_line(self) -> str:
        parts = []
        for node in self.nodes:
            if node.active():
                parts.append(f"{node.name}: active, accepting clients")
            elif node.ha is not None and node.ha.state == State.PASSIVE:
                parts.append(f"{node.name}: passive {node.role()}, not accepting clients")
            else:
                parts.append(f"{node.name}: {node.state()}")
        return "; ".join(parts)

    def _transition_hook(self, node: Node) -> Callable[[State, Event, State], None]:
        def on_transition(old: State, event: Event, new: State) -> None:
            assert node.ha is not None
            if new == State.ACTIVATING and node.ha.role == HaRole.BACKUP:
                self.failovers[node.name].count(_reason(event))
            elif event == Event.FAILBACK_REQUESTED:
                self.failovers[node.name].count("failback")
            ready = not self._ready_sent and not self._awaiting_activation()
            self._ready_sent = self._ready_sent or ready
            systemd.notify(*(("READY=1",) if ready else ()), f"STATUS={self.status_line()}")

        return on_transition

    def reload(self) -> None:
        systemd.notify("RELOADING=1", systemd.monotonic_usec())
        for node in self.nodes:
            if node.broker.server.started:
                log_report(node.name, reload_broker(node.broker))
                if node.ha is not None:  # a broker it makes after a step-down starts from the same file
                    node.ha.config = node.broker.config
            else:
                log.info("AMQ951011: %s: reload skipped: not active (read at activation)", node.name)
        systemd.notify("READY=1", f"STATUS={self.status_line()}")

    def stopping(self) -> None:
        systemd.notify("STOPPING=1", "STATUS=stopping")  # the watchdog goes on while the loop stops

    async def stop(self) -> None:
        self.watch.stop()
        if self.watchdog is not None:
            self.watchdog.stop()
        for endpoint in self.endpoints:
            await endpoint.stop()
        for console in self.consoles:
            await console.stop()


def _reason(event: Event) -> str:
    return {Event.LOCK_ACQUIRED: "primary_lost"}.get(event, str(event.name).lower())
