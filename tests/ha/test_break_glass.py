"""When the activation sequence says nobody may activate: a claim cut short by a crash (the claimer
repairs it, the other waits for it), and the primary's storage lost after its backup was fenced off
(only an operator can say the backup's copy will do: `ha break-glass`, refused while a server of the pair
runs, then the runbook of docs/ha.md carried out to the end)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from connections.cli import Management
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.ha import replicated_pair, stays


def status(broker: BrokerProcess) -> dict:  # type: ignore[type-arg]
    with Management(broker.url) as management:
        return dict(management.call("getHAStatus", []))


def ha(broker: BrokerProcess, action: str, *more: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "amqp_mirror", "ha", action, "--config", str(broker.config_path), *more]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def node_id(broker: BrokerProcess) -> str:
    return (broker.home / "data" / "journal" / "node-id").read_text().strip()


def set_coordinated(zookeeper: Ensemble, namespace: str, node: str, value: int) -> None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect_string)
    client.start(timeout=10)
    try:
        client.set(f"/{namespace}/{node}/activation-sequence", str(value).encode())
    finally:
        client.stop()
        client.close()


def test_a_claim_cut_short_is_repaired_by_its_claimer_while_the_other_waits(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """The backup took over (sequence 2) and is then found as if killed between its claim and its commit
    (coordinated -2, its local 2). The primary (local 1) must not activate: the claimer may hold more (it
    says AMQ951074 and waits). The backup, restarted, sees its own claim and commits it (self repair:
    sequence 2 again); the primary then finds it active and fails back (3) with everything."""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "b1")
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    assert send(primary.url, "orders", [f"m{i}" for i in range(10)]) == 10
    assert primary.stop() == 0  # hands over
    wait_until(lambda: "AMQ221010" in backup.log(), 20, "the backup to take over")
    assert send(backup.url, "orders", [f"n{i}" for i in range(10)]) == 10
    assert backup.stop() == 0
    set_coordinated(zookeeper, "b1", node_id(backup), -2)

    primary.ready_text = "AMQ951074"  # maybe in sync: it waits for the claimer
    primary.start()
    stays(lambda: "AMQ221007" in primary.log(), 3, "the primary activating on another's claim")
    backup.ready_text = "AMQ221010"
    backup.start()
    assert "activation sequence 2" in backup.log()  # its own claim, committed
    wait_until(lambda: "AMQ221007" in primary.log(), 60, "the primary to follow it and fail back")
    assert status(primary)["activationSequence"] == 3
    got = [m.body for m in receive(primary.url, "orders", 30, timeout=2)]
    assert got == [f"m{i}" for i in range(10)] + [f"n{i}" for i in range(10)]
    primary.stop()
    backup.stop()


def test_break_glass_is_refused_while_the_pair_runs_and_then_activates_the_chosen_copy(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """The backup is killed (the primary fences it off: sequence 2) and the primary goes on alone; then
    the primary dies with its storage. The backup's copy is stale: it never activates by itself. Break
    glass is refused while the primary runs; once it is gone, it makes the backup activate with what it
    has (what the primary confirmed alone is lost: the operator's call). The primary, rebuilt empty with
    the node id, replicates from it and fails back."""
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "b2")
    primary.start()
    backup.start()
    wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
    assert send(primary.url, "orders", [f"both-{i}" for i in range(20)]) == 20
    backup.kill()
    assert send(primary.url, "orders", [f"alone-{i}" for i in range(20)]) == 20  # fenced first: sequence 2
    node = node_id(backup)

    refused = ha(backup, "break-glass")
    assert refused.returncode == 1 and f"--node-id {node}" in refused.stderr  # it wants the id typed back
    refused = ha(backup, "break-glass", "--node-id", node)
    assert refused.returncode == 1 and f"127.0.0.1:{primary.port} answers" in refused.stderr
    shown = ha(backup, "sequence")
    assert shown.returncode == 0, shown.stderr
    assert "local sequence        1" in shown.stdout and "coordinated sequence  2" in shown.stdout
    assert "verdict               stale" in shown.stdout and "lock                  held" in shown.stdout

    primary.kill()
    shutil.rmtree(primary.home / "data")  # its storage is lost
    backup.start()
    stays(lambda: "AMQ221010" in backup.log(), 4, "a stale backup activating")  # session-ms 2 s
    assert backup.stop() == 0

    done = ha(backup, "break-glass", "--node-id", node)
    assert done.returncode == 0, done.stderr
    assert "AMQ951076" in done.stdout and "set to 3" in done.stdout
    backup.ready_text = "AMQ221010"
    backup.start()
    assert "AMQ951076" in backup.log()
    assert status(backup)["activationSequence"] == 4
    assert not (backup.home / "data" / "journal" / "break-glass.json").exists()  # said once

    # the runbook's last step: the rebuilt primary gets the node id, replicates, and fails back
    (primary.home / "data" / "journal").mkdir(parents=True)
    (primary.home / "data" / "journal" / "node-id").write_text(node + "\n")
    primary.ready_text = "AMQ221033"
    primary.start()
    wait_until(lambda: "AMQ221007" in primary.log(), 60, "the rebuilt primary to fail back")
    got = [m.body for m in receive(primary.url, "orders", 50, timeout=2)]
    assert got == [f"both-{i}" for i in range(20)]  # what the backup had; the rest was the operator's call
    primary.stop()
    backup.stop()
