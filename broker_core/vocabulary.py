"""The broker's words, each defined once: routing types and why a message left its queue.

Plain `Final` constants rather than enums where the hot path compares them (mypyc compiles a `Final`
int or str to a literal); `RoutingType` is the enum configuration validates against, with the same values.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

ANYCAST: Final = "ANYCAST"
MULTICAST: Final = "MULTICAST"
ROUTING_TYPES: Final = frozenset({ANYCAST, MULTICAST})


class RoutingType(StrEnum):
    ANYCAST = "ANYCAST"
    MULTICAST = "MULTICAST"


class AckReason:
    """Why a message reference left its queue, numbered as Artemis numbers them (its `AckReason`).

    The journal stores it with each acknowledgement and the mirror sends it with each postAck."""

    NORMAL: Final = 0
    KILLED: Final = 1  # dead-lettered
    EXPIRED: Final = 2
    REPLACED: Final = 3  # last-value replacement: never mirrored

    ALL: Final = frozenset({NORMAL, KILLED, EXPIRED, REPLACED})
