"""AMQP semantics clients rely on, against our broker running as a separate process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import ConnectionException, Delivery, Message, Timeout
from proton.utils import LinkDetached, SendException

from connections.cli import request
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import Capabilities, connect, receive, send
from tests.support.raw_amqp import taken_then_lost


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path / "b",
        xml_kwargs={
            "addresses": """
      <address name="orders"><anycast><queue name="orders"/></anycast></address>
      <address name="news"><multicast/></address>"""
        },
    )
    b.start()
    yield b
    b.stop()


def consumers(b: BrokerProcess, queue: str) -> int:
    return int(request(b.url, "getStatistics", [], resource=f"queue.{queue}")["consumer-count"])


def test_send_and_receive_keeps_properties_and_body(broker: BrokerProcess) -> None:
    props = {"region": "eu", "n": 7, "flag": True}
    with connect(broker.url) as conn:
        s = conn.create_sender("orders")
        s.send(
            Message(
                body={"id": 1, "items": ["a", "b"]},
                properties=props,
                subject="new",
                durable=True,
                content_type="application/json",
                correlation_id="c-1",
            )
        )
    [m] = receive(broker.url, "orders", 1)
    assert m.body == {"id": 1, "items": ["a", "b"]}
    assert m.properties == props
    assert (m.subject, m.content_type, m.correlation_id, m.durable) == (
        "new",
        "application/json",
        "c-1",
        True,
    )


def test_per_queue_order_and_competing_consumers(broker: BrokerProcess) -> None:
    send(broker.url, "orders", range(40))
    with connect(broker.url) as c1, connect(broker.url) as c2:
        r1 = c1.create_receiver("orders", credit=5)
        r2 = c2.create_receiver("orders", credit=5)
        got1, got2 = [], []
        deadline = time.monotonic() + 20
        while len(got1) + len(got2) < 40:
            assert time.monotonic() < deadline, f"only {len(got1) + len(got2)} of 40 within 20 s"
            for r, got in ((r1, got1), (r2, got2)):
                try:
                    got.append(r.receive(timeout=0.2).body)
                except Timeout:
                    continue  # this consumer has nothing right now; the other may
                r.accept()
    assert sorted(got1 + got2) == list(range(40))
    assert got1 == sorted(got1) and got2 == sorted(got2)
    assert got1 and got2, "both consumers should have had a share"


def test_auto_created_anycast_queue_with_queue_capability(broker: BrokerProcess) -> None:
    send(broker.url, "auto.q", ["x", "y"])  # stock address settings: no capability -> MULTICAST...
    # ...so nothing was kept for a later consumer, exactly as Artemis behaves for bare AMQP senders
    assert receive(broker.url, "auto.q", 1, timeout=0.5) == []
    with connect(broker.url) as conn:
        s = conn.create_sender("auto.anycast", options=Capabilities("queue"))
        s.send(Message(body="kept", durable=True))
    [m] = receive(broker.url, "auto.anycast", 1)
    assert m.body == "kept"


def test_multicast_subscribers_each_get_every_message(broker: BrokerProcess) -> None:
    with connect(broker.url) as c1, connect(broker.url) as c2:
        r1 = c1.create_receiver("news", credit=10)
        r2 = c2.create_receiver("news", credit=10)
        send(broker.url, "news", ["a", "b", "c"])
        for r in (r1, r2):
            got = []
            for _ in range(3):
                got.append(r.receive(timeout=5).body)
                r.accept()
            assert got == ["a", "b", "c"]


def test_redelivery_after_consumer_loss_counts_deliveries(broker: BrokerProcess) -> None:
    """As on Artemis (checked against 2.40): what a consumer held unsettled comes back counted as a
    delivery when its connection is lost (it may have been processed), uncounted when the client let
    go of it in an orderly way (a link detach, a connection close)."""
    send(broker.url, "orders", ["once"])
    with connect(broker.url) as conn:
        r = conn.create_receiver("orders", credit=1)
        m = r.receive(timeout=5)
        assert m.body == "once" and m.delivery_count == 0
        # the connection closes without settling: the broker gets it back, not counted
    [again] = receive(broker.url, "orders", 1, accept=None)
    assert again.body == "once"
    assert again.delivery_count == 0
    assert taken_then_lost(broker.port, "orders") == 0
    [lost] = receive(broker.url, "orders", 1)  # the socket went without a close: counted
    assert lost.body == "once"
    assert lost.delivery_count == 1


def test_rejected_goes_to_dead_letter_address(broker: BrokerProcess) -> None:
    send(broker.url, "orders", ["poison"])
    with connect(broker.url) as conn:
        r = conn.create_receiver("orders", credit=1)
        assert r.receive(timeout=5).body == "poison"
        r.reject()
    [m] = receive(broker.url, "DLA", 1)
    assert m.body == "poison"
    assert receive(broker.url, "orders", 1, timeout=0.3) == []


def test_release_is_not_an_attempt_but_consumer_loss_is_until_dead_letter(broker: BrokerProcess) -> None:
    send(broker.url, "orders", ["flaky"])
    with connect(broker.url) as conn:
        r = conn.create_receiver("orders", credit=1)
        r.receive(timeout=5)
        r.release(delivered=False)  # released: redelivered, no attempt counted (as Artemis)
        assert r.receive(timeout=5).delivery_count == 0
        r.release(delivered=True)  # modified without delivery-failed: likewise
        assert r.receive(timeout=5).delivery_count == 0
    for attempt in (0, 1, 2):  # max-delivery-attempts=3: each consumer loss counts one
        assert taken_then_lost(broker.port, "orders") == attempt
    assert receive(broker.url, "orders", 1, timeout=0.3) == []
    [dead] = receive(broker.url, "DLA", 1)
    assert dead.body == "flaky"


def test_ttl_expiry_moves_message_to_expiry_address(broker: BrokerProcess) -> None:
    send(broker.url, "orders", ["stale"], ttl=0.05)
    send(broker.url, "orders", ["fresh"])
    deadline = time.monotonic() + 0.1
    while time.monotonic() < deadline:  # let the first one expire (TTL, not synchronisation)
        time.sleep(0.02)
    got = receive(broker.url, "orders", 2, timeout=1)
    assert [m.body for m in got] == ["fresh"]
    [expired] = receive(broker.url, "ExpiryQueue", 1)
    assert expired.body == "stale"


def test_large_message_spans_many_transfer_frames(broker: BrokerProcess) -> None:
    body = bytes(range(256)) * 8192  # 2 MiB, max-frame-size 128 KiB
    send(broker.url, "orders", [body])
    [m] = receive(broker.url, "orders", 1)
    assert m.body == body


def test_durable_messages_survive_restart_and_acked_ones_do_not_return(broker: BrokerProcess) -> None:
    send(broker.url, "orders", [f"m{i}" for i in range(10)])
    got = receive(broker.url, "orders", 4)
    assert [m.body for m in got] == ["m0", "m1", "m2", "m3"]
    assert broker.stop() == 0
    broker.start()
    rest = receive(broker.url, "orders", 10, timeout=1)
    assert [m.body for m in rest] == [f"m{i}" for i in range(4, 10)]


def test_non_durable_messages_do_not_survive_restart(broker: BrokerProcess) -> None:
    send(broker.url, "orders", ["volatile"], durable=False)
    send(broker.url, "orders", ["kept"], durable=True)
    broker.stop()
    broker.start()
    assert [m.body for m in receive(broker.url, "orders", 2, timeout=1)] == ["kept"]


def test_unknown_queue_without_auto_create_is_not_found(tmp_path: Path) -> None:
    b = BrokerProcess(
        tmp_path / "b",
        xml_kwargs={
            "address_settings": """
      <address-setting match="#"><auto-create-queues>false</auto-create-queues>
        <auto-create-addresses>false</auto-create-addresses></address-setting>"""
        },
    )
    b.start()
    try:
        with connect(b.url) as conn, pytest.raises(LinkDetached) as info:
            conn.create_receiver("missing")
        assert "amqp:not-found" in str(info.value)
    finally:
        b.stop()


def test_send_to_multicast_without_subscribers_is_accepted_and_dropped(broker: BrokerProcess) -> None:
    with connect(broker.url) as conn:
        delivery = conn.create_sender("news").send(Message(body="nobody", durable=True))
    assert delivery.remote_state == Delivery.ACCEPTED  # send() raises SendException on anything else
    # dropped: a subscriber that comes later finds nothing kept for it
    assert receive(broker.url, "news", 1, timeout=0.5) == []
    assert "nobody" not in [m.body for m in receive(broker.url, "DLA", 10, timeout=0.3)]


def test_receive_helper_raises_when_the_broker_goes_away(broker: BrokerProcess) -> None:
    """The helper's "nothing came" (an empty list) must mean a live link was idle: a dead one raises."""
    outcome: list[object] = []

    def waiting_receive() -> None:
        try:
            outcome.append(receive(broker.url, "orders", 1, timeout=30))
        except ConnectionException as exc:
            outcome.append(exc)

    t = threading.Thread(target=waiting_receive)
    t.start()
    wait_until(lambda: consumers(broker, "orders") == 1, 10, "the helper's receiver to attach")
    broker.kill()
    t.join(15)
    assert not t.is_alive(), "the helper kept waiting on a dead connection"
    [result] = outcome
    assert isinstance(result, ConnectionException), f"the helper returned {result!r} for a dead broker"


def test_a_fully_qualified_target_sends_to_that_one_queue(tmp_path: Path) -> None:
    """``address::queue`` as a producer's target (Artemis's fully qualified queue name): the message goes
    to that queue only, whatever the queue is called and whatever else the address has bound; a queue
    that is not on that address is refused at attach, and one deleted since is a rejected message, not
    an Accepted one that reached nothing."""
    b = BrokerProcess(
        tmp_path / "b",
        xml_kwargs={
            "addresses": """
      <address name="billing"><anycast><queue name="billing.q"/></anycast></address>
      <address name="news"><multicast><queue name="news.a"/><queue name="news.b"/></multicast></address>"""
        },
    )
    b.start()
    try:
        with connect(b.url) as conn:
            conn.create_sender("news::news.b").send(Message(body="to b only", durable=True))
            conn.create_sender("billing::billing.q").send(Message(body="billed", durable=True))
            for wrong in ("news::billing.q", "billing::missing"):
                with pytest.raises(LinkDetached) as info:
                    conn.create_sender(wrong)
                assert "amqp:not-found" in str(info.value)
            orphan = conn.create_sender("news::news.a")
            request(b.url, "destroyQueue", ["news.a"])
            with pytest.raises(SendException) as refused:
                orphan.send(Message(body="into nothing", durable=True))
            assert refused.value.state == Delivery.REJECTED
        assert [m.body for m in receive(b.url, "news::news.b", 5, timeout=0.5)] == ["to b only"]
        assert [m.body for m in receive(b.url, "billing::billing.q", 5, timeout=0.5)] == ["billed"]
        names = request(b.url, "getAddressNames", [])
        assert not [n for n in names if "::" in n], "an address was made of the qualified name"
    finally:
        b.stop()
