"""A server's message counters, read by management and metrics as a snapshot."""

from __future__ import annotations

_COUNTERS = (
    "messages_acked",
    "messages_dropped",
    "messages_expired",
    "messages_killed",
    "messages_routed",
    "messages_scaled_down",
    "messages_scaled_in",
    "messages_unrouted",
    "transactions_committed",
    "transactions_declared",
    "transactions_rolled_back",
)


class AcceptorStats:
    """One acceptor's connections: accepted, refused at its connectionsAllowed, failed logins."""

    __slots__ = ("accepted", "auth_failures", "refused")

    def __init__(self) -> None:
        self.accepted = 0
        self.refused = 0
        self.auth_failures = 0


class BrokerStats:
    __slots__ = (*_COUNTERS, "acceptors")

    def __init__(self) -> None:
        self.messages_routed = 0
        self.messages_dropped = 0  # by an address's DROP policy
        self.messages_unrouted = 0
        self.messages_acked = 0
        self.messages_expired = 0
        self.messages_killed = 0
        self.messages_scaled_down = 0  # sent to another server by this one's scale-down, and settled
        self.messages_scaled_in = 0  # stored here by another server's scale-down
        self.transactions_declared = 0
        self.transactions_committed = 0
        self.transactions_rolled_back = 0
        self.acceptors: dict[str, AcceptorStats] = {}

    def acceptor(self, name: str) -> AcceptorStats:
        stats = self.acceptors.get(name)
        if stats is None:
            stats = self.acceptors[name] = AcceptorStats()
        return stats

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _COUNTERS}
