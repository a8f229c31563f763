"""The network isolation check's probes and timer (its rules: broker_core/ha/isolation.py).

Everything is done in process where it can be, so that it works under the shipped unit's sandboxing (no
raw sockets, no setuid ping): an ICMP echo on an unprivileged datagram socket (where
`net.ipv4.ping_group_range` allows the service's group), else a TCP connection to the address's echo
port (7), where a refusal means the host answered; an HTTP GET for a URL. A configured ping command is
run only when the in-process probe got no answer (as Artemis does after `InetAddress.isReachable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from broker_core.config.model import BrokerConfig
from broker_core.ha.isolation import (
    NetworkAction,
    NetworkEvent,
    Serving,
    Targets,
    healthy,
    is_ipv6,
    network_step,
    ping_argv,
    split_list,
)

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("broker.ha")

ECHO_PORT = 7
_ICMP_ECHO, _ICMP6_ECHO = 8, 128


def targets_of(config: BrokerConfig) -> Targets:
    return Targets(
        addresses=split_list(config.network_check_list),
        urls=split_list(config.network_check_URL_list),
        nic=config.network_check_NIC or None,
        period_ms=config.network_check_period,
        timeout_ms=config.network_check_timeout,
        ping_command=config.network_check_ping_command,
        ping6_command=config.network_check_ping6_command,
    )


class NetworkCheck:
    """Checks the targets every period; tells `on_change(healthy)` when the verdict changes."""

    def __init__(self, name: str, targets: Targets, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.targets = targets
        self.loop = loop
        self.healthy = True
        self.checks = 0
        self.isolations = 0  # times the network was found gone (a metric)
        self.listeners: list[Callable[[bool], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._icmp_refused = False  # the system refuses unprivileged ICMP sockets: TCP from then on

    def start(self) -> None:
        if self.targets.enabled and self._task is None:
            self._task = self.loop.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            answer = await self.check()
            self.checks += 1
            if answer != self.healthy:
                self.healthy = answer
                if not answer:
                    self.isolations += 1
                    log.warning(
                        "AMQ951110: %s cannot reach any of %s: it is isolated from the network",
                        self.name,
                        ", ".join(self.targets.addresses + self.targets.urls),
                    )
                else:
                    log.info("AMQ951111: %s reaches the network again", self.name)
                for listener in list(self.listeners):
                    listener(answer)
            await asyncio.sleep(self.targets.period_ms / 1000)

    async def check(self) -> bool:
        """One round: every target at once, each within the timeout; whether any answered."""
        probes = [self.address(a) for a in self.targets.addresses] + [self.url(u) for u in self.targets.urls]
        answers = await asyncio.gather(*probes, return_exceptions=True)
        return healthy([answer is True for answer in answers])

    # ---------------------------------------------------------------------------- addresses

    async def address(self, address: str) -> bool:
        timeout = self.targets.timeout_ms / 1000
        if await self._in_process(address, timeout):
            return True
        command = self.targets.ping6_command if is_ipv6(address) else self.targets.ping_command
        return command is not None and await self._ping_command(command, address, timeout)

    async def _in_process(self, address: str, timeout: float) -> bool:
        try:
            infos = await self.loop.getaddrinfo(address, ECHO_PORT, type=socket.SOCK_STREAM)
        except OSError:
            return False
        family, _, _, _, where = infos[0]
        if not self._icmp_refused:
            answered = await self._icmp(family, where, timeout)
            if answered is not None:
                return answered
        return await self._tcp(family, where, timeout)

    def _bind_nic(self, sock: socket.socket) -> None:
        nic = self.targets.nic
        if nic:
            with contextlib.suppress(OSError):  # unprivileged: the routing table decides, as without it
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, nic.encode())

    async def _icmp(self, family: int, where: tuple[object, ...], timeout: float) -> bool | None:
        """An echo and its reply; None when the system refuses the socket (then TCP says)."""
        proto = socket.IPPROTO_ICMPV6 if family == socket.AF_INET6 else socket.IPPROTO_ICMP
        try:
            sock = socket.socket(family, socket.SOCK_DGRAM, proto)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EPROTONOSUPPORT, errno.EAFNOSUPPORT):
                self._icmp_refused = True
                return None
            raise
        with sock:
            sock.setblocking(False)
            self._bind_nic(sock)
            kind = _ICMP6_ECHO if family == socket.AF_INET6 else _ICMP_ECHO
            header = struct.pack("!BBHHH", kind, 0, 0, 0, os.getpid() & 0xFFFF)
            packet = header + b"amqp-mirror network check"
            try:
                await self.loop.sock_sendto(sock, _checksummed(packet), (str(where[0]), 0))
                await asyncio.wait_for(self.loop.sock_recv(sock, 1024), timeout)
            except (OSError, TimeoutError):
                return False
            return True

    async def _tcp(self, family: int, where: tuple[object, ...], timeout: float) -> bool:
        sock = socket.socket(family, socket.SOCK_STREAM)
        with sock:
            sock.setblocking(False)
            self._bind_nic(sock)
            try:
                await asyncio.wait_for(self.loop.sock_connect(sock, (str(where[0]), ECHO_PORT)), timeout)
            except ConnectionRefusedError:
                return True  # the host answered, refusing: it is there
            except (OSError, TimeoutError):
                return False
            return True

    async def _ping_command(self, command: str, address: str, timeout: float) -> bool:
        argv = ping_argv(command, self.targets.timeout_ms, address)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
            )
        except OSError as exc:
            log.warning("%s: network-check ping command %r cannot run: %s", self.name, argv[0], exc)
            return False
        try:
            return await asyncio.wait_for(process.wait(), timeout + 1) == 0
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            return False

    # --------------------------------------------------------------------------------- URLs

    async def url(self, url: str) -> bool:
        parts = urlsplit(url)
        secure = parts.scheme == "https"
        port = parts.port or (443 if secure else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        timeout = self.targets.timeout_ms / 1000
        writer = None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    parts.hostname, port, ssl=ssl.create_default_context() if secure else None
                ),
                timeout,
            )
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode())
            status = await asyncio.wait_for(reader.readline(), timeout)
        except (OSError, TimeoutError, ssl.SSLError):
            return False
        finally:
            if writer is not None:
                writer.close()
        words = status.split()
        return len(words) >= 2 and words[1].isdigit() and int(words[1]) < 400


def _checksummed(packet: bytes) -> bytes:
    """The ICMP checksum in its place (the kernel fills the identifier of a datagram socket's echo)."""
    data = packet + b"\0" * (len(packet) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    checksum = ~total & 0xFFFF
    return packet[:2] + struct.pack("!H", checksum) + packet[4:]


class NetworkGuard:
    """Stops a broker serving while the network is gone, and serves again once it is back (isolation.py's
    table). `broker_of()` is the broker to act on (None: nothing is served now, a passive server);
    `may_serve_again()` may refuse the return (another server took over meanwhile: the caller stops)."""

    def __init__(
        self,
        check: NetworkCheck,
        broker_of: Callable[[], Broker | None],
        may_serve_again: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.check = check
        self.broker_of = broker_of
        self.may_serve_again = may_serve_again
        self.state = Serving.SERVING
        self._isolated: Broker | None = None
        check.listeners.append(self._changed)

    def _changed(self, there: bool) -> None:
        broker = self.broker_of() if self.state == Serving.SERVING else self._isolated
        if broker is None:
            return  # nothing served: a passive server never activates while isolated (its poll waits)
        step = network_step(self.state, NetworkEvent.THERE if there else NetworkEvent.GONE)
        self.state = step.state
        if step.action == NetworkAction.STOP_SERVING:
            self._isolated = broker
            broker.isolate()
            log.warning(
                "AMQ951108: %s stops serving while isolated: acceptors closed, clients and broker "
                "connections stopped; its journal is kept",
                broker.config.name,
            )
        elif step.action == NetworkAction.SERVE_AGAIN:
            self._isolated = None
            self.check.loop.create_task(self._serve_again(broker))

    async def _serve_again(self, broker: Broker) -> None:
        if self.may_serve_again is not None and not await self.may_serve_again():
            return
        if self.state == Serving.SERVING and broker.server.started:
            await broker.serve_again()
            log.info("AMQ951109: %s serves again: the network is back", broker.config.name)
