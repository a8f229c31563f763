"""`amqp-mirror status` on a mirrored pair, and what operations see of a shared-store HA pair: a
passive backup is alive but not ready, says where the active server is, and counts its failover."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.peers.ports import free_port, wait_until
from tests.support.broker import REPO, BrokerProcess
from tests.support.client import send
from tests.support.ha import shared_pair
from tests.support.ops import Metered, metrics_xml, mirrored_pair

MARK = "<!--metrics-->"


def status(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "amqp_mirror", "status", "--url", url, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def test_status_table_and_json_of_a_mirrored_pair(tmp_path: Path) -> None:
    dc1, dc2 = mirrored_pair(tmp_path)
    try:
        send(dc1.broker.url, "orders", [f"m{i}" for i in range(7)])
        shown = status(dc1.broker.url)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0].startswith("server dc1  node ")
        assert "HA     policy primary-only  role primary  state active  replica in sync no" in lines
        mirror = next(line for line in lines if line.startswith("DC2 ") and " up " in line)
        assert mirror.split()[:3] == ["DC2", "up", "0"]  # nothing pending once DC2 accepted the seven
        assert any(line.split()[:4] == ["orders", "orders", "7", "0"] for line in lines)
        assert any(line.startswith("amqp ") for line in lines)  # the acceptor

        answer = status(dc2.broker.url, "--json")
        data = json.loads(answer.stdout)
        [origin] = data["mirrors"]["target"]["origins"].values()
        assert origin["messages"] == 7
        assert data["connections"][0]["name"] == "DC1" and data["connections"][0]["connected"] is True
        assert status(dc1.broker.url, "--watch", "0").returncode == 2
        assert status(f"amqp://127.0.0.1:{free_port()}").returncode == 1  # nobody there: one line, exit 1
    finally:
        dc1.broker.stop()
        dc2.broker.stop()


def _with_metrics(b: BrokerProcess) -> Metered:
    port = free_port()
    b.config_path.write_text(b.config_path.read_text().replace(MARK, metrics_xml(port)))
    return Metered(b, port)


def test_a_passive_backup_is_alive_not_ready_and_counts_its_failover(tmp_path: Path) -> None:
    primary, backup = (_with_metrics(b) for b in shared_pair(tmp_path, extra=MARK))
    primary.broker.start()
    backup.broker.start()
    try:
        assert backup.get("/healthz") == (200, "alive\n")
        assert backup.get("/readyz") == (503, "passive\n")
        assert backup.value("amqp_mirror_server_active") == 0
        assert backup.value("amqp_mirror_ha_role_info", policy="shared-store", role="backup") == 1
        assert primary.get("/readyz") == (200, "active\n")
        shown = status(backup.broker.url)
        assert shown.returncode == 0 and f"active: 127.0.0.1:{primary.broker.port}" in shown.stdout

        primary.broker.kill()
        wait_until(lambda: backup.get("/readyz")[0] == 200, 30, "the backup to take over")
        assert backup.value("amqp_mirror_ha_failovers_total", reason="primary_lost") == 1
        assert backup.value("amqp_mirror_server_active") == 1
        assert "state active" in status(backup.broker.url).stdout
    finally:
        primary.broker.kill()
        backup.broker.stop()
