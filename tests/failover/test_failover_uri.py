"""Parsing failover, discovery and plain URIs: documented defaults, every option, and clear errors."""

from __future__ import annotations

import pytest

from connections.failover.uri import BrokerUri, FailoverOptions, parse_failover_uri


def test_defaults_are_the_documented_ones() -> None:
    # AMQ 6.3 client failover, Table 2.1: every default, as the reader of the chapter expects it.
    options = parse_failover_uri("failover:(tcp://a:61616,tcp://b:61616)").options
    assert options == FailoverOptions(
        initial_reconnect_delay=10,
        max_reconnect_delay=30000,
        use_exponential_back_off=True,
        back_off_multiplier=2.0,
        max_reconnect_attempts=-1,
        startup_max_reconnect_attempts=-1,
        randomize=True,
        timeout=-1,
        priority_backup=False,
        priority_uris=(),
        warn_after_reconnect_attempts=10,
    )


def test_example_2_1_simple_failover_uri() -> None:
    parsed = parse_failover_uri(
        "failover:(tcp://localhost:61616,tcp://remotehost:61616)?initialReconnectDelay=100"
    )
    assert [u.url for u in parsed.uris] == ["amqp://localhost:61616", "amqp://remotehost:61616"]
    assert parsed.options.initial_reconnect_delay == 100
    assert parsed.failover


def test_every_option_is_parsed() -> None:
    text = (
        "failover:(amqp://l1:5672,amqp://l2:5672,amqps://remote:5671)?initialReconnectDelay=5"
        "&maxReconnectDelay=400&useExponentialBackOff=false&backOffMultiplier=1.5&maxReconnectAttempts=3"
        "&startupMaxReconnectAttempts=0&randomize=FALSE&timeout=2500&priorityBackup=true"
        "&priorityURIs=amqp://l2:5672,amqp://l1:5672&warnAfterReconnectAttempts=0"
    )
    parsed = parse_failover_uri(text)
    l1, l2, remote = parsed.uris
    assert parsed.options == FailoverOptions(5, 400, False, 1.5, 3, 0, False, 2500, True, (l2, l1), 0)
    assert remote.scheme == "amqps" and remote.port == 5671


def test_example_2_6_priority_uris_with_spaces_after_question_mark() -> None:
    parsed = parse_failover_uri(
        "failover:(tcp://local1:61616,tcp://local2:61616,tcp://remote:61616)? "
        "randomize=false&priorityBackup=true&priorityURIs=tcp://local1:61616,tcp://local2:61616"
    )
    assert [str(u) for u in parsed.options.priority_uris] == ["amqp://local1:61616", "amqp://local2:61616"]


def test_nested_options_apply_to_every_uri_and_override_their_own() -> None:
    parsed = parse_failover_uri(
        "failover:(tcp://h1:1?amqp.idleTimeout=5&x=own,tcp://h2:2)?nested.x=all&nested.wireFormat.a=1"
    )
    assert [dict(u.options) for u in parsed.uris] == [
        {"amqp.idleTimeout": "5", "x": "all", "wireFormat.a": "1"},
        {"x": "all", "wireFormat.a": "1"},
    ]


@pytest.mark.parametrize(
    "text",
    [
        "discovery:(static://(tcp://localhost:61716,tcp://localhost:61816))",
        "discovery:static://(tcp://localhost:61716,tcp://localhost:61816)",
        "discovery:(static:(tcp://localhost:61716,tcp://localhost:61816))",
    ],
)
def test_static_discovery(text: str) -> None:
    parsed = parse_failover_uri(text)
    assert [u.port for u in parsed.uris] == [61716, 61816]
    assert parsed.options == FailoverOptions()


def test_discovery_injects_unknown_options_into_the_endpoints() -> None:
    parsed = parse_failover_uri(
        "discovery:(static://(tcp://a:1,tcp://b:2))?initialReconnectDelay=100&connectionTimeout=10000"
    )
    assert parsed.options.initial_reconnect_delay == 100
    assert all(dict(u.options) == {"connectionTimeout": "10000"} for u in parsed.uris)


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("amqp://broker", "amqp://broker:5672"),
        ("amqps://broker", "amqps://broker:5671"),
        ("tcp://broker:61616", "amqp://broker:61616"),
        ("AMQP://Broker:1/", "amqp://Broker:1"),
        ("amqp://[::1]:5673", "amqp://[::1]:5673"),
    ],
)
def test_plain_uris_have_no_failover(text: str, url: str) -> None:
    parsed = parse_failover_uri(text)
    assert [u.url for u in parsed.uris] == [url]
    assert not parsed.failover
    assert parsed.options.max_reconnect_attempts == 0
    assert parsed.options.startup_max_reconnect_attempts == 0


def test_uri_identity_ignores_host_case_and_options() -> None:
    assert BrokerUri("amqp", "Host", 1) == BrokerUri("amqp", "host", 1)
    assert BrokerUri("amqp", "host", 1) != BrokerUri("amqps", "host", 1)
    assert len({BrokerUri("amqp", "H", 1), BrokerUri("amqp", "h", 1)}) == 1


def test_unsupported_options_are_accepted_at_their_documented_default() -> None:
    text = (
        "failover:(tcp://a:1)?backup=false&trackMessages=false&maxCacheSize=131072&updateURIsSupported=true"
    )
    assert parse_failover_uri(text).options == FailoverOptions()
    assert not parse_failover_uri(
        "failover:(tcp://a:1)?updateURIsSupported=false"
    ).options.update_uris_supported


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ["non-empty"]),
        ("failover:tcp://a:1", ["(uri1,...,uriN)"]),
        ("failover:(tcp://a:1", ["unbalanced"]),
        ("failover:()", ["one or more"]),
        ("failover:(tcp://a:1,)", ["one or more"]),
        ("failover:(tcp://a:1)x", ["?options"]),
        ("failover:(http://a:1)", ["http://a:1", "amqp://"]),
        ("failover:(tcp://a)", ["explicit port"]),
        ("failover:(tcp://a:0)", ["port number"]),
        ("failover:(tcp://a:port)", ["port number"]),
        ("failover:(tcp://:1)", ["host name"]),
        ("failover:(amqp://u:p@a:1)", ["credentials"]),
        ("failover:(tcp://a:1)?initialReconnectDelay=soon", ["initialReconnectDelay", "integer"]),
        ("failover:(tcp://a:1)?maxReconnectDelay=-5", ["maxReconnectDelay", ">= 0"]),
        ("failover:(tcp://a:1)?maxReconnectAttempts=-2", ["maxReconnectAttempts", ">= -1"]),
        ("failover:(tcp://a:1)?startupMaxReconnectAttempts=x", ["startupMaxReconnectAttempts"]),
        ("failover:(tcp://a:1)?timeout=1.5", ["timeout", "integer"]),
        ("failover:(tcp://a:1)?randomize=yes", ["randomize", "true or false"]),
        ("failover:(tcp://a:1)?useExponentialBackOff=1", ["useExponentialBackOff", "true or false"]),
        ("failover:(tcp://a:1)?priorityBackup=on", ["priorityBackup"]),
        ("failover:(tcp://a:1)?backOffMultiplier=0.5", ["backOffMultiplier", ">= 1"]),
        ("failover:(tcp://a:1)?backOffMultiplier=nan", ["backOffMultiplier"]),
        ("failover:(tcp://a:1)?backOffMultiplier=inf", ["backOffMultiplier", "finite"]),
        ("failover:(tcp://a:1)?warnAfterReconnectAttempts=often", ["warnAfterReconnectAttempts"]),
        ("failover:(tcp://a:1)?priorityURIs=tcp://b:1", ["priorityURIs", "amqp://b:1", "not in"]),
        ("failover:(tcp://a:1)?priorityURIs=", ["priorityURIs", "comma-separated"]),
        ("failover:(tcp://a:1)?reconnectDelay=1", ["unknown failover option", "reconnectDelay", "timeout"]),
        ("failover:(tcp://a:1)?randomize", ["name=value"]),
        ("failover:(tcp://a:1)?timeout=1&timeout=2", ["timeout", "twice"]),
        ("failover:(tcp://a:1)?backup=true", ["backup", "not supported", "false"]),
        ("failover:(tcp://a:1)?updateURIsURL=file:/x", ["updateURIsURL", "not supported"]),
        ("discovery:(multicast://default)", ["multicast://default", "static"]),
        ("discovery:(static://(tcp://a:1)?x=1)", ["options belong after"]),
        ("mqtt://a:1", ["mqtt://a:1", "amqp://"]),
    ],
)
def test_invalid_input_names_the_problem(text: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as raised:
        parse_failover_uri(text)
    for word in words:
        assert word in str(raised.value)
