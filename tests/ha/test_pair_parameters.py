"""What each replication parameter does, on real processes with a real ZooKeeper ensemble:
check-for-active-server, call-timeout (a connected backup that does not confirm is dropped and fenced
off), connection-ttl-override, group-name with a spare backup, a second backup refused and taking over
later (one primary, two backups, failed over twice), and max-saved-replicated-journals-size."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from connections.cli import Management
from tests.peers.ports import free_port, wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.ha import replicated_pair, replicated_servers
from tests.support.ops import Metered, metrics_xml


def status(broker: BrokerProcess) -> dict:  # type: ignore[type-arg]
    with Management(broker.url) as management:
        return dict(management.call("getHAStatus", []))


def synchronized(broker: BrokerProcess) -> bool:
    return status(broker).get("synchronized") is True


def test_check_for_active_server_replicates_from_the_active_server_before_asking_for_the_lock(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    check = "<check-for-active-server>true</check-for-active-server>"
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "p1", check)
    primary.start()  # alone: its probe finds nobody, then it takes the lock
    backup.start()
    wait_until(lambda: synchronized(primary), 30, "the backup to synchronize")
    assert send(primary.url, "orders", ["before"]) == 1
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    assert send(backup.url, "orders", ["on-backup"]) == 1
    primary.ready_text = "AMQ951075"  # it finds its node id active at its partner
    primary.start()
    wait_until(lambda: "AMQ221007" in primary.log(), 60, "the primary to fail back")
    assert "AMQ221033" not in primary.log()  # it never asked the lock manager before finding it
    assert status(primary)["activationSequence"] == 3
    assert [m.body for m in receive(primary.url, "orders", 10)] == ["before", "on-backup"]
    primary.stop()


def test_a_backup_that_does_not_confirm_is_dropped_past_call_timeout_and_fenced_off(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """The backup stops (SIGSTOP) with its connection open (connection-ttl 60 s): a send waits for it no
    longer than call-timeout (1.5 s), then the primary drops and fences it off, says so (AMQ222207) and
    counts it; woken up, the backup copies again and takes over later with everything."""
    mark = "<!--metrics-->"
    primary, backup = replicated_pair(
        tmp_path, zookeeper.connect_string, "p2", cluster="<call-timeout>1500</call-timeout>", extra=mark
    )
    port = free_port()
    primary.write_config()
    primary.config_path.write_text(primary.config_path.read_text().replace(mark, metrics_xml(port)))
    metrics = Metered(primary, port)
    primary.start()
    backup.start()
    wait_until(lambda: synchronized(primary), 30, "the backup to synchronize")
    assert backup.proc is not None
    os.kill(backup.proc.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        assert send(primary.url, "orders", ["while-stalled"]) == 1
        waited = time.monotonic() - began
    finally:
        os.kill(backup.proc.pid, signal.SIGCONT)
    assert 1.4 <= waited < 8, waited  # held for call-timeout, not for connection-ttl
    log = primary.log()
    assert "AMQ222207" in log and "AMQ221036" in log and "AMQ221035" in log
    assert metrics.value("amqp_mirror_ha_replicas_dropped_lagging_total") == 1
    wait_until(lambda: primary.log().count("AMQ221024") == 2, 30, "the backup to copy again")
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    assert [m.body for m in receive(backup.url, "orders", 10)] == ["while-stalled"]
    backup.stop()


def test_connection_ttl_override_is_how_long_the_primary_waits_for_a_silent_backup(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """The backup asks for a 60 s connection-ttl; the primary's connection-ttl-override (1 s) wins: a
    stopped backup is gone within about a second, fenced off, and the send it held goes out."""
    override = "<connection-ttl-override>1000</connection-ttl-override>"
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "p3", extra=override)
    primary.start()
    backup.start()
    wait_until(lambda: synchronized(primary), 30, "the backup to synchronize")
    assert backup.proc is not None
    os.kill(backup.proc.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        assert send(primary.url, "orders", ["while-silent"]) == 1
        waited = time.monotonic() - began
    finally:
        os.kill(backup.proc.pid, signal.SIGCONT)
    assert waited < 8, waited  # not the 30 s of call-timeout, nor the backup's 60 s
    assert "AMQ222092" in primary.log() and "AMQ222207" not in primary.log()
    primary.stop()
    backup.stop()


def test_group_name_pairs_a_backup_with_a_primary_of_its_group_only(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """A backup of group fish tries a primary of group bird first (its first static connector): refused;
    it replicates from the fish primary, and takes over from it."""
    bird, fish, backup = replicated_servers(
        tmp_path,
        zookeeper.connect_string,
        "p4",
        [
            ("bird", "primary", "<group-name>bird</group-name>"),
            ("fish", "primary", "<group-name>fish</group-name>"),
            (
                "backup",
                "backup",
                "<group-name>fish</group-name><retry-replication-wait>300</retry-replication-wait>",
            ),
        ],
    )
    bird.start()
    fish.start()
    backup.start()
    wait_until(lambda: synchronized(fish), 30, "the backup to pair with the fish primary")
    assert "replication refused" in bird.log() and "group-name 'fish'" in bird.log()
    assert status(bird)["backupPresent"] is False
    assert send(fish.url, "orders", ["fish"]) == 1
    fish.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over from the fish primary")
    assert [m.body for m in receive(backup.url, "orders", 10)] == ["fish"]
    assert status(backup)["nodeId"] == (fish.home / "data" / "journal" / "node-id").read_text().strip()
    bird.stop()
    backup.stop()


def test_one_primary_two_backups_the_spare_pairs_once_the_first_is_gone(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """The second backup is refused while the first replicates, and tries again every
    retry-replication-wait; when the first is gone it pairs with the primary, takes over when the primary
    dies, and the first, back as the spare, pairs with it and takes over in turn."""
    wait = "<retry-replication-wait>300</retry-replication-wait>"
    primary, first, second = replicated_servers(
        tmp_path,
        zookeeper.connect_string,
        "p5",
        [("primary", "primary", ""), ("first", "backup", wait), ("second", "backup", wait)],
    )
    primary.start()
    first.start()
    wait_until(lambda: synchronized(primary), 30, "the first backup to synchronize")
    second.start()
    wait_until(lambda: primary.log().count("replicates from this server already") >= 2, 10, "refusals")
    assert send(primary.url, "orders", ["a"]) == 1
    first.kill()
    wait_until(lambda: synchronized(primary) and "AMQ221026" in second.log(), 30, "the spare to pair")
    assert send(primary.url, "orders", ["b"]) == 1
    primary.kill()
    wait_until(lambda: "AMQ221010" in second.log(), 30, "the spare to take over")
    assert send(second.url, "orders", ["c"]) == 1
    first.start()  # its copy is stale (fenced off): it replicates from the active spare
    wait_until(lambda: synchronized(second), 30, "the first backup to pair with the active spare")
    second.kill()
    wait_until(lambda: "AMQ221010" in first.log(), 30, "the first backup to take over")
    assert [m.body for m in receive(first.url, "orders", 10)] == ["a", "b", "c"]
    assert status(first)["activationSequence"] == 4  # 1 primary, 2 the first fenced off, 3 second, 4 first
    first.stop()


def test_old_copies_are_kept_up_to_max_saved_replicated_journals_size(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """Each new copy puts the data the backup held aside as oldreplica.N; with the default 2, three
    restarts leave oldreplica.2 and oldreplica.3."""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "p6")
    primary.start()
    assert send(primary.url, "orders", ["kept"]) == 1
    for copies in range(1, 5):
        backup.start()
        wait_until(lambda n=copies: primary.log().count("AMQ221024") == n, 30, "the backup to synchronize")
        if copies < 4:
            assert backup.stop() == 0
    data = backup.home / "data"
    assert sorted(p.name for p in data.glob("oldreplica.*")) == ["oldreplica.2", "oldreplica.3"]
    assert any((data / "oldreplica.3" / "journal").iterdir())  # the journal it held, put aside
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    assert [m.body for m in receive(backup.url, "orders", 10)] == ["kept"]
    backup.stop()
