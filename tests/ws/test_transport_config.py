"""What broker.xml says about WebSocket and HTTP upgrades, as loaded: ws:// and wss:// broker connections,
an acceptor's httpUpgradeEnabled, handshake-timeout and webSocketMaxFramePayloadLength, and a colocated
backup's copy of its host's acceptors and connectors (broker_core/config/colocated.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.config import ConfigError, load_config
from broker_core.config.colocated import (
    backup_acceptor,
    backup_connector,
    backup_connector_uri,
    shared_with_host,
)
from broker_core.config.model import Acceptor, BrokerConfig, Connector
from broker_core.config.uri import ParsedUri, format_uri, parse_acceptor_uri, parse_connection_uri
from broker_core.config.values import BadValue
from broker_core.http_upgrade import Upgrade
from connections.failover.bridge import upgrade_of
from connections.failover.uri import parse_failover_uri
from connections.outbound import client_upgrade

HEAD = (
    '<configuration xmlns="urn:activemq">\n<core xmlns="urn:activemq:core">\n'
    "<security-enabled>false</security-enabled>\n"
)


def load(tmp_path: Path, body: str) -> BrokerConfig:
    path = tmp_path / "broker.xml"
    path.write_text(HEAD + body + "\n</core>\n</configuration>\n")
    return load_config(path, environ={})[0]


def errors(tmp_path: Path, body: str) -> list[str]:
    with pytest.raises(ConfigError) as failed:
        load(tmp_path, body)
    return [f"{p.message}; expected {p.expected}" for p in failed.value.problems]


def connection(uri: str) -> str:
    return f'<broker-connections><amqp-connection uri="{uri}" name="c"/></broker-connections>'


def test_a_ws_broker_connection_has_its_scheme_path_and_alternates(tmp_path: Path) -> None:
    uri = "ws://dc2:8080/amqp/ws?activemqServerName=dc2-backup#dc3:8080,wss://dc4:443?sslCaPath=ca.pem"
    endpoints = load(tmp_path, connection(uri)).broker_connections[0].endpoints
    assert [(e.scheme, e.host, e.port, e.path) for e in endpoints] == [
        ("ws", "dc2", 8080, "/amqp/ws"),
        ("ws", "dc3", 8080, "/amqp/ws"),  # no scheme: the primary's scheme and path
        ("wss", "dc4", 443, "/"),
    ]
    assert endpoints[1].params == {"activemqServerName": "dc2-backup"}  # no parameters: the primary's
    assert endpoints[2].params == {"sslCaPath": "ca.pem"}


def test_what_a_connector_asks_for_follows_its_uri(tmp_path: Path) -> None:
    body = connection(
        "ws://h:1/x?activemqServerName=b;httpUpgradeEndpoint=e#tcp://h:2?httpUpgradeEnabled=true"
    )
    ws, http = load(tmp_path, body).broker_connections[0].endpoints
    upgrade = client_upgrade(ws)
    assert upgrade is not None
    assert (upgrade.kind, upgrade.path, upgrade.server_name, upgrade.endpoint) == (
        "websocket",
        "/x",
        "b",
        "e",
    )
    upgrade = client_upgrade(http)
    assert upgrade is not None and (upgrade.kind, upgrade.server_name) == ("activemq-remoting", None)
    plain = (
        load(tmp_path, connection("tcp://h:1?httpUpgradeEnabled=false")).broker_connections[0].endpoints[0]
    )
    assert client_upgrade(plain) is None


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (connection("wss://h:1?sslEnabled=false"), "wss:// with sslEnabled=false"),
        (connection("tcp://h:1/amqp"), "a path ('/amqp') in tcp:// URI"),
        (connection("http://h:1"), "unsupported scheme 'http'"),
        (
            connection("tcp://h:1?httpUpgradeEnabled=yes"),
            "URI parameter httpUpgradeEnabled: bad boolean 'yes'",
        ),
        (
            '<acceptors><acceptor name="a">ws://h:1</acceptor></acceptors>',
            "scheme ws:// is for broker connections",
        ),
        ('<connectors><connector name="c">wss://h:1</connector></connectors>', "httpUpgradeEnabled=true"),
        (
            '<acceptors><acceptor name="a">tcp://h:1?handshake-timeout=-1</acceptor></acceptors>',
            "handshake-timeout",
        ),
        (
            '<acceptors><acceptor name="a">tcp://h:1?webSocketEncoderType=text</acceptor></acceptors>',
            "text frames",
        ),
        (
            '<acceptors><acceptor name="a">tcp://h:1?webSocketCompressionSupported=true</acceptor></acceptors>',
            "permessage-deflate",
        ),
    ],
)
def test_what_cannot_be_done_is_an_error_saying_so(tmp_path: Path, body: str, says: str) -> None:
    found = errors(tmp_path, body)
    assert any(says in line for line in found), found


def test_an_acceptors_upgrade_settings_are_read(tmp_path: Path) -> None:
    uri = "tcp://h:1?httpUpgradeEnabled=true;handshake-timeout=3;webSocketMaxFramePayloadLength=1048576"
    body = (
        f'<acceptors><acceptor name="a">{uri}</acceptor><acceptor name="b">tcp://h:2</acceptor></acceptors>'
    )
    a, b = load(tmp_path, body).acceptors
    assert (a.http_upgrade, a.handshake_timeout, a.websocket_max_payload) == (True, 3, 1048576)
    assert (b.http_upgrade, b.handshake_timeout, b.websocket_max_payload) == (
        False,
        10,
        None,
    )  # Artemis's 10 s


@pytest.mark.parametrize(
    "uri",
    ["tcp://h:5672", "tcp://[::1]:5672?sslEnabled=true;trustAll=true", "ws://h:80/a/b?x=1", "wss://h:443"],
)
def test_a_formatted_uri_parses_back_to_itself(uri: str) -> None:
    parsed = parse_connection_uri(uri)[0]
    assert parse_connection_uri(format_uri(parsed))[0] == parsed


# ------------------------------------------------------------------------------------------ colocated


def test_a_colocated_backups_http_connector_keeps_the_port_and_names_the_backup() -> None:
    assert backup_connector_uri("tcp://h:8080?httpUpgradeEnabled=true", "backup-1", 100) == (
        "tcp://h:8080?httpUpgradeEnabled=true;activemqServerName=backup-1"
    )
    # a name written by the operator stays
    named = "tcp://h:8080?httpUpgradeEnabled=true;activemqServerName=mine"
    assert backup_connector_uri(named, "backup-1", 100) == named


def test_a_colocated_backups_other_connectors_move_unless_do_not_offset() -> None:
    assert backup_connector_uri("tcp://h:61616?sslEnabled=true", "b", 100) == "tcp://h:61716?sslEnabled=true"
    assert (
        backup_connector_uri("tcp://h:61616?doNotOffset=true", "b", 100) == "tcp://h:61616?doNotOffset=true"
    )
    assert backup_connector_uri("tcp://h:61616?httpUpgradeEnabled=false", "b", 100) == (
        "tcp://h:61716?httpUpgradeEnabled=false"
    )
    moved = backup_connector(Connector(name="c", uri="tcp://h:61616", host="h", port=61616), "b", 7)
    assert (moved.port, moved.uri, moved.name) == (61623, "tcp://h:61623", "c")


def test_a_colocated_backups_acceptors_move_or_are_the_hosts() -> None:
    def acceptor(uri: str) -> Acceptor:
        parsed = parse_acceptor_uri(uri)
        params = parsed.params
        return Acceptor(
            name="a",
            uri=uri,
            host=parsed.host,
            port=parsed.port,
            http_upgrade=params.get("httpUpgradeEnabled") == "true",
            do_not_offset=params.get("doNotOffset") == "true",
        )

    plain = backup_acceptor(acceptor("tcp://0.0.0.0:61616?amqpCredits=5"), 100)
    assert (plain.port, plain.uri, shared_with_host(plain)) == (
        61716,
        "tcp://0.0.0.0:61716?amqpCredits=5",
        False,
    )
    for uri in ("tcp://0.0.0.0:8080?httpUpgradeEnabled=true", "tcp://0.0.0.0:8080?doNotOffset=true"):
        kept = backup_acceptor(acceptor(uri), 100)
        assert (kept.port, kept.uri, shared_with_host(kept)) == (8080, uri, True)


def test_format_uri_writes_artemis_form() -> None:
    assert format_uri(ParsedUri("::1", 5, {"a": "1", "b": "2"})) == "tcp://[::1]:5?a=1;b=2"
    with pytest.raises(BadValue):
        parse_acceptor_uri("ws://h:1")


def test_the_failover_clients_upgrade_follows_its_uri_path_and_names() -> None:
    first, second, third = parse_failover_uri(
        "failover:(ws://h:8080/amqp/ws?activemqServerName=b,amqpwss://h2,tcp://h3:61616?httpUpgradeEnabled=true)"
    ).uris
    assert (first.scheme, first.path, first.url) == ("ws", "/amqp/ws", "ws://h:8080/amqp/ws")
    assert (second.scheme, second.port, second.path) == ("wss", 443, "/")
    upgrade = upgrade_of(first)
    assert upgrade is not None and upgrade.kind is Upgrade.WEBSOCKET
    assert upgrade.request().startswith(b"GET /amqp/ws HTTP/1.1\r\nHost: h:8080\r\n")
    assert b"\r\nactivemqServerName: b\r\n" in upgrade.request()
    remoting = upgrade_of(third)
    assert remoting is not None and remoting.kind is Upgrade.REMOTING and third.url == "amqp://h3:61616"
    with pytest.raises(ValueError, match="a path is for ws:// and wss:// URIs only"):
        parse_failover_uri("amqp://h:5672/x")
