"""A server's message counters, read by management (and, later, metrics) as a snapshot."""

from __future__ import annotations


class BrokerStats:
    __slots__ = (
        "messages_acked",
        "messages_dropped",
        "messages_expired",
        "messages_killed",
        "messages_routed",
        "messages_unrouted",
    )

    def __init__(self) -> None:
        self.messages_routed = 0
        self.messages_dropped = 0  # by an address's DROP policy
        self.messages_unrouted = 0
        self.messages_acked = 0
        self.messages_expired = 0
        self.messages_killed = 0

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}
