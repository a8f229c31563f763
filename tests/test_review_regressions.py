"""Regressions for bugs a review found: each test fails on the code before its fix."""

from __future__ import annotations

import time
from pathlib import Path

from proton import Message

from broker_core.amqp.codec import enc_bool, enc_list_of_encoded, enc_string, enc_uint
from broker_core.amqp.framing import frame
from broker_core.amqp.performatives import Attach, Detach, Disposition, End, Source, Target, Transfer
from tests.mirror.test_dual_mirror import QUEUES, depth, status
from tests.mirror.test_mirror_scenarios import broker, conn_xml, drained
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive, send
from tests.support.raw_amqp import RawPeer


def test_message_ids_are_not_reused_after_a_restart_so_the_target_drops_nothing(tmp_path: Path) -> None:
    p1, p2 = free_port(), free_port()
    dc2 = broker(tmp_path, "dc2", p2).start()
    dc1 = broker(tmp_path, "dc1", p1, ("DC2", p2, "")).start()
    try:
        wait_until(lambda: "AMQ111003" in dc1.log(), 20, "the mirror to connect")
        send(dc1.url, "orders", [f"nd{i}" for i in range(10)], durable=False)  # ids never journalled
        wait_until(lambda: depth(dc2, "orders") == 10, 10, "the non-durable messages on DC2")
        dc1.stop()
        dc1.start()
        wait_until(lambda: "AMQ111003" in dc1.log(), 20, "the mirror to reconnect")
        send(dc1.url, "orders", [f"d{i}" for i in range(10)], durable=True)
        wait_until(lambda: drained(dc1), 10, "the mirror to drain")
        assert depth(dc2, "orders") == 20
        assert status(dc2)["target"]["duplicates"] == 0
    finally:
        dc1.stop()
        dc2.stop()


def test_an_expired_message_with_absolute_expiry_lands_once_in_the_expiry_queue(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "b", xml_kwargs={"addresses": QUEUES}).start()
    try:
        with connect(b.url) as conn:
            m = Message(body="stale", durable=True)
            m.ttl = 0.05
            m.expiry_time = time.time() + 0.05  # Qpid JMS sets both
            conn.create_sender("orders").send(m)
        wait_until(lambda: time.time() > m.expiry_time + 0.05, 2, "the message to be past its expiry")
        assert receive(b.url, "orders", 1, timeout=0.5) == []  # the consumer makes the broker expire it
        got = receive(b.url, "ExpiryQueue", 5, timeout=1)
        assert [x.body for x in got] == ["stale"], "the expiry copy must not expire again"
        assert depth(b, "ExpiryQueue") == 0
    finally:
        assert b.stop() == 0


def test_an_out_of_range_priority_does_not_poison_the_journal_batch(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "b", xml_kwargs={"addresses": QUEUES}).start()
    try:
        with RawPeer("127.0.0.1", b.port) as p:
            p.open()
            p.begin(0)
            p.attach_sender("s1", "orders")
            header = b"\x00\x53\x70" + enc_list_of_encoded(
                [enc_bool(True), enc_uint(300)]
            )  # priority is a ubyte
            body = b"\x00\x53\x77" + enc_string("loud")
            t = Transfer(handle=0, delivery_id=0, delivery_tag=b"t", message_format=0).encode_amqp()
            p.send_frame(0, t + header + body)
            p.wait_for(Disposition)
        send(b.url, "orders", ["normal"])
        b.stop()
        b.start()
        assert sorted(m.body for m in receive(b.url, "orders", 5, timeout=1)) == ["loud", "normal"]
    finally:
        b.stop()


def test_a_deferred_detach_answer_goes_before_the_end(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "b", xml_kwargs={"addresses": QUEUES}).start()
    try:
        with RawPeer("127.0.0.1", b.port) as p:
            p.open()
            p.begin(0)
            attach = Attach(name="r1", handle=0, role=True, source=Source(address="orders"), target=Target())
            p.send_frame(0, attach.encode_amqp())
            p.wait_for(Attach)
            p.send(frame(0, Detach(handle=0, closed=True).encode_amqp()) + frame(0, End().encode_amqp()))
            p.wait_for(Detach, timeout=5)  # raises if the End came first: wait_for skips over other frames
            p.wait_for(End, timeout=5)
    finally:
        b.stop()


def test_store_and_forward_events_never_expire(tmp_path: Path) -> None:
    dead = free_port()  # the mirror target is down: the event waits
    extra = conn_xml(("DC2", dead, "")) + "<message-expiry-scan-period>100</message-expiry-scan-period>"
    b = BrokerProcess(tmp_path / "b", xml_kwargs={"addresses": QUEUES, "extra": extra}).start()
    try:
        send(b.url, "orders", ["x"], ttl=0.2)
        # Both references carry the same expiry time, so the scan that expired the client queue's one would
        # have expired the store-and-forward one in the same pass.
        wait_until(lambda: depth(b, "ExpiryQueue") >= 1, 10, "the client queue's copy to expire")
        assert depth(b, "ExpiryQueue") == 1, "the store-and-forward reference expired as well"
        # queued: addAddress and createQueue for orders, DLA and ExpiryQueue, the message, its EXPIRED postAck
        wait_until(
            lambda: status(b)["sources"][0]["eventsQueued"] == 8, 5, "the expiry's postAck to be queued"
        )
        assert status(b)["sources"][0]["pendingEvents"] == 8, "an event left the queue with the target down"
    finally:
        b.stop()
