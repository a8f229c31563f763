"""One port, two servers of one process: an upgrade naming a server hands the connection to it.

Colocated backups come later; what they will plug into is here now: a server registers in another's
`routes` (broker_core/upgrade.py) with what serves its connections, and the host's acceptors hand it
every upgrade whose activemqServerName names it. Two brokers run on one event loop (as colocated servers
will); `guest` registers with `host`. Real sockets and real clients: the failover client (WebSocket, and
Artemis's activemq-remoting upgrade) and proton for plain AMQP.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from proton import Message

from amqp_mirror.broker import Broker
from amqp_mirror.runtime import new_loop
from broker_core.config import load_config
from broker_core.config.model import Acceptor
from connections.failover import FailoverConnection, ReconnectExhaustedError
from tests.peers.ports import LOOPBACK, free_port
from tests.support.broker import BrokerProcess
from tests.support.client import receive

T = TypeVar("T")


class LoopThread:
    def __init__(self) -> None:
        self.loop = new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="colocated-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def call(self, fn: Any) -> Any:
        async def wrapper() -> Any:
            return fn()

        return self.run(wrapper())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def start(loop: LoopThread, home: Path, name: str, queue: str, extra_acceptors: str = "") -> Broker:
    xml = {"addresses": f'<address name="{queue}"><anycast><queue name="{queue}"/></anycast></address>'}
    path = BrokerProcess(
        home, name=name, xml_kwargs={**xml, "extra_acceptors": extra_acceptors}
    ).write_config()
    broker = Broker(load_config(path)[0], loop.loop)
    loop.run(broker.start())
    return broker


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[LoopThread, Broker, Broker, int]]:
    loop = LoopThread()
    http = free_port()
    upgrade_only = f'\n<acceptor name="http">tcp://{LOOPBACK}:{http}?httpUpgradeEnabled=true</acceptor>'
    host = start(loop, tmp_path / "host", "host", "host.q", upgrade_only)
    guest = start(loop, tmp_path / "guest", "guest", "guest.q")
    assert guest.listener is not None
    listener = guest.listener

    def serve_guest(acceptor: Acceptor) -> Any:  # the guest's own acceptor of the same name, else its first
        own = {a.name: a for a in guest.config.acceptors}
        return listener.serve(own.get(acceptor.name, guest.config.acceptors[0]))

    loop.call(lambda: host.server.routes.add("guest", serve_guest))
    try:
        yield loop, host, guest, http
    finally:
        for broker in (host, guest):
            loop.run(broker.stop())
        loop.close()


def test_an_upgrade_naming_the_guest_reaches_it_on_the_hosts_port(
    servers: tuple[LoopThread, Broker, Broker, int],
) -> None:
    loop, host, guest, http = servers
    port = host.port("amqp")
    with FailoverConnection(f"ws://{LOOPBACK}:{port}?activemqServerName=guest") as conn:
        conn.sender("guest.q").send(Message(body="for the guest"))
    with FailoverConnection(
        f"tcp://{LOOPBACK}:{http}?httpUpgradeEnabled=true&activemqServerName=guest"
    ) as conn:
        conn.sender("guest.q").send(Message(body="for the guest, by activemq-remoting"))
    with FailoverConnection(f"ws://{LOOPBACK}:{port}?activemqServerName=host") as conn:
        conn.sender("host.q").send(Message(body="for the host, by name"))
    with FailoverConnection(f"ws://{LOOPBACK}:{port}") as conn:
        conn.sender("host.q").send(Message(body="for the host, unnamed"))
    assert loop.call(lambda: (guest.server.queues["guest.q"].depth, "guest.q" in host.server.queues)) == (
        2,
        False,
    )
    assert [m.body for m in receive(f"amqp://{LOOPBACK}:{guest.port()}", "guest.q", 2)] == [
        "for the guest",
        "for the guest, by activemq-remoting",
    ]
    assert [m.body for m in receive(f"amqp://{LOOPBACK}:{port}", "host.q", 2)] == [
        "for the host, by name",
        "for the host, unnamed",
    ]


def test_once_the_guest_is_gone_its_name_is_refused(servers: tuple[LoopThread, Broker, Broker, int]) -> None:
    loop, host, _, _ = servers
    loop.call(lambda: host.server.routes.remove("guest"))
    with pytest.raises(
        ReconnectExhaustedError, match=r"HTTP 404 Not Found: no server named guest in this process"
    ):
        FailoverConnection(f"ws://{LOOPBACK}:{host.port('amqp')}?activemqServerName=guest")
