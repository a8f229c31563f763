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


def test_failback_the_restarted_primary_resynchronizes_then_takes_over(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "r2")
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    with FailoverConnection(f"failover:({primary.url},{backup.url})?{FAST}") as conn:
        conn.sender("orders").send(Message(body="before", durable=True))
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    with FailoverConnection(f"failover:({backup.url})?{FAST}") as conn:
        conn.sender("orders").send(Message(body="on-backup", durable=True))
    primary.ready_text = "AMQ221033"  # it finds its backup active and replicates from it
    primary.start()
    wait_until(lambda: "AMQ221007" in primary.log(), 60, "the primary to take over again")
    assert "AMQ221002" in backup.log()  # the backup stepped down for it
    assert status(primary)["activationSequence"] == 3  # 1: primary, 2: backup, 3: primary again
    assert [m.body for m in receive(primary.url, "orders", 10)] == ["before", "on-backup"]
    primary.stop()


def test_losing_the_zookeeper_majority_stops_the_active_server_and_nobody_else_activates(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "r3")
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    majority = zookeeper.nodes[:2]
    for node in majority:
        node.stop()
    try:
        assert primary.proc is not None and primary.proc.wait(timeout=20) == 1  # it halts on its own
        assert "AMQ222325" in primary.log()
        assert "AMQ221010" not in backup.log()  # no majority, no lock: the backup stays passive
    finally:
        for node in majority:
            node.start()
        zookeeper.wait_serving()
    wait_until(lambda: "AMQ221010" in backup.log(), 60, "the backup to take over once ZooKeeper is back")
    backup.stop()


def test_a_clean_stop_keeps_the_backup_passive_and_force_failover_hands_over(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    primary, backup = replicated_pair(tmp_path / "paused", zookeeper.connect_string, "r4")
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    assert primary.stop() == 0
    wait_until(lambda: "AMQ221028" in backup.log(), 10, "the backup to hear the primary stopping")
    assert "AMQ221010" not in backup.log()
    backup.stop()

    primary, backup = replicated_pair(tmp_path / "failing-over", zookeeper.connect_string, "r5")
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    with Management(primary.url) as management:
        assert management.call("forceFailover", []) is True  # stop, and let the backup take over
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    assert primary.proc is not None and primary.proc.wait(timeout=10) == 0
    backup.stop()
