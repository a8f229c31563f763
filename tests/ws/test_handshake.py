"""The HTTP upgrades, both sides, sans I/O (broker_core/http_upgrade.py), and who takes a connection
(`Routes` in broker_core/upgrade.py): what is answered 101, what is refused with which status and line."""

from __future__ import annotations

import base64
import hashlib

import pytest

from broker_core.config.model import Acceptor
from broker_core.http_upgrade import (
    MAX_HEAD,
    ClientUpgrade,
    Refusal,
    Upgrade,
    UpgradeFailed,
    UpgradeRequest,
    accept_key,
    head_end,
    parse_request,
    sniff_http,
    switching,
)
from broker_core.upgrade import Routes

KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 section 1.3's sample key


def request(*headers: str, line: str = "GET /amqp HTTP/1.1") -> bytes:
    return ("\r\n".join([line, *headers]) + "\r\n\r\n").encode()


WS = (
    "Host: broker:5672",
    "Upgrade: websocket",
    "Connection: keep-alive, Upgrade",
    f"Sec-WebSocket-Key: {KEY}",
    "Sec-WebSocket-Version: 13",
)


def test_rfc_6455s_sample_key_gets_its_accept_value() -> None:
    assert accept_key(Upgrade.WEBSOCKET, KEY) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 section 1.3


def test_a_browser_style_upgrade_with_subprotocol_amqp_is_switched_and_answered_with_it() -> None:
    parsed = parse_request(request(*WS, "Sec-WebSocket-Protocol: mqtt, AMQP", "Origin: http://page"))
    assert parsed == UpgradeRequest(Upgrade.WEBSOCKET, KEY, "/amqp", None, None, subprotocol="AMQP")
    answer = switching(parsed).decode()
    assert answer.startswith("HTTP/1.1 101 Switching Protocols\r\n")
    assert "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in answer
    assert "Sec-WebSocket-Protocol: AMQP\r\n" in answer  # the client's own spelling, as it must match
    assert answer.endswith("\r\n\r\n")


def test_without_an_offered_subprotocol_the_answer_names_none() -> None:
    parsed = parse_request(request(*WS))
    assert parsed.subprotocol is None
    assert "Sec-WebSocket-Protocol" not in switching(parsed).decode()


def test_a_browser_names_the_server_in_the_query_as_it_cannot_add_headers() -> None:
    parsed = parse_request(request(*WS, line="GET /amqp?activemqServerName=backup%2D1&x=y HTTP/1.1"))
    assert (parsed.server_name, parsed.endpoint, parsed.path) == (
        "backup-1",
        None,
        "/amqp?activemqServerName=backup%2D1&x=y",
    )
    both = request(
        *WS, "activemqServerName: from-header", line="GET /?activemqServerName=from-query HTTP/1.1"
    )
    assert parse_request(both).server_name == "from-header"


def test_the_routing_headers_are_read_from_either_upgrade() -> None:
    ws = parse_request(request(*WS, "activemqservername: backup-1", "httpUpgradeEndpoint: http-acceptor"))
    assert (ws.server_name, ws.endpoint) == ("backup-1", "http-acceptor")
    remoting = parse_request(
        request(
            "Host: h",
            "Upgrade: activemq-remoting",
            "Connection: Upgrade",
            "Sec-ActiveMQRemoting-Key: abc",
            "activemqServerName: main",
        )
    )
    assert remoting == UpgradeRequest(Upgrade.REMOTING, "abc", "/amqp", "main", None)
    expected = base64.b64encode(hashlib.sha1(b"abcCF70DEB8-70F9-4FBA-8B4F-DFC3E723B4CD").digest()).decode()
    answer = switching(remoting).decode()
    assert f"Sec-ActiveMQRemoting-Accept: {expected}\r\n" in answer
    assert "Upgrade: activemq-remoting\r\n" in answer


@pytest.mark.parametrize(
    ("head", "status", "why"),
    [
        (request("Host: h"), 426, "this is an AMQP acceptor"),
        (request(*WS, line="POST / HTTP/1.1"), 405, "POST"),
        (request(*WS, line="GET / HTTP/1.0"), 400, "HTTP/1.1"),
        (request(*WS, line="GET /"), 400, "request line"),
        (request("Host: h", "Upgrade: h2c", "Connection: Upgrade"), 400, "h2c"),
        (request(*WS[1:]), 400, "Host"),
        (request(*WS[:2], *WS[3:]), 400, "Connection: Upgrade"),
        (request(*WS[:4], "Sec-WebSocket-Version: 8"), 426, "version 13"),
        (request(*WS[:3], "Sec-WebSocket-Key: c2hvcnQ=", WS[4]), 400, "16 bytes"),
        (request(*WS, "Sec-WebSocket-Protocol: mqtt, stomp"), 400, "mqtt, stomp"),
        (
            request("Host: h", "Upgrade: activemq-remoting", "Connection: Upgrade"),
            400,
            "Sec-ActiveMQRemoting-Key",
        ),
        (request(*WS, "Bad Header: x"), 400, "malformed header"),
    ],
)
def test_a_request_that_cannot_be_switched_is_refused_saying_why(head: bytes, status: int, why: str) -> None:
    with pytest.raises(Refusal) as refused:
        parse_request(head)
    assert refused.value.status == status
    assert why in refused.value.why
    answer = refused.value.response()
    assert answer.startswith(f"HTTP/1.1 {status} ".encode())
    body = answer.split(b"\r\n\r\n", 1)[1]
    assert f"Content-Length: {len(body)}\r\n".encode() in answer
    assert why.encode() in body


def test_426_says_which_version_and_upgrade_it_wants() -> None:
    with pytest.raises(Refusal) as refused:
        parse_request(request(*WS[:4], "Sec-WebSocket-Version: 8"))
    assert b"Sec-WebSocket-Version: 13\r\n" in refused.value.response()


def test_the_head_is_read_to_its_blank_line_and_no_further_than_the_limit() -> None:
    assert head_end(b"GET / HTTP/1.1\r\nHost: h\r\n") == -1
    assert head_end(b"GET / HTTP/1.1\r\n\r\nAMQP") == len(b"GET / HTTP/1.1\r\n\r\n")
    with pytest.raises(Refusal) as refused:
        head_end(b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD)
    assert refused.value.status == 431


@pytest.mark.parametrize(
    ("first", "http"),
    [
        (b"", None),
        (b"G", None),
        (b"GET", None),
        (b"GET ", True),
        (b"OPTIONS /", True),
        (b"AMQP", False),
        (b"\x00\x00", False),
        (b"GE\x00", False),
        (b"POS", None),
    ],
)
def test_the_first_bytes_say_http_amqp_or_not_yet(first: bytes, http: bool | None) -> None:
    assert sniff_http(first) is http


# ------------------------------------------------------------------------------------------ client side


@pytest.mark.parametrize("kind", list(Upgrade))
def test_a_connectors_request_is_what_the_acceptor_switches_and_its_answer_passes_the_check(
    kind: Upgrade,
) -> None:
    client = ClientUpgrade(kind, "::1", 61616, "/amqp", server_name="backup-1", endpoint="http-acceptor")
    sent = client.request()
    assert sent.startswith(b"GET /amqp HTTP/1.1\r\nHost: [::1]:61616\r\n")
    parsed = parse_request(sent)
    assert (parsed.kind, parsed.key, parsed.server_name, parsed.endpoint) == (
        kind,
        client.key,
        "backup-1",
        "http-acceptor",
    )
    client.check(switching(parsed))  # no exception: switched
    assert len(base64.b64decode(client.key)) == 16
    assert ClientUpgrade(kind, "h", 1).key != client.key


def test_a_refusal_reaches_the_connector_with_its_status_and_line() -> None:
    client = ClientUpgrade(Upgrade.WEBSOCKET, "h", 1, server_name="nobody")
    answer = Refusal(404, "no server named nobody in this process (server: main)").response()
    head, body = answer.split(b"\r\n\r\n", 1)
    with pytest.raises(UpgradeFailed, match=r"HTTP 404 Not Found: no server named nobody in this process"):
        client.check(head + b"\r\n\r\n", body)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: AAAA\r\n\r\n",
            "accept key",
        ),
        ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "Upgrade: websocket"),
        ("SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP response"),
    ],
)
def test_a_bad_101_is_not_taken_for_a_switch(answer: str, why: str) -> None:
    with pytest.raises(UpgradeFailed, match=why):
        ClientUpgrade(Upgrade.WEBSOCKET, "h", 1).check(answer.encode())


def test_a_101_with_another_subprotocol_or_an_extension_is_not_taken() -> None:
    client = ClientUpgrade(Upgrade.WEBSOCKET, "h", 1)
    good = switching(UpgradeRequest(Upgrade.WEBSOCKET, client.key)).decode()[:-2]
    with pytest.raises(UpgradeFailed, match="subprotocol 'mqtt'"):
        client.check((good + "Sec-WebSocket-Protocol: mqtt\r\n\r\n").encode())
    with pytest.raises(UpgradeFailed, match="extensions"):
        client.check((good + "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n").encode())


# ------------------------------------------------------------------------------------------ routing


def acceptor(http_upgrade: bool = False) -> Acceptor:
    return Acceptor(name="http-acceptor", uri="tcp://h:1", host="h", port=1, http_upgrade=http_upgrade)


def test_no_name_or_the_main_servers_name_goes_to_it_and_a_backups_name_to_the_backup() -> None:
    routes = Routes("main")
    routes.add("backup-1", lambda a: None)
    ws = UpgradeRequest(Upgrade.WEBSOCKET, KEY)
    assert routes.choose(ws, acceptor()) is None
    assert routes.choose(UpgradeRequest(Upgrade.WEBSOCKET, KEY, server_name="main"), acceptor()) is None
    assert (
        routes.choose(UpgradeRequest(Upgrade.WEBSOCKET, KEY, server_name="backup-1"), acceptor())
        == "backup-1"
    )
    routes.remove("backup-1")
    with pytest.raises(Refusal) as refused:
        routes.choose(UpgradeRequest(Upgrade.WEBSOCKET, KEY, server_name="backup-1"), acceptor())
    assert refused.value.status == 404
    assert refused.value.why == "no server named backup-1 in this process (server: main)"


def test_an_unknown_name_is_refused_naming_what_is_here() -> None:
    routes = Routes("main")
    routes.add("backup-2", lambda a: None)
    routes.add("backup-1", lambda a: None)
    with pytest.raises(Refusal) as refused:
        routes.choose(UpgradeRequest(Upgrade.REMOTING, KEY, server_name="other"), acceptor(http_upgrade=True))
    assert (
        refused.value.why
        == "no server named other in this process (server: main; colocated backups: backup-1, backup-2)"
    )
    with pytest.raises(ValueError, match="main server"):
        routes.add("main", lambda a: None)


def test_activemq_remoting_needs_an_http_upgrade_endpoint_as_artemis_answers_403() -> None:
    remoting = UpgradeRequest(Upgrade.REMOTING, KEY)
    with pytest.raises(Refusal) as refused:
        Routes("main").choose(remoting, acceptor(http_upgrade=False))
    assert refused.value.status == 403
    assert "httpUpgradeEnabled=true" in refused.value.why
    assert Routes("main").choose(remoting, acceptor(http_upgrade=True)) is None


def test_an_upgrade_meant_for_another_acceptor_is_refused() -> None:
    elsewhere = UpgradeRequest(Upgrade.WEBSOCKET, KEY, endpoint="other-acceptor")
    with pytest.raises(Refusal) as refused:
        Routes("main").choose(elsewhere, acceptor())
    assert (refused.value.status, refused.value.why) == (
        404,
        "no HTTP upgrade endpoint other-acceptor here: this is acceptor http-acceptor",
    )
    assert (
        Routes("main").choose(UpgradeRequest(Upgrade.WEBSOCKET, KEY, endpoint="http-acceptor"), acceptor())
        is None
    )
