"""Authentication and authorization against our broker as a separate process, with security enabled.

Users (tests/support/broker.py): admin/secret (amq), alice/wonderland (producers), bob/builder
(consumers). `vault.#` is granted to amq only, so the most specific setting takes alice's send and
bob's consume away there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from proton import ConnectionException, Disposition, Message
from proton.utils import BlockingConnection, LinkDetached, SendException

from broker_core.amqp.framing import AMQP_HEADER
from broker_core.amqp.performatives import Attach, Detach, Open, SaslMechanisms, SaslOutcome, Source, Target
from tests.peers.ports import LOOPBACK
from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive, send
from tests.support.raw_amqp import RawPeer

UNAUTHORIZED = "amqp:unauthorized-access"
PASSWORDS = ("secret", "wonderland", "builder")
WRONG_PASSWORD = "not-the-password-42"

SECURITY_SETTINGS = """
      <security-setting match="#">
        <permission type="createAddress" roles="amq,producers,consumers"/>
        <permission type="createDurableQueue" roles="amq,producers,consumers"/>
        <permission type="createNonDurableQueue" roles="amq,consumers"/>
        <permission type="send" roles="amq,producers"/>
        <permission type="consume" roles="amq,consumers"/>
      </security-setting>
      <security-setting match="vault.#">
        <permission type="send" roles="amq"/>
        <permission type="consume" roles="amq"/>
      </security-setting>"""

ADDRESSES = """
      <address name="orders"><anycast><queue name="orders"/></anycast></address>
      <address name="vault.plans"><anycast><queue name="vault.plans"/></anycast></address>"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("secure"),
        xml_kwargs={"security": True, "security_settings": SECURITY_SETTINGS, "addresses": ADDRESSES},
    )
    b.start()
    yield b
    assert b.stop() == 0


def _condition(exc: LinkDetached) -> str | None:
    cond = exc.link.remote_condition
    return cond.name if cond is not None else None


def _assert_refused(action: Callable[[str], object], address: str) -> None:
    """Attaching (`action` is create_sender/create_receiver) is refused with unauthorized-access."""
    with pytest.raises(LinkDetached) as info:
        action(address)
    assert _condition(info.value) == UNAUTHORIZED


def _round_trip_on(conn: BlockingConnection, url: str, address: str, body: str) -> None:
    """The connection still sends (its user must be allowed to), and the message arrives."""
    conn.create_sender(address).send(Message(body=body, durable=True))
    [m] = receive(url, address, 1, user="admin", password="secret")
    assert m.body == body


# ---------------------------------------------------------------------------------- authentication


def test_admin_with_the_right_password_sends_and_receives(broker: BrokerProcess) -> None:
    assert send(broker.url, "orders", ["a", "b"], user="admin", password="secret") == 2
    got = receive(broker.url, "orders", 2, user="admin", password="secret")
    assert [m.body for m in got] == ["a", "b"]


def test_wrong_password_fails_sasl_and_the_log_names_the_user_only(broker: BrokerProcess) -> None:
    with pytest.raises(ConnectionException, match=UNAUTHORIZED), connect(broker.url, "alice", WRONG_PASSWORD):
        pass
    log = broker.log()
    assert "alice" in log
    for password in (WRONG_PASSWORD, *PASSWORDS):
        assert password not in log


def test_a_user_name_cannot_forge_a_log_line(broker: BrokerProcess) -> None:
    forged = "mallory\n2026-01-01 00:00:00,000 INFO    broker: user admin authenticated"
    with pytest.raises(ConnectionException, match=UNAUTHORIZED), connect(broker.url, forged, "x"):
        pass
    log = broker.log()
    assert "authentication failed for user mallory\\n2026-01-01" in log  # escaped, on its own line
    assert not any(line.startswith("2026-01-01 00:00:00,000") for line in log.splitlines())


def test_unknown_user_fails_like_a_wrong_password(broker: BrokerProcess) -> None:
    with pytest.raises(ConnectionException, match=UNAUTHORIZED), connect(broker.url, "mallory", "secret"):
        pass


def test_successful_logins_never_log_a_password(broker: BrokerProcess) -> None:
    for user, password in (("admin", "secret"), ("alice", "wonderland"), ("bob", "builder")):
        with connect(broker.url, user, password) as conn:
            if user == "bob":
                conn.create_receiver("orders")
            else:
                conn.create_sender("orders")
    log = broker.log()
    for password in PASSWORDS:
        assert password not in log


def test_anonymous_is_not_offered_and_is_refused_when_chosen(broker: BrokerProcess) -> None:
    with RawPeer(LOOPBACK, broker.port) as peer:
        peer.sasl_init("ANONYMOUS")
        mechanisms = peer.wait_for(SaslMechanisms)
        assert "ANONYMOUS" not in [str(m) for m in mechanisms.sasl_server_mechanisms]
        outcome = peer.wait_for(SaslOutcome)
        assert outcome.code != 0
        assert peer.wait_closed() is None


def test_proton_anonymous_client_cannot_connect(broker: BrokerProcess) -> None:
    with pytest.raises(ConnectionException, match=UNAUTHORIZED), connect(broker.url):
        pass


def test_skipping_sasl_is_refused(broker: BrokerProcess) -> None:
    with RawPeer(LOOPBACK, broker.port) as peer:
        peer.send(AMQP_HEADER)
        peer.wait_closed()
        # The broker names the protocol it insists on (AMQP 1.0 part 2.2): the SASL layer.
        assert peer.headers and peer.headers[0] != AMQP_HEADER


# ----------------------------------------------------------------------------------- authorization


def test_producer_may_send_but_not_consume_and_keeps_its_connection(broker: BrokerProcess) -> None:
    with connect(broker.url, "alice", "wonderland") as conn:
        _assert_refused(conn.create_receiver, "orders")
        _round_trip_on(conn, broker.url, "orders", "from alice after a refusal")


def test_consumer_may_consume_but_not_send_and_keeps_its_connection(broker: BrokerProcess) -> None:
    send(broker.url, "orders", ["for bob"], user="admin", password="secret")
    with connect(broker.url, "bob", "builder") as conn:
        _assert_refused(conn.create_sender, "orders")
        receiver = conn.create_receiver("orders", credit=1)
        assert receiver.receive(timeout=10).body == "for bob"
        receiver.accept()


def test_most_specific_security_setting_decides(broker: BrokerProcess) -> None:
    with connect(broker.url, "alice", "wonderland") as conn:
        _assert_refused(conn.create_sender, "vault.plans")
        _round_trip_on(conn, broker.url, "orders", "alice still sends to orders")
    with connect(broker.url, "bob", "builder") as conn:
        _assert_refused(conn.create_receiver, "vault.plans")
        conn.create_receiver("orders", credit=1)  # still permitted on this connection
    send(broker.url, "vault.plans", ["top secret"], user="admin", password="secret")
    [m] = receive(broker.url, "vault.plans", 1, user="admin", password="secret")
    assert m.body == "top secret"


def test_refused_send_does_not_deliver_anything(broker: BrokerProcess) -> None:
    with connect(broker.url, "alice", "wonderland") as conn:
        _assert_refused(conn.create_sender, "vault.plans")
    assert receive(broker.url, "vault.plans", 1, timeout=0.5, user="admin", password="secret") == []


def test_anonymous_relay_checks_send_permission_per_message(broker: BrokerProcess) -> None:
    with connect(broker.url, "alice", "wonderland") as conn:
        relay = conn.create_sender(None)
        relay.send(Message(address="orders", body="relayed"))
        with pytest.raises(SendException) as info:
            relay.send(Message(address="vault.plans", body="smuggled"))
        assert info.value.state == Disposition.REJECTED
        relay.send(Message(address="orders", body="relayed again"))
    got = receive(broker.url, "orders", 2, user="admin", password="secret")
    assert [m.body for m in got] == ["relayed", "relayed again"]
    assert receive(broker.url, "vault.plans", 1, timeout=0.5, user="admin", password="secret") == []


def test_fully_qualified_queue_names_do_not_bypass_permissions(broker: BrokerProcess) -> None:
    with connect(broker.url, "alice", "wonderland") as conn:
        _assert_refused(conn.create_receiver, "orders::orders")
    with connect(broker.url, "bob", "builder") as conn:
        _assert_refused(conn.create_receiver, "vault.plans::vault.plans")
        _assert_refused(conn.create_sender, "vault.plans::vault.plans")
    send(broker.url, "orders", ["by fqqn"], user="admin", password="secret")
    with connect(broker.url, "bob", "builder") as conn:
        receiver = conn.create_receiver("orders::orders", credit=1)
        assert receiver.receive(timeout=10).body == "by fqqn"
        receiver.accept()


def test_plain_authzid_cannot_borrow_another_users_rights(broker: BrokerProcess) -> None:
    """alice's password with authzid=admin either fails or leaves her alice: never admin."""
    with RawPeer(LOOPBACK, broker.port) as peer:
        peer.sasl_init("PLAIN", b"admin\0alice\0wonderland")
        if peer.wait_for(SaslOutcome).code != 0:
            return
        peer.send(AMQP_HEADER)
        peer.send_frame(0, Open(container_id="authzid").encode_amqp())
        peer.wait_for(Open)
        peer.begin()
        source = Source(address="vault.plans")
        peer.send_frame(
            0, Attach(name="peek", handle=0, role=True, source=source, target=Target()).encode_amqp()
        )
        detach = peer.wait_for(Detach)
        assert detach.error is not None and str(detach.error.condition) == UNAUTHORIZED


def test_refusal_description_does_not_repeat_the_condition(broker: BrokerProcess) -> None:
    with connect(broker.url, "alice", "wonderland") as conn, pytest.raises(LinkDetached) as info:
        conn.create_receiver("orders")
    text = str(info.value)
    assert "consume" in text and "alice" in text
    assert text.count(UNAUTHORIZED) == 1, text


# --------------------------------------------------------------------------------- security disabled


def test_anonymous_works_when_security_is_disabled(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "open", xml_kwargs={"security": False, "addresses": ADDRESSES})
    b.start()
    try:
        assert send(b.url, "vault.plans", ["open to all"]) == 1
        assert [m.body for m in receive(b.url, "vault.plans", 1)] == ["open to all"]
    finally:
        assert b.stop() == 0


def test_a_management_reply_goes_only_where_the_requester_may_send(tmp_path: Path) -> None:
    """bob may manage and consume, not send: management must not put its replies where he may not."""
    consume = '<permission type="consume" roles="amq,consumers"/>'
    manage = '<permission type="manage" roles="consumers"/>'
    settings = SECURITY_SETTINGS.replace(consume, consume + manage, 1)
    b = BrokerProcess(
        tmp_path, xml_kwargs={"security": True, "security_settings": settings, "addresses": ADDRESSES}
    )
    b.start()
    try:
        with connect(b.url, "bob", "builder") as conn:
            sender = conn.create_sender("activemq.management")
            request = Message(
                body="[]",
                reply_to="orders",
                properties={"_AMQ_ResourceName": "broker", "_AMQ_OperationName": "getQueueNames"},
            )
            with pytest.raises(SendException) as refused:
                sender.send(request)
            assert refused.value.state == Disposition.REJECTED
            replies = conn.create_receiver(None, dynamic=True, credit=1)  # his own temporary queue
            request.reply_to = replies.link.remote_source.address
            sender.send(request)
            answer = replies.receive(timeout=10)
            assert "orders" in answer.body
        assert receive(b.url, "orders", 1, user="admin", password="secret", timeout=1) == []
    finally:
        assert b.stop() == 0
