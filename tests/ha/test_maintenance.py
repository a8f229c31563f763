"""Maintenance of a replicated pair as an operator runs it (docs/ha.md, "Maintenance"): a clean stop of
the active server hands over to its synchronized backup under traffic, the stopped server comes back
(upgraded, say) and fails back, the backup rejoins; and a stop of both, backup first, starts again with
everything. `ha status` and the metrics say at each step who is active, who is synchronized, and
whether the pair has a backup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.peers.ports import free_port, wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.ha import journal_of, replicated_pair, traffic_through
from tests.support.ops import Metered, metrics_xml

NESTED = "amqp.idleTimeout=1000&transport.connectTimeout=1000"
MARK = "<!--metrics-->"


def metered(broker: BrokerProcess) -> Metered:
    port = free_port()
    broker.write_config()
    broker.config_path.write_text(broker.config_path.read_text().replace(MARK, metrics_xml(port)))
    return Metered(broker, port)


def ha_status(broker: BrokerProcess) -> str:
    answer = subprocess.run(
        [sys.executable, "-m", "amqp_mirror", "ha", "status", "--url", broker.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return answer.stdout


def says(m: Metered, active: int, synced: int, backup: int | None) -> bool:
    """The metrics of `m`: serving or not, a replica in sync or not, a backup present (active only)."""
    return (
        m.value("amqp_mirror_server_active") == active
        and m.value("amqp_mirror_ha_replica_synced") == synced
        and m.value("amqp_mirror_ha_backup_present") == backup
    )


def test_rolling_maintenance_hands_over_fails_back_and_rejoins(tmp_path: Path, zookeeper: Ensemble) -> None:
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "m1", extra=MARK)
    p, b = metered(primary), metered(backup)
    primary.start()
    backup.start()
    wait_until(lambda: says(p, 1, 1, 1), 30, "the primary to report its backup synchronized")
    assert "replica in sync       yes" in ha_status(primary) and "backup present        yes" in ha_status(
        primary
    )

    # 1. stop the active server (systemctl stop): it hands over to the synchronized backup, under traffic
    journals = [journal_of(primary), journal_of(backup)]
    traffic_through(
        (primary, backup), primary.stop, "replication, clean stop of the primary", journals, nested=NESTED
    )
    assert primary.proc is not None and primary.proc.returncode == 0  # an operator's stop: not restarted
    assert "AMQ951072" in primary.log() and "AMQ221010" in backup.log()
    wait_until(lambda: says(b, 1, 0, 0), 10, "the backup to report itself active, without a backup")
    assert "backup present        no" in ha_status(backup)

    # 2. the stopped server comes back (upgraded): it replicates from the active backup, then fails back
    primary.ready_text = "AMQ221033"
    primary.start()
    wait_until(lambda: "AMQ221007" in primary.log(), 60, "the primary to fail back")
    assert backup.proc is not None and backup.proc.wait(timeout=20) == 4  # to be started again
    assert "AMQ221002" in backup.log()

    # 3. the backup's service starts it again: the pair is whole, the primary says so
    backup.start()
    wait_until(lambda: says(p, 1, 1, 1), 30, "the pair to have its backup again")
    assert "activation sequence   3" in ha_status(primary)  # 1 primary, 2 backup, 3 primary again
    assert receive(primary.url, "orders", 10, timeout=1) == []  # each message of the traffic taken once

    # 4. both stopped for an upgrade of both, backup first: each starts again where it was
    assert send(primary.url, "orders", ["kept"]) == 1
    assert backup.stop() == 0
    assert primary.stop() == 0
    assert "AMQ951071" in primary.log()  # no synchronized backup any more: nobody takes over
    primary.ready_text = "AMQ221007"
    primary.start()
    backup.start()
    wait_until(lambda: says(p, 1, 1, 1), 30, "the pair to be whole again")
    assert [m.body for m in receive(primary.url, "orders", 10)] == ["kept"]
    primary.stop()
    backup.stop()
