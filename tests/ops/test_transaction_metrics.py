"""The local transactions' counters on the metrics endpoint: declared, committed, rolled back."""

from __future__ import annotations

from pathlib import Path

from proton import Message

from connections.failover import FailoverConnection, FailoverTransaction
from tests.peers.ports import free_port
from tests.support.broker import BrokerProcess
from tests.support.ops import ORDERS, Metered, metrics_xml


def test_transactions_are_counted(tmp_path: Path) -> None:
    port = free_port()
    metered = Metered(
        BrokerProcess(tmp_path, xml_kwargs={"addresses": ORDERS, "extra": metrics_xml(port)}), port
    )
    metered.broker.start()
    try:
        with FailoverConnection(metered.broker.url) as conn:
            tx, sender = FailoverTransaction(conn), conn.sender("orders")
            for _ in range(2):
                tx.send(sender, Message(body="kept"))
                tx.commit()
            tx.send(sender, Message(body="dropped"))
            tx.rollback()
        assert metered.value("amqp_mirror_transactions_declared_total") == 3
        assert metered.value("amqp_mirror_transactions_committed_total") == 2
        assert metered.value("amqp_mirror_transactions_rolled_back_total") == 1
    finally:
        metered.broker.stop()
