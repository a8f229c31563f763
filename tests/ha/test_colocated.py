"""Colocated backups, replicated, as real processes: two nodes, each a primary that asks the other to
host its backup (request-backup) and hosts the other's as colocated_backup_01 in its own process; a
client on HTTP-upgrade connectors follows the killed node's primary to its backup on the surviving node
(activemqServerName routing on the host's acceptor); a host with max-backups reached refuses, and the
asking primary retries as configured, then gives up; a returning replicated primary finds its backup
through its cluster and fails back; a primary whose backup's host dies requests a backup again."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message, symbol
from proton.reactor import LinkOption
from proton.utils import LinkDetached

from amqp_mirror.colocation import COLOCATION_ADDRESS
from connections.cli import Management
from connections.failover import FailoverConnection, ReceiveTimeout
from tests.peers.ports import LOOPBACK, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive, send, send_all
from tests.support.colocated import BACKUP, OFFSET, nodes
from tests.support.ha import FAST, Producer, still_serving
from tests.support.history import Interval, intervals, log_events, overlaps
from tests.support.ops import Metered


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


def _paced(first: int, gate: threading.Event, done: threading.Event) -> Iterator[int]:
    """Bodies 0..first-1 at once, then (once `gate` is set) one every 20 ms until `done`: traffic that
    goes on through a failover and the failback after it."""
    yield from range(first)
    gate.wait(120)
    body = first
    while not done.is_set() and body < first + 3000:
        yield body
        body += 1
        done.wait(0.02)  # a pace, not a synchronisation: the test waits on the brokers' lines


def _actives(a: BrokerProcess, b: BrokerProcess) -> list[Interval]:
    """When each server of node-b's node id was active, from the logs: node-b's two runs (the first one
    killed) and node-a's lines of the backup it hosts for node-b."""
    runs = sorted(b.home.glob("broker-*.log"))
    events = [e for run in runs[:-1] for e in log_events("node-b", run.read_text(), ended=True)]
    events += log_events("node-b", runs[-1].read_text(), ended=False)
    hosted_lines = "\n".join(line for line in a.log().splitlines() if BACKUP in line)
    events += log_events(BACKUP, hosted_lines, ended=False)
    return intervals(events, {"node-b": "node-b", BACKUP: "node-b"}, time.time())


def test_a_returning_replicated_primary_fails_back_from_its_colocated_backup(tmp_path: Path) -> None:
    """node-b killed under traffic, its colocated backup on node-a active and taking the sends; node-b
    restarted: it asks its cluster where its node id is active (its backup, on node-a's offset port, not
    a static connector), replicates from it and fails back; the backup stops and node-a hosts node-b's
    backup anew. Every confirmed message (duplicate ids on) received once, from node-b; never two
    actives for node-b's node id; node-b still serves seconds later."""
    (a, b), ports = nodes(tmp_path, {"a": ["b"], "b": ["a"]})
    a.start()
    b.start()
    wait_until(lambda: ha_status(b)["synchronized"] is True, 30, "node-b's backup on node-a to synchronize")
    to_b = f"ws://{LOOPBACK}:{ports['b-http']}"
    to_backup = f"ws://{LOOPBACK}:{ports['a-http']}?activemqServerName={BACKUP}"
    gate, done = threading.Event(), threading.Event()
    with Producer() as producer:
        producer.start(
            f"failover:({to_b},{to_backup})?{FAST}&updateURIsSupported=false", _paced(100, gate, done)
        )
        wait_until(lambda: len(producer.confirmed) == 100, 30, "sends confirmed by node-b")
        b.kill()
        gate.set()
        wait_until(lambda: "AMQ951184" in a.log(), 30, "node-b's backup on node-a to activate")
        taken = len(producer.confirmed)
        wait_until(lambda: len(producer.confirmed) >= taken + 50, 30, "the colocated backup to take sends")
        b.start(timeout=60)  # ready once active again: after the failback
        done.set()
        producer.join(60)
    log_b = b.log()
    assert "AMQ951189" in log_b and f"127.0.0.1:{ports['a'] + OFFSET}" in log_b  # at its host's offset port
    assert "AMQ222329" not in log_b  # it never replicated from node-a's own primary
    assert "AMQ221002: backup colocated_backup_01 stepping down" in a.log()
    wait_until(lambda: "AMQ951187" in a.log(), 30, "the colocated backup to stop")
    # node-b, active again, asks for a backup anew; node-a hosts it, passive, and it synchronizes
    wait_until(lambda: a.log().count("AMQ951183") == 2, 30, "node-a to host node-b's backup again")
    wait_until(lambda: ha_status(b)["synchronized"] is True, 30, "node-b's new backup to synchronize")
    [backup] = hosted(a)
    assert (backup["backsUp"], backup["state"]) == ("node-b", "passive")
    still_serving(b, 3, "node-b")
    overlapping = overlaps(_actives(a, b))
    assert not overlapping, overlapping  # never two actives for node-b's node id, over the whole run
    assert len(_actives(a, b)) == 3  # node-b, its backup, node-b again

    confirmed = producer.confirmed
    assert len(set(confirmed)) == len(confirmed) > 150
    got: list[int] = []
    with FailoverConnection(f"failover:({to_b})?{FAST}") as conn:
        receiver = conn.receiver("orders", credit=200)
        while True:
            try:
                message = receiver.receive(timeout=3)
            except ReceiveTimeout:
                break
            got.append(message.body)
            receiver.accept()
    assert sorted(got) == sorted(confirmed)  # each once: none lost, none stored twice
    with FailoverConnection(f"failover:(ws://{LOOPBACK}:{ports['a-http']})?{FAST}") as conn:
        conn.sender("orders").send(Message(body="node-a's own", durable=True))
    b.stop()
    a.stop()


def test_a_primary_whose_backups_host_dies_requests_a_backup_again(tmp_path: Path) -> None:
    """Three nodes, max-backups 2: node-a asks node-b, then node-c; node-b and node-c ask node-a. node-b
    hosts node-a's backup; killed, it takes that backup with it: node-a says so and requests again, as
    configured (node-b first, which does not answer, then node-c, which accepts); its new backup on
    node-c synchronizes."""
    (a, b, c), ports = nodes(tmp_path, {"a": ["b", "c"], "b": ["a"], "c": ["a"]}, max_backups=2)
    b.start()
    c.start()
    a.start()
    wait_until(lambda: "AMQ951186" in a.log(), 30, "node-a's backup to be hosted")
    assert ha_status(a)["backupHostedBy"] == f"{LOOPBACK}:{ports['b']} as {BACKUP}"
    wait_until(lambda: ha_status(a)["synchronized"] is True, 30, "node-a's backup on node-b to synchronize")
    for host in (b, c):
        wait_until(lambda h=host: "AMQ951186" in h.log(), 30, f"{host.name}'s backup to be hosted by node-a")
    assert "AMQ951143" not in a.log()
    b.kill()
    wait_until(lambda: "AMQ951143" in a.log(), 30, "node-a to see its backup's host gone")
    wait_until(lambda: a.log().count("AMQ951186") == 2, 30, "node-a to have its backup hosted again")
    again = a.log().split("AMQ951143", 1)[1]
    asked = [line.split(" requests a backup from ")[1] for line in again.splitlines() if "AMQ951180" in line]
    assert asked[:2] == [
        f"{LOOPBACK}:{ports['b']} (attempt 1 of unlimited)",
        f"{LOOPBACK}:{ports['c']} (attempt 1 of unlimited)",
    ]
    assert ha_status(a)["backupHostedBy"] == f"{LOOPBACK}:{ports['c']} as {BACKUP}"
    assert any(h["backsUp"] == "node-a" for h in hosted(c))
    wait_until(
        lambda: ha_status(a)["synchronized"] is True, 30, "node-a's new backup on node-c to synchronize"
    )
    assert "AMQ951143" not in c.log()  # node-c's backup is hosted by node-a, which lives
    for n in (a, c):
        n.stop()


@pytest.mark.parametrize("kind", ["replication", "shared-store"])
def test_a_hosted_backup_with_scale_down_moves_its_primarys_messages_into_its_host(
    tmp_path: Path, kind: str
) -> None:
    """node-b's colocated backup on node-a has `<scale-down>` naming no member: node-b killed, the backup
    never serves but moves every confirmed message (duplicate ids with them) to node-a's own server, and
    stops; node-a goes on, its own queue holding them in order, and a retried send is deduplicated."""
    (a, b), ports = nodes(tmp_path, {"a": ["b"], "b": ["a"]}, kind=kind, backup_options="<scale-down/>")
    a.start()
    b.start()
    wait_until(lambda: "AMQ951183" in a.log(), 30, "node-a to host node-b's backup")
    ready = "synchronized" if kind == "replication" else "backupPresent"
    wait_until(lambda: ha_status(b)[ready] is True, 30, "node-b's backup on node-a to be ready")
    count = 60
    with_ids = {i: f"order-{i}" for i in range(0, count, 3)}
    outcomes = send_all(
        b.url,
        "orders",
        list(range(count)),
        properties=lambda i: {"_AMQ_DUPL_ID": with_ids[i]} if i in with_ids else {},
    )
    assert outcomes == dict.fromkeys(range(count), "accepted")
    b.kill()
    ended = ("AMQ951187", "AMQ951184")  # stopped, or (wrongly) active
    wait_until(
        lambda: any(i in a.log() for i in ended), 60, "node-b's backup on node-a to scale down and stop"
    )
    log = a.log()
    assert f"AMQ951164: backup {BACKUP} scales down instead of activating" in log, log
    moved = f"AMQ951161: {BACKUP} scales down to {LOOPBACK}:{ports['a']}"  # into its host
    assert moved in log and f"AMQ951163: {BACKUP} scaled down to" in log, log
    assert f"scaled queue orders (ANYCAST, address orders) down: {count} messages moved" in log, log
    # it never served, over its whole life (it has stopped)
    assert "AMQ951184" not in log and "(exit code 0)" in log
    assert not [line for line in log.splitlines() if "AMQ221010" in line and BACKUP in line]
    assert hosted(a) == []
    # a client that retries a send it was not sure of: node-a has that id already
    assert send_all(a.url, "orders", [3], properties=lambda i: {"_AMQ_DUPL_ID": with_ids[i]}) == {
        0: "accepted"
    }
    send(a.url, "orders", ["after"])  # node-a still serves
    got = [m.body for m in receive(a.url, "orders", count + 5, timeout=3)]
    assert got == [*range(count), "after"]  # each once, in order, the retry not stored
    assert a.proc is not None and a.proc.poll() is None
    a.stop()
