"""The support table (broker_core/config/support.py), row by row through the loader, and its completeness.

Each row is tried in a broker.xml of its own: an implemented name loads silently, one that has no effect
here gives exactly one note on its line, one not implemented yet exactly one error on its line (and a
harmless value of it, what this broker does anyway, nothing). So a parser that reads a name without
judging it, or judges it by the wrong table, fails here. The table itself must cover every name Artemis
2.40's schema has in the elements it judges, and every transport parameter of Artemis 2.40's acceptors
and connectors (the key sets of its TransportConstants), with no name Artemis does not have.
"""

from __future__ import annotations

import importlib.util
import re
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from conftest import WriteConfig
from pydantic_core import PydanticUndefined

from broker_core.config import ConfigError, ConfigProblem, load_config
from broker_core.config import acceptors as acceptors_module
from broker_core.config.ha import _ALLOWED
from broker_core.config.model import AddressSettings, BrokerConfig, HaPolicy, QueueConfig
from broker_core.config.parser import _SECTIONS
from broker_core.config.schema import artemis
from broker_core.config.support import (
    ADDRESS_SETTING,
    CLUSTER_CONNECTION,
    CORE,
    ELEMENTS,
    METRICS,
    QUEUE,
    QUORUM_PARAMETERS,
    URI_PARAMETERS,
    Rule,
    Support,
    UriKind,
)

REPO = Path(__file__).resolve().parents[2]
SEC = "<security-enabled>false</security-enabled>\n"
# names in the tables beyond Artemis 2.40's schema: ours, and an older Artemis's (which its files still have)
OURS = {"core": {"journal-sync-durable", "purge-page-folders"}}
# what a harmless value is not: a value asking for something this broker does not do
CONTRARY = {
    "true": "false",
    "false": "true",
    "-1": "5",
    "0": "5",
    "off": "FORCE",
    "pem": "JKS",
    "jdk": "OPENSSL",
}

# Artemis 2.40's TransportConstants.ALLOWABLE_ACCEPTOR_KEYS and ALLOWABLE_CONNECTOR_KEYS (read from the
# artemis-core-client jar), and the setters of its protocol managers an acceptor's URI may set
ARTEMIS_ACCEPTOR_KEYS = """
sslEnabled sslAutoReload httpResponseTime httpServerScanPeriod httpUpgradeEnabled useNio useEpoll
useKQueue useInvm protocol protocols scheme host port keyStoreProvider keyStoreType keyStorePath
keyStorePassword keyStoreAlias trustStoreProvider trustStoreType trustStorePath trustStorePassword
enabledCipherSuites enabledProtocols needClientAuth wantClientAuth verifyHost sniHost tcpNoDelay
tcpSendBufferSize tcpReceiveBufferSize writeBufferHighWaterMark writeBufferLowWaterMark
nioRemotingThreads remotingThreads batchDelay directDeliver clusterConnection stompConsumerCredits
stompConsumerWindowSize stomp-min-large-message-size stompMinLargeMessageSize connectionTtl
connectionTtlMax connectionTtlMin heartBeatToConnectionTtlModifier stomp-enable-message-id
stompEnableMessageId connectionsAllowed stompMaxFramePayloadLength webSocketMaxFramePayloadLength
backlog crlPath handshake-timeout sslProvider trustManagerFactoryPlugin shutdownTimeout quietPeriod
disableStompServerHeader autoStart router
""".split()  # noqa: SIM905
ARTEMIS_PROTOCOL_MANAGER_KEYS = """
amqpCredits amqpLowCredits amqpMinLargeMessageSize amqpDuplicateDetection amqpIdleTimeout
directDeliver maxFrameSize saslMechanisms saslLoginConfigScope anycastPrefix multicastPrefix
initialRemoteMaxFrameSize amqpUseModifiedForTransientDeliveryErrors
amqpTreatRejectAsUnmodifiedDeliveryFailed ackManagerFlushTimeout mirrorMaxPendingAcks pubSubPrefix
securityDomain supportAdvisory suppressInternalManagementObjects actorThresholdBytes
maxInactivityDuration maxInactivityDurationInitalDelay openWireDestinationCacheSize
openwireMaxPacketChunkSize openwireUseDuplicateDetectionOnFailover rebalanceClusterClients
updateClusterClients updateClusterClientsOnRemove useKeepAlive virtualTopicConsumerLruCacheMax
virtualTopicConsumerWildcards allowLinkStealing closeMqttConnectionOnPublishAuthorizationFailure
defaultMqttSessionExpiryInterval maximumPacketSize receiveMaximum serverKeepAlive topicAliasMaximum
""".split()  # noqa: SIM905
ARTEMIS_CONNECTOR_KEYS = """
activemqServerName sslEnabled httpEnabled httpClientIdleTime httpClientIdleScanPeriod
httpRequiresSessionId httpUpgradeEnabled httpUpgradeEndpoint useServlet servletPath useNio
useNioGlobalWorkerPool useEpoll useKQueue useGlobalWorkerPool host port localAddress localPort
keyStoreProvider keyStoreType keyStorePath keyStorePassword keyStoreAlias trustStoreProvider
trustStoreType trustStorePath trustStorePassword enabledCipherSuites enabledProtocols verifyHost
trustAll forceSSLParameters sniHost tcpNoDelay tcpSendBufferSize tcpReceiveBufferSize
writeBufferHighWaterMark writeBufferLowWaterMark nioRemotingThreads remotingThreads batchDelay
socksEnabled socksHost socksPort socksVersion socksUsername socksPassword socksRemoteDNS
connect-timeout-millis useDefaultSslContext sslProvider trustManagerFactoryPlugin handshake-timeout
crlPath
""".split()  # noqa: SIM905
# ours, and the two of the colocated-backup design (an HTTP header and a port-offset exemption)
OUR_PARAMETERS = {
    "sslCertPath",
    "sslKeyPath",
    "sslCaPath",
    "mirrorTrustedOrigins",
    "mirrorMaxHeldMessages",
    "mirrorHoldTimeout",
    "consoleSessionTimeout",
    "doNotOffset",
    "activemqServerName",
}
ARTEMIS_PARAMETERS = {
    # Artemis's acceptor reads two web-socket parameters its key list does not name
    UriKind.ACCEPTOR: {
        *ARTEMIS_ACCEPTOR_KEYS,
        *ARTEMIS_PROTOCOL_MANAGER_KEYS,
        "webSocketEncoderType",
        "webSocketCompressionSupported",
    },
    # a client URL's reconnectAttempts and retryInterval: written as attributes of a broker connection
    UriKind.CONNECTION: set(ARTEMIS_CONNECTOR_KEYS) | {"reconnectAttempts", "retryInterval"},
    UriKind.CONNECTOR: set(ARTEMIS_CONNECTOR_KEYS),
}


# ---------------------------------------------------------------------------------- the table is whole


def _schema_names(element: str) -> set[str]:
    schema = artemis()
    return set(schema.children.get(element, ())) | {f"@{a}" for a in schema.attributes.get(element, ())}


@pytest.mark.parametrize("parent", sorted(ELEMENTS))
def test_the_table_covers_every_name_artemis_has_there_and_no_other(parent: str) -> None:
    table = ELEMENTS[parent]
    # one table serves every HA role: it must cover the union of theirs
    roles = [r for r, t in ELEMENTS.items() if t is table]
    artemis_names = set().union(*(_schema_names(r) for r in roles))
    deprecated = {"check-for-live-server"}  # read as check-for-active-server (a warning), then judged as it
    missing = artemis_names - table.keys() - deprecated - {"@match"}  # a setting's match: always read
    assert not missing, f"<{parent}>: Artemis has {sorted(missing)}; the table does not say"
    assert not (table.keys() - artemis_names - OURS.get(parent, set())), "a name Artemis does not have there"


@pytest.mark.parametrize("kind", list(UriKind))
def test_every_artemis_transport_parameter_is_judged_and_no_other(kind: UriKind) -> None:
    table = URI_PARAMETERS[kind]
    assert not ARTEMIS_PARAMETERS[kind] - table.keys()
    assert not table.keys() - ARTEMIS_PARAMETERS[kind] - OUR_PARAMETERS


def test_every_rule_says_why_and_only_a_refused_one_has_harmless_values() -> None:
    tables = [*ELEMENTS.values(), *URI_PARAMETERS.values()]
    for rule in (rule for table in tables for rule in table.values()):
        assert (rule.support == Support.IMPLEMENTED) == (not rule.why)
        assert not (rule.harmless or rule.instead) or rule.support == Support.REFUSED


def test_what_an_acceptor_acts_on_is_what_the_table_says_is_implemented() -> None:
    implemented = {k for k, r in URI_PARAMETERS[UriKind.ACCEPTOR].items() if r.support == Support.IMPLEMENTED}
    read = {*acceptors_module._PARAMS, *acceptors_module._TLS_PARAMS, acceptors_module._SESSION_TIMEOUT}
    assert implemented == read


def test_what_an_outgoing_connection_reads_is_what_the_table_says_is_implemented() -> None:
    """connections/outbound.py reads a broker connection's (and the replication link's) parameters by
    name, and config/colocated.py those a colocated backup's copy of a connector reads: each read must
    be one the table implements, and each implemented one must be read."""
    source = (REPO / "connections" / "outbound.py").read_text()
    read = set(re.findall(r"\bp\.get\(\"(\w+)\"", source))
    assert read  # the pattern still finds them
    colocated = (REPO / "broker_core" / "config" / "colocated.py").read_text()
    read |= set(re.findall(r"_is_true\(params, \"(\w+)\"\)", colocated))
    assert "doNotOffset" in read
    for kind in (UriKind.CONNECTION, UriKind.CONNECTOR):
        implemented = {k for k, r in URI_PARAMETERS[kind].items() if r.support == Support.IMPLEMENTED}
        assert read == implemented, kind


# ---------------------------------------------------------------------------------- row by row


def _sample(annotation: Any, default: Any) -> str:
    """A value the loader converts for a model field: its default, else one of its type."""
    if default is not None and default is not PydanticUndefined:
        if isinstance(default, bool):
            return str(default).lower()
        return str(default.value) if isinstance(default, Enum) else str(default)
    enums = [a for a in getattr(annotation, "__args__", ()) if isinstance(a, type) and issubclass(a, Enum)]
    if enums:
        return str(next(iter(enums[0])).value)
    text = str(annotation)
    return "data/x" if "Path" in text else "1000" if "int" in text else "x"


def _field_sample(model: Any, name: str) -> str:
    field = model.model_fields.get(name.lstrip("@").replace("-", "_"))
    return _sample(field.annotation, field.default) if field is not None else ""


def _cases(table: dict[str, Rule], sample: Any, skip: set[str]) -> list[Any]:
    """(name, value, expected support) per row; a refused row with harmless values twice: harmless
    (implemented) and contrary (refused)."""
    cases = []
    for name, rule in table.items():
        if name in skip:
            continue
        if rule.harmless:
            harmless = rule.harmless[0]
            cases.append(pytest.param(name, harmless, Support.IMPLEMENTED, id=f"{name}={harmless}"))
            contrary = CONTRARY.get(harmless.lower(), "x")
            cases.append(pytest.param(name, contrary, Support.REFUSED, id=f"{name}={contrary}"))
        else:
            cases.append(pytest.param(name, sample(name), rule.support, id=name))
    return cases


def _outcome(write_config: WriteConfig, body: str, *, strict: bool = False) -> list[ConfigProblem]:
    try:
        return load_config(write_config(SEC + body + "\n"), environ={}, strict=strict)[1]
    except ConfigError as exc:
        return exc.problems


def _check(problems: list[ConfigProblem], expected: Support, line: int, where: str, what: str = "") -> None:
    shown = [str(p) for p in problems]
    if expected == Support.IMPLEMENTED:
        assert problems == [], shown
        return
    severity, says = (
        ("note", "has no effect here") if expected == Support.INERT else ("error", "not implemented")
    )
    assert [(p.severity, p.line) for p in problems] == [(severity, line)], shown
    at = f"/@{problems[0].attribute}" if problems[0].attribute else ""
    assert where in problems[0].element_path + at, shown
    assert f"{what}{' is ' if what and severity == 'error' else ' '}{says}".strip() in problems[0].message, (
        shown
    )


_CORE_SKIP = {*_SECTIONS, "store", "security-enabled"}


def _core_sample(name: str) -> str:
    if name in ("cluster-user", "cluster-password"):
        return "x"
    return _field_sample(BrokerConfig, name)


@pytest.mark.parametrize(("name", "value", "expected"), _cases(CORE, _core_sample, _CORE_SKIP))
def test_a_core_element(write_config: WriteConfig, name: str, value: str, expected: Support) -> None:
    _check(_outcome(write_config, f"<{name}>{value}</{name}>"), expected, 4, f"core/{name}")


def test_an_element_that_has_no_effect_here_is_refused_under_strict(write_config: WriteConfig) -> None:
    problems = _outcome(write_config, "<journal-type>NIO</journal-type>", strict=True)
    assert [(p.severity, p.line) for p in problems] == [("error", 4)]
    assert problems[0].message.endswith("; refused (--strict)")


@pytest.mark.parametrize(
    ("name", "value", "expected"), _cases(ADDRESS_SETTING, lambda n: _field_sample(AddressSettings, n), set())
)
def test_an_address_setting(write_config: WriteConfig, name: str, value: str, expected: Support) -> None:
    setting = f"<{name}>{value}</{name}>"
    body = f'<address-settings><address-setting match="#">{setting}</address-setting></address-settings>'
    _check(_outcome(write_config, body), expected, 4, f"address-setting[@match=#]/{name}")


@pytest.mark.parametrize(
    ("name", "value", "expected"), _cases(QUEUE, lambda n: _field_sample(QueueConfig, n), {"@name", "filter"})
)
def test_a_queue_attribute_or_element(
    write_config: WriteConfig, name: str, value: str, expected: Support
) -> None:
    if name.startswith("@"):
        queue = f'<queue name="q" {name[1:]}="{value}"/>'
    else:
        queue = f'<queue name="q"><{name}>{value}</{name}></queue>'
    body = f'<addresses><address name="a"><anycast>{queue}</anycast></address></addresses>'
    _check(_outcome(write_config, body), expected, 4, f"queue[@name=q]/{name}")


def _ha_body(name: str, value: str) -> str:
    # in a <primary> or <backup> (a <primary-only>'s <scale-down> is in its own table: PRIMARY_ONLY)
    kind, role = next((k, r) for (k, r), allowed in _ALLOWED.items() if name in allowed and r is not None)
    inner = f"<{name}>{value}</{name}>"
    # quorum voting's parameters are judged where it decides (no <manager>); the others with a manager
    if kind.value == "replication" and name != "manager" and name not in QUORUM_PARAMETERS:
        inner += (
            '<manager><properties><property key="connect-string" value="zk:2181"/></properties></manager>'
        )
    element = f"<{role.value}>{inner}</{role.value}>" if role else inner
    return f"<ha-policy><{kind.value}>{element}</{kind.value}></ha-policy>"


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    _cases(
        ELEMENTS["primary"],
        lambda n: "<enabled>false</enabled>" if n == "scale-down" else _field_sample(HaPolicy, n),
        {"manager"},
    ),
)
def test_an_ha_parameter(write_config: WriteConfig, name: str, value: str, expected: Support) -> None:
    if name == "failback-delay":
        value = "1000"
    _check(_outcome(write_config, _ha_body(name, value)), expected, 4, name)


def _cluster_sample(name: str) -> str:
    if name == "connector-ref":
        return "x"
    if name in ("address", "client-id", "scale-down-connector", "discovery-group-ref", "@uri"):
        return "x"
    return "1000"


_CLUSTER_SKIP = {"@name", "static-connectors"}


@pytest.mark.parametrize(
    ("name", "value", "expected"), _cases(CLUSTER_CONNECTION, _cluster_sample, _CLUSTER_SKIP)
)
def test_a_cluster_connection_element(
    write_config: WriteConfig, name: str, value: str, expected: Support
) -> None:
    connectors = '<connectors><connector name="x">tcp://h:1</connector></connectors>'
    if name.startswith("@"):
        cluster = f'<cluster-connection name="c" {name[1:]}="{value}"/>'
    elif name == "discovery-group-ref":  # a discovery group of that name, where discovery runs
        cluster = (
            f'<cluster-connection name="c"><{name} discovery-group-name="{value}"/></cluster-connection>'
        )
        connectors += (
            "<ha-policy><replication><primary/></replication></ha-policy>"
            f'<discovery-groups><discovery-group name="{value}"><group-address>231.7.7.7</group-address>'
            "<group-port>9876</group-port></discovery-group></discovery-groups>"
        )
    else:
        cluster = f'<cluster-connection name="c"><{name}>{value}</{name}></cluster-connection>'
    body = f"{connectors}<cluster-connections>{cluster}</cluster-connections>"
    _check(_outcome(write_config, body), expected, 4, name.lstrip("@"))


@pytest.mark.parametrize(("name", "value", "expected"), _cases(METRICS, lambda n: "true", {"plugin"}))
def test_a_metrics_element(write_config: WriteConfig, name: str, value: str, expected: Support) -> None:
    _check(
        _outcome(write_config, f"<metrics><{name}>{value}</{name}></metrics>"), expected, 4, f"metrics/{name}"
    )


def test_a_store(write_config: WriteConfig) -> None:
    _check(_outcome(write_config, "<store><file-store/></store>"), Support.IMPLEMENTED, 4, "")
    body = "<store><database-store><jdbc-connection-url>jdbc:x</jdbc-connection-url></database-store></store>"
    _check(_outcome(write_config, body), Support.REFUSED, 4, "store/database-store")
    problems = _outcome(write_config, body.replace("jdbc-connection-url", "jdbc-conection-url"))
    assert [p.severity for p in problems] == ["error", "error"]  # and a typo inside it is one too
    assert "did you mean <jdbc-connection-url>?" in problems[1].message


# ---------------------------------------------------------------------------------- URI parameters

_PARAMETER_SAMPLES = {
    "protocols": "AMQP",
    "amqpCredits": "1000",
    "amqpLowCredits": "300",
    "amqpIdleTimeout": "1000",
    "amqpDuplicateDetection": "true",
    "maxFrameSize": "1024",
    "anycastPrefix": "a://",
    "multicastPrefix": "m://",
    "connectionsAllowed": "5",
    "httpUpgradeEnabled": "true",
    "doNotOffset": "true",
    "mirrorTrustedOrigins": "dc2:dc1",
    "sslEnabled": "false",
    "needClientAuth": "false",
    "verifyHost": "true",
    "trustAll": "false",
    "keyStorePath": "c.pem",
    "trustStorePath": "t.pem",
    "sslCertPath": "c.pem",
    "sslKeyPath": "k.pem;sslCertPath=c.pem",  # a key goes with its certificate
    "sslCaPath": "ca.pem",
    "consoleSessionTimeout": "60000;protocols=CONSOLE",  # read on the console's acceptor
}
_URI_BODIES = {
    UriKind.ACCEPTOR: '<acceptors><acceptor name="a">tcp://h:1?{}</acceptor></acceptors>',
    UriKind.CONNECTION: (
        '<broker-connections><amqp-connection uri="tcp://h:1?{}" name="c"/></broker-connections>'
    ),
    UriKind.CONNECTOR: '<connectors><connector name="c">tcp://h:1?{}</connector></connectors>',
}


@pytest.mark.parametrize(
    ("kind", "name", "value", "expected"),
    [
        pytest.param(kind, *case.values, id=f"{kind.name.lower()}-{case.id}")
        for kind, table in URI_PARAMETERS.items()
        for case in _cases(table, lambda n: _PARAMETER_SAMPLES.get(n, "1"), set())
    ],
)
def test_a_uri_parameter(
    write_config: WriteConfig, kind: UriKind, name: str, value: str, expected: Support
) -> None:
    body = _URI_BODIES[kind].format(f"{name}={value}")
    _check(_outcome(write_config, body), expected, 4, "", f"URI parameter {name}")


@pytest.mark.parametrize("kind", list(UriKind))
@pytest.mark.parametrize("name", ["trustStorePath", "sslCaPath"])
def test_a_java_key_store_is_refused_whatever_names_it(
    write_config: WriteConfig, kind: UriKind, name: str
) -> None:
    problems = _outcome(write_config, _URI_BODIES[kind].format(f"{name}=/etc/trust.JKS"))
    _check(problems, Support.REFUSED, 4, "", f"URI parameter {name}")
    assert "Java key stores" in problems[0].message


def test_the_documented_table_is_the_table() -> None:
    """docs/configuration.md shows the table as it is (scripts/support_table.py writes it there)."""
    spec = importlib.util.spec_from_file_location("support_table", REPO / "scripts" / "support_table.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.documented(script.DOC.read_text()) == script.render(), "run scripts/support_table.py"


def test_a_misspelt_attribute_on_an_element_not_read_is_an_error(write_config: WriteConfig) -> None:
    problems = _outcome(write_config, '<diverts><divert nmae="d"/></diverts><bridges colour="x"/>')
    assert [(p.severity, p.attribute) for p in problems] == [
        ("error", None),  # <diverts>: not implemented yet
        ("error", "nmae"),
        ("error", None),  # <bridges>
        ("error", "colour"),
    ]
    assert "(did you mean name?)" in problems[1].message
