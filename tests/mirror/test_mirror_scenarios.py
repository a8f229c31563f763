"""Mirror scenarios with our brokers as separate processes: outages, kills, filters, toggles, topologies."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from proton import ConnectionException, Delivery, Message, Timeout

from broker_core.journal import iter_records
from broker_core.journal.records import MessageAcked, MessageAdded, MessagesAcked, QueueAdded
from connections.cli import request
from tests.mirror.test_dual_mirror import QUEUES, depth, status
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import Capabilities, connect, receive, send


def conn_xml(*mirrors: tuple[str, int, str] | tuple[str, int, str, str]) -> str:
    """Mirrors as (connection name, port, <mirror> attributes[, <mirror> children])."""
    parts = []
    for name, port, attrs, *children in mirrors:
        inner = children[0] if children else ""
        parts.append(
            f'<amqp-connection uri="tcp://127.0.0.1:{port}" name="{name}" retry-interval="200">'
            f"<mirror {attrs}>{inner}</mirror></amqp-connection>"
        )
    return f"<broker-connections>{''.join(parts)}</broker-connections>"


def broker(
    tmp: Path,
    name: str,
    port: int,
    *mirrors: tuple[str, int, str],
    addresses: str = QUEUES,
    node_id: str | None = None,
    acceptor_params: str = "",
) -> BrokerProcess:
    extra = conn_xml(*mirrors) if mirrors else ""
    xml = {"addresses": addresses, "extra": extra, "acceptor_params": acceptor_params}
    return BrokerProcess(tmp / name, name=name, port=port, xml_kwargs=xml, node_id=node_id)


def drained(*brokers: BrokerProcess) -> bool:
    return all(all(s["pendingEvents"] == 0 for s in status(b)["sources"]) for b in brokers)


def bodies(b: BrokerProcess, queue: str = "orders") -> list[str]:
    return sorted(m.body for m in receive(b.url, queue, 100000, timeout=1, accept=None))


def test_target_down_under_load_then_catch_up_exactly(tmp_path: Path) -> None:
    p1, p2 = free_port(), free_port()
    dc2 = broker(tmp_path, "dc2", p2).start()
    dc1 = broker(tmp_path, "dc1", p1, ("DC2", p2, "")).start()
    try:
        wait_until(lambda: "AMQ111003" in dc1.log(), 20, "the mirror to connect")
        done = threading.Event()

        def load() -> None:
            send(dc1.url, "orders", [f"m{i}" for i in range(600)])
            done.set()

        t = threading.Thread(target=load)
        t.start()
        wait_until(lambda: depth(dc2, "orders") > 50, 20, "some messages to reach DC2")
        dc2.kill()
        t.join(60)
        assert done.is_set()
        # once DC1 has seen the link go (it retries), no Accepted can still arrive: the backlog is fixed
        wait_until(lambda: "AMQ111002" in dc1.log(), 20, "DC1 to notice that DC2 is gone")
        held = status(dc1)["sources"][0]
        assert held["pendingEvents"] > 0, "the outage should leave events waiting on DC1"
        assert held["pendingBytes"] >= held["pendingEvents"] * len("m0"), held
        dc1.stop()  # the source restarts during the outage: its backlog and its figures come back
        dc1.start()
        recovered = f"queue $ACTIVEMQ_ARTEMIS_MIRROR_DC2 holds {held['pendingEvents']} events"
        assert recovered in dc1.log(), "the backlog did not come back whole at the restart"
        again = status(dc1)["sources"][0]
        # plus the restart's announcements: addAddress and createQueue for orders, DLA and ExpiryQueue
        assert again["pendingEvents"] == held["pendingEvents"] + 2 * 3
        assert again["pendingBytes"] > held["pendingBytes"]
        dc2.start()
        wait_until(lambda: drained(dc1), 30, "DC1's store-and-forward queue to drain")
        assert status(dc1)["sources"][0]["pendingBytes"] == 0  # neither lost at the restart nor counted twice
        assert bodies(dc2) == sorted(f"m{i}" for i in range(600)), "lost or duplicated after catch-up"
    finally:
        dc1.stop()
        dc2.stop()


def test_accepted_events_leave_the_queue_in_runs_and_stay_gone_after_a_restart(tmp_path: Path) -> None:
    """The events one disposition of the target accepts are journalled as one MessagesAcked, which
    recovery replays like the acks one by one."""
    p1, p2 = free_port(), free_port()
    dc2 = broker(tmp_path, "dc2", p2).start()
    dc1 = broker(tmp_path, "dc1", p1, ("DC2", p2, "")).start()
    try:
        wait_until(lambda: "AMQ111003" in dc1.log(), 20, "the mirror to connect")
        send(dc1.url, "orders", [f"m{i}" for i in range(600)])
        wait_until(lambda: drained(dc1), 30, "DC1's store-and-forward queue to drain")
        dc1.stop()
        dc2.stop()
        journal = list(iter_records(tmp_path / "dc1" / "data" / "journal"))
        snf = next(
            r.queue_id
            for _, r in journal
            if isinstance(r, QueueAdded) and r.name == "$ACTIVEMQ_ARTEMIS_MIRROR_DC2"
        )
        runs = [r for _, r in journal if isinstance(r, MessagesAcked) and r.queue_id == snf]
        assert not [r for _, r in journal if isinstance(r, MessageAcked) and r.queue_id == snf]
        acked = [mid for r in runs for mid in r.message_ids]
        events = [r for _, r in journal if isinstance(r, MessageAdded) and snf in r.queue_ids]
        assert len([r for r in events if r.address == "orders"]) == 600, "each send is one event"
        assert sorted(acked) == sorted(r.message_id for r in events), "every event acked exactly once"
        assert len(runs) < len(acked), "the target's dispositions cover several events each"
        dc1.start()  # the target still down: nothing can leave the queue but what recovery left in it
        assert "queue $ACTIVEMQ_ARTEMIS_MIRROR_DC2 holds 0 events" in dc1.log()
        # only this start's announcements: addAddress and createQueue for orders, DLA and ExpiryQueue
        assert status(dc1)["sources"][0]["pendingEvents"] == 2 * 3, "accepted events came back at the restart"
    finally:
        dc1.stop()
        dc2.stop()


def test_source_sigkilled_mid_stream_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    p1, p2 = free_port(), free_port()
    dc2 = broker(tmp_path, "dc2", p2).start()
    dc1 = broker(tmp_path, "dc1", p1, ("DC2", p2, "")).start()
    accepted: list[str] = []
    try:
        wait_until(lambda: "AMQ111003" in dc1.log(), 20, "the mirror to connect")
        killer = threading.Timer(0.8, dc1.kill)
        killer.start()
        cut_off: ConnectionException | None = None
        try:
            with connect(dc1.url, timeout=5) as conn:
                sender = conn.create_sender("orders")
                for i in range(100000):
                    sender.send(Message(body=f"m{i}", durable=True))
                    accepted.append(f"m{i}")
        except ConnectionException as exc:  # the kill; a Timeout or a refused send would be a failure
            cut_off = exc
        killer.join()
        assert cut_off is not None, "the kill should have cut the sender off mid-stream"
        assert len(accepted) > 10
        dc1.start()
        wait_until(lambda: drained(dc1), 30, "the restarted source to drain its store-and-forward queue")
        on_dc1, on_dc2 = bodies(dc1), bodies(dc2)
        assert len(on_dc2) == len(set(on_dc2)), "duplicates on the target"
        assert set(accepted) <= set(on_dc1), "the source lost accepted messages"
        assert on_dc2 == on_dc1, "target and source differ after recovery"
    finally:
        dc1.stop()
        dc2.stop()


def test_address_filter_and_queue_creation_toggle(tmp_path: Path) -> None:
    p1, p2 = free_port(), free_port()
    addrs = "".join(
        f'<address name="{a}"><anycast><queue name="{a}"/></anycast></address>'
        for a in ("eu.fr", "eu.uk", "us.ny")
    )
    dc2 = broker(tmp_path, "dc2", p2, addresses=addrs).start()
    dc1 = broker(tmp_path, "dc1", p1, ("DC2", p2, 'address-filter="eu,!eu.uk" queue-creation="false"'),
                 addresses=addrs).start()  # fmt: skip
    try:
        wait_until(lambda: "AMQ111003" in dc1.log(), 20, "the mirror to connect")
        for a in ("eu.fr", "eu.uk", "us.ny"):
            send(dc1.url, a, [f"{a}-1", f"{a}-2"])
        with connect(dc1.url) as conn:
            conn.create_sender("eu.new", options=Capabilities("queue")).close()
        wait_until(lambda: drained(dc1), 10, "the mirror to drain")
        assert depth(dc2, "eu.fr") == 2
        assert depth(dc2, "eu.uk") == 0 and depth(dc2, "us.ny") == 0
        assert depth(dc2, "eu.new") == -1, "queue-creation=false must not create queues on the target"
    finally:
        dc1.stop()
        dc2.stop()


def test_queue_removal_is_mirrored_unless_disabled(tmp_path: Path) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    dc2 = broker(tmp_path, "dc2", p2).start()
    dc3 = broker(tmp_path, "dc3", p3).start()
    dc1 = broker(tmp_path, "dc1", p1, ("DC2", p2, ""), ("DC3", p3, 'queue-removal="false"')).start()
    try:
        wait_until(lambda: dc1.log().count("AMQ111003") >= 2, 20, "both mirrors to connect")
        with connect(dc1.url) as conn:
            conn.create_sender("temp.work", options=Capabilities("queue")).close()
        wait_until(lambda: depth(dc2, "temp.work") == 0 and depth(dc3, "temp.work") == 0, 10, "queue on both")
        request(dc1.url, "destroyQueue", ["temp.work"])
        wait_until(lambda: depth(dc2, "temp.work") == -1, 10, "the removal to reach DC2")
        wait_until(lambda: drained(dc1), 10, "the mirrors to drain")
        assert depth(dc3, "temp.work") == 0, "queue-removal=false must keep the queue on DC3"
    finally:
        dc1.stop()
        dc2.stop()
        dc3.stop()


def test_fan_out_and_chain_never_duplicate(tmp_path: Path) -> None:
    # A -> B -> C chain, plus A -> D fan-out. Messages reach B, C and D exactly once; acks follow.
    # C takes A's events from B because it is told to (origin trust, docs/mirror.md).
    pa, pb, pc, pd = (free_port() for _ in range(4))
    node_a, node_b = str(uuid.uuid4()), str(uuid.uuid4())
    c = broker(tmp_path, "c", pc, acceptor_params=f"mirrorTrustedOrigins={node_b}:{node_a}").start()
    d = broker(tmp_path, "d", pd).start()
    b = broker(tmp_path, "b", pb, ("C", pc, ""), node_id=node_b).start()
    a = broker(tmp_path, "a", pa, ("B", pb, ""), ("D", pd, ""), node_id=node_a).start()
    try:
        wait_until(lambda: a.log().count("AMQ111003") >= 2 and "AMQ111003" in b.log(), 20, "mirrors up")
        send(a.url, "orders", [f"x{i}" for i in range(30)])
        wait_until(lambda: drained(a) and drained(b), 10, "A and B to drain")
        expected = sorted(f"x{i}" for i in range(30))
        assert bodies(b) == bodies(c) == bodies(d) == expected
        receive(a.url, "orders", 10)
        wait_until(lambda: depth(b, "orders") == 20 and depth(d, "orders") == 20, 10, "acks to reach B and D")
        wait_until(lambda: depth(c, "orders") == 20, 10, "acks to travel the chain to C")
    finally:
        for x in (a, b, c, d):
            x.stop()


def test_multicast_ack_removes_the_copy_of_that_subscription_only(tmp_path: Path) -> None:
    """A multicast address with two subscription queues on both sides: consuming from one subscription on
    DC1 removes those messages from the same subscription on DC2 and nowhere else (the postAck names its
    queue)."""
    subscriptions = '<queue name="news.a"/><queue name="news.b"/>'
    news = f'<address name="news"><multicast>{subscriptions}</multicast></address>'
    p1, p2 = free_port(), free_port()
    dc1 = broker(tmp_path, "dc1", p1, ("DC2", p2, ""), addresses=QUEUES + news).start()
    dc2 = broker(tmp_path, "dc2", p2, ("DC1", p1, ""), addresses=QUEUES + news).start()
    try:
        wait_until(lambda: all("AMQ111003" in b.log() for b in (dc1, dc2)), 20, "both mirrors to connect")
        send(dc1.url, "news", ["n0", "n1", "n2"])
        wait_until(lambda: depth(dc2, "news.a") == 3 and depth(dc2, "news.b") == 3, 10, "both copies on DC2")
        assert [m.body for m in receive(dc1.url, "news::news.a", 2)] == ["n0", "n1"]
        wait_until(lambda: depth(dc2, "news.a") == 1, 10, "the acks of news.a to reach DC2")
        wait_until(lambda: drained(dc1, dc2), 10, "both mirrors to drain")
        assert bodies(dc2, "news::news.a") == ["n2"]
        assert bodies(dc2, "news::news.b") == ["n0", "n1", "n2"], "an ack of news.a removed news.b's copy"
        assert bodies(dc1, "news::news.b") == ["n0", "n1", "n2"]
        assert depth(dc1, "news.a") == 1
    finally:
        dc1.stop()
        dc2.stop()


def test_sync_mirror_confirms_sends_only_after_the_target_accepted(tmp_path: Path) -> None:
    """DC1 mirrors with sync="true", DC3 without, both to DC2: with DC2 down, DC3 confirms a durable send
    at once, DC1 holds its outcome until DC2 is back and has the message."""
    p1, p2, p3 = free_port(), free_port(), free_port()
    dc2 = broker(tmp_path, "dc2", p2).start()
    dc1 = broker(tmp_path, "dc1", p1, ("DC2", p2, 'sync="true"')).start()
    dc3 = broker(tmp_path, "dc3", p3, ("DC2", p2, 'sync="false"')).start()
    try:
        wait_until(lambda: all("AMQ111003" in b.log() for b in (dc1, dc3)), 20, "both mirrors to connect")
        send(dc1.url, "orders", ["s1"])
        # the send returned only after DC2 accepted the event, so DC2 already holds it
        assert depth(dc2, "orders") == 1
        dc2.kill()
        with connect(dc1.url) as conn:
            held = conn.create_sender("orders").link.send(Message(body="held", durable=True))
            # DC3's mirror is not sync: its durable send is Accepted while the same target is down
            with connect(dc3.url) as conn3:
                unsynced = Message(body="unsynced", durable=True)
                delivery = conn3.create_sender("orders").send(unsynced, timeout=10)
                assert delivery.remote_state == Delivery.ACCEPTED
            # 2 s is hundreds of times what a durable send takes here (DC3's just now): only the sync
            # mirror can keep DC1's outcome back that long
            with pytest.raises(Timeout):
                conn.wait(lambda: held.settled, timeout=2, msg="DC1 to settle the sync send")
            assert held.remote_state not in (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED)
            dc2.start()
            conn.wait(lambda: held.settled, timeout=30, msg="DC1 to settle the sync send after DC2 returned")
            assert held.remote_state == Delivery.ACCEPTED
            # confirmed only once DC2 had it: DC2 holds it now, without waiting
            assert "held" in bodies(dc2)
        wait_until(lambda: drained(dc1, dc3), 20, "both mirrors to drain")
        assert bodies(dc2) == ["held", "s1", "unsynced"]
    finally:
        dc1.stop()
        dc3.stop()
        dc2.stop()


def test_pre_existing_messages_are_not_mirrored_unless_initial_sync_is_asked(tmp_path: Path) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    dc2 = broker(tmp_path, "dc2", p2).start()
    dc3 = broker(tmp_path, "dc3", p3).start()
    dc1 = broker(tmp_path, "dc1", p1).start()  # no mirror yet: a backlog builds up
    send(dc1.url, "orders", [f"old{i}" for i in range(20)])
    dc1.stop()
    sync = '<property key="initial-sync" value="true"/>'
    dc1.xml_kwargs["extra"] = conn_xml(("DC2", p2, ""), ("DC3", p3, "", sync))
    dc1.write_config()
    dc1.start()
    try:
        wait_until(lambda: dc1.log().count("AMQ111003") >= 2, 20, "both mirrors to connect")
        send(dc1.url, "orders", ["new"])
        wait_until(lambda: drained(dc1), 10, "the mirrors to drain")
        assert bodies(dc2) == ["new"], "Artemis semantics: the backlog is not mirrored by default"
        assert bodies(dc3) == sorted([f"old{i}" for i in range(20)] + ["new"])
        receive(dc1.url, "orders", 5)  # acks of synced messages find them on DC3 by identity
        wait_until(lambda: depth(dc3, "orders") == 16, 10, "acks of synced messages to reach DC3")
        assert "initial sync queued 20" in dc1.log()
    finally:
        dc1.stop()
        dc2.stop()
        dc3.stop()
