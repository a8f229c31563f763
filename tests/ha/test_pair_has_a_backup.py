"""Whether a pair has a backup, said truthfully: the active server's `ha status`, its metric and the
alert on it follow the backup coming and going; a server the pair stops (failback, a requested
failover) exits with the code its service restarts (4), so the pair gets its backup back; a passive
server's `ha status` says whether the active server it names is really there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from connections.cli import Management
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.ha import shared_pair


def ha_status(broker: BrokerProcess, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amqp_mirror", "ha", "status", "--url", broker.url, *more],
        capture_output=True,
        text=True,
        timeout=60,
    )


def backup_present(broker: BrokerProcess) -> bool:
    with Management(broker.url) as m:
        return bool(m.call("getHAStatus", [])["backupPresent"])


def test_the_active_server_says_whether_its_backup_is_there(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    assert backup_present(primary) is False  # alone
    text = ha_status(primary).stdout
    assert "backup present        no" in text, text
    backup.start()
    wait_until(lambda: backup_present(primary), 10, "the backup to be seen waiting")
    assert "backup present        yes" in ha_status(primary).stdout
    backup.kill()
    wait_until(lambda: not backup_present(primary), 10, "the backup's absence to be seen")
    primary.stop()


def test_a_server_the_pair_stops_exits_4_and_rejoins_as_the_backup(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    wait_until(lambda: backup_present(primary), 10, "the backup waiting")
    with Management(primary.url) as m:
        assert m.call("forceFailover", []) is True
    assert primary.proc is not None and primary.proc.wait(timeout=20) == 4
    assert "AMQ951030" in primary.log() and "failed over to its backup on request" in primary.log()
    wait_until(lambda: "AMQ221010" in backup.log(), 10, "the backup to take over")
    assert not backup_present(backup)  # the pair runs without a backup until the old primary is back
    # as its service does: started again, it fails back (allow-failback), and the backup that steps
    # down exits 4 in turn; started again too, the pair is whole
    primary.ready_text = "AMQ221034"
    primary.start()
    assert backup.proc is not None and backup.proc.wait(timeout=30) == 4
    assert "stepped down for its primary" in backup.log()
    wait_until(lambda: "AMQ221007" in primary.log(), 10, "the primary active again")
    backup.start()
    wait_until(lambda: backup_present(primary), 10, "the backup back in the pair")
    primary.stop()
    assert primary.proc is not None and primary.proc.returncode == 0  # an operator's stop: 0
    backup.stop()


def test_a_passive_server_says_whether_the_active_one_it_names_is_there(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    shown = ha_status(backup)
    assert (
        shown.returncode == 0
        and shown.stdout.strip() == f"passive; the active server is 127.0.0.1:{primary.port}"
    )
    primary.stop()  # a clean stop without failover-on-shutdown: the backup stays passive
    shown = ha_status(backup)
    assert shown.returncode == 0, shown.stderr
    assert "nothing answers there: the pair may have no active server" in shown.stdout, shown.stdout
    assert '"activeReachable": false' in ha_status(backup, "--json").stdout
    backup.stop()
