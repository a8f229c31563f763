"""A replicated primary/backup pair with a ZooKeeper lock manager (a real three-node ensemble on
loopback), one broker process each with its own data directories (spec A1's R and LM scenarios)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
from proton import Message, ProtonException
from proton.utils import BlockingConnection

from broker_core.ha.replication_wire import REPLICATION_ADDRESS
from broker_core.journal.node_id import coordinated_node_id
from connections.cli import Management
from connections.failover import FailoverConnection
from tests.conftest import require
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.broker import BrokerProcess
from tests.support.certs import make_certs
from tests.support.client import connect, receive, send
from tests.support.ha import (
    FAST,
    InDoubtSend,
    Producer,
    failover_uri,
    journal_of,
    replicated_pair,
    stays,
    traffic_through,
)

NESTED = "amqp.idleTimeout=1000&transport.connectTimeout=1000"  # a silent (paused) server noticed in 1 s


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
    with Management(primary.url) as management:
        assert management.call("isReplicaSync", []) is True
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


def test_kill_9_under_traffic_every_confirmed_send_is_received_once(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """A producer and a consumer on the failover client while the synchronized primary is killed: every
    send is confirmed in the end (retried while in doubt, stored once by duplicate detection: one send is
    on both servers' disks when its outcome is cut off), every one is received, nothing else is, and a
    message comes twice only after an accept left in doubt."""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "r10")
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    journals = [journal_of(primary), journal_of(backup)]
    what = "kill -9 of a replicated primary under traffic"
    traffic_through((primary, backup), primary.kill, what, journals, count=1000, nested=NESTED)
    assert receive(backup.url, "orders", 10, timeout=1) == []  # each stored once: none left over
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


def test_failover_and_failback_under_traffic(tmp_path: Path, zookeeper: Ensemble) -> None:
    """kill -9 of the synchronized primary, then its restart and failback, with a producer (duplicate
    detection) and a consumer on the failover client throughout; the restarted backup synchronizes
    again (restart-backup)."""
    primary, backup = replicated_pair(
        tmp_path, zookeeper.connect_string, "r12", backup_options="<restart-backup>true</restart-backup>"
    )
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    pair = (primary, backup)
    both = [journal_of(primary), journal_of(backup)]
    traffic_through(pair, primary.kill, "replication, kill -9 of the primary", both, count=400, nested=NESTED)
    primary.ready_text = "AMQ221033"
    what = "replication, failback to the restarted primary"  # the backup alone has the send cut off
    traffic_through(pair, primary.start, what, [journal_of(backup)], count=400, nested=NESTED)
    wait_until(lambda: "AMQ221007" in primary.log(), 60, "the primary to be active again")
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the restarted backup to synchronize")
    assert status(primary)["activationSequence"] == 3
    assert receive(primary.url, "orders", 10, timeout=1) == []  # each stored once
    primary.stop()
    backup.stop()


def test_force_failover_hands_over_under_traffic(tmp_path: Path, zookeeper: Ensemble) -> None:
    """`forceFailover` (management, `ha failover`): the active server hands over to its synchronized
    backup and exits 4, to be started again as the pair's backup. (A plain clean stop hands over too:
    test_maintenance.py.)"""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "r5")
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")

    def force_failover() -> None:
        with Management(primary.url) as management:
            assert management.call("forceFailover", []) is True  # stop, and let the backup take over

    journals = [journal_of(primary), journal_of(backup)]
    traffic_through((primary, backup), force_failover, "replication, forceFailover", journals, nested=NESTED)
    assert "AMQ221010" in backup.log()
    assert primary.proc is not None and primary.proc.wait(timeout=10) == 4  # to be started again: rejoin
    assert receive(backup.url, "orders", 10, timeout=1) == []  # each stored once
    backup.stop()


def test_a_paused_primary_confirms_nothing_its_backup_lacks_and_stops_when_it_wakes(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """SIGSTOP of the active primary: its ZooKeeper session expires, the backup (synchronized, its stream
    silent past connection-ttl) takes the lock and activates. SIGCONT: the primary finds its backup gone;
    it may not confirm what waited for the backup until it has fenced the backup off, which it cannot
    (the lock and the activation sequence have moved): it confirms nothing more and halts. One more send
    is on both servers' disks at the pause, its outcome cut off (`InDoubtSend`): retried, stored once."""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "r6", ttl=1000)
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    assert primary.proc is not None
    pid = primary.proc.pid
    with Producer() as producer, InDoubtSend((primary, backup), NESTED) as in_doubt:
        in_doubt.ready([journal_of(primary), journal_of(backup)], "SIGSTOP of the primary")
        producer.start(failover_uri([primary.url, backup.url], NESTED) + "&timeout=60000", range(600))
        wait_until(lambda: len(producer.confirmed) >= 200, 30, "sends confirmed by the primary")
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over from the paused one")
            confirmed_by_then = len(producer.confirmed)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert primary.proc.wait(timeout=20) == 1  # it halts on its own once it runs again
        assert "AMQ222325" in primary.log() or "AMQ222330" in primary.log()
        assert "Traceback" not in primary.log(), primary.log()  # a halt is one line, not a crash
        producer.join(60)
        in_doubt.check()
    assert status(backup)["activationSequence"] == 2
    got = [m.body for m in receive(backup.url, "orders", 1000, timeout=2)]
    print(
        f"SIGSTOP of a replicated primary: {producer.summary()} ({confirmed_by_then} when the backup "
        f"activated), {len(got)} received, {len(got) - len(set(got))} duplicates"
    )
    assert sorted(got) == list(range(600))  # each exactly once: nothing confirmed was lost
    backup.stop()


def test_a_lost_backup_is_fenced_off_and_a_stale_backup_never_activates(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """kill -9 of the backup: the primary moves the activation sequence on (2) before it confirms
    anything alone. The backup, restarted after the primary died too, holds a stale copy (1): it stays
    passive (it would lose what the primary confirmed alone) until the primary is back (activating: 3);
    it then replicates, and takes over from the primary with everything (4)."""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "r7")
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    assert send(primary.url, "orders", [f"both-{i}" for i in range(50)]) == 50
    backup.kill()
    assert send(primary.url, "orders", [f"alone-{i}" for i in range(50)]) == 50
    assert "AMQ221035" in primary.log() and "AMQ221036" in primary.log()
    assert status(primary)["activationSequence"] == 2
    primary.kill()

    backup.start()
    stays(lambda: "AMQ221010" in backup.log(), 6, "a stale backup activating")  # session-ms 2 s

    primary.ready_text = "AMQ221024"  # it activates, and its backup synchronizes again
    primary.start(timeout=60)
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize again")
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    assert status(backup)["activationSequence"] == 4
    got = [m.body for m in receive(backup.url, "orders", 200, timeout=2)]
    assert got == [f"both-{i}" for i in range(50)] + [f"alone-{i}" for i in range(50)]
    backup.stop()


def test_competing_primaries_with_a_coordination_id(tmp_path: Path, zookeeper: Ensemble) -> None:
    """Seed 001 §2.2.4: two primaries sharing a coordination-id compete: the first activates, the second
    replicates from it; when the first dies the second activates with everything; the first, restarted,
    replicates from the second (no failback between peers)."""
    peer = "<coordination-id>peer-journal-001</coordination-id>"
    first, second = replicated_pair(
        tmp_path, zookeeper.connect_string, "r8", peer, peer, roles=("primary", "primary")
    )
    first.start()
    second.ready_text = "AMQ221033"  # another server is active: it replicates from it
    second.start()
    wait_until(lambda: status(first)["synchronized"] is True, 30, "the second peer to synchronize")
    shared = coordinated_node_id("peer-journal-001")  # one node id for both, the coordination id's
    assert status(first)["nodeId"] == shared and f"node id {shared}" in second.log()
    assert send(first.url, "orders", range(20)) == 20
    first.kill()
    wait_until(lambda: "AMQ221007" in second.log(), 30, "the second peer to activate")
    assert status(second)["activationSequence"] == 2
    first.ready_text = "AMQ221033"
    first.start()
    wait_until(lambda: status(second)["synchronized"] is True, 30, "the first peer to synchronize")
    assert "AMQ221007" not in first.log()  # a peer does not fail back
    assert [m.body for m in receive(second.url, "orders", 50, timeout=2)] == list(range(20))
    second.stop()
    first.stop()


def test_replication_over_tls(tmp_path: Path, zookeeper: Ensemble) -> None:
    """Acceptors that serve TLS only, connectors that trust their certificate: the backup synchronizes
    (so the stream ran over TLS: there is no other way in) and takes over."""
    certs = make_certs(tmp_path)
    require("a certificate generator", certs is not None, "neither the cryptography package nor openssl")
    assert certs is not None
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "r9", tls=certs)
    primary.start()
    backup.start()
    wait_until(lambda: "AMQ221024" in backup.log(), 30, "the backup to synchronize over TLS")
    assert "(TLS)" in primary.log()
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    backup.stop()


def test_only_the_cluster_user_replicates_and_a_silent_backup_times_out(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """The replication service takes the cluster user only; a backup that takes the copy but never
    confirms its end is dropped after initial-replication-sync-timeout, and the primary serves on."""
    timeout = "<initial-replication-sync-timeout>1000</initial-replication-sync-timeout>"
    primary, _ = replicated_pair(tmp_path, zookeeper.connect_string, "r11", timeout)
    primary.start()
    assert send(primary.url, "orders", range(10)) == 10
    with connect(primary.url, "admin", "secret") as conn, pytest.raises(ProtonException):
        conn.create_receiver(REPLICATION_ADDRESS)  # a user, even an admin, is not the cluster user
    conn = BlockingConnection(primary.url, user="cluster", password="cluster-secret", allowed_mechs="PLAIN")
    try:
        conn.create_receiver(REPLICATION_ADDRESS, credit=100)  # takes the packets, settles none
        wait_until(lambda: "initial-replication-sync-timeout" in primary.log(), 15, "the copy to time out")
    finally:
        with contextlib.suppress(ProtonException):
            conn.close()
    assert "AMQ221024" not in primary.log()  # never synchronized: nothing ever waited for it
    assert send(primary.url, "orders", range(10)) == 10
    primary.stop()
