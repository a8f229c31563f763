"""Brokers of both kinds from one broker.xml, and the queries a test asks either of them.

``config()`` writes the broker.xml both brokers run: apart from the acceptor's port, the peer's port in a
broker connection and the directories (relative, so each broker's own), the text is the same for our
broker and for Artemis. Everything a test reads back goes through Artemis's management over AMQP
(``messageCount``, ``getQueueNames``, ``getAddressNames``), which both brokers answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from proton import Message

from connections.cli import Management
from tests.peers.artemis import ArtemisProcess
from tests.support.broker import BrokerProcess, broker_xml
from tests.support.client import Capabilities, connect

ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'

# Auto-created queues stay until a test deletes them (Artemis's default deletes an empty queue when its
# last consumer leaves, which would put deleteQueue events at moments no test chose); a quick expiry
# reaper; a rejected message goes to the DLA at once.
SETTINGS = """
      <address-setting match="#">
        <dead-letter-address>DLA</dead-letter-address>
        <expiry-address>ExpiryQueue</expiry-address>
        <max-delivery-attempts>100</max-delivery-attempts>
        <auto-create-queues>true</auto-create-queues>
        <auto-create-addresses>true</auto-create-addresses>
        <auto-delete-queues>false</auto-delete-queues>
        <auto-delete-addresses>false</auto-delete-addresses>
      </address-setting>"""


def mirror_connection(name: str, peer_port: int, attrs: str = "", children: str = "") -> str:
    return (
        f'<amqp-connection uri="tcp://127.0.0.1:{peer_port}" name="{name}" retry-interval="200">'
        f"<mirror {attrs}>{children}</mirror></amqp-connection>"
    )


def config(
    port: int, *connections: str, addresses: str = ORDERS, acceptor_params: str = "", extra: str = ""
) -> str:
    """One broker.xml for either broker: the same text for both, but for the ports in it."""
    links = f"<broker-connections>{''.join(connections)}</broker-connections>" if connections else ""
    return broker_xml(
        "node",
        port,
        addresses=addresses,
        address_settings=SETTINGS,
        acceptor_params=acceptor_params,
        extra="<message-expiry-scan-period>200</message-expiry-scan-period>" + extra + links,
    )


def ours(home: Path, port: int, text: str) -> BrokerProcess:
    return BrokerProcess(home, name=home.name, port=port, config=text)


def artemis(home: Path, port: int, text: str) -> ArtemisProcess:
    return ArtemisProcess(home, text, port=port)


Broker = BrokerProcess | ArtemisProcess


def depth(broker: Broker, queue: str) -> int:
    """Messages in ``queue`` (its ``messageCount``), -1 while it does not exist."""
    try:
        with Management(broker.url) as m:
            return int(m.get("messageCount", resource=f"queue.{queue}"))
    except RuntimeError:
        return -1


def queue_names(broker: Broker) -> set[str]:
    with Management(broker.url) as m:
        return set(_listed(m.call("getQueueNames", [])))


def address_names(broker: Broker) -> set[str]:
    with Management(broker.url) as m:
        return set(_listed(m.call("getAddressNames", [])))


def _listed(result: Any) -> list[str]:
    # Artemis answers a String[] as a JSON array; ours as a list: either way, names
    return [str(x) for x in result]


def call(broker: Broker, operation: str, *params: Any, resource: str = "broker") -> Any:
    with Management(broker.url) as m:
        return m.call(operation, list(params), resource=resource)


def send_to_queue(
    broker: Broker, address: str, bodies: Iterable[Any], *, durable: bool = True, ttl: float | None = None
) -> int:
    """Send each body to ``address`` as an anycast queue (created on first use, as both brokers do for
    the ``queue`` capability); returns how many were accepted."""
    n = 0
    with connect(broker.url) as conn:
        sender = conn.create_sender(address, options=Capabilities("queue"))
        for body in bodies:
            msg = Message(body=body, durable=durable)
            if ttl is not None:
                msg.ttl = ttl
            sender.send(msg)
            n += 1
    return n


def bodies(broker: Broker, queue: str, timeout: float = 1.0) -> list[Any]:
    """What ``queue`` holds, sorted, without consuming it: browsed (distribution mode copy)."""
    from proton import Timeout
    from proton.reactor import Copy

    out = []
    with connect(broker.url) as conn:
        receiver = conn.create_receiver(queue, credit=500, options=Copy())
        while True:
            try:
                out.append(receiver.receive(timeout=timeout).body)
            except Timeout:
                break
            receiver.accept()
    return sorted(out)


def reaches(
    source: ArtemisProcess, target: BrokerProcess, queue: str, count: int, what: str, mirror: str = "ours"
) -> None:
    """Wait for our ``queue`` to hold ``count`` messages mirrored from Artemis: generous on a loaded
    machine (a stall of Artemis's mirror of about 30 s was seen once under CI), and on a timeout what
    was where on both sides: Artemis's backlog for mirror ``mirror``, and our target's counters."""
    from tests.peers.ports import WaitTimeout, wait_until

    try:
        wait_until(lambda: depth(target, queue) == count, 90, what)
    except WaitTimeout as exc:
        backlog = depth(source, f"$ACTIVEMQ_ARTEMIS_MIRROR_{mirror}")
        applied = call(target, "getMirrorStatus")["target"]
        raise AssertionError(f"{exc}: {depth(target, queue)} here, {depth(source, queue)} on Artemis, "
                             f"its mirror backlog {backlog}, our target {applied}\n{source.log()[-3000:]}\n"
                             f"{target.log()[-3000:]}") from exc  # fmt: skip


def mirror_complaints(broker: ArtemisProcess) -> list[str]:
    """Artemis's WARN and ERROR lines about mirroring. An Artemis target reads an event by casting its
    fields without checks: a wrong type is logged at WARN and the event is Accepted and lost, so a clean
    log is what proves our events are read as we mean them."""
    return [
        line
        for line in broker.all_logs().splitlines()
        if (" WARN " in line or " ERROR " in line) and "mirror" in line.lower()
    ]
