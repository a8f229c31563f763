"""Two brokers in one process, as the two data centres of the mirror tests will be: nothing is shared.

Both run on ONE event loop (a thread of this process), each with its own directory, port, node id,
journal and queues; the last test runs them on two separate loops instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from proton import ConnectionException

from amqp_mirror.broker import Broker
from amqp_mirror.runtime import new_loop
from broker_core.config import load_config
from tests.peers.ports import LOOPBACK
from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive, send

T = TypeVar("T")
QUEUE_XML = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


def _write_config(home: Path, name: str) -> Path:
    return BrokerProcess(home, name=name, xml_kwargs={"addresses": QUEUE_XML}).write_config()


def _url(broker: Broker) -> str:
    return f"amqp://{LOOPBACK}:{broker.port()}"


class SharedLoop:
    """One event loop on a thread; brokers are started, inspected and stopped on it."""

    def __init__(self) -> None:
        self.loop = new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="two-brokers-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the loop: broker state belongs to the loop's thread."""

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper())

    def start(self, config_path: Path) -> Broker:
        cfg, _ = load_config(config_path)
        broker = Broker(cfg, self.loop)
        self.run(broker.start())
        return broker

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        assert not self.thread.is_alive()
        self.loop.close()


def _journal_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("journal-writer")]


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[SharedLoop, Broker, Broker]]:
    loop = SharedLoop()
    a = loop.start(_write_config(tmp_path / "dc1", "dc1"))
    b = loop.start(_write_config(tmp_path / "dc2", "dc2"))
    try:
        yield loop, a, b
    finally:
        for broker in (a, b):
            if broker.server.started:
                loop.run(broker.stop())
        loop.close()


def _depth(loop: SharedLoop, broker: Broker, queue: str = "orders") -> int:
    return loop.call(lambda: broker.server.queues[queue].depth)


def test_each_broker_has_its_own_port_node_id_and_journal(shared: tuple[SharedLoop, Broker, Broker]) -> None:
    _, a, b = shared
    assert a.port() != b.port()
    assert a.server.node_id and b.server.node_id and a.server.node_id != b.server.node_id
    assert a.config.journal_directory != b.config.journal_directory
    assert (a.server.name, b.server.name) == ("dc1", "dc2")


def test_messages_sent_to_one_are_not_on_the_other(shared: tuple[SharedLoop, Broker, Broker]) -> None:
    loop, a, b = shared
    assert send(_url(a), "orders", [f"a{i}" for i in range(5)]) == 5
    assert send(_url(b), "orders", [f"b{i}" for i in range(3)]) == 3
    assert (_depth(loop, a), _depth(loop, b)) == (5, 3)

    assert [m.body for m in receive(_url(b), "orders", 10, timeout=0.5)] == ["b0", "b1", "b2"]
    assert (_depth(loop, a), _depth(loop, b)) == (5, 0)
    assert [m.body for m in receive(_url(a), "orders", 10, timeout=0.5)] == [f"a{i}" for i in range(5)]
    assert loop.call(lambda: (a.server.stats.messages_routed, b.server.stats.messages_routed)) == (5, 3)


def test_queues_created_on_one_do_not_appear_on_the_other(shared: tuple[SharedLoop, Broker, Broker]) -> None:
    loop, a, b = shared
    send(_url(a), "only.on.a", ["x"])
    assert loop.call(lambda: ("only.on.a" in a.server.addresses, "only.on.a" in b.server.addresses)) == (
        True,
        False,
    )


def test_stopping_one_leaves_the_other_serving(shared: tuple[SharedLoop, Broker, Broker]) -> None:
    loop, a, b = shared
    port_a = a.port()
    loop.run(a.stop())
    with pytest.raises(ConnectionException), connect(f"amqp://{LOOPBACK}:{port_a}", timeout=3):
        pass
    assert send(_url(b), "orders", ["b is fine"]) == 1
    assert [m.body for m in receive(_url(b), "orders", 1)] == ["b is fine"]


def test_both_stop_cleanly_and_restart_with_only_their_own_messages(tmp_path: Path) -> None:
    configs = [_write_config(tmp_path / "dc1", "dc1"), _write_config(tmp_path / "dc2", "dc2")]
    before = _journal_threads()
    loop = SharedLoop()
    a, b = (loop.start(c) for c in configs)
    send(_url(a), "orders", ["durable on a"], durable=True)
    send(_url(b), "orders", ["durable on b"], durable=True)
    loop.run(a.stop())
    loop.run(b.stop())
    loop.close()
    assert _journal_threads() == before  # both journals closed their writer threads

    loop = SharedLoop()
    try:
        a, b = (loop.start(c) for c in configs)
        assert [m.body for m in receive(_url(a), "orders", 5, timeout=0.5)] == ["durable on a"]
        assert [m.body for m in receive(_url(b), "orders", 5, timeout=0.5)] == ["durable on b"]
        loop.run(a.stop())
        loop.run(b.stop())
    finally:
        loop.close()


def _routed(loop: SharedLoop, broker: Broker) -> int:
    return loop.call(lambda: broker.server.stats.messages_routed)


def test_two_brokers_on_their_own_loops(tmp_path: Path) -> None:
    loops = [SharedLoop(), SharedLoop()]
    brokers = [
        loop.start(_write_config(tmp_path / n, n)) for loop, n in zip(loops, ("east", "west"), strict=True)
    ]
    try:
        east, west = (_url(b) for b in brokers)
        send(east, "orders", ["to east"])
        assert receive(west, "orders", 1, timeout=0.5) == []
        assert [m.body for m in receive(east, "orders", 1)] == ["to east"]
        routed = [_routed(loop, b) for loop, b in zip(loops, brokers, strict=True)]
        assert routed == [1, 0]
    finally:
        for loop, broker in zip(loops, brokers, strict=True):
            loop.run(broker.stop())
            loop.close()
    assert not any(loop.thread.is_alive() for loop in loops)
