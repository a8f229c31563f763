"""`amqp-mirror demo`: a broker on an embedded default config, real AMQP traffic, a printed summary.

The broker runs on its own event loop thread in this process, on a free loopback port, in a temp
directory; producers and consumers are python-qpid-proton clients over real sockets. The demo also
restarts the broker once mid-way to show that durable messages survive.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .config import load_config
from .runtime import Broker, new_loop

DEMO_XML = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq">
  <core xmlns="urn:activemq:core">
    <name>{name}</name>
    <persistence-enabled>true</persistence-enabled>
    <security-enabled>false</security-enabled>
    <journal-directory>data/journal</journal-directory>
    <bindings-directory>data/bindings</bindings-directory>
    <paging-directory>data/paging</paging-directory>
    <large-messages-directory>data/large-messages</large-messages-directory>
    <acceptors><acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP</acceptor></acceptors>
    <address-settings>
      <address-setting match="#">
        <dead-letter-address>DLA</dead-letter-address>
        <expiry-address>ExpiryQueue</expiry-address>
        <max-delivery-attempts>3</max-delivery-attempts>
      </address-setting>
    </address-settings>
    <addresses>
      <address name="DLA"><anycast><queue name="DLA"/></anycast></address>
      <address name="ExpiryQueue"><anycast><queue name="ExpiryQueue"/></anycast></address>
      <address name="orders"><anycast><queue name="orders"/></anycast></address>
      <address name="prices"><multicast/></address>
    </addresses>
  </core>
</configuration>
"""


class EmbeddedBroker:
    """A broker on a private event-loop thread."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.loop = new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="broker-loop", daemon=True)
        self.broker: Broker | None = None

    def start(self) -> None:
        cfg, _ = load_config(self.config_path)
        self.thread.start()
        self.broker = Broker(cfg, self.loop)
        asyncio.run_coroutine_threadsafe(self.broker.start(), self.loop).result(30)

    def stop(self) -> None:
        if self.broker is not None:
            asyncio.run_coroutine_threadsafe(self.broker.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def stats(self) -> dict[str, int]:
        assert self.broker is not None
        return dict(self.broker.server.stats)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(messages: int = 2000) -> int:
    from proton import Message
    from proton.utils import BlockingConnection

    with tempfile.TemporaryDirectory(prefix="amqp-mirror-demo-") as tmp:
        etc = Path(tmp) / "etc"
        etc.mkdir()
        port = _free_port()
        (etc / "broker.xml").write_text(DEMO_XML.format(name="demo", port=port))
        url = f"amqp://127.0.0.1:{port}"
        broker = EmbeddedBroker(etc / "broker.xml")
        broker.start()
        print(f"broker 'demo' listening on {url} (data in a temp dir)")
        t0 = time.monotonic()
        conn = BlockingConnection(url, allowed_mechs="ANONYMOUS")
        prices = conn.create_receiver("prices", credit=100)
        orders_out = conn.create_sender("orders")
        prices_out = conn.create_sender("prices")
        for i in range(messages):
            orders_out.send(Message(body={"order": i}, durable=True))
            if i % 10 == 0:
                prices_out.send(Message(body={"tick": i}, durable=False))
            if (i + 1) % (messages // 4) == 0:
                print(f"  sent {i + 1}/{messages} durable orders")
        ticks = 0
        while ticks < messages // 10:
            prices.receive(timeout=10)
            prices.accept()
            ticks += 1
        consumer = conn.create_receiver("orders", credit=200)
        half = messages // 2
        for _ in range(half):
            consumer.receive(timeout=10)
            consumer.accept()
        conn.close()
        print(f"  consumed {half} orders and {ticks} price ticks; restarting the broker...")
        before = broker.stats()
        broker.stop()
        broker = EmbeddedBroker(etc / "broker.xml")
        broker.start()
        conn = BlockingConnection(url, allowed_mechs="ANONYMOUS")
        consumer = conn.create_receiver("orders", credit=200)
        survivors = []
        while True:
            try:
                m = consumer.receive(timeout=2)
            except Exception:
                break
            consumer.accept()
            body: Any = m.body
            survivors.append(body["order"])
        conn.close()
        broker.stop()
        elapsed = time.monotonic() - t0
        expected = list(range(half, messages))
        print()
        print("summary")
        print(f"  durable orders sent and accepted : {messages}")
        print(f"  price ticks (multicast) received : {ticks}")
        print(f"  orders consumed before restart   : {half}")
        print(
            f"  orders recovered after restart   : {len(survivors)} "
            f"({'exactly the unconsumed ones, in order' if survivors == expected else 'MISMATCH'})"
        )
        print(f"  messages routed by the broker    : {before['messages_routed']}")
        print(f"  wall time                        : {elapsed:.1f} s")
        return 0 if survivors == expected else 1
