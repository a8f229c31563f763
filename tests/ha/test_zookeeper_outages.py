"""A replicated pair through ZooKeeper outages (a real three-node ensemble on loopback, its majority
stopped and started again): the active server stops before its session could expire, nobody activates
without a majority, and the server that takes over once the ensemble is back keeps serving - a passive
server that only ever tried the lock has nothing to lose when its own connection is suspended."""

from __future__ import annotations

from pathlib import Path

from connections.cli import Management
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.broker import BrokerProcess
from tests.support.ha import replicated_pair, stays, still_serving


def synchronized(broker: BrokerProcess) -> bool:
    with Management(broker.url) as management:
        return management.call("getHAStatus", [])["synchronized"] is True


def outage(zookeeper: Ensemble) -> list:  # type: ignore[type-arg]
    majority = zookeeper.nodes[:2]
    for node in majority:
        node.stop()
    return majority


def heal(zookeeper: Ensemble, majority: list) -> None:  # type: ignore[type-arg]
    for node in majority:
        node.start()
    zookeeper.wait_serving()


def test_losing_the_majority_stops_the_active_server_and_the_backup_takes_over_for_good(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """Both servers up: the primary halts on its own (LM4); without a majority the backup stays passive
    well past session-ms; once the ensemble is back it activates, and still serves seconds later (its
    suspended connection while passive must not count as a lost lock)."""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "o1")
    primary.start()
    backup.start()
    wait_until(lambda: synchronized(primary), 30, "the backup to synchronize")
    majority = outage(zookeeper)
    try:
        assert primary.proc is not None and primary.proc.wait(timeout=20) == 1  # it halts on its own
        assert "AMQ222325" in primary.log()
        stays(lambda: "AMQ221010" in backup.log(), 4, "the backup activating without a ZooKeeper majority")
    finally:
        heal(zookeeper, majority)
    wait_until(lambda: "AMQ221010" in backup.log(), 60, "the backup to take over once ZooKeeper is back")
    still_serving(backup, 3, "the backup that took over")
    assert "Traceback" not in primary.log(), primary.log()  # a halt is one line, not a crash
    backup.stop()


def test_an_outage_before_the_dead_primary_session_expires_leaves_the_backup_serving(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """kill -9 of the primary, then the majority lost before its session could expire: nobody activates
    during the outage; once it is back, the primary's session expires, the backup activates and serves
    on (it tried the lock while the primary's session ran, before the outage: never held, never lost)."""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "o2")
    primary.start()
    backup.start()
    wait_until(lambda: synchronized(primary), 30, "the backup to synchronize")
    primary.kill()
    wait_until(lambda: "AMQ951070" in backup.log(), 10, "the backup to try the lock")
    majority = outage(zookeeper)
    try:
        stays(lambda: "AMQ221010" in backup.log(), 3, "the backup activating without a ZooKeeper majority")
    finally:
        heal(zookeeper, majority)
    wait_until(lambda: "AMQ221010" in backup.log(), 60, "the backup to take over once ZooKeeper is back")
    still_serving(backup, 3, "the backup that took over")
    backup.stop()


def test_an_empty_backup_waits_across_an_outage_and_an_active_backup_halts_in_one(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """A backup that has never had a primary stays a backup across a majority outage (LM6), copies and
    takes over once its primary came and died; active, it halts when the majority goes in turn (LM4)."""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "o3")
    backup.start()
    majority = outage(zookeeper)
    try:
        stays(lambda: "AMQ221010" in backup.log(), 3, "an empty backup activating")
    finally:
        heal(zookeeper, majority)
    primary.start()
    wait_until(lambda: synchronized(primary), 30, "the backup to synchronize after the outage")
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    majority = outage(zookeeper)
    try:
        assert backup.proc is not None and backup.proc.wait(timeout=20) == 1  # it halts on its own
        assert "AMQ222325" in backup.log() and "Traceback" not in backup.log()
    finally:
        heal(zookeeper, majority)
