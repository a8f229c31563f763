"""A replicated pair and its ZooKeeper ensemble on hosts of their own (network namespaces, one bridge:
tests/support/netns.py), and partitions between them: primary and backup cut from each other only (the
backup must not activate while the primary holds the lock); the primary cut from ZooKeeper only (it stops
before its session can expire; the backup takes over afterwards); clients cut from the primary only
(nobody fails over: they wait); the backup's ZooKeeper session expired on its own (it can still take over
later). The test is the client host: every message is checked against what the clients were told."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from connections.cli import Management
from tests.conftest import require
from tests.peers import zookeeper as zookeeper_peer
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble, running_ensemble
from tests.support import netns
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.ha import (
    Producer,
    failover_uri,
    journal_of,
    replicated_servers,
    stays,
    still_serving,
    traffic_through,
)

NESTED = "amqp.idleTimeout=1000&transport.connectTimeout=1000"
Net = tuple[netns.Topology, Ensemble]


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    require("network namespaces", *netns.availability())
    require("ZooKeeper", *zookeeper_peer.availability())
    topology = netns.Topology({"zk": 3, "primary": 1, "backup": 1, "client": 1})
    try:
        topology.create()
        home = tmp_path_factory.mktemp("zookeeper-netns")
        with (
            topology.entered("client"),
            running_ensemble(home, hosts=topology.addresses["zk"], prefix=topology.prefix("zk")) as ensemble,
        ):
            yield topology, ensemble
    finally:
        topology.close()


@pytest.fixture
def pair(
    net: Net, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    topology, ensemble = net
    primary, backup = replicated_servers(
        tmp_path,
        ensemble.connect_string,
        request.node.name[-40:].replace("[", "_").replace("]", "_"),
        [("primary", "primary", ""), ("backup", "backup", "")],
        ttl=1000,  # a partner cut off is gone within a second
        hosts={name: topology.address(name) for name in ("primary", "backup")},
        prefixes={name: topology.prefix(name) for name in ("primary", "backup")},
        port=5672,
    )
    try:
        yield primary, backup
    finally:
        topology.heal_all()


def status(broker: BrokerProcess) -> dict:  # type: ignore[type-arg]
    with Management(broker.url) as management:
        return dict(management.call("getHAStatus", []))


def start_synchronized(primary: BrokerProcess, backup: BrokerProcess) -> None:
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")


def logged_at(broker: BrokerProcess, log_id: str) -> datetime:
    line = next(line for line in broker.log().splitlines() if log_id in line)
    stamp = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
    assert stamp is not None, line
    return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")


def drained(broker: BrokerProcess, count: int) -> list[int]:
    got = [m.body for m in receive(broker.url, "orders", count + 10, timeout=3)]
    assert sorted(got) == list(range(count)), f"{len(got)} received, {len(set(got))} distinct of {count}"
    return got


def test_primary_and_backup_cut_from_each_other_then_the_backup_cut_from_zookeeper(
    net: Net, pair: tuple[BrokerProcess, BrokerProcess]
) -> None:
    """The primary still holds its lock: the backup, its stream gone, tries the lock and never gets it;
    the primary fences it off and confirms alone. Healed, the backup copies again. Then the backup alone
    is cut from ZooKeeper past its session (the primary and the ensemble healthy): its session expires.
    Neither the lock it only tried nor its expired session counts against it: when the primary dies it
    takes over, with every confirmed send, and serves on."""
    topology, _ = net
    primary, backup = pair
    start_synchronized(primary, backup)
    with Producer() as producer:
        producer.start(failover_uri([primary.url, backup.url], NESTED), range(300))
        wait_until(lambda: len(producer.confirmed) >= 50, 30, "sends before the cut")
        topology.cut("primary", "backup")
        wait_until(lambda: "AMQ221036" in primary.log(), 20, "the primary to fence its backup off")
        stays(
            lambda: "AMQ221010" in backup.log(), 4, "the backup activating while its primary holds the lock"
        )
        assert "AMQ951070" in backup.log()  # it tried the lock
        topology.heal("primary", "backup")
        producer.join(60)
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to copy again")
    topology.cut("backup", "zk")
    stays(lambda: "AMQ222325" in primary.log(), 3, "the primary losing its lock")  # past session-ms
    topology.heal("backup", "zk")
    wait_until(lambda: "Session has expired" in backup.log(), 20, "the backup to hear its session expired")
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    still_serving(backup, 2, "the backup that took over")
    drained(backup, 300)
    backup.stop()


def test_the_primary_cut_from_zookeeper_stops_before_its_session_can_expire(
    net: Net, pair: tuple[BrokerProcess, BrokerProcess]
) -> None:
    """Under traffic: the primary, hearing nothing from ZooKeeper for its grace, halts; only then can
    its session expire and the backup take the lock. Its halt is logged before the backup's activation."""
    topology, _ = net
    primary, backup = pair
    start_synchronized(primary, backup)
    journals = [journal_of(primary), journal_of(backup)]
    what = "the primary cut from ZooKeeper"
    traffic_through((primary, backup), lambda: topology.cut("primary", "zk"), what, journals, nested=NESTED)
    assert primary.proc is not None and primary.proc.wait(timeout=20) == 1
    assert logged_at(primary, "AMQ222325") < logged_at(backup, "AMQ221010")
    assert receive(backup.url, "orders", 10, timeout=1) == []  # each taken once
    still_serving(backup, 2, "the backup that took over")
    backup.stop()


def test_clients_cut_from_the_primary_only_wait_and_nobody_fails_over(
    net: Net, pair: tuple[BrokerProcess, BrokerProcess]
) -> None:
    topology, _ = net
    primary, backup = pair
    start_synchronized(primary, backup)
    with Producer() as producer:
        producer.start(failover_uri([primary.url, backup.url], NESTED) + "&timeout=60000", range(300))
        wait_until(lambda: len(producer.confirmed) >= 50, 30, "sends before the cut")
        topology.cut("client", "primary")
        stays(lambda: "AMQ221010" in backup.log(), 4, "the backup activating: the primary is healthy")
        cut_at = len(producer.confirmed)
        topology.heal("client", "primary")
        producer.join(60)
    print(f"clients cut from the primary: {producer.summary()}, {cut_at} confirmed at the heal")
    assert status(primary)["synchronized"] is True
    drained(primary, 300)
    primary.stop()
    backup.stop()
