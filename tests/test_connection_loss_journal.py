"""A journal that fails while connections are lost is handled as everywhere else: the loop turn's error
path (one critical line, the broker told to stop once), no exception into the socket layer, and every
lost connection cleaned up. Whole brokers joined in memory (tests/support/pair.py), their sockets' own
`connection_lost` called as the event loop calls it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker_core.amqp.performatives import Attach, Source, Target
from tests.support.pair import MemoryClient, Network

# One delivery attempt: a message a lost consumer held is dead-lettered, which the journal must record.
SETTINGS = (
    '<address-setting match="#"><dead-letter-address>DLA</dead-letter-address>'
    "<max-delivery-attempts>1</max-delivery-attempts></address-setting>"
)
ADDRESSES = (
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="DLA"><anycast><queue name="DLA"/></anycast></address>'
)


def hold_one(net: Network, client: MemoryClient) -> None:
    """`client` takes one message from `orders` and keeps it unsettled."""
    assert client.session is not None
    attach = Attach(name=f"hold-{id(client)}", role=True, source=Source(address="orders"), target=Target())
    link = client.conn.attach(client.session, attach)
    client.conn.flow(link, credit=1)
    client._write()
    net.pump()
    assert len(client.received.pop(link.name)) == 1


def test_a_failing_journal_at_connection_loss_is_logged_once_and_every_connection_is_cleaned_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    net = Network(tmp_path)
    broker = net.broker("dc1", persistence=True, settings=SETTINGS, addresses=ADDRESSES)
    net.start_all()
    producer = net.client("dc1")
    producer.send("orders", "a")
    producer.send("orders", "b")
    net.pump()
    consumers = [net.client("dc1"), net.client("dc1")]
    for consumer in consumers:
        hold_one(net, consumer)
    queue = broker.server.queues["orders"]
    assert len(queue.consumers) == 2 and queue.in_flight == 2
    fatal: list[BaseException] = []
    broker.turn.on_fatal = fatal.append
    journal = broker.server.journal
    assert journal is not None
    journal.close()  # what a failed write leaves behind: a journal that takes nothing more
    sockets = [s for s in net.sockets["dc1"] if s.endpoint is not None and s.endpoint.consumers]
    assert len(sockets) == 2
    with caplog.at_level(logging.DEBUG):
        for sock in sockets:
            sock.connection_lost(ConnectionResetError("peer gone"))  # must not raise
    critical = [r for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert [r.getMessage().split(":")[0] for r in critical] == [
        "journal failed, the broker cannot persist and shuts down"
    ]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert len(fatal) == 1, "the broker was told to stop more than once"
    assert all(s not in net.sockets["dc1"] and s.endpoint is not None and s.endpoint.closed for s in sockets)
    assert queue.consumers == [] and queue.in_flight == 0
