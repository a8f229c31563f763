"""The console of a shared-store HA pair: a passive backup's console shows its role, state and where the
active server is; the primary's console fails the pair over, and the backup's then shows it active."""

from __future__ import annotations

from pathlib import Path

from tests.peers.ports import LOOPBACK, free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.console import HttpClient
from tests.support.ha import shared_pair


def _with_console(broker: BrokerProcess) -> int:
    port = free_port()
    acceptor = f'<acceptor name="console">tcp://{LOOPBACK}:{port}?protocols=CONSOLE</acceptor></acceptors>'
    broker.config_path.write_text(broker.config_path.read_text().replace("</acceptors>", acceptor, 1))
    return port


def test_a_passive_backup_shows_where_the_active_server_is_and_a_failover_makes_it_active(
    tmp_path: Path,
) -> None:
    primary, backup = shared_pair(tmp_path)
    primary_console, backup_console = _with_console(primary), _with_console(backup)
    primary.start()
    backup.start()
    watching = HttpClient(backup_console)  # security is off in this pair: no login is asked
    overview = watching.get("/")
    assert overview.status == 200
    for fact in ("<dt>role</dt><dd>backup</dd>", "<dt>state</dt><dd>passive</dd>", "The active server is"):
        assert fact in overview.body, fact
    assert f"{LOOPBACK}:{primary.port}" in overview.body
    assert "This server is passive" in watching.get("/queues").body

    operator = HttpClient(primary_console)
    page = operator.get("/")
    assert "<dt>state</dt><dd>active</dd>" in page.body and "Fail over to the backup" in page.body
    assert operator.action("/", do="failover").status == 303
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    wait_until(lambda: "<dt>state</dt><dd>active</dd>" in watching.get("/").body, 20, "its console to say so")
    assert primary.proc is not None and primary.proc.wait(timeout=20) == 4  # stopped, to rejoin as backup
    assert "AMQ951083: primary: console: user anonymous: failover requested" in primary.log()
    backup.stop()
