"""UDP multicast discovery of a cluster's members: `<broadcast-group>` and `<discovery-group>`.

A broadcast group sends, every broadcast-period, one datagram to its multicast group and port; a
discovery group listens there and keeps each connector it hears until refresh-timeout passes without a
datagram naming it. The datagram is this project's own format, not Artemis's binary one (a real Artemis
neither joins by it nor is heard): UTF-8 JSON of one object,

    {"format": "amqp-mirror-discovery", "version": 1, "nodeId": "<node id>", "active": true,
     "connectors": ["host:port", ...]}

the sender's node id, whether it is active, and the host and port of each connector its broadcast group
names. Nothing else of a connector (no URI parameter, so no password) goes out: a discovered member is
reached at host:port with the cluster connection's user. A datagram of another format or version is
ignored. What a discovery group hears becomes members of the cluster connection that refers to it
(amqp_mirror/ha_cluster.py): membership, votes and the failover-server-list see them as static ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
import time
from collections.abc import Callable

from broker_core.config.model import BroadcastGroup, Connector, DiscoveryGroup

log = logging.getLogger("broker.ha")

FORMAT = "amqp-mirror-discovery"
VERSION = 1
MAX_DATAGRAM = 8192


def encode(node_id: str, active: bool, connectors: list[str]) -> bytes:
    body = {
        "format": FORMAT,
        "version": VERSION,
        "nodeId": node_id,
        "active": active,
        "connectors": connectors,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def decode(data: bytes) -> tuple[str, list[str]] | None:
    """(node id, connectors) of a datagram of ours; None for anything else."""
    try:
        body = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(body, dict) or body.get("format") != FORMAT or body.get("version") != VERSION:
        return None
    node_id, connectors = body.get("nodeId"), body.get("connectors")
    if not isinstance(node_id, str) or not isinstance(connectors, list):
        return None
    return node_id, [c for c in connectors if isinstance(c, str) and _host_port(c) is not None]


def _host_port(where: str) -> tuple[str, int] | None:
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, received: Callable[[bytes], None]) -> None:
        self.received = received

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        self.received(data)


class Broadcaster:
    """One `<broadcast-group>`: sends `payload(group)` every broadcast-period (nothing while it is None)."""

    def __init__(
        self,
        server: str,
        group: BroadcastGroup,
        loop: asyncio.AbstractEventLoop,
        payload: Callable[[BroadcastGroup], bytes | None],
    ) -> None:
        self.server = server
        self.group = group
        self.loop = loop
        self.payload = payload
        self.sock: socket.socket | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        group = self.group
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            port = 0 if group.local_bind_port == -1 else group.local_bind_port
            sock.bind((group.local_bind_address or "", port))
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)  # members on this host hear it
            if group.local_bind_address:
                sock.setsockopt(
                    socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(group.local_bind_address)
                )
            sock.setblocking(False)
        except OSError as error:
            sock.close()
            log.error("AMQ951197: %s cannot open broadcast group %s: %s", self.server, group.name, error)
            return
        self.sock = sock
        log.info(
            "AMQ951193: %s broadcasts its connectors (%s) to %s:%d every %d ms (broadcast group %s)",
            self.server,
            ", ".join(group.connectors),
            group.group_address,
            group.group_port,
            group.broadcast_period,
            group.name,
        )
        self._send()

    def _send(self) -> None:
        data = self.payload(self.group)
        if data is not None and self.sock is not None:
            try:
                self.sock.sendto(data, (self.group.group_address, self.group.group_port))
            except OSError as error:  # no route to the group yet: said at debug, tried again next period
                log.debug("%s: broadcast group %s cannot send: %s", self.server, self.group.name, error)
        self._timer = self.loop.call_later(self.group.broadcast_period / 1000, self._send)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class Discovery:
    """One `<discovery-group>`: the connectors heard (host:port -> node id, when last heard); `found` and
    `gone` are told of each connector that appears and of each not heard for refresh-timeout. `own` (the
    server's own connector) is never a member."""

    def __init__(
        self,
        server: str,
        group: DiscoveryGroup,
        loop: asyncio.AbstractEventLoop,
        own: str,
        found: Callable[[Connector, str], None],
        gone: Callable[[Connector], None],
    ) -> None:
        self.server = server
        self.group = group
        self.loop = loop
        self.own = own
        self.found = found
        self.gone = gone
        self.heard: dict[str, tuple[str, float]] = {}
        self._transport: asyncio.DatagramTransport | None = None
        self._listening: asyncio.Task[None] | None = None

    def start(self) -> None:
        group = self.group
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # several servers of one host listen
            sock.bind(("", group.group_port))
            interface = socket.inet_aton(group.local_bind_address or "0.0.0.0")
            membership = struct.pack("4s4s", socket.inet_aton(group.group_address), interface)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
            sock.setblocking(False)
        except OSError as error:
            sock.close()
            log.error("AMQ951197: %s cannot join discovery group %s: %s", self.server, group.name, error)
            return
        self._listening = self.loop.create_task(self._listen(sock))
        log.info(
            "AMQ951194: %s listens for cluster members on %s:%d (discovery group %s, refresh-timeout %d ms)",
            self.server,
            group.group_address,
            group.group_port,
            group.name,
            group.refresh_timeout,
        )

    async def _listen(self, sock: socket.socket) -> None:
        try:
            transport, _ = await self.loop.create_datagram_endpoint(
                lambda: _Protocol(self.received), sock=sock
            )
        except BaseException:
            sock.close()  # stopped (or failed) before it listened
            raise
        self._transport = transport

    def received(self, data: bytes) -> None:
        decoded = decode(data[:MAX_DATAGRAM])
        if decoded is None:
            return
        node_id, connectors = decoded
        now = time.monotonic()
        for where in connectors:
            if where == self.own:
                continue
            first = where not in self.heard
            self.heard[where] = (node_id, now)
            if first:
                log.info(
                    "AMQ951195: %s discovered cluster member %s (node id %s) by discovery group %s",
                    self.server,
                    where,
                    node_id,
                    self.group.name,
                )
                self.found(_connector(where), node_id)

    def expire(self, now: float) -> None:
        """Drop the connectors not heard for refresh-timeout."""
        timeout = self.group.refresh_timeout / 1000
        for where, (node_id, heard_at) in list(self.heard.items()):
            if now - heard_at > timeout:
                del self.heard[where]
                log.info(
                    "AMQ951196: %s dropped cluster member %s (node id %s): not heard for %d ms",
                    self.server,
                    where,
                    node_id,
                    self.group.refresh_timeout,
                )
                self.gone(_connector(where))

    def stop(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            self._listening = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None


def _connector(where: str) -> Connector:
    host_port = _host_port(where)
    assert host_port is not None  # decode() kept only these
    host, port = host_port
    return Connector(name=f"discovered:{where}", uri=f"tcp://{where}", host=host, port=port)
