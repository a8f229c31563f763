"""Scale-down between broker processes: a primary-only server stopped cleanly moves every message of its
queues to an active member of its group, through the member's AMQP acceptor as the cluster user, and
redirects its clients there.

Each test counts exactly what arrives: durable and non-durable messages of an anycast queue and of a
multicast subscription, with their properties and delivery counts; moved messages after the member's own,
in their order; a member of another group passed over; a scale-down killed (kill -9) after the member
stored everything but before the source removed anything, run again, storing nothing twice; a member that
is down, the stop saying so and every durable message kept.
"""

from __future__ import annotations

import signal
from pathlib import Path

from proton import Message

from broker_core.amqp.performatives import Attach, Flow, Source, Target, Transfer
from connections.cli import Management
from connections.failover import FailoverConnection
from tests.peers.ports import LOOPBACK, free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive, send
from tests.support.ha import CLUSTER, Relay, failover_uri
from tests.support.raw_amqp import RawPeer

N, M = 30, 20  # durable and non-durable messages per queue
ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
EVENTS = '<address name="events"><multicast><queue name="events.audit"/></multicast></address>'
LATER = '<address name="later"><anycast><queue name="later"/></anycast></address>'
DISPOSITION = b"\x00\x53\x15"


def server(
    home: Path,
    name: str,
    *,
    group: str | None = None,
    scale_to: tuple[int, ...] = (),
    enabled: bool = True,
    addresses: str = "",
) -> BrokerProcess:
    """A primary-only server with the cluster user; `scale_to`: the ports of the members it may scale
    down to, in order (none: it only announces its group)."""
    connectors = "".join(
        f'<connector name="m{i}">tcp://{LOOPBACK}:{p}</connector>' for i, p in enumerate(scale_to)
    )
    refs = "".join(f"<connector-ref>m{i}</connector-ref>" for i in range(len(scale_to)))
    scale = f"<enabled>{str(enabled and bool(scale_to)).lower()}</enabled>"
    scale += f"<group-name>{group}</group-name>" if group else ""
    scale += f"<connectors>{refs}</connectors>" if refs else ""
    extra = CLUSTER + (f"<connectors>{connectors}</connectors>" if connectors else "")
    extra += f"<ha-policy><primary-only><scale-down>{scale}</scale-down></primary-only></ha-policy>"
    return BrokerProcess(home / name, name=name, xml_kwargs={"addresses": addresses, "extra": extra})


def bodies(url: str, address: str, count: int) -> list[object]:
    return [m.body for m in receive(url, address, count, timeout=1)]


def statistics(broker: BrokerProcess) -> dict[str, int]:
    management = Management(broker.url)
    try:
        stats: dict[str, int] = management.call("getStatistics", [])
        return stats
    finally:
        management.conn.close()


def delivery_counts(broker: BrokerProcess, queue: str) -> dict[tuple[bool, int], int]:
    """(durable, property i) -> delivery count of each message of `queue`, as management lists them."""
    management = Management(broker.url)
    try:
        entries = management.call("listMessages", [""], resource=f"queue.{queue}")
    finally:
        management.conn.close()
    return {(e["durable"], e["i"]): e.get("deliveryCount", 0) for e in entries}


def test_every_message_moves_in_order_after_the_members_own_and_the_client_follows(tmp_path: Path) -> None:
    target = server(tmp_path, "target", group="g1", addresses=ORDERS + LATER).start()
    source = server(
        tmp_path, "source", group="g1", scale_to=(target.port,), addresses=ORDERS + EVENTS + LATER
    ).start()
    send(target.url, "orders", [f"t{i}" for i in range(5)])  # the member's own, there before
    with connect(source.url) as conn:
        for address in ("orders", "events"):
            sender = conn.create_sender(address)
            for durable, kind, count in ((True, "d", N), (False, "n", M)):
                for i in range(count):
                    properties = {"i": i, "_AMQ_DUPL_ID": f"{address}-{kind}{i}"}
                    sender.send(Message(body=f"{kind}{i}", durable=durable, properties=properties))
    # the subscription's first message taken by a consumer whose socket is then lost: delivery count 1
    with RawPeer(LOOPBACK, source.port) as peer:
        peer.open()
        peer.begin()
        source_terminus = Source(address="events::events.audit")
        peer.send_frame(
            0, Attach(name="r", handle=0, role=True, source=source_terminus, target=Target()).encode_amqp()
        )
        peer.wait_for(Attach)
        flow = Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0, outgoing_window=100,
                    handle=0, delivery_count=0, link_credit=1)  # fmt: skip
        peer.send_frame(0, flow.encode_amqp())
        peer.wait_for(Transfer)
    wait_until(lambda: delivery_counts(source, "events.audit").get((True, 0)) == 1, 10, "d0 back, counted")
    counts = delivery_counts(source, "events.audit")
    client = FailoverConnection(failover_uri([source.url]))
    try:
        sender = client.sender("later")
        sender.send(Message(body="before", durable=True))
        assert source.stop() == 0
        sender.send(Message(body="after", durable=True))  # redirected: it goes on at the member
        assert client.connected_uri is not None and client.connected_uri.port == target.port
    finally:
        client.close()
    log = source.log()
    assert "AMQ951160" in log and "AMQ951161" in log, log
    assert f"scaled queue orders (ANYCAST, address orders) down: {N + M} messages moved" in log
    assert f"scaled queue events.audit (MULTICAST, address events) down: {N + M} messages moved" in log
    assert f"{2 * (N + M) + 1} messages moved" in log  # with "before" on the queue "later"
    # order: the member's own first, then the moved ones in their order
    moved = [f"d{i}" for i in range(N)] + [f"n{i}" for i in range(M)]
    assert bodies(target.url, "orders", 200) == [f"t{i}" for i in range(5)] + moved
    assert delivery_counts(target, "events.audit") == counts  # the member counts on from there
    audit = receive(target.url, "events::events.audit", 200, timeout=1)
    assert sorted(m.body for m in audit) == sorted(moved)
    assert {(m.durable, m.properties["i"]): m.delivery_count for m in audit} == counts
    assert all(m.properties["i"] == int(m.body[1:]) for m in audit)
    assert all(m.durable == m.body.startswith("d") for m in audit)
    assert bodies(target.url, "later", 10) == ["before", "after"]
    # the duplicate ids moved with their messages: a client's retry at the member is not stored again
    send(target.url, "orders", ["retry"], properties={"_AMQ_DUPL_ID": "orders-d7"})
    assert bodies(target.url, "orders", 10) == []
    assert statistics(target)["messages_scaled_in"] == 2 * (N + M) + 1
    assert target.stop() == 0


def test_a_member_of_another_group_is_passed_over(tmp_path: Path) -> None:
    other = server(tmp_path, "other", group="g2", addresses=ORDERS).start()
    member = server(tmp_path, "member", group="g1", addresses=ORDERS).start()
    source = server(
        tmp_path, "source", group="g1", scale_to=(other.port, member.port), addresses=ORDERS
    ).start()
    send(source.url, "orders", list(range(10)))
    assert source.stop() == 0
    assert bodies(member.url, "orders", 100) == list(range(10))
    assert bodies(other.url, "orders", 100) == []
    assert "scales queue" not in other.log()
    assert f"scales down to {LOOPBACK}:{member.port}" in source.log()
    other.stop()
    member.stop()


def test_a_scale_down_killed_after_the_member_stored_everything_run_again_stores_nothing_twice(
    tmp_path: Path,
) -> None:
    """The member stores each message and answers; its first answer is held back (a relay), so the
    source removes nothing before it is killed. Started again and stopped, it sends them all again:
    the member takes each as the repeat it is."""
    count = 200
    target = server(tmp_path, "target", group="g1", addresses=ORDERS).start()
    with Relay(target.port) as relay:
        source = server(tmp_path, "source", group="g1", scale_to=(relay.port,), addresses=ORDERS).start()
        send(source.url, "orders", list(range(count)))
        relay.pause_when(lambda frame: frame[8:11] == DISPOSITION)
        assert source.proc is not None
        source.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: relay.paused.is_set(), 20, "the member's first acceptance")
        wait_until(lambda: statistics(target)["messages_scaled_in"] == count, 20, "the member to store all")
        source.kill()
        assert "AMQ951163" not in source.log()
        source.start()
        assert source.stop() == 0
    assert f"{count} messages moved" in source.log()  # all of them again
    got = bodies(target.url, "orders", 2 * count)
    assert sorted(got) == list(range(count))  # each once
    assert statistics(target)["messages_scaled_in"] == count  # the repeats stored nothing
    target.stop()


def test_with_no_member_up_the_stop_says_so_and_keeps_every_durable_message(tmp_path: Path) -> None:
    source = server(tmp_path, "source", group="g1", scale_to=(free_port(),), addresses=ORDERS).start()
    send(source.url, "orders", list(range(25)))
    assert source.stop(timeout=30) == 1
    assert "AMQ951166" in source.log() and "its 25 messages stay in its journal" in source.log()
    source.start()
    assert bodies(source.url, "orders", 100) == list(range(25))
    assert source.stop(timeout=30) == 0  # nothing left to move: nothing stranded
    assert "its 0 messages stay" in source.log()


def shared_store_pair_scaling_down(home: Path, member_port: int) -> tuple[BrokerProcess, BrokerProcess]:
    """A shared-store primary and its backup; the backup scales down to `member_port` (group g1)."""
    ports = {"primary": free_port(), "backup": free_port()}
    scale = (
        "<scale-down><group-name>g1</group-name><connectors><connector-ref>m0</connector-ref></connectors>"
    )
    scale += "</scale-down>"
    servers = []
    for role, other in (("primary", "backup"), ("backup", "primary")):
        connectors = f'<connector name="partner">tcp://{LOOPBACK}:{ports[other]}</connector>'
        connectors += f'<connector name="m0">tcp://{LOOPBACK}:{member_port}</connector>'
        options = scale if role == "backup" else ""
        extra = CLUSTER + f"<connectors>{connectors}</connectors>"
        extra += f"<ha-policy><shared-store><{role}>{options}</{role}></shared-store></ha-policy>"
        broker = BrokerProcess(
            home / role,
            name=role,
            port=ports[role],
            xml_kwargs={"addresses": ORDERS, "extra": extra},
            ready_text="AMQ221007" if role == "primary" else "passive on",
        )
        broker.write_config()
        text = broker.config_path.read_text()
        for kind in ("journal", "bindings", "paging", "large-messages"):
            text = text.replace(f"<{kind}-directory>data/{kind}<", f"<{kind}-directory>{home}/shared/{kind}<")
        broker.config_path.write_text(text)
        servers.append(broker)
    return servers[0], servers[1]


def test_a_backup_with_scale_down_moves_its_primarys_messages_instead_of_activating(tmp_path: Path) -> None:
    target = server(tmp_path, "target", group="g1", addresses=ORDERS).start()
    primary, backup = shared_store_pair_scaling_down(tmp_path, target.port)
    primary.start()
    backup.start()
    send(primary.url, "orders", list(range(40)))
    primary.kill()
    assert backup.proc is not None
    wait_until(lambda: backup.proc is not None and backup.proc.poll() is not None, 30, "the backup to stop")
    assert backup.proc.returncode == 0, backup.log()
    log = backup.log()
    assert "AMQ951164" in log and "40 messages moved" in log, log
    assert "AMQ221010" not in log  # it never served
    assert bodies(target.url, "orders", 100) == list(range(40))
    target.stop()
