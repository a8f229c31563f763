"""What a mirror target refuses from an authenticated mirror peer (mirror/target.py), on whole brokers
joined in memory (tests/support/pair.py).

- An event or message naming a store-and-forward queue (anything under the mirror prefix), the
  management address, or an internal or temporary entity is not applied: Accepted and dropped, counted
  in `refused`, said once a minute per remote and event kind (MIR102).
- A delivery that does not decode, or whose JSON body has the wrong shape, is dropped the same way
  (`undecodable`, MIR103): one WARN line, no traceback, however often a peer sends it.
- An origin broker id too long to key the target's records by is refused like a protected name.

tests/mirror/test_hostile_peer.py shows the same over real sockets, with a chain of broker processes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker_core.message import build_message
from broker_core.vocabulary import AckReason
from mirror import wire
from mirror.json_shapes import AddressInfo, QueueConfiguration, RoutingType
from mirror.target import MirrorTarget
from mirror.trust import MAX_BROKER_ID_BYTES
from tests.support.pair import Network

SNF = wire.snf_name("dc3")
EVIL = "evil"
DC1 = "00000000-0000-0000-0000-0000000000d1"


@pytest.fixture
def net(tmp_path: Path) -> Network:
    """DC2 mirrors to DC3, which is down: DC2's store-and-forward queue to DC3 holds its events."""
    net = Network(tmp_path)
    net.broker("dc2", mirror_to="dc3", persistence=True)
    net.start_all()
    announced = net.depth("dc2", SNF)  # the topology DC2 announces when its mirror is installed
    client = net.client("dc2")
    for i in range(3):
        client.send("orders", f"m{i}")
    net.pump()
    assert net.depth("dc2", SNF) == announced + 3
    return net


def target_of(net: Network) -> MirrorTarget:
    target = net.brokers["dc2"].mirror_target
    assert target is not None
    return target


def lines(caplog: pytest.LogCaptureFixture, marker: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(marker)]


def hostile_events() -> list[bytes]:
    """Every kind of event, each naming the store-and-forward queue to DC3 or its address."""
    snf_info = AddressInfo(name=SNF, routing_types=(RoutingType.ANYCAST,))
    body = build_message("forged", durable=True)
    return [
        wire.delete_queue_event(SNF, SNF),
        wire.delete_address_event(snf_info),
        wire.add_address_event(snf_info),
        wire.create_queue_event(
            QueueConfiguration(name="tap", address=SNF, routing_type=RoutingType.ANYCAST)
        ),
        wire.create_queue_event(
            QueueConfiguration(name=SNF + "2", address="orders", routing_type=RoutingType.ANYCAST)
        ),
        wire.post_ack_event(SNF, SNF, 1, None, AckReason.NORMAL),
        wire.replicate(body, 7, None, SNF),  # a forged event into DC3's stream
        wire.encode_replicated(body, 8, None, "orders", [SNF]),
        wire.replicate(body, 9, None, "activemq.management"),
    ]


def test_events_naming_a_store_and_forward_queue_are_not_applied(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    target = target_of(net)
    snf, pending = net.server("dc2").queues[SNF], net.depth("dc2", SNF)
    caplog.set_level(logging.WARNING, logger="broker.mirror")
    events = hostile_events()
    for payload in events:
        assert target.apply(EVIL, payload) == 0  # nothing journalled: Accepted at once, dropped
    net.pump()
    assert net.server("dc2").queues.get(SNF) is snf and net.depth("dc2", SNF) == pending
    assert "tap" not in net.server("dc2").queues and SNF + "2" not in net.server("dc2").queues
    assert net.depth("dc2", "orders") == 3
    assert target.stats["refused"] == len(events)
    assert target.stats["errors"] == 0 and target.stats["messages"] == 0
    said = lines(caplog, "MIR102")
    # one line per event kind from this remote: deleteQueue, deleteAddress, addAddress, createQueue,
    # postAck, message
    assert len(said) == 6, [r.getMessage() for r in said]
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in said)
    assert f"mirror from {EVIL}: deleteQueue not applied: queue {SNF} is under the mirror prefix" in (
        said[0].getMessage()
    )
    for payload in events:  # again: counted, not said again within the minute
        target.apply(EVIL, payload)
    assert target.stats["refused"] == 2 * len(events)
    assert len(lines(caplog, "MIR102")) == 6


def test_internal_and_temporary_names_here_are_protected_whatever_they_are_called(net: Network) -> None:
    """Protection follows what an entity is here, not only its name."""
    target = target_of(net)
    srv = net.server("dc2")
    srv.create_queue("plain.internal", "plain.internal", "ANYCAST", internal=True)
    info = AddressInfo(name="plain.internal", routing_types=(RoutingType.ANYCAST,))
    target.apply(EVIL, wire.delete_queue_event("plain.internal", "plain.internal"))
    target.apply(EVIL, wire.delete_address_event(info))
    claimed = AddressInfo(name="fresh", routing_types=(RoutingType.ANYCAST,), internal=True)
    target.apply(EVIL, wire.add_address_event(claimed))  # a source never mirrors an internal address
    tap = QueueConfiguration(name="tap", address="plain.internal", routing_type=RoutingType.ANYCAST)
    target.apply(EVIL, wire.create_queue_event(tap))  # a second queue on an internal address
    net.pump()
    assert "plain.internal" in srv.queues and "fresh" not in srv.addresses and "tap" not in srv.queues
    assert target.stats["refused"] == 4


def test_an_ordinary_event_still_applies(net: Network) -> None:
    target = target_of(net)
    target.apply(EVIL, wire.create_queue_event(QueueConfiguration(name="q1", address="a1")))
    target.apply(EVIL, wire.delete_queue_event("orders", "orders"))
    net.pump()
    assert "q1" in net.server("dc2").queues and "orders" not in net.server("dc2").queues
    assert target.stats["refused"] == 0


def test_a_remote_event_cannot_delete_an_internal_queue_even_past_the_target(net: Network) -> None:
    """The broker's own guard under the target's: work caused by a remote broker never deletes an
    internal queue (a management operation, with no remote cause, still may)."""
    from broker_core.errors import NotAllowed
    from broker_core.events import Cause

    srv = net.server("dc2")
    pending = net.depth("dc2", SNF)
    with pytest.raises(NotAllowed):
        srv.delete_queue(SNF, Cause.applying(EVIL))
    with pytest.raises(NotAllowed):
        srv.delete_address(SNF, force=True, cause=Cause.applying(EVIL))
    assert net.depth("dc2", SNF) == pending


def malformed_events() -> list[bytes]:
    """What a fuzzer made of address and queue events: wrong JSON types, broken JSON."""
    add, create = wire.ADD_ADDRESS, wire.CREATE_QUEUE
    good = wire.replicate(build_message("body", durable=True), 5, None, "orders")
    durable_true = b"\x00\x53\x70\xc0\x07\x05\x41"  # the header's list, its first field `true`
    assert durable_true in good
    bad_header = good.replace(durable_true, durable_true[:-1] + b"\x24", 1)  # 0x24: no such constructor
    return [
        wire.encode_control_event(add, address="a", body='{"name": "a", "routingTypes": [[1]]}'),
        wire.encode_control_event(add, address="a", body='{"name": "a", "routingTypes": [{"x": 1}]}'),
        wire.encode_control_event(add, address="a", body='{"name": "a", "routingTypes": ['),
        wire.encode_control_event(add, address="a", body='{"name": ["a"]}'),
        wire.encode_control_event(add, address="a", body="[1, 2]"),
        wire.encode_control_event(create, queue="q", body='{"name": "q", "routing-type": [1]}'),
        wire.encode_control_event(create, queue="q", body='{"name": "q", "max-consumers": "many"}'),
        wire.encode_control_event(create, queue="q", body='{"name": "q", "address": '),
        wire.encode_control_event(create, queue="q", body='{"name": "q", "routing-type": "SIDEWAYS"}'),
        wire.encode_control_event(wire.POST_ACK, queue="q", body="not a long"),
        bad_header,
    ]


def test_malformed_events_are_one_warning_and_counted_never_a_traceback(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    target = target_of(net)
    caplog.set_level(logging.DEBUG, logger="broker.mirror")
    events = malformed_events()
    for payload in events:
        assert target.apply("fz-remote", payload) == 0
    net.pump()
    assert target.stats["undecodable"] == len(events)
    assert target.stats["errors"] == 0
    said = lines(caplog, "MIR103")
    assert len(said) == 1 and said[0].levelno == logging.WARNING, [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.exc_info is not None or r.levelno >= logging.ERROR]
    assert "Traceback" not in caplog.text
    target.apply("fz-remote", wire.create_queue_event(QueueConfiguration(name="after", address="after")))
    net.pump()
    assert "after" in net.server("dc2").queues  # the link's next event is applied as usual


def test_an_origin_id_too_long_to_key_a_record_by_is_refused(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    target = target_of(net)
    long_origin = "o" * 65_530  # passes the 65,535-byte name check; mirror.dedup.<origin> would not
    body = build_message("long origin", durable=True)
    target.apply(DC1, wire.replicate(body, 1, long_origin, "orders"))
    target.apply(DC1, wire.replicate(body, 2, long_origin, "orders"))
    target.apply(DC1, wire.post_ack_event("orders", "orders", 2, long_origin))
    target.apply(
        DC1, wire.replicate(build_message("right", durable=True), 3, "o" * MAX_BROKER_ID_BYTES, "orders")
    )
    net.pump()
    assert target.stats["refused"] == 3 and net.depth("dc2", "orders") == 4  # 3 before, and the last
    assert not any(len(key) > 1000 for key in net.server("dc2").meta)
    said = lines(caplog, "MIR102")
    assert len(said) == 2 and all(len(r.getMessage()) < 500 for r in caplog.records)
