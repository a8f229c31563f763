"""The network isolation check (`network-check-*`) with a real network: the server and the address it
checks are hosts of their own (network namespaces, tests/support/netns.py), and the test takes the
checked host's interface down and brings it back (as a pulled cable, nothing answers). The check is done
in process (no ping command, no privilege): an active server stops serving and serves again, with its
journal; a backup never activates while isolated, and does once the network is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.peers.ports import wait_until
from tests.support import netns
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.ha import (
    FILE_LOCKS,
    ORDERS,
    lock_manager,
    replicated_servers,
    stays,
    still_serving,
)

Net = netns.Topology


def check_of(topology: netns.Topology) -> str:
    return (
        f"<network-check-list>{topology.address('probe')}</network-check-list>"
        "<network-check-period>300</network-check-period><network-check-timeout>300</network-check-timeout>"
    )


@pytest.fixture(scope="module")
def net() -> Iterator[Net]:
    require("network namespaces", *netns.availability())
    topology = netns.Topology({"server": 1, "probe": 1, "client": 1})
    try:
        topology.create()
        with topology.entered("client"):
            yield topology
    finally:
        topology.close()


@pytest.fixture
def probe(net: Net) -> Iterator[Net]:
    try:
        yield net
    finally:
        net.link("probe", up=True)


def refused(broker: BrokerProcess) -> bool:
    try:
        send(broker.url, "orders", ["while isolated"])
    except Exception:
        return True
    return False


def test_an_isolated_broker_stops_serving_and_serves_again_with_its_journal(
    probe: Net, tmp_path: Path
) -> None:
    broker = BrokerProcess(
        tmp_path,
        xml_kwargs={"addresses": ORDERS, "extra": check_of(probe)},
        host=probe.address("server"),
        prefix=probe.prefix("server"),
    )
    broker.start()
    try:
        assert send(broker.url, "orders", ["before"]) == 1
        probe.link("probe", up=False)
        wait_until(lambda: "AMQ951108" in broker.log(), 20, "the broker to stop serving")
        assert refused(broker)
        stays(lambda: not refused(broker), 2, "the isolated broker serving")
        probe.link("probe", up=True)
        wait_until(lambda: "AMQ951109: broker serves again" in broker.log(), 20, "the broker to serve again")
        assert send(broker.url, "orders", ["after"]) == 1
        assert [m.body for m in receive(broker.url, "orders", 2, timeout=5)] == ["before", "after"]
    finally:
        broker.stop()


def test_a_backup_never_activates_while_isolated(probe: Net, tmp_path: Path) -> None:
    """A replicated pair (file lock manager) on the server host; only the backup checks the network. The
    probe down, its primary killed: the backup stays passive, saying why; the probe back, it activates
    with every message the primary had confirmed."""
    manager = lock_manager(FILE_LOCKS, locks_folder=str(tmp_path / "locks"))
    primary, backup = replicated_servers(
        tmp_path,
        "",
        "",
        [("primary", "primary", ""), ("backup", "backup", "")],
        ttl=1000,
        extra="",
        hosts={"primary": probe.address("server"), "backup": probe.address("server")},
        prefixes={"primary": probe.prefix("server"), "backup": probe.prefix("server")},
        manager=manager,
    )
    backup.xml_kwargs["extra"] += check_of(probe)
    primary.start()
    backup.start()
    try:
        wait_until(lambda: "AMQ221024" in backup.log(), 30, "the backup to synchronize")
        assert send(primary.url, "orders", list(range(20))) == 20
        probe.link("probe", up=False)
        wait_until(lambda: "AMQ951110" in backup.log(), 20, "the backup to find itself isolated")
        primary.kill()
        wait_until(lambda: "AMQ951104" in backup.log(), 20, "the backup to refuse to activate")
        stays(lambda: "AMQ221010" in backup.log(), 3, "the isolated backup activating")
        probe.link("probe", up=True)
        wait_until(lambda: "AMQ221010" in backup.log(), 20, "the backup to take over")
        still_serving(backup, 1, "the backup")
        assert sorted(m.body for m in receive(backup.url, "orders", 25, timeout=3)) == list(range(20))
    finally:
        backup.stop()
