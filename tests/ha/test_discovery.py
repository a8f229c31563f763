"""A cluster of primaries found by UDP only: three replicated servers (quorum voting, no backups), each
on a host of its own (network namespaces on one bridge, multicast routed: tests/support/netns.py), whose
cluster connection has no static connector, only a `<discovery-group-ref>`; each broadcasts its own
connector on one multicast group. Each learns the two others, their node ids and that they are active;
a client told of one learns all three (failover-server-list). A member stopped disappears from the
others' membership once refresh-timeout passes without its datagram, and comes back when it starts
again. The test is the client host."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from connections.cli import Management
from connections.failover import FailoverConnection
from tests.conftest import require
from tests.peers.ports import wait_until
from tests.support import netns
from tests.support.broker import BrokerProcess
from tests.support.ha import CLUSTER, PAIR_ADDRESSES, failover_uri

PORT = 5672
GROUP = "231.7.7.7"
GROUP_PORT = 9876
REFRESH_TIMEOUT = 1500  # ms: a member not heard for this long is dropped
NESTED = "amqp.idleTimeout=1000&transport.connectTimeout=1000"
HOSTS = ("n1", "n2", "n3")


def server_xml(address: str) -> str:
    policy = "<ha-policy><replication><primary/></replication></ha-policy>"
    groups = (
        f'<connectors><connector name="self">tcp://{address}:{PORT}</connector></connectors>'
        '<broadcast-groups><broadcast-group name="bg">'
        f"<group-address>{GROUP}</group-address><group-port>{GROUP_PORT}</group-port>"
        "<broadcast-period>250</broadcast-period><connector-ref>self</connector-ref>"
        "</broadcast-group></broadcast-groups>"
        '<discovery-groups><discovery-group name="dg">'
        f"<group-address>{GROUP}</group-address><group-port>{GROUP_PORT}</group-port>"
        f"<refresh-timeout>{REFRESH_TIMEOUT}</refresh-timeout></discovery-group></discovery-groups>"
        '<cluster-connections><cluster-connection name="cluster"><connector-ref>self</connector-ref>'
        '<connection-ttl>60000</connection-ttl><discovery-group-ref discovery-group-name="dg"/>'
        "</cluster-connection></cluster-connections>"
    )
    return policy + groups + CLUSTER


class Cluster:
    def __init__(self, topology: netns.Topology, servers: dict[str, BrokerProcess]) -> None:
        self.topology = topology
        self.servers = servers

    def status(self, name: str) -> dict:  # type: ignore[type-arg]
        with Management(self.servers[name].url) as management:
            return dict(management.call("getHAStatus", []))

    def members(self, name: str) -> dict[str, tuple[bool, str | None]]:
        """connector -> (active, node id) of `name`'s cluster members."""
        return {m["connector"]: (m["active"], m["nodeId"]) for m in self.status(name)["cluster"]}

    def where(self, name: str) -> str:
        return f"{self.topology.address(name)}:{PORT}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require("network namespaces", *netns.availability())
    topology = netns.Topology({**{host: 1 for host in HOSTS}, "client": 1})
    servers: list[BrokerProcess] = []
    try:
        topology.create()
        topology.multicast()
        home = tmp_path_factory.mktemp("discovery")
        for host in HOSTS:
            address = topology.address(host)
            servers.append(
                BrokerProcess(
                    home / host,
                    name=host,
                    port=PORT,
                    xml_kwargs={"addresses": PAIR_ADDRESSES, "extra": server_xml(address)},
                    ready_text="AMQ221007",
                    host=address,
                    prefix=topology.prefix(host),
                )
            )
        with topology.entered("client"):
            for server in servers:
                server.start()
            yield Cluster(topology, {server.name: server for server in servers})
    finally:
        for server in servers:
            if server.proc is not None and server.proc.poll() is None:
                server.kill()
        topology.close()


def sees_active(cluster: Cluster, name: str, others: set[str]) -> bool:
    members = cluster.members(name)
    return set(members) == others and all(active for active, _ in members.values())


def test_members_found_by_udp_know_each_other_and_clients_learn_them(cluster: Cluster) -> None:
    """No static connector anywhere: each server's members are the two others, heard on the group,
    active, with their node ids; the open frame's failover-server-list names them."""
    for name in HOSTS:
        others = {cluster.where(other) for other in HOSTS if other != name}
        wait_until(lambda name=name, others=others: sees_active(cluster, name, others), 30, f"{name}'s view")
    node_ids = {name: cluster.status(name)["nodeId"] for name in HOSTS}
    assert len(set(node_ids.values())) == 3
    for name in HOSTS:
        expected = {cluster.where(other): node_ids[other] for other in HOSTS if other != name}
        assert {where: node for where, (_, node) in cluster.members(name).items()} == expected
        assert "AMQ951195" in cluster.servers[name].log()  # discovered, said with its node id
    with FailoverConnection(failover_uri([cluster.servers["n1"].url], NESTED)) as conn:
        conn.sender("orders")  # connected
        learnt = {f"{uri.host}:{uri.port}" for uri in conn.uris}
    assert {cluster.where(name) for name in HOSTS} <= learnt


def test_a_stopped_member_is_dropped_after_refresh_timeout_and_found_again(cluster: Cluster) -> None:
    """n3 stopped: the others first see it inactive (its connection gone), then, refresh-timeout after
    its last datagram, no longer list it at all (a static connector would stay listed, inactive); n3
    started again is heard and active again."""
    n3 = cluster.where("n3")
    for name in ("n1", "n2"):
        wait_until(lambda name=name: cluster.members(name).get(n3, (False, None))[0], 30, f"{name} to see n3")
    cluster.servers["n3"].stop()
    for name in ("n1", "n2"):
        wait_until(lambda name=name: n3 not in cluster.members(name), 15, f"{name} to drop n3")
        assert "AMQ951196" in cluster.servers[name].log()
        assert cluster.members(name) == {
            cluster.where(other): (True, cluster.status(other)["nodeId"])
            for other in ("n1", "n2")
            if other != name
        }
    cluster.servers["n3"].start()
    node = cluster.status("n3")["nodeId"]
    for name in ("n1", "n2"):
        wait_until(
            lambda name=name: cluster.members(name).get(n3) == (True, node), 30, f"{name} to see n3 again"
        )
