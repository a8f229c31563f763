"""Quorum voting (replication without a `<manager>`) with three primary/backup pairs, each server on a
host of its own (network namespaces, tests/support/netns.py), one cluster connection whose static
connectors are the five others, a group-name per pair. The six servers are started once for the module
and each test fails a different pair:

- pair 2: only the backup's link to its primary is cut: the other primaries still see primary 2 and vote
  no, so the backup never activates; healed, it copies again;
- pair 3: primary 3 (vote-on-replication-failure) is cut from every other host: its backup wins the vote
  (the other primaries lost primary 3) and takes over; primary 3, its backup gone and no majority seeing
  it, stops;
- pair 1: primary 1 is killed: its backup asks the two other active servers, wins, and takes over with
  every confirmed send;
- pair 2 again: primary 2 is paused until its backup took over and was seen at its newer activation
  sequence, the backup is killed, primary 2 woken: the voters refuse its older journal, and it stops.

The test is the client host: it reaches each server at its own address, and its metrics endpoint (every
server's on port 9100 of its own host) for the vote counters."""

from __future__ import annotations

import os
import signal
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from connections.cli import Management
from connections.failover import FailoverConnection
from tests.conftest import require
from tests.peers.ports import wait_until
from tests.support import netns
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.ha import Producer, failover_uri, replicated_servers, stays, still_serving
from tests.support.ops import metrics_xml

METRICS_PORT = 9100
NESTED = "amqp.idleTimeout=1000&transport.connectTimeout=1000"
PAIRS = (1, 2, 3)
VOTING = "<vote-retries>10</vote-retries><vote-retry-wait>500</vote-retry-wait>" + (
    "<quorum-vote-wait>2</quorum-vote-wait>"
)


class Cluster:
    def __init__(self, topology: netns.Topology, servers: dict[str, BrokerProcess]) -> None:
        self.topology = topology
        self.servers = servers

    def __getitem__(self, name: str) -> BrokerProcess:
        return self.servers[name]

    def status(self, name: str) -> dict:  # type: ignore[type-arg]
        with Management(self.servers[name].url) as management:
            return dict(management.call("getHAStatus", []))

    def votes(self, name: str, family: str, question: str, label: str) -> float:
        """One sample of `amqp_mirror_ha_votes_<family>_total` scraped from server `name`'s /metrics."""
        url = f"http://{self.topology.address(name)}:{METRICS_PORT}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        wanted = {"question": question, "outcome" if family == "asked" else "vote": label}
        for metric in text_string_to_metric_families(text):
            for sample in metric.samples:
                if sample.name == f"amqp_mirror_ha_votes_{family}_total" and sample.labels == wanted:
                    return sample.value
        raise AssertionError(f"no amqp_mirror_ha_votes_{family}_total{wanted} in {name}'s metrics")

    def isolate(self, host: str) -> None:
        for other in self.topology.addresses:
            if other != host:
                self.topology.cut(host, other)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require("network namespaces", *netns.availability())
    hosts = [f"{role}{n}" for n in PAIRS for role in ("p", "b")]
    topology = netns.Topology({**{host: 1 for host in hosts}, "client": 1})
    servers: list[BrokerProcess] = []
    try:
        topology.create()
        home = tmp_path_factory.mktemp("quorum")
        members = []
        for n in PAIRS:
            group = f"<group-name>pair{n}</group-name>"
            members.append((f"p{n}", "primary", group + VOTING + "<vote-on-replication-failure>true"
                            "</vote-on-replication-failure>"))  # fmt: skip
            members.append((f"b{n}", "backup", group + VOTING))
        servers = replicated_servers(
            home,
            "",
            "",
            members,
            ttl=1000,  # a member cut off is gone within a second
            hosts={host: topology.address(host) for host in hosts},
            prefixes={host: topology.prefix(host) for host in hosts},
            port=5672,
            manager="",
            extra=metrics_xml(METRICS_PORT, host="0.0.0.0"),
        )
        with topology.entered("client"):
            for server in servers:
                server.start()
            by_name = {server.name: server for server in servers}
            for n in PAIRS:
                wait_until(
                    lambda n=n: "AMQ221024" in by_name[f"b{n}"].log(), 60, f"backup {n} to synchronize"
                )
            yield Cluster(topology, by_name)
    finally:
        topology.heal_all()
        for server in servers:
            if server.proc is not None and server.proc.poll() is None:
                server.kill()
        topology.close()


def active_members(cluster: Cluster, name: str) -> set[str]:
    return {m["connector"] for m in cluster.status(name)["cluster"] if m["active"]}


def test_members_know_each_other_and_clients_learn_the_live_ones(cluster: Cluster) -> None:
    """Each primary sees the two others active, with their node ids (its backups passive), and the open
    frame's failover-server-list names the live members: a client told of one primary learns them."""
    primaries = {f"p{n}": f"{cluster.topology.address(f'p{n}')}:5672" for n in PAIRS}
    for name in primaries:
        others = {where for other, where in primaries.items() if other != name}
        wait_until(
            lambda name=name, others=others: active_members(cluster, name) == others, 20, f"{name}'s view"
        )
    node_ids = {cluster.status(name)["nodeId"] for name in primaries}
    assert len(node_ids) == 3
    seen = {m["nodeId"] for m in cluster.status("p1")["cluster"] if m["active"]}
    assert seen == node_ids - {cluster.status("p1")["nodeId"]}
    with FailoverConnection(failover_uri([cluster["p1"].url], NESTED)) as conn:
        conn.sender("orders")  # connected
        learnt = {f"{uri.host}:{uri.port}" for uri in conn.uris}
    assert learnt == set(primaries.values())


def test_a_backup_cut_from_its_primary_alone_never_activates(cluster: Cluster) -> None:
    """Backup 2 loses its stream; the other primaries still see primary 2 and vote no, every retry: it
    stays passive over a window and says why; healed, it copies again (primary 2 never stopped)."""
    backup, primary = cluster["b2"], cluster["p2"]
    lost_before = backup.log().count("AMQ951103")
    cluster.topology.cut("b2", "p2")
    wait_until(lambda: backup.log().count("AMQ951103") > lost_before, 30, "backup 2's vote to be lost")
    assert "AMQ951102: b2's vote on node id" in backup.log() and " lost (0 yes of 2 needed" in backup.log()
    stays(lambda: "AMQ221010" in backup.log(), 4, "backup 2 activating while primary 2 is seen")
    votes = [line for n in (1, 3) for line in cluster[f"p{n}"].log().splitlines() if "AMQ951101" in line]
    on_backup = [line for line in votes if " on primary-gone " in line]
    assert on_backup and all(" votes no " in line for line in on_backup), on_backup
    # primary 2 lost its backup too: it asked to stay active (vote-on-replication-failure), was seen, stays
    assert any(" votes yes " in line and " on stay-active " in line for line in votes), votes
    assert "AMQ951102: p2's vote on node id" in primary.log() and "AMQ951105" not in primary.log()
    # ... and the metrics count what the logs say, on each side
    assert cluster.votes("b2", "asked", "primary-gone", "lost") >= 1
    assert cluster.votes("b2", "asked", "primary-gone", "won") == 0
    assert sum(cluster.votes(f"p{n}", "cast", "primary-gone", "no") for n in (1, 3)) == len(on_backup)
    assert sum(cluster.votes(f"p{n}", "cast", "primary-gone", "yes") for n in (1, 3)) == 0
    assert cluster.votes("p2", "asked", "stay-active", "won") >= 1
    synchronized_before = backup.log().count("AMQ221024")
    cluster.topology.heal("b2", "p2")
    wait_until(lambda: backup.log().count("AMQ221024") > synchronized_before, 30, "backup 2 to copy again")
    still_serving(primary, 1, "primary 2")


def test_a_primary_isolated_from_the_majority_stops_and_its_backup_takes_over(cluster: Cluster) -> None:
    """Primary 3 (vote-on-replication-failure) cut from every other host under traffic it had confirmed:
    its backup's vote is won once the other primaries lost primary 3; primary 3, its backup gone, asks to
    stay active, is not seen by the majority, and stops (exit 1) without confirming anything more."""
    primary, backup = cluster["p3"], cluster["b3"]
    with Producer() as producer:
        producer.start(failover_uri([primary.url, backup.url], NESTED), range(100))
        producer.join(60)
    cluster.isolate("p3")
    wait_until(lambda: "AMQ951105" in primary.log(), 40, "primary 3 to stop: the majority does not see it")
    assert primary.proc is not None and primary.proc.wait(timeout=20) == 1
    wait_until(lambda: "AMQ221010" in backup.log(), 40, "backup 3 to take over")
    assert " won (2 yes of 2 needed" in backup.log()
    still_serving(backup, 2, "backup 3")
    got = [m.body for m in receive(backup.url, "orders", 110, timeout=3)]
    assert sorted(got) == list(range(100)), f"{len(got)} received of 100"
    cluster.topology.heal_all()


def test_a_backup_takes_over_when_its_primary_is_killed(cluster: Cluster) -> None:
    """kill -9 of primary 1: backup 1 asks the two other active servers (primary 2, and backup 3 active
    for node 3 by now), both no longer see primary 1: it wins and takes over, with every confirmed send.
    The producer keeps to the pair (updateURIsSupported=false): told of the cluster, it would also send
    to primary 2 while the vote is under way, and a send in doubt retried there is a new message to it."""
    primary, backup = cluster["p1"], cluster["b1"]
    with Producer() as producer:
        producer.start(
            failover_uri([primary.url, backup.url], NESTED) + "&updateURIsSupported=false", range(300)
        )
        wait_until(lambda: len(producer.confirmed) >= 100, 30, "sends before the kill")
        primary.kill()
        producer.join(60)
    wait_until(lambda: "AMQ221010" in backup.log(), 30, "backup 1 to take over")
    assert " won (2 yes of 2 needed" in backup.log()
    assert cluster.votes("b1", "asked", "primary-gone", "won") == 1
    assert cluster.votes("p2", "cast", "primary-gone", "yes") >= 1
    still_serving(backup, 2, "backup 1")
    got = [m.body for m in receive(backup.url, "orders", 310, timeout=3)]
    assert sorted(got) == list(range(300)), f"{len(got)} received, {len(set(got))} distinct of 300"


def test_a_woken_primary_is_refused_once_a_newer_activation_of_its_node_was_seen(cluster: Cluster) -> None:
    """Primary 2 is paused past its backup's vote: backup 2 takes over (activation sequence n+1) and the
    other active servers see it so; backup 2 is killed; primary 2 wakes and asks to stay active with its
    older journal (sequence n). The voters see primary 2 at its own connector again, but they have seen a
    newer activation of node 2: they answer no, every retry, and primary 2 stops (exit 1) instead of
    going on without what backup 2 confirmed."""
    primary, backup = cluster["p2"], cluster["b2"]
    voters = ("b1", "b3")  # active for nodes 1 and 3 after the tests above
    assert primary.proc is not None and backup.proc is not None
    node = cluster.status("p2")["nodeId"]
    older = cluster.status("p2")["activationSequence"]  # 1, or more if it fenced off its backup before
    newer = older + 1
    at = f"{cluster.topology.address('b2')}:5672"

    def seen_newer(voter: str) -> bool:
        members = cluster.status(voter)["cluster"]
        return any(m.get("activeAt") == at and m.get("activationSequence") == newer for m in members)

    os.kill(primary.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: "AMQ221010" in backup.log(), 40, "backup 2 to take over")
        for voter in voters:
            wait_until(lambda voter=voter: seen_newer(voter), 20, f"{voter} to see backup 2 at {newer}")
        backup.kill()
    finally:
        os.kill(primary.proc.pid, signal.SIGCONT)
    wait_until(lambda: "AMQ951105" in primary.log(), 60, "primary 2 to stop: a newer activation was seen")
    assert primary.proc.wait(timeout=20) == 1
    refusals = [
        line
        for voter in voters
        for line in cluster[voter].log().splitlines()
        if "AMQ951101" in line and " on stay-active " in line and f" {node} at " in line
    ]
    assert refusals and all(" votes no " in line for line in refusals), refusals
    assert any(
        f"with activation sequence {older} " in line
        and f"the newest activation it has seen of it: {newer}" in line
        for line in refusals
    ), refusals
