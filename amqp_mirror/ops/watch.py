"""State changes of the mirrors worth a log line: falling behind, caught up again.

Looked at on a timer (every few seconds, not per event): a mirror is *behind* once its oldest pending
event is older than `mirror-behind-seconds` (metrics property; 10 s by default), and *caught up* once
nothing older than a second waits. Each change is one line with a stable id; nothing is said while the
state stays.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .node import Node

if TYPE_CHECKING:
    pass

log = logging.getLogger("amqp_mirror.ops")

EVERY = 2.0  # seconds between looks
CAUGHT_UP_BELOW = 1.0  # seconds: the oldest pending event is younger than this


class MirrorWatch:
    def __init__(self, loop: asyncio.AbstractEventLoop, nodes: list[Node]) -> None:
        self.loop = loop
        self.nodes = nodes
        self.behind: set[tuple[str, str]] = set()  # (node, mirror)
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._timer = self.loop.call_later(EVERY, self._look)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _look(self) -> None:
        try:
            for node in self.nodes:
                if node.active():
                    self.check(node)
        finally:
            self._timer = self.loop.call_later(EVERY, self._look)

    def check(self, node: Node) -> None:
        threshold = node.config.metrics.mirror_behind_seconds
        for source, connected in node.broker.mirror_sources():
            status = source.status()
            age = status["oldestPendingAgeMs"] / 1000
            key = (node.name, source.name)
            if key not in self.behind and age > threshold:
                self.behind.add(key)
                log.warning(
                    "AMQ951002: mirror %s of %s is falling behind: %d events pending, the oldest %.1f s old "
                    "(link %s)",
                    source.name,
                    node.name,
                    status["pendingEvents"],
                    age,
                    "up" if connected else "down",
                )
            elif key in self.behind and age < CAUGHT_UP_BELOW:
                self.behind.discard(key)
                log.info(
                    "AMQ951001: mirror %s of %s caught up: %d events pending", source.name, node.name,
                    status["pendingEvents"],
                )  # fmt: skip
