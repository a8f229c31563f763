"""Where a management reply may go, against our broker as a process with real proton clients.

A reply goes only where its requester could send, and never into the broker's own addresses: not into
the store-and-forward queue of a mirror (even for an admin who may send everywhere), and into a temporary
queue only if it is the requester's own. The broker mirrors to a broker that is down, so its
store-and-forward queue exists and holds events.

Users: admin (every permission), bob (consumers: consume, temporary queues), carol (managers: manage and
temporary queues, no send anywhere).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message, Timeout

from connections.cli import request
from tests.peers.ports import free_port
from tests.support.broker import BrokerProcess
from tests.support.client import connect, send
from tests.support.ha import stays

SNF = "$ACTIVEMQ_ARTEMIS_MIRROR_dc2"
NOT_ALLOWED = "amqp:not-allowed"
USERS = "admin = secret\nbob = builder\ncarol = caroline\n"
ROLES = "amq = admin\nconsumers = bob\nmanagers = carol\n"
SECURITY = """
      <security-setting match="#">
        <permission type="createAddress" roles="amq"/>
        <permission type="createDurableQueue" roles="amq"/>
        <permission type="createNonDurableQueue" roles="amq,consumers,managers"/>
        <permission type="deleteNonDurableQueue" roles="amq,consumers,managers"/>
        <permission type="send" roles="amq"/>
        <permission type="consume" roles="amq,consumers,managers"/>
        <permission type="manage" roles="amq"/>
      </security-setting>
      <security-setting match="activemq.management">
        <permission type="send" roles="amq,managers"/>
        <permission type="manage" roles="amq,managers"/>
      </security-setting>"""
ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    down = free_port()  # nothing listens there: the mirror's events wait in its store-and-forward queue
    mirror = (
        f'<broker-connections><amqp-connection uri="tcp://127.0.0.1:{down}" name="dc2" retry-interval="500">'
        "<mirror/></amqp-connection></broker-connections>"
    )
    b = BrokerProcess(
        tmp_path_factory.mktemp("replies"),
        xml_kwargs={"security": True, "security_settings": SECURITY, "addresses": ORDERS, "extra": mirror},
    )
    b.write_config()
    (b.home / "etc" / "artemis-users.properties").write_text(USERS)
    (b.home / "etc" / "artemis-roles.properties").write_text(ROLES)
    b.start()
    send(b.url, "orders", ["one", "two"], user="admin", password="secret")
    yield b
    assert b.stop() == 0


def depth(b: BrokerProcess, queue: str) -> int:
    stats = request(b.url, "getStatistics", [], resource=f"queue.{queue}", user="admin", password="secret")
    return int(stats["message-count"])


def ask(sender: Any, reply_to: str) -> Any:
    """One management request (the broker's queue names) whose reply goes to `reply_to`."""
    return sender.send(
        Message(
            id="q-1",
            body="[]",
            reply_to=reply_to,
            properties={"_AMQ_ResourceName": "broker", "_AMQ_OperationName": "getQueueNames"},
        )
    )


def outcome(b: BrokerProcess, user: str, password: str, reply_to: str, timeout: float = 10) -> str:
    """How the broker settles one request of `user` whose reply goes to `reply_to`: "accepted", or
    "rejected" with the condition and description the rejection carries."""
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Request(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(auto_settle=True)
            self.result = "no outcome"
            self.conn: Any = None

        def on_start(self, event: Any) -> None:
            self.conn = event.container.connect(b.url, user=user, password=password, allowed_mechs="PLAIN")
            event.container.create_sender(self.conn, "activemq.management")
            event.container.schedule(timeout, self)

        def on_timer_task(self, event: Any) -> None:
            self.conn.close()

        def on_sendable(self, event: Any) -> None:
            if self.result == "no outcome" and event.sender.credit:
                ask(event.sender, reply_to)
                self.result = "sent"

        def on_accepted(self, event: Any) -> None:
            self.result = "accepted"
            self.conn.close()

        def on_rejected(self, event: Any) -> None:
            condition = event.delivery.remote.condition
            self.result = f"rejected {condition.name}: {condition.description}" if condition else "rejected"
            self.conn.close()

        def on_connection_closed(self, event: Any) -> None:
            event.container.stop()

        def on_transport_error(self, event: Any) -> None:
            event.container.stop()

    request_ = Request()
    Container(request_).run()
    return request_.result


def test_an_admin_reply_never_enters_the_store_and_forward_queue(broker: BrokerProcess) -> None:
    before = depth(broker, SNF)
    assert before >= 2  # the two sends, waiting for dc2
    assert outcome(broker, "admin", "secret", SNF) == (
        f"rejected {NOT_ALLOWED}: address {SNF} is internal to the broker; clients cannot use it"
    )
    stays(lambda: depth(broker, SNF) != before, 1.0, "a management reply reaching the SNF queue")
    with connect(broker.url, "admin", "secret") as conn:  # the admin's own reply queue still works
        replies = conn.create_receiver(None, dynamic=True, credit=1)
        ask(conn.create_sender("activemq.management"), replies.link.remote_source.address)
        assert SNF in replies.receive(timeout=10).body


def test_a_reply_goes_into_the_requesters_own_temporary_queue_only(broker: BrokerProcess) -> None:
    with connect(broker.url, "bob", "builder") as bob:
        bobs = bob.create_receiver(None, dynamic=True, credit=5)  # bob's reply queue
        address = bobs.link.remote_source.address
        assert outcome(broker, "carol", "caroline", address) == (
            f"rejected {NOT_ALLOWED}: address {address} is a temporary queue of another connection"
        )
        with pytest.raises(Timeout):
            bobs.receive(timeout=1.5)  # nothing of carol's, over a window
    with connect(broker.url, "carol", "caroline") as carol:  # her own: no send permission needed
        own = carol.create_receiver(None, dynamic=True, credit=1)
        ask(carol.create_sender("activemq.management"), own.link.remote_source.address)
        answer = own.receive(timeout=10)
        assert answer.correlation_id == "q-1" and "orders" in answer.body
