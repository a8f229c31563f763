"""The network isolation check's rules (`network-check-*`): what is checked, what the answers mean, and
what a server does about them. Pure; amqp_mirror/network_check.py probes and acts.

A server checks, every `network-check-period` ms (5000), each address of `network-check-list` and each
URL of `network-check-URL-list`, each within `network-check-timeout` ms (1000). The network is there if
**any one** of them answers (as Artemis judges it); with nothing listed, the check is off and always
passes. An address is reached in process (an ICMP echo on an unprivileged datagram socket where the
system allows it, else a TCP connection to its echo port, which a refusal answers as well as an accept:
the host is there), bound to `network-check-NIC` when one is named; when that fails and a
`network-check-ping-command` (IPv4) or `network-check-ping6-command` (IPv6) is configured, the command
is run too, and its exit code 0 counts. A URL is reached when an HTTP GET answers below 400.

While the network is not there an *active* server is **isolated**: it stops serving (its acceptors close
and its clients are disconnected, its broker connections stop; its journal and, in a pair, its lock
stay), and it serves again once the network is back. A passive server never activates while isolated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

DEFAULT_PERIOD = 5000
DEFAULT_TIMEOUT = 1000
DEFAULT_PING = "ping -c 1 -t %d %s"  # Artemis's (Linux): %d the timeout in seconds, %s the address
DEFAULT_PING6 = "ping6 -c 1 %2$s"


@dataclass(frozen=True)
class Targets:
    addresses: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    nic: str | None = None
    period_ms: int = DEFAULT_PERIOD
    timeout_ms: int = DEFAULT_TIMEOUT
    ping_command: str | None = None  # only when configured: in process first
    ping6_command: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.addresses or self.urls)


def split_list(text: str | None) -> tuple[str, ...]:
    """A comma-separated list, as Artemis writes these (spaces around items ignored)."""
    return tuple(item.strip() for item in (text or "").split(",") if item.strip())


def healthy(answers: list[bool]) -> bool:
    """The network is there if nothing is checked, or if any one target answered."""
    return not answers or any(answers)


_FORMAT = re.compile(r"%(?:(\d)\$)?([ds%])")


def ping_argv(command: str, timeout_ms: int, address: str) -> list[str]:
    """The command line of a ping command for `address`, Java's String.format with (timeout in whole
    seconds, rounded up, at least 1; address): `%d`, `%s` in turn, or by position (`%1$d`, `%2$s`)."""
    seconds = max(1, math.ceil(timeout_ms / 1000))
    values: tuple[str, str] = (str(seconds), address)

    def substitute(match: re.Match[str]) -> str:
        position, kind = match.group(1), match.group(2)
        if kind == "%":
            return "%"
        if position is not None:
            return values[int(position) - 1]
        return values[0 if kind == "d" else 1]

    return [_FORMAT.sub(substitute, word) for word in command.split()]


def is_ipv6(address: str) -> bool:
    return ":" in address


# ---------------------------------------------------------------------------------- what a server does


class Serving(StrEnum):
    SERVING = "serving"
    ISOLATED = "isolated"


class NetworkEvent(StrEnum):
    THERE = "network there"
    GONE = "network gone"


class NetworkAction(StrEnum):
    NONE = "none"
    STOP_SERVING = "stop serving: close the acceptors and clients, stop broker connections (AMQ951108)"
    SERVE_AGAIN = "serve again (AMQ951109)"


class NetworkStep(NamedTuple):
    state: Serving
    action: NetworkAction


_STEPS: dict[tuple[Serving, NetworkEvent], NetworkStep] = {
    (Serving.SERVING, NetworkEvent.GONE): NetworkStep(Serving.ISOLATED, NetworkAction.STOP_SERVING),
    (Serving.ISOLATED, NetworkEvent.THERE): NetworkStep(Serving.SERVING, NetworkAction.SERVE_AGAIN),
}


def network_step(state: Serving, event: NetworkEvent) -> NetworkStep:
    return _STEPS.get((state, event)) or NetworkStep(state, NetworkAction.NONE)
