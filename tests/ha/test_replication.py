"""A replicated primary/backup pair with a ZooKeeper lock manager (a real three-node ensemble on
loopback), one broker process each with its own data directories (spec A1's R and LM scenarios)."""

from __future__ import annotations

from pathlib import Path

from proton import Message

from connections.cli import Management
from connections.failover import FailoverConnection
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.ha import replicated_pair

FAST = "initialReconnectDelay=10&maxReconnectDelay=200&randomize=false"


def status(broker: BrokerProcess) -> dict:  # type: ignore[type-arg]
    with Management(broker.url) as management:
        return dict(management.call("getHAStatus", []))


def test_the_backup_synchronizes_and_takes_over_with_everything_confirmed(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "r1")
    primary.start()
    assert status(primary)["activationSequence"] == 1
    backup.start()
    wait_until(lambda: "AMQ221024" in backup.log(), 30, "the backup to synchronize")
    wait_until(lambda: status(primary)["synchronized"] is True, 10, "the primary to see its backup in sync")
    with FailoverConnection(f"failover:({primary.url},{backup.url})?{FAST}") as conn:
        sender = conn.sender("orders")
        for i in range(100):
            sender.send(Message(body=i, durable=True))  # Accepted: on the primary's disk and on the backup
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    assert status(backup)["activationSequence"] == 2
    got = [m.body for m in receive(backup.url, "orders", 200, timeout=2)]
    assert got == list(range(100))
    backup.stop()
