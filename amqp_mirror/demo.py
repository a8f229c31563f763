"""`amqp-mirror demo`: two data centres mirroring each other, real traffic, a printed account.

DC1 and DC2 run on one event loop (two servers side by side, nothing shared) on free loopback ports
in a temp directory, each with a `<mirror>` broker connection to the other. python-qpid-proton clients
produce and consume on both sides over real sockets; the link DC1 -> DC2 is cut and restored once.
"""

from __future__ import annotations

import asyncio
import json
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from broker_core.config import load_config

from .broker import Broker
from .runtime import new_loop

DEMO_XML = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq">
  <core xmlns="urn:activemq:core">
    <name>{name}</name>
    <persistence-enabled>true</persistence-enabled>
    <security-enabled>false</security-enabled>
    <journal-directory>data/journal</journal-directory>
    <acceptors><acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP</acceptor></acceptors>
    <broker-connections>
      <amqp-connection uri="tcp://127.0.0.1:{peer_port}" name="{peer}" retry-interval="200">
        <mirror/>
      </amqp-connection>
    </broker-connections>
    <addresses>
      <address name="orders"><anycast><queue name="orders"/></anycast></address>
    </addresses>
  </core>
</configuration>
"""


class Site:
    """One data centre: its broker on the shared loop."""

    def __init__(
        self, name: str, home: Path, loop: asyncio.AbstractEventLoop, port: int, peer: str, peer_port: int
    ) -> None:
        etc = home / "etc"
        etc.mkdir(parents=True)
        (etc / "broker.xml").write_text(DEMO_XML.format(name=name, port=port, peer=peer, peer_port=peer_port))
        cfg, _ = load_config(etc / "broker.xml")
        self.name = name
        self.loop = loop
        self.url = f"amqp://127.0.0.1:{port}"
        self.broker = Broker(cfg, loop)

    def call(self, fn: Any) -> Any:
        """Run `fn()` on the broker loop and return its result (the broker is not thread-safe)."""
        return asyncio.run_coroutine_threadsafe(_call(fn), self.loop).result(10)

    def mirror(self) -> dict[str, Any]:
        sources: Any = self.call(lambda: self.broker.mirror_status()["sources"])
        return dict(sources[0])

    def depth(self) -> int:
        return int(self.call(lambda: self.broker.server.queues["orders"].depth))

    def contents(self) -> list[bytes]:
        """The orders waiting here, as stored (the message bytes a mirror must carry unchanged)."""
        payloads: list[bytes] = self.call(
            lambda: [r.message.payload for r in self.broker.server.queues["orders"].refs()]
        )
        return sorted(payloads)


def _summary(
    dc1: Site,
    dc2: Site,
    produced: dict[str, int],
    consumed: int,
    same: bool,
    targets: list[dict[str, Any]],
    lag_ms: dict[str, int],
) -> None:
    """One aligned table: what each data centre did, what its mirror carried, and how its link is now."""
    m1, m2 = dc1.mirror(), dc2.mirror()
    k1, k2 = m1["eventsQueuedByKind"], m2["eventsQueuedByKind"]

    def row(label: str, a: object, b: object, note: str = "") -> None:
        print(f"  {label:<34}{a!s:>10}{b!s:>10}{'   ' + note if note else ''}")

    def link(m: dict[str, Any]) -> str:
        state = "connected" if m["connected"] else "DOWN"
        pending = "nothing pending" if m["pendingEvents"] == 0 else f"{m['pendingEvents']} events pending"
        return f"{state}, {pending}"

    print()
    print(f"summary{'DC1':>39}{'DC2':>10}")
    row("orders produced", produced["DC1"], produced["DC2"])
    row("orders consumed", 0, consumed)
    row("orders left", dc1.depth(), dc2.depth(), "identical, byte for byte" if same else "DIFFERENT")
    row("mirror events queued", m1["eventsQueued"], m2["eventsQueued"])
    row("  messages (sends)", k1["messages"], k2["messages"])
    row("  acknowledgements", k1["acks"], k2["acks"])
    row("  address and queue events", k1["topology"], k2["topology"])
    row("mirror events accepted remotely", m1["eventsAccepted"], m2["eventsAccepted"])
    row("duplicates dropped on arrival", targets[0]["duplicates"], targets[1]["duplicates"])
    row("worst mirror lag, steps 1-2", f"{lag_ms['DC1']} ms", f"{lag_ms['DC2']} ms")
    print(f"  {'mirror link to the other side':<34}DC1: {link(m1)}; DC2: {link(m2)}")


async def _call(fn: Any) -> Any:
    return fn()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _send(url: str, n: int, prefix: str, fallback: str | None = None) -> None:
    """Produce through the failover client: with `fallback`, a producer that would move to the other DC."""
    from proton import Message

    from connections.failover import FailoverConnection

    uris = f"{url},{fallback}" if fallback else url
    with FailoverConnection(f"failover:({uris})?randomize=false&maxReconnectAttempts=3") as conn:
        sender = conn.sender("orders")
        for i in range(n):
            sender.send(Message(body=f"{prefix}-{i}", durable=True))


def _consume(url: str, n: int) -> int:
    from proton.utils import BlockingConnection

    conn = BlockingConnection(url, allowed_mechs="ANONYMOUS")
    receiver = conn.create_receiver("orders", credit=100)
    got = 0
    for _ in range(n):
        receiver.receive(timeout=10)
        receiver.accept()
        got += 1
    conn.close()
    return got


def _wait(what: str, predicate: Any, timeout: float = 30.0, poll: float = 0.02) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"demo: timed out waiting for {what}")
        time.sleep(poll)
    return time.monotonic() - start


def _caught_up(dc1: Site, dc2: Site) -> bool:
    return bool(dc1.mirror()["pendingEvents"] == 0 and dc2.depth() == dc1.depth())


class LagSampler(threading.Thread):
    """Samples each mirror's oldest pending event age while traffic runs."""

    def __init__(self, sites: list[Site]) -> None:
        super().__init__(daemon=True)
        self.sites = sites
        self.max_lag_ms = {s.name: 0 for s in sites}
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(0.02):
            for s in self.sites:
                age = int(s.mirror()["oldestPendingAgeMs"])
                self.max_lag_ms[s.name] = max(self.max_lag_ms[s.name], age)


def main(messages: int = 1000) -> int:
    from connections.cli import request

    loop = new_loop()
    thread = threading.Thread(target=loop.run_forever, name="brokers", daemon=True)
    thread.start()
    with tempfile.TemporaryDirectory(prefix="amqp-mirror-demo-") as tmp:
        p1, p2 = _free_port(), _free_port()
        dc1 = Site("DC1", Path(tmp) / "dc1", loop, p1, "DC2", p2)
        dc2 = Site("DC2", Path(tmp) / "dc2", loop, p2, "DC1", p1)
        for site in (dc1, dc2):
            asyncio.run_coroutine_threadsafe(site.broker.start(), loop).result(30)
        print(f"DC1 on {dc1.url} and DC2 on {dc2.url}, each mirroring to the other")
        _wait("both mirrors to connect", lambda: dc1.mirror()["connected"] and dc2.mirror()["connected"])
        sampler = LagSampler([dc1, dc2])
        sampler.start()

        t0 = time.monotonic()
        print(f"1. {messages} durable orders on DC1 and {messages // 2} on DC2, concurrently")
        print("   (failover clients: each producer has the other data centre as its backup)")
        producers = [
            threading.Thread(target=_send, args=(dc1.url, messages, "dc1", dc2.url)),
            threading.Thread(target=_send, args=(dc2.url, messages // 2, "dc2", dc1.url)),
        ]
        for p in producers:
            p.start()
        for p in producers:
            p.join()
        total = messages + messages // 2
        _wait("both sides to hold every order", lambda: dc1.depth() == total and dc2.depth() == total)
        print(f"   both sides hold {total} orders ({time.monotonic() - t0:.1f} s)")

        consumed = _consume(dc2.url, total // 2)
        _wait("the acks to reach DC1", lambda: dc1.depth() == total - consumed)
        print(
            f"2. a consumer on DC2 took {consumed} orders; DC1 dropped them too: "
            f"DC1 {dc1.depth()}, DC2 {dc2.depth()}"
        )

        sampler.stop_event.set()
        sampler.join()
        request(dc1.url, "stopBrokerConnection", ["DC2"])
        print("3. link DC1 -> DC2 cut (stopBrokerConnection); 200 more orders on DC1")
        _send(dc1.url, 200, "outage")
        held = dc1.mirror()["pendingEvents"]
        print(
            f"   DC1 holds {held} events for DC2 in $ACTIVEMQ_ARTEMIS_MIRROR_DC2; DC2 still has {dc2.depth()}"
        )
        restarted = time.monotonic()  # from the start request: the backlog can drain before it returns
        request(dc1.url, "startBrokerConnection", ["DC2"])
        _wait("DC1's mirror to drain and DC2 to catch up", lambda: _caught_up(dc1, dc2), poll=0.001)
        took = time.monotonic() - restarted
        print(
            f"   link restored: {held} events caught up in {took * 1000:.0f} ms "
            f"({held / took:,.0f} events/s); DC1 {dc1.depth()}, DC2 {dc2.depth()}"
        )

        statuses = [
            json.loads(json.dumps(s.call(lambda s=s: s.broker.mirror_status()["target"]))) for s in (dc1, dc2)
        ]
        same = dc1.contents() == dc2.contents()  # the same messages, byte for byte, not just as many
        produced = {"DC1": messages + 200, "DC2": messages // 2}
        _summary(dc1, dc2, produced, consumed, same, statuses, sampler.max_lag_ms)
        for site in (dc1, dc2):  # links first, so neither side logs the other's shutdown as a loss
            site.call(lambda site=site: site.broker.connections and site.broker.connections.stop())
        for site in (dc1, dc2):
            asyncio.run_coroutine_threadsafe(site.broker.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    return 0 if same else 1
