"""Network partitions between processes, with network namespaces the test makes (spec B6): each host a
namespace of its own with one or more addresses of a private /24, all joined by a bridge in a namespace
of its own; nothing is added to the machine's own namespace. A partition is, on each side, a permanent
neighbour entry giving the other's addresses a hardware address nobody has: what is sent there leaves and
is lost, silently (a connection hears nothing, a connect times out), as across a cut cable; healing
deletes the entries, and the addresses are resolved again. The test's own thread enters a namespace of
the topology (`entered`) to reach the others, as a client host would; the processes it starts there
inherit it.

Needs root and iproute2 (`ip`); `availability()` says why not otherwise.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
NOWHERE = "02:00:00:00:00:01"  # a hardware address no interface of the topology has


def availability() -> tuple[bool, str]:
    if shutil.which("ip") is None:
        return False, "iproute2 (ip) is not installed"
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    return True, ""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Topology:
    """`hosts`: name -> how many addresses it has. Addresses are 10.250.<net>.<n>, in order."""

    def __init__(self, hosts: dict[str, int]) -> None:
        self.tag = f"amqpha{os.getpid()}"
        self.net = 100 + os.getpid() % 150
        self.switch = f"{self.tag}-sw"
        self.addresses: dict[str, list[str]] = {}
        self._cuts: set[tuple[str, str, str]] = set()  # (host, other host, address sent nowhere)
        self._made: list[str] = []
        n = 1
        for host, count in hosts.items():
            self.addresses[host] = [f"10.250.{self.net}.{n + i}" for i in range(count)]
            n += count

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def prefix(self, host: str) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.namespace(host))

    def address(self, host: str) -> str:
        return self.addresses[host][0]

    def create(self) -> None:
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, (host, addresses) in enumerate(self.addresses.items()):
            ns = self.namespace(host)
            _ip("netns", "add", ns)
            self._made.append(ns)
            # the pair is made in the switch's namespace, one end moved at once: never in the machine's own
            _ip(
                "-n", self.switch, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns
            )
            _ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", self.switch, "link", "set", f"p{i}", "up")
            for address in addresses:
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def multicast(self) -> None:
        """Multicast across the bridge: each host routes 224.0.0.0/4 out of its interface, and the bridge
        floods every group (no IGMP snooping to wait for)."""
        _ip("-n", self.switch, "link", "set", "br0", "type", "bridge", "mcast_snooping", "0")
        for host in self.addresses:
            _ip("-n", self.namespace(host), "route", "add", "224.0.0.0/4", "dev", "eth0")

    def cut(self, a: str, b: str) -> None:
        """Nothing goes between hosts `a` and `b`, either way."""
        self.cut_one_way(a, b)
        self.cut_one_way(b, a)

    def cut_one_way(self, here: str, there: str) -> None:
        """Nothing `here` sends reaches `there`; what `there` sends still arrives (a one-way partition:
        a TCP connection between them hears its peer but its own segments, and acknowledgements, are
        lost). `heal(here, there)` mends it."""
        for address in self.addresses[there]:
            if (here, there, address) not in self._cuts:
                ns = self.namespace(here)
                _ip(
                    "-n",
                    ns,
                    "neigh",
                    "replace",
                    address,
                    "lladdr",
                    NOWHERE,
                    "dev",
                    "eth0",
                    "nud",
                    "permanent",
                )
                self._cuts.add((here, there, address))

    def heal(self, a: str, b: str) -> None:
        for here, there in ((a, b), (b, a)):
            for address in self.addresses[there]:
                if (here, there, address) in self._cuts:
                    _ip("-n", self.namespace(here), "neigh", "del", address, "dev", "eth0")
                    self._cuts.discard((here, there, address))

    def heal_all(self) -> None:
        for here, there, _ in list(self._cuts):
            self.heal(here, there)

    def link(self, host: str, up: bool) -> None:
        """`host`'s interface up or down (down: nothing reaches its addresses, as with its cable pulled)."""
        _ip("-n", self.namespace(host), "link", "set", "eth0", "up" if up else "down")

    def close(self) -> None:
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self._made.clear()

    @contextmanager
    def entered(self, host: str) -> Iterator[None]:
        """The calling thread (and the threads and processes it starts meanwhile) in `host`'s namespace."""
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        there = os.open(f"/run/netns/{self.namespace(host)}", os.O_RDONLY)
        try:
            if libc.setns(there, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"cannot enter {self.namespace(host)}")
            try:
                yield
            finally:
                if libc.setns(own, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "cannot return to this process's network namespace")
        finally:
            os.close(there)
            os.close(own)
