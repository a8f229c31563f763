"""One configured server as operations see it: its broker now, its HA controller, whether it serves.

Under an HA policy the controller makes a new broker after a step-down, and a passive server's broker is
not assembled until it activates, so nothing here holds on to a broker: it is asked for each time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker_core.config.model import BrokerConfig
from broker_core.ha.states import State

if TYPE_CHECKING:
    from ..broker import Broker
    from ..ha import HaController


class Node:
    def __init__(self, config: BrokerConfig, broker: Broker | None = None, ha: HaController | None = None):
        assert (broker is None) != (ha is None), "a node is a plain broker or an HA controller's"
        self.config = config
        self.name = config.name
        self._broker = broker
        self.ha = ha

    @property
    def broker(self) -> Broker:
        if self.ha is not None:
            return self.ha.broker
        assert self._broker is not None
        return self._broker

    def active(self) -> bool:
        """Serving clients: the broker is started and listening (and, under HA, the active server)."""
        broker = self.broker
        if not broker.server.started or broker.listener is None:
            return False
        return self.ha is None or self.ha.state == State.ACTIVE

    def role(self) -> str:
        return str(self.ha.role) if self.ha is not None else "primary"

    def state(self) -> str:
        if self.ha is not None:
            return str(self.ha.state)
        return "active" if self.active() else "starting"
