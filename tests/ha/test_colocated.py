"""Colocated backups, replicated, as real processes: two nodes, each a primary that asks the other to
host its backup (request-backup) and hosts the other's as colocated_backup_01 in its own process; a
client on HTTP-upgrade connectors follows the killed node's primary to its backup on the surviving node
(activemqServerName routing on the host's acceptor); a host with max-backups reached refuses, and the
asking primary retries as configured, then gives up."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from proton import Message

from connections.cli import Management
from connections.failover import FailoverConnection, ReceiveTimeout
from tests.peers.ports import LOOPBACK, free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.ha import CLUSTER, FAST, FILE_LOCKS, ORDERS, Producer, lock_manager
from tests.support.ops import Metered, metrics_xml

OFFSET = 100
BACKUP = "colocated_backup_01"


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def offset_port() -> int:
    """A free port whose colocated copy (port + OFFSET) is free too."""
    while True:
        port = free_port()
        if port + OFFSET < 65536 and _free(port + OFFSET):
            return port


def node(
    home: Path,
    name: str,
    port: int,
    http: int,
    other: int,
    locks: Path,
    *,
    max_backups: int = 1,
    retries: int = -1,
    kind: str = "replication",
    metrics: int | None = None,
) -> BrokerProcess:
    # a shared store's lock files are in the primary's journal directory, which its backup uses
    manager = lock_manager(FILE_LOCKS, locks_folder=str(locks)) if kind == "replication" else ""
    extra = (
        (metrics_xml(metrics) if metrics is not None else "")
        + f"""{CLUSTER}
    <connectors>
      <connector name="self">tcp://{LOOPBACK}:{port}</connector>
      <connector name="other">tcp://{LOOPBACK}:{other}</connector>
    </connectors>
    <cluster-connections><cluster-connection name="c">
      <connector-ref>self</connector-ref><connection-ttl>5000</connection-ttl><retry-interval>200</retry-interval>
      <static-connectors><connector-ref>other</connector-ref></static-connectors>
    </cluster-connection></cluster-connections>
    <ha-policy><{kind}><colocated>
      <request-backup>true</request-backup><max-backups>{max_backups}</max-backups>
      <backup-request-retries>{retries}</backup-request-retries>
      <backup-request-retry-interval>300</backup-request-retry-interval>
      <backup-port-offset>{OFFSET}</backup-port-offset>
      <primary>{manager}</primary><backup>{manager}</backup>
    </colocated></{kind}></ha-policy>"""
    )
    acceptor = f'\n      <acceptor name="http">tcp://{LOOPBACK}:{http}?httpUpgradeEnabled=true</acceptor>'
    return BrokerProcess(
        home,
        name=name,
        port=port,
        xml_kwargs={"addresses": ORDERS, "extra": extra, "extra_acceptors": acceptor},
        ready_text="AMQ221007",
    )


def two_nodes(tmp_path: Path, **options: Any) -> tuple[BrokerProcess, BrokerProcess, dict[str, int]]:
    ports = {"a": offset_port(), "b": offset_port(), "a-http": free_port(), "b-http": free_port()}
    ports["a-metrics"] = free_port()
    locks = tmp_path / "locks"
    locks.mkdir()
    a = node(
        tmp_path / "a",
        "node-a",
        ports["a"],
        ports["a-http"],
        ports["b"],
        locks,
        metrics=ports["a-metrics"],
        **options,
    )
    b = node(tmp_path / "b", "node-b", ports["b"], ports["b-http"], ports["a"], locks, **options)
    return a, b, ports


def ha_status(broker: BrokerProcess) -> dict:  # type: ignore[type-arg]
    with Management(broker.url) as management:
        return dict(management.call("getHAStatus", []))


def hosted(broker: BrokerProcess) -> list[dict]:  # type: ignore[type-arg]
    return list(ha_status(broker).get("colocatedBackups") or [])


def cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "amqp_mirror", *args], capture_output=True, text=True, timeout=60
    )
    return done.stdout


def colocated_metric(metrics_port: int, state: str) -> float | None:
    labels = {"backup": BACKUP, "role": "backup", "state": state, "backs_up": "node-b"}
    return Metered(None, metrics_port).value("amqp_mirror_ha_colocated_backups", **labels)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["replication", "shared-store"])
def test_each_node_hosts_the_others_backup_and_the_client_follows_a_killed_node_to_it(
    tmp_path: Path, kind: str
) -> None:
    a, b, ports = two_nodes(tmp_path, kind=kind)
    a.start()
    b.start()
    for host, other in ((a, "node-b"), (b, "node-a")):
        wait_until(lambda h=host: "AMQ951183" in h.log(), 30, f"{host.name} to start a backup of {other}")
        [backup] = hosted(host)
        assert (backup["name"], backup["backsUp"], backup["role"]) == (BACKUP, other, "backup")
    if kind == "replication":
        wait_until(
            lambda: ha_status(b)["synchronized"] is True, 30, "node-b's backup on node-a to synchronize"
        )
    else:
        wait_until(lambda: ha_status(b)["backupPresent"] is True, 30, "node-b's backup on node-a to wait")
    assert ha_status(b)["backupHostedBy"] == f"{LOOPBACK}:{ports['a']} as {BACKUP}"
    # replication: the host's directories with the backup's name appended; shared store: the requester's
    appended = [(node.home / "data" / f"journal_{BACKUP}").is_dir() for node in (a, b)]
    assert appended == ([True, True] if kind == "replication" else [False, False])
    # what runs in node-a's process, as status, ha status and the metrics say it
    passive = "passive"
    said = f"colocated backup {BACKUP}  role backup  state {passive}  backs up node-b at tcp://{LOOPBACK}:{ports['b']}"
    assert said in cli("status", "--url", a.url)
    assert f"{BACKUP} (backup, {passive}) backs up node-b" in cli("ha", "status", "--url", a.url)
    assert colocated_metric(ports["a-metrics"], passive) == 1
    # its own acceptor moved by the offset; the HTTP-upgrade one is its host's (the passive backup redirects)
    with socket.create_connection((LOOPBACK, ports["b"] + OFFSET), timeout=5):
        pass

    to_b = f"ws://{LOOPBACK}:{ports['b-http']}"
    to_backup = f"ws://{LOOPBACK}:{ports['a-http']}?activemqServerName={BACKUP}"
    uri = f"failover:({to_b},{to_backup})?{FAST}&updateURIsSupported=false"
    with Producer() as producer:
        producer.start(uri, range(400))
        wait_until(lambda: len(producer.confirmed) >= 100, 30, "sends confirmed by node-b")
        b.kill()
        wait_until(lambda: "AMQ951184" in a.log(), 30, "node-b's backup on node-a to activate")
        producer.join(60)
    assert producer.confirmed == list(range(400))
    assert "AMQ221010" in a.log()  # the backup's own activation line
    [backup] = hosted(a)
    assert backup["state"] == "active" and colocated_metric(ports["a-metrics"], "active") == 1

    got: list[int] = []
    with FailoverConnection(f"failover:({to_backup})?{FAST}") as conn:
        receiver = conn.receiver("orders", credit=100)
        while True:
            try:
                message = receiver.receive(timeout=3)
            except ReceiveTimeout:
                break
            got.append(message.body)
            receiver.accept()
        assert sorted(got) == list(range(400)) and len(got) == 400  # every confirmed one, once
        # still serving, seconds later
        conn.sender("orders").send(Message(body="after", durable=True))
        assert receiver.receive(timeout=10).body == "after"
        receiver.accept()
    # node-a's own primary served throughout, beside the backup
    with FailoverConnection(f"failover:(ws://{LOOPBACK}:{ports['a-http']})?{FAST}") as conn:
        conn.sender("orders").send(Message(body="node-a's own", durable=True))
    a.stop()


def test_a_host_at_max_backups_refuses_and_the_primary_retries_then_gives_up(tmp_path: Path) -> None:
    a, b, _ = two_nodes(tmp_path, max_backups=0, retries=2)
    a.start()
    b.start()
    for asker, host in ((a, b), (b, a)):
        wait_until(lambda s=asker: "AMQ951188" in s.log(), 30, f"{asker.name} to give up")
        assert asker.log().count("AMQ951180") >= 3  # the first request and two retries that reached it
        assert "AMQ951181" not in host.log() and hosted(host) == []
    # every request that reached a host was refused, and none after the requester gave up
    refusals = b.log().count("AMQ951182: node-b refuses to host a backup for node-a")
    assert 1 <= refusals <= 3
    assert a.log().count("AMQ951180") == 3
    assert "backupHostedBy" in ha_status(a) and ha_status(a)["backupHostedBy"] is None
    a.stop()
    b.stop()
