"""`<peer>`, `<sender>` and `<receiver>` broker-connection links on the wire (spec §6).

Our broker connects to a scripted endpoint (decoding with python-qpid-proton) that plays the remote:
a Qpid Dispatch router for `<peer>` (waypoint capability) or another broker for sender/receiver.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Message, symbol, ubyte
from proton.utils import BlockingConnection

from tests.conformance.wire_helpers import (
    AMQP_VALUE,
    PROPERTIES,
    anycast,
    broker,
    connection_xml,
    depth,
    durable_header,
    section,
    send_to_queue,
    symbols_of,
    wait_for_log,
)
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.peer import Frame, LinkReply, ScriptedServer

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
WAYPOINT = symbol("qd.waypoint")
# Queue names differ from their addresses: links must use the ADDRESS.
ADDRESSES = anycast("x.a", "x.a.q") + anycast("s.a", "s.a.q") + anycast("r.a", "r.a.q") + anycast("other")
LINKS = '<peer address-match="x.#"/><sender address-match="s.#"/><receiver address-match="r.#"/>'


def links_by_address(attaches: list[Frame]) -> dict[tuple[str, str], Frame]:
    """{(address, "sender" | "receiver"): attach}, role as seen from our broker."""
    out: dict[tuple[str, str], Frame] = {}
    for a in attaches:
        address = str(a["name"]).rsplit(":", 1)[0]
        out[(address, "receiver" if a["role"] else "sender")] = a
    return out


def terminus_caps(attach: Frame, which: str) -> list[symbol]:
    terminus = attach.terminus(which)
    assert terminus is not None, f"attach without a {which}"
    return symbols_of(terminus["capabilities"])


def assert_link_shape(attach: Frame, address: str) -> None:
    assert re.fullmatch(re.escape(address) + ":" + UUID, str(attach["name"])), attach["name"]
    source, target = attach.terminus("source"), attach.terminus("target")
    assert source is not None and target is not None
    assert source["address"] == address and target["address"] == address, "the queue's address"
    assert type(attach["snd_settle_mode"]) is ubyte and int(attach["snd_settle_mode"]) == 0  # unsettled
    assert type(attach["rcv_settle_mode"]) is ubyte and int(attach["rcv_settle_mode"]) == 0  # first
    assert attach["properties"] is None
    assert attach["desired_capabilities"] is None


@pytest.fixture(scope="module")
def linked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ScriptedServer, BrokerProcess]]:
    with ScriptedServer(LinkReply()) as peer:
        b = broker(
            tmp_path_factory.mktemp("links"), addresses=ADDRESSES, extra=connection_xml(peer.port, LINKS)
        )
        try:
            wait_for_log(b, "AMQ111003")
            yield peer, b
        finally:
            b.stop()


def test_matching_queues_get_links_with_exact_fields(linked: tuple[ScriptedServer, BrokerProcess]) -> None:
    peer, _ = linked
    links = links_by_address(peer.attaches[:4])
    assert set(links) == {("x.a", "sender"), ("x.a", "receiver"), ("s.a", "sender"), ("r.a", "receiver")}
    for (address, _), attach in links.items():
        assert_link_shape(attach, address)
    assert terminus_caps(links[("x.a", "sender")], "target") == [WAYPOINT]
    assert terminus_caps(links[("x.a", "sender")], "source") == []
    assert terminus_caps(links[("x.a", "receiver")], "source") == [WAYPOINT]
    assert terminus_caps(links[("x.a", "receiver")], "target") == []
    for plain in (links[("s.a", "sender")], links[("r.a", "receiver")]):
        assert terminus_caps(plain, "source") == [] and terminus_caps(plain, "target") == []
    assert all(type(c) is symbol for c in terminus_caps(links[("x.a", "sender")], "target"))
    assert len({a["name"] for a in peer.attaches}) == len(peer.attaches), "link names are unique"


def test_sender_link_forwards_and_acks_only_on_accepted(linked: tuple[ScriptedServer, BrokerProcess]) -> None:
    peer, b = linked
    start = len(peer.transfers)
    send(b.url, "s.a", ["out"])
    peer.records.wait(lambda: len(peer.transfers) > start, 10, "the forwarded message")
    [t] = peer.transfers[start:]
    assert t.link.startswith("s.a:") and t.amqp_value == "out" and t.settled is False
    wait_until(lambda: depth(b, "s.a.q") == 0, 5, "the local ack after Accepted")


def test_receiver_link_routes_into_the_local_address(linked: tuple[ScriptedServer, BrokerProcess]) -> None:
    peer, b = linked
    name = str(links_by_address(peer.attaches[:4])[("r.a", "receiver")]["name"])
    # `to` names another address: a receiver link routes into its queue's address regardless.
    payload = durable_header() + section(PROPERTIES, [None, None, "elsewhere"]) + section(AMQP_VALUE, "in")
    delivery = peer.send(name, payload)
    peer.records.wait(
        lambda: any(int(d["first"]) == delivery for d in peer.records.dispositions), 10, "the disposition"
    )
    [d] = [d for d in peer.records.dispositions if int(d["first"]) == delivery]
    assert d.state == "accepted" and d["settled"] is True
    assert [m.body for m in receive(b.url, "r.a", 1)] == ["in"]
    assert depth(b, "elsewhere") == -1, "nothing went to the `to` address"


def test_a_matching_queue_created_later_gets_its_links(linked: tuple[ScriptedServer, BrokerProcess]) -> None:
    peer, b = linked
    before = len(peer.attaches)
    send_to_queue(b.url, "other.late", ["not matched"])
    send_to_queue(b.url, "x.late", ["late"])
    peer.records.wait(lambda: len(peer.attaches) >= before + 2, 10, "the links of x.late")
    links = links_by_address(peer.attaches[before:])
    assert set(links) == {("x.late", "sender"), ("x.late", "receiver")}, "only x.late matches x.#"
    assert_link_shape(links[("x.late", "sender")], "x.late")
    assert terminus_caps(links[("x.late", "sender")], "target") == [WAYPOINT]
    assert terminus_caps(links[("x.late", "receiver")], "source") == [WAYPOINT]
    peer.records.wait(lambda: any(t.amqp_value == "late" for t in peer.transfers), 10, "the late message")
    receive(b.url, "other.late", 1, timeout=1)


def test_refused_links_fail_the_attempt_and_reconnect(tmp_path: Path) -> None:
    """Receiver refused (null source) -> AMQ119029; sender refused (null target) -> AMQ119023 (§6)."""

    def script(attach: Frame) -> LinkReply:
        attempt = len(peer.connections) - 1
        remote_is_receiver = bool(attach["role"])
        if (attempt == 0 and remote_is_receiver) or (attempt == 1 and not remote_is_receiver):
            return LinkReply(refuse=True, error_condition="amqp:not-found", error_description="no node")
        return LinkReply()

    peer = ScriptedServer(script)
    with peer:
        links = '<sender address-match="s.#"/><receiver address-match="r.#"/>'
        b = broker(tmp_path / "b", addresses=ADDRESSES, extra=connection_xml(peer.port, links))
        try:
            wait_for_log(b, "AMQ111003")
            log = b.log()
            receiver_refused, sender_refused = log.find("AMQ119029"), log.find("AMQ119023")
            assert 0 <= receiver_refused < sender_refused, log
            assert "r.a" in log[receiver_refused:].splitlines()[0]
            assert "s.a" in log[sender_refused:].splitlines()[0]
            assert log.count("AMQ111002") >= 2, "each refusal is retried"
            assert len(peer.connections) >= 3
            peer.records.wait(lambda: all(c.closed for c in peer.connections[:2]), 5, "refused ones closed")
            assert not peer.connections[-1].closed
        finally:
            b.stop()


def test_peer_messages_carry_the_original_bytes(linked: tuple[ScriptedServer, BrokerProcess]) -> None:
    """A sender link forwards the stored message unchanged (no mirror annotations on plain links)."""
    peer, b = linked
    start = len(peer.transfers)
    message = Message(body="exact", durable=True, properties={"k": "v"}, subject="s")
    encoded = bytes(message.encode())
    conn = BlockingConnection(b.url, allowed_mechs="ANONYMOUS", timeout=10)
    try:
        conn.create_sender("x.a").send(message)
    finally:
        conn.close()
    peer.records.wait(lambda: len(peer.transfers) > start, 10, "the forwarded message")
    [t] = peer.transfers[start:]
    assert t.link.startswith("x.a:")
    assert t.payload == encoded
    assert t.delivery_annotations is None
