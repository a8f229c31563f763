"""Apache ActiveMQ Artemis mirrors to us: we are the target of a real Artemis source.

One Artemis and one of our brokers for the module, from the same broker.xml (Artemis's has the mirror);
each test works on addresses of its own, so the tests do not see each other's events.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.artemis import support
from tests.artemis.support import (
    address_names,
    artemis,
    bodies,
    call,
    config,
    depth,
    mirror_connection,
    ours,
    queue_names,
    send_to_queue,
)
from tests.peers.artemis import CONNECTED, ArtemisProcess
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive

pytestmark = pytest.mark.usefixtures("artemis_available")

FILTER = "!excluded"


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, artemis_available: None
) -> Iterator[tuple[ArtemisProcess, BrokerProcess]]:
    root = tmp_path_factory.mktemp("artemis-to-ours")
    a_port, o_port = free_port(), free_port()
    target = ours(root / "ours", o_port, config(o_port)).start()
    mirror = mirror_connection("ours", o_port, f'address-filter="{FILTER}"')
    source = artemis(root / "artemis", a_port, config(a_port, mirror)).start()
    try:
        source.wait_for(CONNECTED, 30, "to connect its mirror to ours")
        yield source, target
    finally:
        source.stop()
        target.stop()


def reaches(pair: tuple[ArtemisProcess, BrokerProcess], queue: str, count: int, what: str) -> None:
    support.reaches(*pair, queue, count, what)


def test_sends_reach_us_exactly_once(pair: tuple[ArtemisProcess, BrokerProcess]) -> None:
    source, target = pair
    sent = [f"s{i}" for i in range(300)]
    assert send_to_queue(source, "sends", sent) == 300
    reaches(pair, "sends", 300, "the 300 messages on our side")
    assert bodies(target, "sends") == sorted(sent)
    assert depth(source, "sends") == 300


def test_a_large_message_reaches_us_whole_through_a_spool_file(
    pair: tuple[ArtemisProcess, BrokerProcess],
) -> None:
    """Artemis mirrors a 3 MiB message as many transfer frames: ours spools it as it arrives (past
    amqpMinLargeMessageSize), applies it whole, byte for byte, and keeps no spool file."""
    source, target = pair
    body = os.urandom(3 * 2**20)
    assert send_to_queue(source, "large", [body]) == 1
    reaches(pair, "large", 1, "the large message on our side")
    # copied while its message lives: proton hands a binary body out as a view of the message's memory
    got = [bytes(m.body) for m in receive(target.url, "large", 2, timeout=1, accept=None)]
    assert got == [body]
    assert not list((target.home / "data" / "large-messages").glob("*"))


def test_consumer_acks_remove_the_same_messages_here(pair: tuple[ArtemisProcess, BrokerProcess]) -> None:
    source, target = pair
    send_to_queue(source, "acked", [f"a{i}" for i in range(100)])
    reaches(pair, "acked", 100, "the messages on our side")
    got = receive(source.url, "acked", 40)
    assert [m.body for m in got] == [f"a{i}" for i in range(40)]
    reaches(pair, "acked", 60, "Artemis's 40 acks applied here")
    assert bodies(target, "acked") == sorted(f"a{i}" for i in range(40, 100))


def test_a_message_removed_by_management_is_killed_here(pair: tuple[ArtemisProcess, BrokerProcess]) -> None:
    """removeMessages is an ack with reason KILLED."""
    source = pair[0]
    send_to_queue(source, "killed", [f"k{i}" for i in range(10)])
    reaches(pair, "killed", 10, "the messages on our side")
    assert call(source, "removeMessages", "", resource="queue.killed") == 10
    reaches(pair, "killed", 0, "the KILLED acks applied here")


def test_rejected_messages_go_to_the_dla_once_on_each_side(
    pair: tuple[ArtemisProcess, BrokerProcess],
) -> None:
    source, target = pair
    dla_before = depth(target, "DLA"), depth(source, "DLA")
    send_to_queue(source, "rejected", ["r0", "r1", "r2"])
    reaches(pair, "rejected", 3, "the messages on our side")
    from tests.support.client import connect

    with connect(source.url) as conn:
        receiver = conn.create_receiver("rejected", credit=3)
        for _ in range(3):
            receiver.receive(timeout=10)
            receiver.reject()
    wait_until(lambda: depth(source, "DLA") == dla_before[1] + 3, 30, "Artemis to dead-letter the three")
    reaches(pair, "rejected", 0, "the originals gone here")
    reaches(pair, "DLA", dla_before[0] + 3, "the three in our DLA")
    assert depth(target, "DLA") == dla_before[0] + 3, "a dead letter arrived twice"


def test_expired_messages_expire_on_each_side_once(pair: tuple[ArtemisProcess, BrokerProcess]) -> None:
    source, target = pair
    before = depth(target, "ExpiryQueue"), depth(source, "ExpiryQueue")
    send_to_queue(source, "expiring", ["e0", "e1"], ttl=1.5)
    wait_until(lambda: depth(source, "ExpiryQueue") == before[1] + 2, 30, "Artemis to expire them")
    reaches(pair, "expiring", 0, "the EXPIRED acks applied here")
    reaches(pair, "ExpiryQueue", before[0] + 2, "our own expiry copies")
    assert depth(source, "ExpiryQueue") == before[1] + 2


def test_creations_and_removals_are_applied_here(pair: tuple[ArtemisProcess, BrokerProcess]) -> None:
    source, target = pair
    call(source, "createAddress", "made.there", "ANYCAST")
    queue = '{"name": "made.there.q", "address": "made.there", "routing-type": "ANYCAST", "durable": true}'
    call(source, "createQueue", queue, False)
    wait_until(lambda: "made.there.q" in queue_names(target), 30, "createQueue applied here")
    assert "made.there" in address_names(target)
    call(source, "destroyQueue", "made.there.q")
    wait_until(lambda: "made.there.q" not in queue_names(target), 30, "deleteQueue applied here")
    call(source, "deleteAddress", "made.there")
    wait_until(lambda: "made.there" not in address_names(target), 30, "removeAddress applied here")


def test_the_address_filter_keeps_excluded_addresses_there(
    pair: tuple[ArtemisProcess, BrokerProcess],
) -> None:
    source, target = pair
    send_to_queue(source, "excluded.orders", ["x0", "x1"])
    send_to_queue(source, "included.orders", ["i0"])
    reaches(pair, "included.orders", 1, "the included message here")
    # sent before the included one, on one ordered link: had it been mirrored, it would be here by now
    assert "excluded.orders" not in queue_names(target)
    assert "excluded.orders" not in address_names(target)
    assert depth(source, "excluded.orders") == 2
