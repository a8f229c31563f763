"""Broker connections between our broker and Apache ActiveMQ Artemis, in both directions.

Our `<sender>`, `<receiver>` and `<peer>` links to Artemis, and Artemis's own `<amqp-connection>` with
`<sender>` and `<receiver>` to us: one broker of each kind, each connected to the other, exact counts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.artemis.support import artemis, bodies, config, depth, ours, send_to_queue
from tests.peers.artemis import CONNECTED, ArtemisProcess
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive

pytestmark = pytest.mark.usefixtures("artemis_available")

QUEUES = ("out.orders", "in.orders", "way.orders", "a2o.orders", "o2a.orders")
ADDRESSES = "".join(f'<address name="{n}"><anycast><queue name="{n}"/></anycast></address>' for n in QUEUES)


def connection(port: int, children: str) -> str:
    return (
        f'<amqp-connection uri="tcp://127.0.0.1:{port}" name="links" retry-interval="200">'
        f"{children}</amqp-connection>"
    )


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, artemis_available: None
) -> Iterator[tuple[BrokerProcess, ArtemisProcess]]:
    root = tmp_path_factory.mktemp("links-artemis")
    o_port, a_port = free_port(), free_port()
    ours_links = (
        '<sender address-match="out.#"/><receiver address-match="in.#"/><peer queue-name="way.orders"/>'
    )
    artemis_links = '<sender address-match="a2o.#"/><receiver address-match="o2a.#"/>'
    mine = ours(root / "ours", o_port, config(o_port, connection(a_port, ours_links), addresses=ADDRESSES))
    theirs = artemis(
        root / "artemis", a_port, config(a_port, connection(o_port, artemis_links), addresses=ADDRESSES)
    )
    mine.start()
    theirs.start()
    try:
        theirs.wait_for(CONNECTED, 30, "to connect its broker connection to ours")
        wait_until(lambda: "AMQ111003" in mine.log(), 30, "our broker connection to Artemis")
        yield mine, theirs
    finally:
        mine.stop()
        theirs.stop()


def test_our_sender_moves_messages_to_artemis(pair: tuple[BrokerProcess, ArtemisProcess]) -> None:
    mine, theirs = pair
    send_to_queue(mine, "out.orders", [f"o{i}" for i in range(50)])
    wait_until(lambda: depth(theirs, "out.orders") == 50, 30, "the 50 on Artemis")
    assert bodies(theirs, "out.orders") == sorted(f"o{i}" for i in range(50))
    wait_until(lambda: depth(mine, "out.orders") == 0, 30, "each forwarded message to leave our queue")


def test_our_receiver_takes_messages_from_artemis(pair: tuple[BrokerProcess, ArtemisProcess]) -> None:
    mine, theirs = pair
    send_to_queue(theirs, "in.orders", [f"i{i}" for i in range(30)])
    got = receive(mine.url, "in.orders", 30, timeout=10)
    assert [m.body for m in got] == [f"i{i}" for i in range(30)]
    wait_until(lambda: depth(theirs, "in.orders") == 0, 30, "Artemis's queue emptied by our receiver")


def test_our_peer_links_attach_to_artemis_both_ways(pair: tuple[BrokerProcess, ArtemisProcess]) -> None:
    """A peer is a sender and a receiver on one queue, with the waypoint capability, for a router: against
    a broker every message would loop between the two, so no message is sent here. Artemis accepted both
    links: our receiver is a consumer of its queue, and our sender a consumer of ours."""
    mine, theirs = pair
    wait_until(lambda: _consumers(theirs, "way.orders") == 1, 30, "our peer's receiver on Artemis")
    wait_until(lambda: _consumers(mine, "way.orders") == 1, 30, "our peer's sender on our queue")
    assert "AMQ119" not in mine.log(), "a link of the connection was refused"


def _consumers(broker: BrokerProcess | ArtemisProcess, queue: str) -> int:
    from connections.cli import Management

    with Management(broker.url) as m:
        return int(m.get("consumerCount", resource=f"queue.{queue}"))


def test_artemis_sender_moves_messages_to_us(pair: tuple[BrokerProcess, ArtemisProcess]) -> None:
    mine, theirs = pair
    send_to_queue(theirs, "a2o.orders", [f"a{i}" for i in range(40)])
    got = receive(mine.url, "a2o.orders", 40, timeout=10)
    assert sorted(m.body for m in got) == sorted(f"a{i}" for i in range(40))
    wait_until(lambda: depth(theirs, "a2o.orders") == 0, 30, "Artemis's queue emptied by its sender")


def test_artemis_receiver_takes_messages_from_us(pair: tuple[BrokerProcess, ArtemisProcess]) -> None:
    mine, theirs = pair
    send_to_queue(mine, "o2a.orders", [f"b{i}" for i in range(25)])
    wait_until(lambda: depth(theirs, "o2a.orders") == 25, 30, "the 25 on Artemis")
    assert bodies(theirs, "o2a.orders") == sorted(f"b{i}" for i in range(25))
    wait_until(lambda: depth(mine, "o2a.orders") == 0, 30, "our queue emptied by Artemis's receiver")


def test_our_management_client_stops_and_starts_artemis_broker_connections(
    pair: tuple[BrokerProcess, ArtemisProcess],
) -> None:
    """Artemis answers a void operation with no body at all; our client took that for an error."""
    from connections.cli import request

    _, theirs = pair
    assert request(theirs.url, "stopBrokerConnection", ["links"]) is None
    assert request(theirs.url, "startBrokerConnection", ["links"]) is None
    wait_until(lambda: theirs.log().count(CONNECTED) >= 2, 30, "Artemis's connection to come back")
