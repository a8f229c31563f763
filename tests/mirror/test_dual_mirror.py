"""Two of our brokers mirroring each other (separate processes): traffic both ways, acks, no echo."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from connections.cli import request
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send

QUEUES = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


def mirror_xml(name: str, port: int, mirror_attrs: str = "") -> str:
    attrs = f'uri="tcp://127.0.0.1:{port}" name="{name}" retry-interval="200"'
    inner = f"<amqp-connection {attrs}><mirror {mirror_attrs}/></amqp-connection>"
    return f"<broker-connections>{inner}</broker-connections>"


def depth(b: BrokerProcess, queue: str) -> int:
    try:
        return int(request(b.url, "getStatistics", [], resource=f"queue.{queue}")["message-count"])
    except RuntimeError:
        return -1  # the queue does not exist (yet)


def status(b: BrokerProcess) -> dict:
    return request(b.url, "getMirrorStatus", [])


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    p1, p2 = free_port(), free_port()
    dc1 = BrokerProcess(
        tmp_path / "dc1",
        name="dc1",
        port=p1,
        xml_kwargs={"addresses": QUEUES, "extra": mirror_xml("DC2", p2)},
    )
    dc2 = BrokerProcess(
        tmp_path / "dc2",
        name="dc2",
        port=p2,
        xml_kwargs={"addresses": QUEUES, "extra": mirror_xml("DC1", p1)},
    )
    dc1.start()
    dc2.start()
    wait_until(lambda: "AMQ111003" in dc1.log() and "AMQ111003" in dc2.log(), 20, "both mirrors to connect")
    yield dc1, dc2
    dc1.stop()
    dc2.stop()


def test_sends_and_acks_are_mirrored_both_ways_without_echo(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    dc1, dc2 = pair
    send(dc1.url, "orders", [f"a{i}" for i in range(50)])
    wait_until(lambda: depth(dc2, "orders") == 50, 10, "DC2 to hold the 50 messages sent on DC1")
    got = receive(dc2.url, "orders", 20)
    assert [m.body for m in got] == [f"a{i}" for i in range(20)]
    wait_until(lambda: depth(dc1, "orders") == 30, 10, "DC2's acks to remove 20 messages on DC1")
    send(dc2.url, "orders", [f"b{i}" for i in range(10)])
    wait_until(lambda: depth(dc1, "orders") == 40, 10, "DC1 to hold DC2's 10 new messages")
    wait_until(
        lambda: (
            status(dc1)["sources"][0]["pendingEvents"] == 0
            and status(dc2)["sources"][0]["pendingEvents"] == 0
        ),
        10,
        "both mirrors to drain",
    )
    assert depth(dc1, "orders") == 40 and depth(dc2, "orders") == 40, "an event echoed"
    rest1 = sorted(m.body for m in receive(dc1.url, "orders", 100, timeout=1, accept=None))
    rest2 = sorted(m.body for m in receive(dc2.url, "orders", 100, timeout=1, accept=None))
    assert rest1 == rest2 == sorted([f"a{i}" for i in range(20, 50)] + [f"b{i}" for i in range(10)])
    assert status(dc1)["target"]["duplicates"] == 0


def test_queue_creation_is_mirrored(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    dc1, dc2 = pair
    from tests.support.client import Capabilities, connect

    with connect(dc1.url) as conn:
        conn.create_sender("created.on.dc1", options=Capabilities("queue")).close()
    wait_until(lambda: depth(dc2, "created.on.dc1") == 0, 10, "the queue to appear on DC2")
