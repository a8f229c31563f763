"""Broker connections through WebSocket and HTTP upgrades, between two of our brokers as processes.

DC1 mirrors `orders` to DC2 over ws://, to an acceptor that takes upgraded connections only (one that
did not upgrade would be closed, AMQ951121), forwards `out.#` to DC2's HTTP upgrade endpoint with Artemis's
activemq-remoting upgrade (httpUpgradeEnabled=true, naming DC2), and has a third connection that names
a server DC2's process does not have: refused with its HTTP status and line, retried, never connected.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.peers.ports import LOOPBACK, free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.ha import stays

ADDRESSES = "".join(
    f'<address name="{q}"><anycast><queue name="{q}"/></anycast></address>'
    for q in ("orders", "out.q", "none.q")
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    home = tmp_path_factory.mktemp("ws-connections")
    http_port = free_port()
    dc2 = BrokerProcess(
        home / "dc2",
        name="dc2",
        xml_kwargs={
            "addresses": ADDRESSES,
            "extra_acceptors": f"""
      <acceptor name="http">tcp://{LOOPBACK}:{http_port}?httpUpgradeEnabled=true</acceptor>""",
        },
    )
    dc2.start()
    connections = f"""
    <broker-connections>
      <amqp-connection uri="ws://{LOOPBACK}:{http_port}/amqp" name="ws-mirror" retry-interval="200">
        <mirror address-filter="orders"/>
      </amqp-connection>
      <amqp-connection name="http-sender" retry-interval="200"
          uri="tcp://{LOOPBACK}:{http_port}?httpUpgradeEnabled=true;activemqServerName=dc2">
        <sender address-match="out.#"/>
      </amqp-connection>
      <amqp-connection name="nobody" retry-interval="200"
          uri="ws://{LOOPBACK}:{dc2.port}?activemqServerName=nobody">
        <sender address-match="none.#"/>
      </amqp-connection>
    </broker-connections>"""
    dc1 = BrokerProcess(home / "dc1", name="dc1", xml_kwargs={"addresses": ADDRESSES, "extra": connections})
    dc1.start()
    yield dc1, dc2
    assert dc1.stop() == 0
    assert dc2.stop() == 0
    for broker in (dc1, dc2):
        assert "Traceback" not in broker.log()


def test_a_mirror_over_websocket_carries_sends_and_acknowledgements(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    dc1, dc2 = pair
    wait_until(
        lambda: "AMQ111003: Connected on Server AMQP Connection ws-mirror" in dc1.log(), 20, "the mirror"
    )
    send(dc1.url, "orders", [f"order {i}" for i in range(50)])
    assert [m.body for m in receive(dc2.url, "orders", 50, timeout=20)] == [f"order {i}" for i in range(50)]
    assert "AMQ951121" not in dc2.log()  # every connection to the upgrade-only acceptor upgraded


def test_a_sender_through_the_http_upgrade_endpoint_forwards(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    dc1, dc2 = pair
    wait_until(
        lambda: "AMQ111003: Connected on Server AMQP Connection http-sender" in dc1.log(), 20, "the sender"
    )
    send(dc1.url, "out.q", ["through activemq-remoting"])
    assert [m.body for m in receive(dc2.url, "out.q", 1, timeout=20)] == ["through activemq-remoting"]


def test_a_connection_naming_no_server_there_is_refused_retried_and_never_connects(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    dc1, dc2 = pair
    refusal = (
        "broker connection nobody: HTTP upgrade to websocket refused by 127.0.0.1:"
        f"{dc2.port}: HTTP 404 Not Found: no server named nobody in this process (server: dc2)"
    )
    wait_until(lambda: refusal in dc1.log(), 20, "DC1 to say why the connection is refused")
    assert re.search(r"WARNING .*" + re.escape(refusal), dc1.log())
    wait_until(lambda: "AMQ111002: Retrying Server AMQP Connection nobody" in dc1.log(), 20, "a retry")
    assert "AMQ951120: acceptor amqp: HTTP request from 127.0.0.1:" in dc2.log()
    send(dc1.url, "none.q", ["held"])
    stays(
        lambda: "Connected on Server AMQP Connection nobody" in dc1.log(), 2.0, "the refused one connecting"
    )
    assert [m.body for m in receive(dc1.url, "none.q", 1)] == ["held"]  # kept on DC1, nothing lost
