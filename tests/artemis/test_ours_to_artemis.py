"""We mirror to Apache ActiveMQ Artemis: a real Artemis is the target of our source.

One of our brokers and one Artemis for the module, from the same broker.xml (ours has the mirror); each
test works on addresses of its own. A second pair, its mirror with every toggle off and a filter,
checks that what we do not send does not reach Artemis.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.artemis.support import (
    address_names,
    artemis,
    bodies,
    call,
    config,
    depth,
    mirror_complaints,
    mirror_connection,
    ours,
    queue_names,
    send_to_queue,
)
from tests.peers.artemis import ArtemisProcess
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import Capabilities, connect, receive

pytestmark = pytest.mark.usefixtures("artemis_available")

Pair = tuple[BrokerProcess, ArtemisProcess]


def start_pair(root: Path, mirror_attrs: str) -> Pair:
    o_port, a_port = free_port(), free_port()
    target = artemis(root / "artemis", a_port, config(a_port)).start()
    source = ours(root / "ours", o_port, config(o_port, mirror_connection("artemis", a_port, mirror_attrs)))
    source.start()
    wait_until(lambda: "AMQ111003" in source.log(), 30, "our mirror to connect to Artemis")
    return source, target


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, artemis_available: None) -> Iterator[Pair]:
    source, target = start_pair(tmp_path_factory.mktemp("ours-to-artemis"), 'address-filter="!excluded"')
    try:
        yield source, target
        assert mirror_complaints(target) == []
    finally:
        source.stop()
        target.stop()


def drained(source: BrokerProcess) -> bool:
    return all(s["pendingEvents"] == 0 for s in call(source, "getMirrorStatus")["sources"])


def test_sends_reach_artemis_exactly_once(pair: Pair) -> None:
    source, target = pair
    sent = [f"s{i}" for i in range(300)]
    assert send_to_queue(source, "sends", sent) == 300
    wait_until(lambda: depth(target, "sends") == 300, 30, "the 300 messages on Artemis")
    assert bodies(target, "sends") == sorted(sent)


def test_consumer_acks_remove_the_same_messages_on_artemis(pair: Pair) -> None:
    source, target = pair
    send_to_queue(source, "acked", [f"a{i}" for i in range(100)])
    wait_until(lambda: depth(target, "acked") == 100, 30, "the messages on Artemis")
    assert [m.body for m in receive(source.url, "acked", 40)] == [f"a{i}" for i in range(40)]
    wait_until(lambda: depth(target, "acked") == 60, 30, "our 40 acks applied on Artemis")
    assert bodies(target, "acked") == sorted(f"a{i}" for i in range(40, 100))


def test_rejected_messages_go_to_the_dla_once_on_each_side(pair: Pair) -> None:
    source, target = pair
    before = depth(source, "DLA"), depth(target, "DLA")
    send_to_queue(source, "rejected", ["r0", "r1", "r2"])
    wait_until(lambda: depth(target, "rejected") == 3, 30, "the messages on Artemis")
    with connect(source.url) as conn:
        receiver = conn.create_receiver("rejected", credit=3)
        for _ in range(3):
            receiver.receive(timeout=10)
            receiver.reject()
    wait_until(lambda: depth(source, "DLA") == before[0] + 3, 30, "our DLA to hold the three")
    wait_until(lambda: depth(target, "rejected") == 0, 30, "the originals gone on Artemis")
    wait_until(lambda: depth(target, "DLA") == before[1] + 3, 30, "the three in Artemis's DLA")
    wait_until(lambda: drained(source), 30, "our mirror to drain")
    assert depth(target, "DLA") == before[1] + 3, "a dead letter arrived twice"


def test_expired_messages_expire_on_each_side_once(pair: Pair) -> None:
    source, target = pair
    before = depth(source, "ExpiryQueue"), depth(target, "ExpiryQueue")
    send_to_queue(source, "expiring", ["e0", "e1"], ttl=1.5)
    wait_until(lambda: depth(source, "ExpiryQueue") == before[0] + 2, 30, "our broker to expire them")
    wait_until(lambda: depth(target, "expiring") == 0, 30, "the EXPIRED acks applied on Artemis")
    wait_until(lambda: depth(target, "ExpiryQueue") == before[1] + 2, 30, "Artemis's own expiry copies")
    wait_until(lambda: drained(source), 30, "our mirror to drain")
    assert depth(target, "ExpiryQueue") == before[1] + 2


def test_creations_and_removals_are_applied_on_artemis(pair: Pair) -> None:
    source, target = pair
    with connect(source.url) as conn:
        conn.create_sender("made.here", options=Capabilities("queue")).close()
    wait_until(lambda: "made.here" in queue_names(target), 30, "createQueue applied on Artemis")
    assert "made.here" in address_names(target)
    call(source, "destroyQueue", "made.here")
    wait_until(lambda: "made.here" not in queue_names(target), 30, "deleteQueue applied on Artemis")
    call(source, "deleteAddress", "made.here")
    wait_until(lambda: "made.here" not in address_names(target), 30, "removeAddress applied on Artemis")


def test_the_address_filter_keeps_excluded_addresses_here(pair: Pair) -> None:
    source, target = pair
    send_to_queue(source, "excluded.orders", ["x0", "x1"])
    send_to_queue(source, "included.orders", ["i0"])
    wait_until(lambda: depth(target, "included.orders") == 1, 30, "the included message on Artemis")
    wait_until(lambda: drained(source), 30, "our mirror to drain")
    assert "excluded.orders" not in queue_names(target)
    assert "excluded.orders" not in address_names(target)


def test_with_every_toggle_off_only_the_sends_cross(tmp_path: Path) -> None:
    """queue-creation, queue-removal and message-acknowledgements off: Artemis gets messages only, into
    the queues it has."""
    source, target = start_pair(
        tmp_path,
        'queue-creation="false" queue-removal="false" message-acknowledgements="false"',
    )
    try:
        with connect(source.url) as conn:
            conn.create_sender("not.created.there", options=Capabilities("queue")).close()
        send_to_queue(source, "orders", ["o0", "o1", "o2"])
        wait_until(lambda: depth(target, "orders") == 3, 30, "the sends on Artemis")
        assert [m.body for m in receive(source.url, "orders", 2)] == ["o0", "o1"]
        call(source, "destroyQueue", "not.created.there")
        send_to_queue(source, "orders", ["o3"])
        wait_until(lambda: depth(target, "orders") == 4, 30, "the send after the ack on Artemis")
        wait_until(lambda: drained(source), 30, "our mirror to drain")
        assert depth(target, "orders") == 4, "an ack crossed with message-acknowledgements off"
        assert "not.created.there" not in queue_names(target), "a queue crossed with queue-creation off"
        call(source, "destroyQueue", "orders")
        send_to_queue(source, "DLA", ["marker"])  # after the removal on the one ordered link
        wait_until(lambda: "marker" in bodies(target, "DLA"), 30, "the marker on Artemis")
        assert "orders" in queue_names(target), "a removal crossed with queue-removal off"
        assert mirror_complaints(target) == []
    finally:
        source.stop()
        target.stop()
