"""`<broadcast-groups>`, `<discovery-groups>` and a cluster connection's `<discovery-group-ref>`: read with
Artemis's defaults; a bad address or port, a missing group, a connector or discovery group that does not
exist, JGroups: each a clear error."""

from __future__ import annotations

import pytest
from conftest import WriteConfig

from broker_core.config import load_config
from broker_core.config.errors import ConfigError

SEC = "<security-enabled>false</security-enabled>\n"
QUORUM = "<ha-policy><replication><primary/></replication></ha-policy>"
CONNECTORS = '<connectors><connector name="self">tcp://127.0.0.1:5672</connector></connectors>'
BROADCAST = (
    '<broadcast-groups><broadcast-group name="bg"><group-address>231.7.7.7</group-address>'
    "<group-port>9876</group-port><connector-ref>self</connector-ref></broadcast-group></broadcast-groups>"
)
DISCOVERY = (
    '<discovery-groups><discovery-group name="dg"><group-address>231.7.7.7</group-address>'
    "<group-port>9876</group-port></discovery-group></discovery-groups>"
)
CLUSTER = (
    '<cluster-connections><cluster-connection name="c"><connector-ref>self</connector-ref>'
    '<discovery-group-ref discovery-group-name="dg"/></cluster-connection></cluster-connections>'
)


def errors(write_config: WriteConfig, body: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(write_config(SEC + QUORUM + body))
    return [str(p) for p in info.value.problems if p.severity == "error"]


def test_groups_and_the_reference_are_read_with_artemis_defaults(write_config: WriteConfig) -> None:
    config, _ = load_config(write_config(SEC + QUORUM + CONNECTORS + BROADCAST + DISCOVERY + CLUSTER))
    (broadcast,) = config.broadcast_groups
    assert (broadcast.group_address, broadcast.group_port, broadcast.connectors) == (
        "231.7.7.7",
        9876,
        ("self",),
    )
    assert (broadcast.broadcast_period, broadcast.local_bind_port, broadcast.local_bind_address) == (
        2000,
        -1,
        None,
    )
    (discovery,) = config.discovery_groups
    assert (discovery.name, discovery.refresh_timeout, discovery.local_bind_address) == ("dg", 10000, None)
    cluster = config.cluster_connection()
    assert cluster is not None and cluster.discovery_group == "dg"
    assert config.ha_partners() == ()  # no static connectors: its members are the discovered ones


def test_set_values_are_read(write_config: WriteConfig) -> None:
    bind = "<local-bind-address>127.0.0.1</local-bind-address><local-bind-port>0</local-bind-port>"
    body = BROADCAST.replace(
        "<group-port>", "<broadcast-period>250</broadcast-period>" + bind + "<group-port>"
    )
    body += DISCOVERY.replace("<group-port>", "<refresh-timeout>1500</refresh-timeout><group-port>")
    config, _ = load_config(write_config(SEC + QUORUM + CONNECTORS + body))
    assert (config.broadcast_groups[0].broadcast_period, config.broadcast_groups[0].local_bind_address) == (
        250,
        "127.0.0.1",
    )
    assert config.broadcast_groups[0].local_bind_port == 0
    assert config.discovery_groups[0].refresh_timeout == 1500


def test_a_unicast_group_address_is_an_error(write_config: WriteConfig) -> None:
    found = errors(write_config, CONNECTORS + BROADCAST.replace("231.7.7.7", "10.0.0.1"))
    assert any("10.0.0.1 is not a multicast address" in e for e in found)
    found = errors(write_config, CONNECTORS + BROADCAST.replace("231.7.7.7", "ff02::1"))
    assert any("ff02::1 is not an IPv4 address" in e for e in found)


def test_a_missing_port_or_a_bad_one_is_an_error(write_config: WriteConfig) -> None:
    found = errors(write_config, DISCOVERY.replace("<group-port>9876</group-port>", ""))
    assert any("<discovery-group> 'dg' needs group-port" in e for e in found)
    found = errors(write_config, DISCOVERY.replace("9876", "70000"))
    assert any("70000" in e for e in found)


def test_an_unknown_connector_or_discovery_group_is_an_error(write_config: WriteConfig) -> None:
    found = errors(write_config, CONNECTORS + BROADCAST.replace(">self<", ">elsewhere<"))
    assert any("no <connector> named 'elsewhere'" in e for e in found)
    found = errors(write_config, CONNECTORS + CLUSTER)
    assert any("no <discovery-group> named 'dg'" in e for e in found)


def test_a_broadcast_group_without_a_connector_is_an_error(write_config: WriteConfig) -> None:
    found = errors(write_config, CONNECTORS + BROADCAST.replace("<connector-ref>self</connector-ref>", ""))
    assert any("'bg' names no connector" in e for e in found)


def test_jgroups_is_refused(write_config: WriteConfig) -> None:
    found = errors(
        write_config, DISCOVERY.replace("<group-port>", "<jgroups-file>j.xml</jgroups-file><group-port>")
    )
    assert any("JGroups is not run here" in e for e in found)


@pytest.mark.parametrize(
    "policy",
    [
        "",
        "<ha-policy><shared-store><primary/></shared-store></ha-policy>",
        "<ha-policy><replication><primary><manager><class-name>"
        "org.apache.activemq.artemis.lockmanager.file.FileBasedLockManager</class-name><properties>"
        '<property key="locks-folder" value="/tmp"/></properties></manager></primary>'
        "</replication></ha-policy>",
    ],
)
def test_groups_are_refused_where_no_cluster_membership_runs(write_config: WriteConfig, policy: str) -> None:
    """Only a replicated server with quorum voting keeps a membership: elsewhere a group would do nothing."""
    with pytest.raises(ConfigError) as info:
        load_config(write_config(SEC + policy + CONNECTORS + BROADCAST + DISCOVERY))
    found = [str(p) for p in info.value.problems if p.severity == "error"]
    assert sum("runs here only on a replicated server with quorum voting" in e for e in found) == 2


def test_a_backup_with_discovery_alone_is_an_error(write_config: WriteConfig) -> None:
    """A backup replicates from static connectors only: with discovery alone it would copy from nobody."""
    backup = "<ha-policy><replication><backup/></replication></ha-policy>"
    body = SEC + backup + CONNECTORS + DISCOVERY + CLUSTER
    with pytest.raises(ConfigError) as info:
        load_config(write_config(body))
    found = [str(p) for p in info.value.problems if p.severity == "error"]
    assert len(found) == 1 and "replicates from static connectors only" in found[0], found
    partner = '<connector name="primary">tcp://127.0.0.2:5672</connector></connectors>'
    static = (
        "<static-connectors><connector-ref>primary</connector-ref></static-connectors><discovery-group-ref"
    )
    config, _ = load_config(
        write_config(body.replace("</connectors>", partner).replace("<discovery-group-ref", static))
    )
    assert [c.name for c in config.ha_partners()] == ["primary"]
