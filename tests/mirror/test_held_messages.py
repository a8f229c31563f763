"""A replicated message no queue here takes yet is held, not Accepted and dropped (mirror/holding.py).

A scripted mirror source on a memory link (tests/support/pair.py) sends what a real Artemis sends
under load: the first message of a new queue before that queue's createQueue. Each rule of the holding:
- held unsettled, not counted as seen, until a queue at its address makes it storable; then stored and
  Accepted (a message is never Accepted unless stored on every queue it names);
- per link and address in the order they came: a later message waits behind a held one;
- an acknowledgement of a held message is a retry that waits for it without using up its attempts; one
  on its only queue, which does not exist here, settles it as consumed at its source (temporary queues);
- a lost link or a restart loses nothing (the source sends what was never Accepted again);
- bounds: past the hold timeout, Accepted without being stored and said; at the count limit, the link
  gets no more credit until fewer are held.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from broker_core.amqp.connection import Link
from broker_core.message import build_message
from broker_core.vocabulary import AckReason
from mirror import wire
from mirror.json_shapes import AddressInfo, QueueConfiguration, RoutingType
from tests.support.pair import MemoryClient, Network

SOURCE = "artemis-node"  # the scripted source's broker id (the origin of its messages)


@pytest.fixture
def net(tmp_path: Path) -> Network:
    return Network(tmp_path)


def target(net: Network, **options: Any) -> tuple[MemoryClient, Link]:
    net.broker("dc2", **options)
    net.start_all()
    client = net.client("dc2")
    return client, client.mirror_link(SOURCE)


def message(body: str, mr_id: int, address: str, queues: list[str] | None = None) -> bytes:
    return wire.encode_replicated(build_message(body, durable=True), mr_id, None, address, queues)


def create_queue(name: str, address: str, routing: RoutingType = RoutingType.ANYCAST) -> bytes:
    return wire.create_queue_event(QueueConfiguration(name=name, address=address, routing_type=routing))


def add_address(name: str, routing: RoutingType = RoutingType.ANYCAST) -> bytes:
    return wire.add_address_event(AddressInfo(name=name, routing_types=(routing,)))


def status(net: Network) -> dict[str, Any]:
    t = net.brokers["dc2"].mirror_target
    assert t is not None
    return t.status()


def metric(net: Network, name: str, **labels: str) -> float:
    """One sample of the broker's Prometheus metrics (`amqp_mirror_` + name), as /metrics serves it."""
    from amqp_mirror.ops.metrics import BrokerCollector
    from amqp_mirror.ops.node import Node

    broker = net.brokers["dc2"]
    for family in BrokerCollector(Node(broker.config, broker)).collect():
        for sample in family.samples:
            if sample.name == f"amqp_mirror_{name}" and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"no metric {name} {labels}")


def bodies(net: Network, queue: str) -> list[bytes]:
    return [ref.message.payload for ref in net.server("dc2").queues[queue].refs()]


def test_a_message_before_its_queue_is_held_unsettled_then_stored_and_accepted(net: Network) -> None:
    client, link = target(net)
    sent = client.send_raw(link, message("first", 1, "fresh"))
    net.pump()
    net.loop.advance(5.0)  # held across many retry ticks: still not settled, nothing stored
    assert not client.settled(sent), "Accepted before any queue here could store it"
    assert "fresh" not in net.server("dc2").queues
    assert status(net)["heldNow"] == 1 and status(net)["messages"] == 0
    events = [
        client.send_raw(link, add_address("fresh")),
        client.send_raw(link, create_queue("fresh", "fresh")),
    ]
    net.pump()
    assert all(client.accepted(d) for d in [sent, *events])
    assert bodies(net, "fresh") == [build_message("first", durable=True)]
    s = status(net)
    assert (s["held"], s["held_stored"], s["heldNow"], s["messages"], s["unrouted"]) == (1, 1, 0, 1, 0)
    assert s["origins"][SOURCE]["held"] == 1
    assert metric(net, "mirror_target_held_total", origin=SOURCE) == 1
    assert metric(net, "mirror_target_holds_ended_total", outcome="stored") == 1
    assert metric(net, "mirror_target_held_messages") == 0


def test_a_queue_made_by_hand_here_releases_what_waited_for_it(net: Network) -> None:
    """queue-creation="false" on the source: the operator makes the queue on each side."""
    client, link = target(net)
    sent = client.send_raw(link, message("m", 1, "by.hand"))
    net.pump()
    assert not client.settled(sent)
    net.server("dc2").create_queue("by.hand", "by.hand", "ANYCAST")
    net.loop.advance(0.15)  # the retry timer notices
    assert client.accepted(sent) and net.depth("dc2", "by.hand") == 1


def test_held_messages_are_stored_in_the_order_they_came_each_on_every_queue_it_names(net: Network) -> None:
    """m1 names a subscription not made here yet; m2, to the same address, could already go to the other
    one, and waits behind m1: both end up on both queues in the order they were sent."""
    client, link = target(net)
    for event in (
        add_address("news", RoutingType.MULTICAST),
        create_queue("news.a", "news", RoutingType.MULTICAST),
    ):
        client.send_raw(link, event)
    net.pump()
    m1 = client.send_raw(link, message("m1", 1, "news", ["news.a", "news.b"]))
    m2 = client.send_raw(link, message("m2", 2, "news"))
    other = client.send_raw(link, message("o", 3, "orders"))  # other addresses are not held up
    net.pump()
    assert client.accepted(other) and not client.settled(m1) and not client.settled(m2)
    assert net.depth("dc2", "news.a") == 0
    client.send_raw(link, create_queue("news.b", "news", RoutingType.MULTICAST))
    net.pump()
    assert client.accepted(m1) and client.accepted(m2)
    expected = [build_message("m1", durable=True), build_message("m2", durable=True)]
    assert bodies(net, "news.a") == expected and bodies(net, "news.b") == expected


def test_an_ack_of_a_held_message_waits_for_it_without_using_up_its_retries(net: Network) -> None:
    client, link = target(net)
    sent = client.send_raw(link, message("m", 7, "fresh"))
    ack = client.send_raw(link, wire.post_ack_event("fresh", "fresh.sub", 7, None, AckReason.NORMAL))
    net.pump()
    assert client.accepted(ack)  # a persisted retry, as for an ack before its message
    net.loop.advance(2.0)  # twenty retry rounds: five would give an unmatched ack up
    client.send_raw(link, create_queue("fresh.sub", "fresh"))
    net.pump()
    assert client.accepted(sent) and net.depth("dc2", "fresh.sub") == 1
    net.loop.advance(0.15)
    assert net.depth("dc2", "fresh.sub") == 0, "the acknowledgement did not match its released message"
    s = status(net)
    assert (s["acks_matched_on_retry"], s["acks_never_matched"], s["pendingAckRetries"]) == (1, 0, 0)


def test_an_ack_on_its_only_queue_settles_a_held_message_never_stored(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    """A temporary queue's traffic: Artemis mirrors the reply and its ack, never the queue."""
    client, link = target(net)
    reply = "6f1c2b9e-temporary"
    sent = client.send_raw(link, message("reply", 9, reply))
    with caplog.at_level(logging.WARNING, logger="broker.mirror"):
        ack = client.send_raw(link, wire.post_ack_event(reply, reply, 9, None, AckReason.NORMAL))
        net.pump()
        net.loop.advance(1.0)
    assert client.accepted(sent) and client.accepted(ack)
    assert reply not in net.server("dc2").addresses
    s = status(net)
    assert (s["held_consumed_at_source"], s["heldNow"], s["messages"], s["pendingAckRetries"]) == (1, 0, 0, 0)
    assert not [r for r in caplog.records if "not found" in r.getMessage()]
    again = client.send_raw(link, message("reply", 9, reply))  # re-sent after a reconnect: a duplicate
    net.pump()
    assert client.accepted(again) and status(net)["duplicates"] == 1 and status(net)["heldNow"] == 0


DLA = (
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="DLA"><anycast><queue name="DLA"/></anycast></address>'
)
DLA_SETTINGS = '<address-setting match="#"><dead-letter-address>DLA</dead-letter-address></address-setting>'


def test_past_the_hold_timeout_a_message_is_kept_on_the_dead_letter_address(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    """A message no queue here took in time is stored on its address's dead-letter address (with its mirror
    identity), then Accepted: the mirror of other addresses goes on, and nothing is lost."""
    client, link = target(net, acceptor_params="mirrorHoldTimeout=2000", addresses=DLA, settings=DLA_SETTINGS)
    sent = [client.send_raw(link, message(f"m{i}", i, "nowhere")) for i in (1, 2)]
    net.pump()
    net.loop.advance(1.5)
    assert not any(client.settled(d) for d in sent)
    with caplog.at_level(logging.WARNING, logger="broker.mirror"):
        net.loop.advance(1.0)
        net.pump()
    assert all(client.accepted(d) for d in sent)
    assert net.depth("dc2", "DLA") == 2
    kept = net.server("dc2").index.get(SOURCE, 1)
    assert kept is not None and kept.address == "DLA"  # with its identity: a DR reconcile knows it
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("AMQ951052")]
    assert len(lines) == 1, lines
    assert "2 messages for address nowhere stored on its dead-letter address DLA" in lines[0]
    again = client.send_raw(link, message("m1", 1, "nowhere"))  # sent again after a lost Accepted
    net.pump()
    assert client.accepted(again) and net.depth("dc2", "DLA") == 2  # a duplicate: not stored twice
    assert status(net)["held_dead_lettered"] == 2
    assert metric(net, "mirror_target_holds_ended_total", outcome="dead_lettered") == 2


def test_past_the_hold_timeout_without_a_dead_letter_address_it_stays_held(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    client, link = target(net, acceptor_params="mirrorHoldTimeout=2000")
    sent = client.send_raw(link, message("m1", 1, "nowhere"))
    net.pump()
    with caplog.at_level(logging.WARNING, logger="broker.mirror"):
        for _ in range(10):  # over ten seconds past the timeout: never Accepted, said once
            net.loop.advance(1.0)
            net.pump()
    assert not client.settled(sent)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("AMQ951054")]
    assert len(lines) == 1 and "address nowhere" in lines[0], lines
    assert status(net)["heldNow"] == 1
    client.send_raw(link, create_queue("nowhere", "nowhere"))  # the operator makes the queue: stored
    net.pump()
    assert client.accepted(sent) and net.depth("dc2", "nowhere") == 1


def test_at_the_hold_limit_the_link_gets_no_more_credit_until_fewer_are_held(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    client, link = target(net, acceptor_params="mirrorMaxHeldMessages=3")
    window = link.credit
    with caplog.at_level(logging.WARNING, logger="broker.mirror"):
        held = [client.send_raw(link, message(f"h{i}", i, "later")) for i in range(1, 4)]
        net.pump()
    assert [r.getMessage()[:9] for r in caplog.records] == ["AMQ951051"]
    assert status(net)["linksWithoutCredit"] == 1 and metric(net, "mirror_target_links_without_credit") == 1
    assert metric(net, "mirror_target_held_messages") == 3
    for i in range(window // 2 + 10):  # past the point where the credit would be topped up
        client.send_raw(link, message(f"o{i}", 100 + i, "orders"))
        net.pump()
    assert link.credit == window - 3 - (window // 2 + 10), "credit was topped up past the hold limit"
    client.send_raw(link, create_queue("later", "later"))
    net.pump()
    assert all(client.accepted(d) for d in held)
    assert link.credit == window and status(net)["linksWithoutCredit"] == 0


def test_a_lost_link_forgets_its_held_messages_and_the_resent_copy_is_stored_once(net: Network) -> None:
    client, link = target(net)
    client.send_raw(link, message("m", 1, "fresh"))
    net.pump()
    net.cut("dc2")
    net.loop.advance(0.15)
    assert status(net)["heldNow"] == 0 and status(net)["held_link_lost"] == 1
    client = net.client("dc2")
    link = client.mirror_link(SOURCE)
    again = client.send_raw(link, message("m", 1, "fresh"))
    client.send_raw(link, create_queue("fresh", "fresh"))
    net.pump()
    assert client.accepted(again) and net.depth("dc2", "fresh") == 1


@pytest.mark.parametrize("held_first", [True, False], ids=["then-later-ids", "after-later-ids"])
def test_a_restart_while_a_message_is_held_loses_nothing(net: Network, held_first: bool) -> None:
    """Later ids applied before or while one is held move duplicate detection's persisted floor: never
    past the held one, which the source sends again after the restart (it was never Accepted)."""
    client, link = target(net, persistence=True)
    held = message("held", 10, "fresh")
    if held_first:
        client.send_raw(link, held)
    for mid in (11, 12, 13):
        client.send_raw(link, message(f"o{mid}", mid, "orders"))
    net.pump()  # the floor persisted for ids up to 12 (13 is the newest, kept exactly)
    if not held_first:
        client.send_raw(link, held)  # an older id, late (an Artemis transaction, or the race)
        net.pump()
    net.stop("dc2")
    net.broker("dc2", persistence=True)
    net.start("dc2")
    client = net.client("dc2")
    link = client.mirror_link(SOURCE)
    again = client.send_raw(link, held)
    client.send_raw(link, create_queue("fresh", "fresh"))
    net.pump()
    assert client.accepted(again)
    assert net.depth("dc2", "fresh") == 1, "the held message was taken for a duplicate after the restart"
    assert net.depth("dc2", "orders") == 3


def test_a_released_message_below_the_floor_of_later_traffic_is_still_stored(
    net: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact window of ids moves on while a message is held: it must not swallow that message."""
    from mirror.dedup import RecentIds

    monkeypatch.setattr(RecentIds, "WINDOW", 20)
    client, link = target(net)
    sent = client.send_raw(link, message("held", 1, "fresh"))
    for mid in range(2, 60):
        client.send_raw(link, message(f"o{mid}", mid, "orders"))
    net.pump()
    client.send_raw(link, create_queue("fresh", "fresh"))
    net.pump()
    assert client.accepted(sent) and net.depth("dc2", "fresh") == 1
