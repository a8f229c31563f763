"""The scripted AMQP peer works: client role against our broker, server role against proton and itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Array, Data, Message, symbol
from proton.utils import BlockingConnection

from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.peer import LinkReply, PeerClosed, ScriptedClient, ScriptedServer

ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "b", xml_kwargs={"addresses": ORDERS}).start()
    yield b
    b.stop()


def test_client_sends_raw_bytes_through_our_broker(broker: BrokerProcess) -> None:
    with ScriptedClient(broker.port) as client:
        assert {"ANONYMOUS", "PLAIN"} <= set(client.offered_mechanisms)
        remote_open = client.open(properties={"product": "scripted"})
        assert isinstance(remote_open["container_id"], str) and remote_open["container_id"]
        answer = client.attach_sender("s1", "orders")
        assert answer.attach is not None and answer.detach is None
        assert answer.attach["role"] is True and answer.attach.terminus("target")["address"] == "orders"
        # a client link gets the acceptor's amqpCredits, Artemis's default 1000 here
        assert answer.flow is not None and int(answer.flow["link_credit"]) == 1000
        disposition = client.send(bytes(Message(body="hello", durable=True).encode()))
        assert disposition is not None and disposition.state == "accepted" and disposition["settled"] is True
        client.close()
    [got] = receive(broker.url, "orders", 1, timeout=5)
    assert got.body == "hello"


def test_server_serves_a_proton_client_and_records_the_delivery() -> None:
    with ScriptedServer(container_id="peer-x") as peer:
        conn = BlockingConnection(peer.url, timeout=10, allowed_mechs="ANONYMOUS")
        try:
            sender = conn.create_sender("inbox")
            sender.send(Message(body="over the wire", durable=True))  # returns once Accepted
        finally:
            conn.close()
        attach = peer.wait_for_attach(timeout=5)
        assert attach["role"] is False and attach.terminus("target")["address"] == "inbox"
        [transfer] = peer.wait_for_transfers(1, timeout=5)
        assert transfer.link == attach["name"] and transfer.amqp_value == "over the wire"
        assert transfer.sections[0].code == 0x70
        assert peer.records.sasl[0]["mechanism"] == "ANONYMOUS"


def test_mirror_target_reply_exact_types_and_plain_user() -> None:
    reply = LinkReply.mirror_target("node-x")
    with ScriptedServer(reply) as peer, ScriptedClient(peer.port, user="mirror", password="pw") as client:
        client.open(properties={"broker-connection-info": {"connectionName": "c", "nodeId": "n"}})
        answer = client.attach_sender(
            "$ACTIVEMQ_ARTEMIS_MIRROR_c:u",
            "$ACTIVEMQ_ARTEMIS_MIRROR_c",
            source="$ACTIVEMQ_ARTEMIS_MIRROR_c",
            desired_capabilities=["amq.mirror"],
            properties={"x-opt-amq-bkr-id": "node-a"},
        )
        assert answer.attach is not None
        offered = answer.attach["offered_capabilities"]
        assert isinstance(offered, Array) and offered.type == Data.SYMBOL
        assert list(offered.elements) == [symbol("amq.mirror")]
        [(key, value)] = answer.attach["properties"].items()
        assert type(key) is symbol and type(value) is str and (key, value) == ("x-opt-amq-bkr-id", "node-x")
        seen = peer.wait_for_attach()
        desired = seen["desired_capabilities"]
        assert isinstance(desired, Array) and list(desired.elements) == ["amq.mirror"]
        assert type(next(iter(seen["properties"]))) is symbol
        info = peer.records.frames[0]["properties"][symbol("broker-connection-info")]
        assert info == {"connectionName": "c", "nodeId": "n"} and all(type(k) is str for k in info)
        assert peer.records.sasl == [{"mechanism": "PLAIN", "user": "mirror", "password": "pw"}]


def test_refusal_is_null_target_then_detach_with_error() -> None:
    reply = LinkReply(refuse=True, error_condition="amqp:illegal-state", error_description="AMQ119024: no")
    with ScriptedServer(reply) as peer, ScriptedClient(peer.port) as client:
        answer = client.attach_sender("m", "$ACTIVEMQ_ARTEMIS_MIRROR_x")
        assert answer.attach is not None and answer.attach["target"] is None and answer.flow is None
        assert answer.detach is not None and answer.detach["closed"] is True
        error = answer.detach["error"]
        assert error.value[0] == symbol("amqp:illegal-state") and error.value[1] == "AMQ119024: no"


def test_multi_frame_delivery_is_assembled_and_outcomes_are_scripted() -> None:
    big = bytes(Message(body=b"x" * 5000, durable=True).encode())
    peer = ScriptedServer(LinkReply(outcome="released"), max_frame_size=512)
    with peer, ScriptedClient(peer.port) as client:
        client.attach_sender("s", "q")
        disposition = client.send(big)
        assert disposition is not None and disposition.state == "released"
        [transfer] = peer.wait_for_transfers(1)
        assert transfer.frames > 10 and transfer.payload == big
        assert transfer.amqp_value == b"x" * 5000


def test_held_deliveries_are_settled_on_command() -> None:
    with ScriptedServer(LinkReply(outcome="hold")) as peer, ScriptedClient(peer.port, timeout=5) as client:
        client.attach_sender("s", "q")
        delivery = client.send_nowait(b"\x00\x53\x77\x40")
        [transfer] = peer.wait_for_transfers(1)
        assert not any(f.name == "disposition" for f in client.frames)
        peer.settle(transfer, "accepted")
        disposition = client.disposition_of(delivery)
        assert int(disposition["first"]) == delivery and disposition.state == "accepted"


def test_drop_cuts_the_connection_and_the_server_takes_a_new_one() -> None:
    with ScriptedServer() as peer:
        with ScriptedClient(peer.port, timeout=5) as first:
            first.attach_sender("s", "q")
            peer.drop()
            with pytest.raises(PeerClosed):
                first.send(b"\x00\x53\x77\x40")
        with ScriptedClient(peer.port, timeout=5) as second:
            answer = second.attach_sender("s", "q")
            assert answer.flow is not None
        assert len(peer.connections) == 2 and peer.connections[0].closed


def test_close_connections_sends_close_with_error() -> None:
    with ScriptedServer() as peer, ScriptedClient(peer.port, timeout=5) as client:
        client.begin()
        peer.wait_for_connection()
        peer.close_connections("amqp:connection:forced", "go away")
        close = client.wait_frame(lambda f: f.name == "close", "the peer's Close")
        assert close["error"].value[:2] == [symbol("amqp:connection:forced"), "go away"]


def test_server_sends_to_a_remote_receiver() -> None:
    with ScriptedServer() as peer:
        conn = BlockingConnection(peer.url, timeout=10, allowed_mechs="ANONYMOUS")
        try:
            receiver = conn.create_receiver("outbox", credit=5)
            attach = peer.wait_for_attach(timeout=5)
            assert attach["role"] is True and attach.terminus("source")["address"] == "outbox"
            delivery = peer.send(attach["name"], bytes(Message(body="from the peer").encode()))
            assert receiver.receive(timeout=5).body == "from the peer"
            receiver.accept()
        finally:
            conn.close()  # also flushes the disposition
        peer.records.wait(lambda: peer.records.dispositions, 5, "the receiver's disposition")
        [disposition] = peer.records.dispositions
        assert int(disposition["first"]) == delivery and disposition.state == "accepted"


def test_expected_attaches_are_answered_in_order_then_the_default_reply() -> None:
    with ScriptedServer() as peer, ScriptedClient(peer.port, timeout=5) as client:
        peer.expect_attach(name="a", target="q1", desired_capabilities=["amq.mirror"]).respond(
            offered_capabilities=["amq.mirror"]
        )
        peer.expect_attach(name="b", role=False).respond(refuse=True)
        first = client.attach_sender("a", "q1", desired_capabilities=["amq.mirror"])
        second = client.attach_sender("b", "q2")
        peer.wait_for_script_to_complete(timeout=5)
        assert first.attach is not None and first.flow is not None
        assert list(first.attach["offered_capabilities"].elements) == ["amq.mirror"]
        assert second.attach is not None and second.attach["target"] is None and second.detach is not None
        third = client.attach_sender("c", "q3")  # the script is used up: the server's own reply
        assert third.flow is not None and third.attach is not None
        assert third.attach["offered_capabilities"] is None


def test_a_mismatched_or_missing_attach_fails_the_script() -> None:
    with ScriptedServer() as peer, ScriptedClient(peer.port, timeout=5) as client:
        peer.expect_attach(target="expected")
        client.attach_sender("s", "other")
        with pytest.raises(AssertionError, match="target: expected 'expected', got 'other'"):
            peer.wait_for_script_to_complete(timeout=5)
    with ScriptedServer() as peer, ScriptedClient(peer.port, timeout=5) as client:
        peer.expect_attach(name="s")
        peer.expect_attach(name="never attached")
        client.attach_sender("s", "q")
        with pytest.raises(TimeoutError, match="1 of 2 expected attaches not answered"):
            peer.wait_for_script_to_complete(timeout=0.5)
    with ScriptedServer() as peer, pytest.raises(TypeError, match="not attach fields"):
        peer.expect_attach(adress="typo")
