"""A postAck that can never match is settled at once and counted, not retried and warned about.

A source re-sends every event it has no Accepted for when its link comes back, acknowledgements included;
their messages are gone from the target by then. A probe saw 128,598 "never matched" warnings in 165 s of
such re-sends. Acknowledgements of messages that were consumed on the target as well (consumers on both
sides) are the same: nothing is left to match. An acknowledgement that comes before its message is still
retried (test_rules.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker_core.amqp.performatives import Accepted, Attach, Source, Target
from mirror import wire
from tests.support.pair import MemoryClient, Network

NEVER_MATCHED = "never matched"
TOPIC = '<address name="news"><multicast><queue name="news.a"/><queue name="news.b"/></multicast></address>'


@pytest.fixture
def net(tmp_path: Path) -> Network:
    return Network(tmp_path)


def one_way(net: Network, **options: object) -> tuple[MemoryClient, MemoryClient]:
    net.broker("dc1", mirror_to="dc2", **options)  # type: ignore[arg-type]
    net.broker("dc2", **options)  # type: ignore[arg-type]
    net.start_all()
    return net.client("dc1"), net.client("dc2")


def target_status(net: Network, name: str) -> dict[str, int]:
    target = net.brokers[name].mirror_target
    assert target is not None
    return target.status()


def resend_after_lost_accepteds(net: Network, consume: object) -> None:
    """Run `consume` on DC1 while DC2's Accepted never reaches DC1, then cut the link: DC1 re-sends."""
    net.hold_from("dc2")
    consume()  # type: ignore[operator]
    net.pump()
    net.cut("dc2")
    net.release_from("dc2")
    net.loop.advance(0.2)  # retry-interval 100 ms: the link is back, the postAcks are sent again
    assert net.depth("dc1", wire.snf_name("dc2")) == 0, "the re-sent events were not all accepted"


def test_postacks_resent_after_a_reconnect_are_recognised_as_applied(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    c1, _ = one_way(net)
    for i in range(3):
        c1.send("orders", f"m{i}")
    net.pump()
    assert net.depth("dc2", "orders") == 3
    with caplog.at_level(logging.WARNING, logger="broker.mirror"):
        resend_after_lost_accepteds(net, lambda: c1.receive("orders", 3))
        net.loop.advance(1.0)  # long enough for five retries
    status = target_status(net, "dc2")
    assert (status["ack_retries"], status["acks_never_matched"]) == (0, 0)
    assert not [r for r in caplog.records if NEVER_MATCHED in r.getMessage()]
    assert (status["acks"], status["acks_duplicate"]) == (6, 3)


def test_a_resent_postack_of_a_message_still_on_another_subscription_is_a_duplicate(net: Network) -> None:
    """The message lives on (news.b), so only the memory of applied acks tells the copy from a new ack."""
    c1, _ = one_way(net, addresses=TOPIC)
    c1.send("news", "headline")
    net.pump()
    assert (net.depth("dc2", "news.a"), net.depth("dc2", "news.b")) == (1, 1)
    resend_after_lost_accepteds(net, lambda: c1.receive("news::news.a", 1))
    net.loop.advance(1.0)
    status = target_status(net, "dc2")
    assert (status["ack_retries"], status["acks_never_matched"]) == (0, 0)
    assert status["acks_duplicate"] == 1
    assert (net.depth("dc2", "news.a"), net.depth("dc2", "news.b")) == (0, 1)


def test_an_ack_of_a_message_consumed_on_both_sides_is_settled_and_counted(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    c1, c2 = one_way(net)
    c1.send("orders", "taken twice")
    net.pump()
    assert len(c2.receive("orders", 1)) == 1  # consumed on DC2 (nothing mirrors it back to DC1)
    with caplog.at_level(logging.WARNING, logger="broker.mirror"):
        assert len(c1.receive("orders", 1)) == 1  # and on DC1: its postAck finds nothing on DC2
        net.loop.advance(1.0)
    status = target_status(net, "dc2")
    assert (status["ack_retries"], status["acks_never_matched"]) == (0, 0)
    assert not [r for r in caplog.records if NEVER_MATCHED in r.getMessage()]
    assert status["acks_message_gone"] == 1


def test_an_ack_of_a_message_out_to_a_local_consumer_waits_for_it(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    """Out to a consumer on DC2: retried; once that consumer accepted it, the retry settles it silently."""
    c1, c2 = one_way(net)
    c1.send("orders", "in flight on dc2")
    net.pump()
    assert c2.session is not None
    attach = Attach(name="held", role=True, source=Source(address="orders"), target=Target())
    link = c2.conn.attach(c2.session, attach)
    c2.conn.flow(link, credit=1)
    c2._write()
    net.pump()
    [(delivery_id, _)] = c2.received.pop("held")  # delivered, not settled
    with caplog.at_level(logging.WARNING, logger="broker.mirror"):
        assert len(c1.receive("orders", 1)) == 1
        assert target_status(net, "dc2")["ack_retries"] == 1  # the message may yet come back
        c2.conn.settle_incoming(c2.session, delivery_id, delivery_id, Accepted().encode_amqp())
        c2._write()
        net.pump()
        net.loop.advance(1.0)
    status = target_status(net, "dc2")
    assert (status["acks_never_matched"], status["pendingAckRetries"]) == (0, 0)
    assert not [r for r in caplog.records if NEVER_MATCHED in r.getMessage()]
    assert status["acks_message_gone"] == 1
