"""`<ha-policy>` read whole (Artemis's HA parameters and defaults), checked per policy and role, with the
older names accepted and warned about (`<colocated>`: test_config_colocated.py), `<scale-down>`
read and checked, what has no effect here noted; a `<manager>` must be one this broker has."""

from __future__ import annotations

import pytest
from conftest import WriteConfig

from broker_core.config import load_config
from broker_core.config.errors import ConfigError
from broker_core.config.model import ZOOKEEPER_LOCK_MANAGER, HaKind, HaRole

SEC = "<security-enabled>false</security-enabled>\n"


def load(write_config: WriteConfig, body: str):  # type: ignore[no-untyped-def]
    return load_config(write_config(SEC + body))


def errors(write_config: WriteConfig, body: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(write_config(SEC + body))
    return [str(p) for p in info.value.problems if p.severity == "error"]


def test_no_policy_is_primary_only(write_config: WriteConfig) -> None:
    config, _ = load(write_config, "")
    assert config.ha_policy.kind == HaKind.PRIMARY_ONLY


def test_shared_store_defaults_and_parameters(write_config: WriteConfig) -> None:
    config, _ = load(write_config, "<ha-policy><shared-store><backup/></shared-store></ha-policy>")
    policy = config.ha_policy
    assert (policy.kind, policy.role) == (HaKind.SHARED_STORE, HaRole.BACKUP)
    assert (policy.allow_failback, policy.restart_backup, policy.failover_on_shutdown) == (True, False, False)
    body = (
        "<ha-policy><shared-store><backup><allow-failback>false</allow-failback>"
        "<restart-backup>true</restart-backup><failover-on-shutdown>true</failover-on-shutdown>"
        "</backup></shared-store></ha-policy>"
    )
    policy = load(write_config, body)[0].ha_policy
    assert (policy.allow_failback, policy.restart_backup, policy.failover_on_shutdown) == (False, True, True)


def test_older_names_are_read_with_a_warning(write_config: WriteConfig) -> None:
    config, warnings = load(write_config, "<ha-policy><shared-store><master/></shared-store></ha-policy>")
    assert config.ha_policy.role == HaRole.PRIMARY
    assert any("<master> is deprecated; read as <primary>" in str(w) for w in warnings)
    config, warnings = load(write_config, "<ha-policy><live-only/></ha-policy>")
    assert config.ha_policy.kind == HaKind.PRIMARY_ONLY
    assert any("<live-only> is deprecated" in str(w) for w in warnings)


def test_a_parameter_where_it_does_not_apply_is_an_error_naming_the_place(write_config: WriteConfig) -> None:
    body = "<ha-policy><shared-store><primary><allow-failback>true</allow-failback></primary>"
    body += "</shared-store></ha-policy>"
    found = errors(write_config, body)
    assert any("<allow-failback> does not apply to <shared-store><primary>" in e for e in found)
    assert any("failover-on-shutdown, wait-for-activation" in e for e in found)


def test_replication_without_a_lock_manager_votes(write_config: WriteConfig) -> None:
    body = (
        "<ha-policy><replication><backup><quorum-size>3</quorum-size><vote-retries>2</vote-retries>"
        "<vote-retry-wait>500</vote-retry-wait><quorum-vote-wait>4</quorum-vote-wait>"
        "</backup></replication></ha-policy>"
    )
    config, problems = load(write_config, body)
    policy = config.ha_policy
    assert problems == [] and policy.manager is None  # quorum voting: every parameter acted on, silently
    assert (policy.quorum_size, policy.vote_retries, policy.vote_retry_wait, policy.quorum_vote_wait) == (
        3,
        2,
        500,
        4,
    )
    config, problems = load(write_config, "<ha-policy><replication><primary/></replication></ha-policy>")
    assert problems == [] and config.ha_policy.vote_retries == 12 and config.ha_policy.quorum_vote_wait == 30
    body = (
        "<ha-policy><replication><primary><manager><properties>"
        '<property key="connect-string" value="127.0.0.1:2181"/></properties></manager>'
        "<coordination-id>peers</coordination-id></primary></replication></ha-policy>"
    )
    policy, problems = load(write_config, body)
    policy = policy.ha_policy
    assert problems == []
    assert policy.kind == HaKind.REPLICATION and policy.coordination_id == "peers"
    assert policy.manager is not None and policy.manager.class_name == ZOOKEEPER_LOCK_MANAGER
    assert policy.manager.properties == {"connect-string": "127.0.0.1:2181"}
    assert (policy.initial_replication_sync_timeout, policy.vote_retries, policy.quorum_vote_wait) == (
        30000,
        12,
        30,
    )


def test_a_typo_inside_the_policy_says_did_you_mean(write_config: WriteConfig) -> None:
    body = "<ha-policy><shared-store><backup><alow-failback>true</alow-failback></backup>"
    body += "</shared-store></ha-policy>"
    assert any("did you mean <allow-failback>" in e for e in errors(write_config, body))


def test_connectors_and_lock_settings(write_config: WriteConfig) -> None:
    body = (
        '<connectors><connector name="backup">tcp://10.0.0.2:61617?sslEnabled=false</connector></connectors>'
        "<journal-lock-acquisition-timeout>5000</journal-lock-acquisition-timeout>"
        "<node-manager-lock-directory>data/locks</node-manager-lock-directory>"
    )
    config, _ = load(write_config, body)
    assert [(c.name, c.host, c.port) for c in config.connectors] == [("backup", "10.0.0.2", 61617)]
    assert config.journal_lock_acquisition_timeout == 5000
    assert config.node_manager_lock_directory is not None
    assert (
        config.node_manager_lock_directory.is_absolute()
        and config.node_manager_lock_directory.name == "locks"
    )
    assert ZOOKEEPER_LOCK_MANAGER.endswith("CuratorDistributedLockManager")


PAIR = (
    '<connectors><connector name="self">tcp://127.0.0.1:61616</connector>'
    '<connector name="dc1-b">tcp://10.0.0.2:61616</connector>'
    '<connector name="dc2">tcp://10.0.1.1:61616</connector></connectors>'
    '<acceptors><acceptor name="amqp">tcp://127.0.0.1:61616?protocols=AMQP</acceptor></acceptors>'
    "<ha-policy><shared-store><primary/></shared-store></ha-policy>"
)


def test_a_cluster_connection_names_the_partner_and_its_ttl(write_config: WriteConfig) -> None:
    body = PAIR + (
        '<cluster-connections><cluster-connection name="pair"><connector-ref>self</connector-ref>'
        "<connection-ttl>3000</connection-ttl><retry-interval>100</retry-interval>"
        "<static-connectors><connector-ref>dc1-b</connector-ref></static-connectors>"
        "</cluster-connection></cluster-connections>"
    )
    config, warnings = load(write_config, body)
    cluster = config.cluster_connection()
    assert cluster is not None
    assert (cluster.name, cluster.connector_ref, cluster.static_connectors) == ("pair", "self", ("dc1-b",))
    assert (cluster.connection_ttl, cluster.check_period, cluster.retry_interval) == (3000, 30000, 100)
    assert [c.name for c in config.ha_partners()] == ["dc1-b"]  # not dc2, a connector for something else
    assert warnings == []
    # without one, every connector that is not one of our acceptors is a partner
    assert [c.name for c in load(write_config, PAIR)[0].ha_partners()] == ["dc1-b", "dc2"]


def test_cluster_name_picks_the_cluster_connection_a_pair_uses(write_config: WriteConfig) -> None:
    """Two cluster connections: the first by default, the one `cluster-name` names otherwise (its partners,
    its connection-ttl and call-timeout: 30000 by default, as the reference's)."""
    clusters = (
        '<cluster-connections><cluster-connection name="queues"><connector-ref>self</connector-ref>'
        "<static-connectors><connector-ref>dc2</connector-ref></static-connectors></cluster-connection>"
        '<cluster-connection name="pair"><connector-ref>self</connector-ref>'
        "<connection-ttl>2000</connection-ttl><call-timeout>1500</call-timeout>"
        "<static-connectors><connector-ref>dc1-b</connector-ref></static-connectors></cluster-connection>"
        "</cluster-connections>"
    )
    manager = (
        '<manager><properties><property key="connect-string" value="127.0.0.1:2181"/></properties></manager>'
    )
    replicated = PAIR.replace(
        "<shared-store><primary/></shared-store>",
        f"<replication><primary>{manager}{{}}</primary></replication>",
    )
    first, _ = load(write_config, replicated.format("") + clusters)
    cluster = first.cluster_connection()
    assert cluster is not None and (cluster.name, cluster.call_timeout) == ("queues", 30000)
    assert [c.name for c in first.ha_partners()] == ["dc2"]
    named, warnings = load(write_config, replicated.format("<cluster-name>pair</cluster-name>") + clusters)
    cluster = named.cluster_connection()
    assert cluster is not None and (cluster.name, cluster.connection_ttl, cluster.call_timeout) == (
        "pair",
        2000,
        1500,
    )
    assert [c.name for c in named.ha_partners()] == ["dc1-b"]
    assert warnings == []


def test_a_cluster_connection_naming_no_connector_is_an_error_and_clustering_is_judged(
    write_config: WriteConfig,
) -> None:
    body = PAIR + (
        '<cluster-connections><cluster-connection name="pair">'
        "<connector-ref>self</connector-ref><message-load-balancing>ON_DEMAND</message-load-balancing>"
        "<static-connectors><connector-ref>dc1-c</connector-ref></static-connectors>"
        "</cluster-connection></cluster-connections>"
    )
    problems = errors(write_config, body)
    assert len(problems) == 2
    assert (
        "message-load-balancing: not implemented yet: queues are not clustered across brokers" in problems[0]
    )
    assert "expected OFF, or left out" in problems[0]
    assert "connector-ref" in problems[1] and "no <connector> named 'dc1-c'" in problems[1]
    assert "dc1-b, dc2, self" in problems[1]
    fixed = body.replace("dc1-c", "dc1-b").replace("ON_DEMAND", "OFF")
    fixed = fixed.replace(
        "</cluster-connection>", "<max-retry-interval>100</max-retry-interval></cluster-connection>"
    )
    _, notes = load(write_config, fixed)
    assert [(n.severity, n.element_path.rsplit("/", 1)[1]) for n in notes] == [("note", "max-retry-interval")]


ZK = "org.apache.activemq.artemis.lockmanager.zookeeper.CuratorDistributedLockManager"


def manager(class_name: str, *properties: tuple[str, str]) -> str:
    props = "".join(f'<property key="{k}" value="{v}"/>' for k, v in properties)
    return (
        f"<ha-policy><replication><primary><manager><class-name>{class_name}</class-name>"
        f"<properties>{props}</properties></manager></primary></replication></ha-policy>"
    )


def test_a_lock_manager_this_broker_does_not_have_is_an_error_naming_those_it_has(
    write_config: WriteConfig,
) -> None:
    found = errors(write_config, manager("org.foo.MyQuorumVotingPlugin", ("connect-string", "zk:2181")))
    assert len(found) == 1
    assert "lock manager class 'org.foo.MyQuorumVotingPlugin' is not one this broker has" in found[0]
    assert ZK in found[0] and "FileBasedLockManager" in found[0]


@pytest.mark.parametrize(
    ("properties", "says"),
    [
        ((("connect-string", "zk:2181"), ("sesion-ms", "2000")), "'sesion-ms' of this lock manager (did you"),
        ((("connect-string", "zk:2181"), ("session-ms", "soon")), "bad integer 'soon'"),
        ((("namespace", "x"),), "missing lock manager property connect-string"),
    ],
)
def test_lock_manager_properties_are_those_it_reads(
    write_config: WriteConfig, properties: tuple[tuple[str, str], ...], says: str
) -> None:
    found = errors(write_config, manager(ZK, *properties))
    assert len(found) == 1 and says in found[0], found
    file_manager = "org.apache.activemq.artemis.lockmanager.file.FileBasedLockManager"
    assert load(write_config, manager(file_manager, ("locks-folder", "/tmp/l")))[1] == []


CONNECTORS = (
    '<connectors><connector name="a">tcp://h1:61616</connector><connector name="b">tcp://h2:61616</connector>'
    "</connectors>"
)


def scale_down(inner: str, policy: str = "<primary-only>{}</primary-only>") -> str:
    return CONNECTORS + "<ha-policy>" + policy.format(f"<scale-down>{inner}</scale-down>") + "</ha-policy>"


def test_scale_down_is_read_with_its_connectors_group_and_switch(write_config: WriteConfig) -> None:
    inner = "<group-name>g1</group-name><connectors><connector-ref>b</connector-ref>"
    inner += "<connector-ref>a</connector-ref></connectors>"
    config, problems = load(write_config, scale_down(inner))
    assert problems == []
    found = config.ha_policy.scale_down
    assert found is not None and (found.enabled, found.group_name, found.connectors) == (
        True,
        "g1",
        ("b", "a"),
    )
    off = load(write_config, scale_down("<enabled>false</enabled><group-name>g1</group-name>"))[0]
    assert off.ha_policy.scale_down is not None and not off.ha_policy.scale_down.enabled
    assert load(write_config, "")[0].ha_policy.scale_down is None


def test_scale_down_names_inside_it_are_checked(write_config: WriteConfig) -> None:
    found = errors(write_config, scale_down("<conectors/><grup-name>g</grup-name>"))
    assert "(did you mean <connectors>?)" in found[0] and "(did you mean <group-name>?)" in found[1], found


@pytest.mark.parametrize(
    ("inner", "says"),
    [
        ("<connectors><connector-ref>c</connector-ref></connectors>", "no <connector> named 'c'"),
        ("<group-name>g</group-name>", "<scale-down> needs the members it may move messages to"),
        ("<enabled>maybe</enabled><connectors><connector-ref>a</connector-ref></connectors>", "maybe"),
        (
            '<discovery-group-ref discovery-group-name="dg"/>',
            "not implemented yet: a scale-down's members found by discovery",
        ),
    ],
    ids=["unknown connector", "no members", "bad switch", "discovery group"],
)
def test_a_scale_down_that_cannot_work_is_one_clear_error(
    write_config: WriteConfig, inner: str, says: str
) -> None:
    found = errors(write_config, scale_down(inner))
    assert len(found) == 1 and says in found[0], found


def test_parameters_read_with_no_effect_here_are_noted_once_each(write_config: WriteConfig) -> None:
    body = (
        "<ha-policy><replication><primary><manager><properties>"
        '<property key="connect-string" value="127.0.0.1:2181"/></properties></manager>'
        "<check-for-active-server>true</check-for-active-server><quorum-size>3</quorum-size>"
        "<vote-on-replication-failure>true</vote-on-replication-failure>"
        "</primary></replication></ha-policy>"
    )
    config, notes = load(write_config, body)
    assert config.ha_policy.quorum_size == 3 and config.ha_policy.check_for_active_server is True
    assert [(n.severity, n.element_path.rsplit("/", 1)[1]) for n in notes] == [
        ("note", "quorum-size"),
        ("note", "vote-on-replication-failure"),
    ]
    assert "with a <manager>, the lock manager decides" in notes[0].message
    config, notes = load(write_config, "<ha-policy><shared-store><primary><wait-for-activation>false"
                         "</wait-for-activation></primary></shared-store></ha-policy>")  # fmt: skip
    assert notes == [] and config.ha_policy.wait_for_activation is False
