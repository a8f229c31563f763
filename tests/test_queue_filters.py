"""A queue's filter (broker.xml's <filter>, createQueue's, a subscription's selector) decides what enters it.

- Routing gives a message only to the queues whose filter it matches; the anycast round robin goes over
  the matching queues only; a queue named by the sender (`only_queues`) takes it whatever its filter.
- An invalid filter refuses the queue before anything changes; one made by a mirror's remote (which must
  exist here too) is created unfiltered, said with AMQ951095.
- A no-local subscription's filter compares the sending connection's container id, for a committed
  transaction's sends too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.config import load_config
from broker_core.errors import InvalidField, NotImplementedHere
from broker_core.message import MessageView, build_message
from broker_core.server import Server
from broker_core.vocabulary import ANYCAST, MULTICAST
from tests.support.broker import BrokerProcess


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    cfg, _ = load_config(BrokerProcess(tmp_path, name="solo").write_config())
    srv = Server(cfg)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _route(srv: Server, address: str, color: str, priority: int = 4, **options: object) -> None:
    payload = build_message(color, application_properties={"color": color}, priority=priority)
    srv.route(address, payload, MessageView(payload), **options)


def _colors(srv: Server, queue: str) -> list[str]:
    from tests.support.paging import body_of

    return [body_of(r.message.payload) for r in srv.queues[queue].refs()]


def test_multicast_queues_take_what_their_filters_match(server: Server) -> None:
    server.ensure_address("paint", {MULTICAST})
    server.create_queue("reds", "paint", MULTICAST, filter_string="color = 'red'")
    server.create_queue("urgent", "paint", MULTICAST, filter_string="AMQPriority > 6")
    server.create_queue("all", "paint", MULTICAST)
    for color, priority in [("red", 4), ("blue", 9), ("red", 7), ("green", 1)]:
        _route(server, "paint", color, priority)
    assert _colors(server, "reds") == ["red", "red"]
    assert _colors(server, "urgent") == ["blue", "red"]
    assert _colors(server, "all") == ["blue", "red", "red", "green"]  # delivery order: by priority


def test_the_anycast_round_robin_goes_over_matching_queues_only(server: Server) -> None:
    server.ensure_address("jobs", {ANYCAST})
    server.create_queue("jobs.red", "jobs", ANYCAST, filter_string="color = 'red'")
    server.create_queue("jobs.any1", "jobs", ANYCAST)
    server.create_queue("jobs.any2", "jobs", ANYCAST)
    for color in ["blue", "blue", "red", "blue"]:
        _route(server, "jobs", color)
    assert _colors(server, "jobs.red") == ["red"]
    assert sorted(_colors(server, "jobs.any1") + _colors(server, "jobs.any2")) == ["blue", "blue", "blue"]


def test_a_queue_the_sender_names_takes_the_message_whatever_its_filter(server: Server) -> None:
    server.ensure_address("paint", {MULTICAST})
    server.create_queue("reds", "paint", MULTICAST, filter_string="color = 'red'")
    _route(server, "paint", "blue", only_queues=["reds"])
    assert _colors(server, "reds") == ["blue"]


def test_an_invalid_filter_refuses_the_queue(server: Server) -> None:
    with pytest.raises(InvalidField):
        server.create_queue("bad", "bad", ANYCAST, filter_string="color =")
    with pytest.raises(NotImplementedHere):
        server.create_queue("xml", "xml", ANYCAST, filter_string="XPATH '//a'")
    assert "bad" not in server.queues and "xml" not in server.queues and "bad" not in server.addresses


def test_a_remote_brokers_queue_with_a_filter_we_cannot_apply_is_made_unfiltered(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        q = server.create_queue("xml", "xml", ANYCAST, filter_string="XPATH '//a'", lenient_filter=True)
    assert q.filter is None and q.filter_string == "XPATH '//a'"
    assert any("AMQ951095" in r.getMessage() and "xml" in r.getMessage() for r in caplog.records)


def test_a_mirrored_queue_keeps_its_filter_and_one_we_cannot_apply_is_made_unfiltered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A createQueue from a mirror peer: the queue must exist here too, whatever its filter."""
    from mirror import wire
    from mirror.json_shapes import QueueConfiguration, RoutingType
    from tests.support.pair import Network

    net = Network(tmp_path)
    net.broker("dc2", mirror_to="dc3", persistence=True)
    net.start_all()
    target = net.brokers["dc2"].mirror_target
    assert target is not None
    peer = "00000000-0000-0000-0000-0000000000d1"
    for name, filter_string in [("reds", "color = 'red'"), ("xml", "XPATH '//a'")]:
        qc = QueueConfiguration(
            name=name, address=name, routing_type=RoutingType.ANYCAST, filter_string=filter_string
        )
        with caplog.at_level(logging.ERROR):
            target.apply(peer, wire.create_queue_event(qc))
    net.pump()
    queues = net.server("dc2").queues
    assert queues["reds"].filter is not None and queues["reds"].filter_string == "color = 'red'"
    assert queues["xml"].filter is None and queues["xml"].filter_string == "XPATH '//a'"
    assert any("AMQ951095" in r.getMessage() and "xml" in r.getMessage() for r in caplog.records)


def test_no_local_knows_a_committed_transactions_sends_by_their_connection(tmp_path: Path) -> None:
    """A transaction's sends are routed at its commit, still known as their connection's: another
    connection's no-local subscription takes them, the sender's own leaves them out."""
    from tests.support.pair import Network

    net = Network(tmp_path)
    net.broker("solo", persistence=True)
    net.start_all()
    srv = net.server("solo")
    mine, theirs = net.client("solo"), net.client("solo")
    srv.ensure_address("chat", {MULTICAST})
    for name, client in [("mine.quiet", mine), ("theirs.quiet", theirs)]:  # as no-local makes them
        srv.create_queue(name, "chat", MULTICAST, filter_string=f"__AMQ_CID<>'{client.conn.container_id}'")
    mine.send("chat", "plain")
    txn = mine.declare()
    mine.send("chat", "in a transaction", txn=txn)
    mine.discharge(txn)
    theirs.send("chat", "theirs")
    net.pump()
    assert _colors(srv, "theirs.quiet") == ["plain", "in a transaction"]
    assert _colors(srv, "mine.quiet") == ["theirs"]
