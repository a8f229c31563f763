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
from proton import Message, symbol
from proton.reactor import LinkOption
from proton.utils import LinkDetached

from amqp_mirror.colocation import COLOCATION_ADDRESS
from connections.cli import Management
from connections.failover import FailoverConnection, ReceiveTimeout
from tests.peers.ports import LOOPBACK, free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import connect
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
    others: list[int],
    locks: Path,
    *,
    max_backups: int = 1,
    retries: int = -1,
    kind: str = "replication",
    metrics: int | None = None,
) -> BrokerProcess:
    """A primary with `<colocated>` asking the servers at `others` (in turn) to host its backup, and
    hosting up to `max_backups` of theirs; a plain acceptor (offset for its backups) and an HTTP upgrade
    endpoint (its backups': the host hands them their connections)."""
    # replication: a lock manager decides; shared store: the lock files in the primary's own journal
    # directory, which its backup uses (and, stopped cleanly, it lets its backup take over)
    if kind == "replication":
        primary = backup = lock_manager(FILE_LOCKS, locks_folder=str(locks))
    else:
        primary, backup = "<failover-on-shutdown>true</failover-on-shutdown>", ""
    connectors = "".join(
        f'<connector name="other-{i}">tcp://{LOOPBACK}:{other}</connector>' for i, other in enumerate(others)
    )
    static = "".join(f"<connector-ref>other-{i}</connector-ref>" for i in range(len(others)))
    extra = (metrics_xml(metrics) if metrics is not None else "") + (
        f"""{CLUSTER}
    <connectors><connector name="self">tcp://{LOOPBACK}:{port}</connector>{connectors}</connectors>
    <cluster-connections><cluster-connection name="c">
      <connector-ref>self</connector-ref><connection-ttl>5000</connection-ttl><retry-interval>200</retry-interval>
      <static-connectors>{static}</static-connectors>
    </cluster-connection></cluster-connections>
    <ha-policy><{kind}><colocated>
      <request-backup>true</request-backup><max-backups>{max_backups}</max-backups>
      <backup-request-retries>{retries}</backup-request-retries>
      <backup-request-retry-interval>300</backup-request-retry-interval>
      <backup-port-offset>{OFFSET}</backup-port-offset>
      <primary>{primary}</primary><backup>{backup}</backup>
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


def nodes(
    tmp_path: Path, asks: dict[str, list[str]], **options: Any
) -> tuple[list[BrokerProcess], dict[str, int]]:
    """The nodes named in `asks`, each asking the others it lists, metrics on; their ports by name."""
    ports = {name: offset_port() for name in asks}
    ports |= {f"{name}-{what}": free_port() for name in asks for what in ("http", "metrics")}
    locks = tmp_path / "locks"
    locks.mkdir()
    made = [
        node(
            tmp_path / name,
            f"node-{name}",
            ports[name],
            ports[f"{name}-http"],
            [ports[other] for other in others],
            locks,
            metrics=ports[f"{name}-metrics"],
            **options,
        )
        for name, others in asks.items()
    ]
    return made, ports


class AttachProperties(LinkOption):
    def __init__(self, properties: dict) -> None:  # type: ignore[type-arg]
        self.properties = properties

    def apply(self, link: Any) -> None:
        link.properties = self.properties


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


def metric(metrics_port: int, name: str, **labels: str) -> float | None:
    return Metered(None, metrics_port).value(name, **labels)  # type: ignore[arg-type]


def colocated_metric(metrics_port: int, state: str) -> float | None:
    labels = {"backup": BACKUP, "role": "backup", "state": state, "backs_up": "node-b"}
    return metric(metrics_port, "amqp_mirror_ha_colocated_backups", **labels)


@pytest.mark.parametrize("kind", ["replication", "shared-store"])
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_each_node_hosts_the_others_backup_and_the_client_follows_a_lost_node_to_it(
    tmp_path: Path, kind: str, how: str
) -> None:
    """The seed's test: node-b's primary lost (SIGKILL, or a clean stop), the client on HTTP-upgrade
    connectors goes on with its colocated backup in node-a's process; every confirmed message once."""
    (a, b), ports = nodes(tmp_path, {"a": ["b"], "b": ["a"]}, kind=kind)
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
    appended = [(n.home / "data" / f"journal_{BACKUP}").is_dir() for n in (a, b)]
    assert appended == ([True, True] if kind == "replication" else [False, False])
    # what runs in node-a's process, as status, ha status and the metrics say it
    primary_at = f"tcp://{LOOPBACK}:{ports['b']}"
    said = f"colocated backup {BACKUP}  role backup  state passive  backs up node-b at {primary_at}"
    assert said in cli("status", "--url", a.url)
    assert f"{BACKUP} (backup, passive) backs up node-b" in cli("ha", "status", "--url", a.url)
    assert colocated_metric(ports["a-metrics"], "passive") == 1
    # its own acceptor moved by the offset; the HTTP upgrade endpoint is its host's
    with socket.create_connection((LOOPBACK, ports["b"] + OFFSET), timeout=5):
        pass

    to_b = f"ws://{LOOPBACK}:{ports['b-http']}"
    to_backup = f"ws://{LOOPBACK}:{ports['a-http']}?activemqServerName={BACKUP}"
    uri = f"failover:({to_b},{to_backup})?{FAST}&updateURIsSupported=false"
    with Producer() as producer:
        producer.start(uri, range(400))
        wait_until(lambda: len(producer.confirmed) >= 100, 30, "sends confirmed by node-b")
        if how == "kill":
            b.kill()
        else:
            b.stop()
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


def test_hosts_at_max_backups_refuse_and_the_primary_retries_then_gives_up(tmp_path: Path) -> None:
    """node-a and node-b host each other's backup (max-backups 1); node-c, started then, asks both in
    turn: each refuses, and it asks again backup-request-retries (2) times, then gives up."""
    (a, b, c), ports = nodes(tmp_path, {"a": ["b"], "b": ["a"], "c": ["a", "b"]}, retries=2)
    a.start()
    b.start()
    for host in (a, b):
        wait_until(lambda h=host: "AMQ951183" in h.log(), 30, f"{host.name} to host a backup")
    c.start()
    wait_until(lambda: "AMQ951188" in c.log(), 30, "node-c to give up")
    assert c.log().count("AMQ951180") == 6  # three rounds over its two members
    for host in (a, b):
        assert host.log().count("AMQ951182: " + host.name + " refuses to host a backup for node-c") == 3
        assert (
            metric(ports[host.name[-1] + "-metrics"], "amqp_mirror_ha_colocated_backup_refusals_total") == 3
        )
        [backup] = hosted(host)
        assert backup["backsUp"] != "node-c"
    assert "AMQ951181" not in c.log() and hosted(c) == []
    assert ha_status(c)["backupHostedBy"] is None
    # a request from anyone but the cluster user is refused before it is read
    with connect(c.url, "admin", "secret") as conn, pytest.raises(LinkDetached, match="cluster user"):
        conn.create_receiver(COLOCATION_ADDRESS, options=AttachProperties({symbol("requester"): "intruder"}))
    assert "intruder" not in c.log() and hosted(c) == []
    for n in (c, a, b):
        n.stop()


def test_a_returning_shared_store_primary_fails_back_and_is_backed_up_again(tmp_path: Path) -> None:
    """node-b killed, its colocated backup on node-a active; node-b restarted: the backup steps down for
    it (allow-failback) and stops, its host (node-a) goes on serving and hosts node-b's backup anew once
    node-b, active again, asks. Nothing confirmed is lost across the two moves."""
    (a, b), ports = nodes(tmp_path, {"a": ["b"], "b": ["a"]}, kind="shared-store")
    a.start()
    b.start()
    wait_until(lambda: ha_status(b)["backupPresent"] is True, 30, "node-b's backup on node-a to wait")
    to_b = f"ws://{LOOPBACK}:{ports['b-http']}"
    with FailoverConnection(f"failover:({to_b})?{FAST}") as conn:
        sender = conn.sender("orders")
        for body in range(10):
            sender.send(Message(body=body, durable=True))
    b.kill()
    wait_until(lambda: "AMQ951184" in a.log(), 30, "node-b's backup on node-a to activate")
    to_backup = f"ws://{LOOPBACK}:{ports['a-http']}?activemqServerName={BACKUP}"
    with FailoverConnection(f"failover:({to_backup})?{FAST}") as conn:
        conn.sender("orders").send(Message(body=10, durable=True))
    b.start()
    wait_until(lambda: "AMQ951187" in a.log(), 30, "the colocated backup to step down and stop")
    wait_until(lambda: a.log().count("AMQ951183") == 2, 30, "node-a to host node-b's backup again")
    [backup] = hosted(a)
    assert (backup["name"], backup["backsUp"], backup["state"]) == (BACKUP, "node-b", "passive")
    with FailoverConnection(f"failover:({to_b})?{FAST}") as conn:
        receiver = conn.receiver("orders", credit=20)
        got = []
        for _ in range(11):
            got.append(receiver.receive(timeout=10).body)
            receiver.accept()
    assert got == list(range(11))
    # the host went on through it all
    assert a.proc is not None and a.proc.poll() is None
    with FailoverConnection(f"failover:(ws://{LOOPBACK}:{ports['a-http']})?{FAST}") as conn:
        conn.sender("orders").send(Message(body="node-a's own", durable=True))
    a.stop()
    b.stop()
