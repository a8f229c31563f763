"""Sizes, URIs with alternates, placeholders and properties files, tested on their own."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.config.placeholders import UnresolvedPlaceholder, substitute
from broker_core.config.uri import ParsedUri, parse_acceptor_uri, parse_connection_uri
from broker_core.config.users import parse_properties
from broker_core.config.values import BadValue, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1048576),
        ("10K", 10240),
        ("10kb", 10240),
        ("10KiB", 10240),
        ("10M", 10485760),
        ("10MB", 10485760),
        ("10MiB", 10485760),
        ("100Mb", 104857600),
        (" 2 G ", 2 * 1024**3),
        ("512b", 512),
        ("-1", -1),
    ],
)
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "ten", "10T", "1.5M", "-2", "10 MBB", "M"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(BadValue):
        parse_size(text)


def test_minus_one_only_where_unlimited_is_allowed() -> None:
    with pytest.raises(BadValue):
        parse_size("-1", allow_unlimited=False)


@given(st.integers(min_value=0, max_value=2**40), st.sampled_from(["", "K", "M", "G"]), st.booleans())
def test_size_suffixes_are_binary_multiples(number: int, unit: str, with_b: bool) -> None:
    multiplier = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[unit]
    assert parse_size(f"{number}{unit}{'B' if with_b else ''}") == number * multiplier


def test_acceptor_uri_with_semicolon_and_ampersand_params() -> None:
    parsed = parse_acceptor_uri("tcp://0.0.0.0:61616?protocols=AMQP;sslEnabled=true&keyStorePath=/k.jks")
    assert parsed == ParsedUri(
        "0.0.0.0", 61616, {"protocols": "AMQP", "sslEnabled": "true", "keyStorePath": "/k.jks"}
    )


def test_acceptor_uri_ipv6_and_errors() -> None:
    assert parse_acceptor_uri("tcp://[::1]:5672").host == "::1"
    for bad in (
        "tcp://host",
        "tcp://host:0",
        "tcp://host:70000",
        "host:5672",
        "tcp://h:1?novalue",
        "tcp://a:1#b:2",
    ):
        with pytest.raises(BadValue):
            parse_acceptor_uri(bad)


def test_connection_uri_alternates_plain_and_with_scheme() -> None:
    plain = parse_connection_uri("tcp://A:5672#B:5673,C:5674")
    assert [(e.host, e.port) for e in plain] == [("A", 5672), ("B", 5673), ("C", 5674)]
    schemed = parse_connection_uri("tcp://A:5672#tcp://B:5672")
    assert [(e.host, e.port) for e in schemed] == [("A", 5672), ("B", 5672)]


def test_connection_uri_alternates_inherit_params_unless_they_have_their_own() -> None:
    endpoints = parse_connection_uri("tcp://A:1?sslEnabled=true#B:2,tcp://C:3?sslEnabled=false")
    assert [e.params for e in endpoints] == [
        {"sslEnabled": "true"},
        {"sslEnabled": "true"},
        {"sslEnabled": "false"},
    ]


def test_connection_uri_errors() -> None:
    for bad in ("tcp://A:5672#", "tcp://A:5672#B:5672,,C:1", "tcp://A:x", "amqp://A:5672", "tcp://A:1#B"):
        if bad == "tcp://A:5672#":
            assert len(parse_connection_uri(bad)) == 1  # a trailing '#' adds nothing
            continue
        with pytest.raises(BadValue):
            parse_connection_uri(bad)


def test_placeholders_from_properties_environment_and_defaults() -> None:
    env = {"AMQP_PORT": "5673", "exact.name": "e"}
    assert substitute("${amqp.port}", {}, env) == "5673"
    assert substitute("${exact.name}", {}, env) == "e"
    assert substitute("${amqp.port}", {"amqp.port": "1"}, env) == "1"
    assert substitute("tcp://${host:0.0.0.0}:${port:5672}", {}, {}) == "tcp://0.0.0.0:5672"
    assert substitute("${empty:}", {}, {}) == ""
    with pytest.raises(UnresolvedPlaceholder) as caught:
        substitute("a ${missing} b", {}, {})
    assert caught.value.name == "missing"


def test_properties_syntax() -> None:
    text = "# comment\n! also a comment\n\nadmin = secret\nguest:guest\n"
    text += "spaced\\ role = a, b\nlong = one,\\\n   two\n"
    props = parse_properties(text)
    assert [(p.line, p.key, p.value) for p in props] == [
        (4, "admin", "secret"),
        (5, "guest", "guest"),
        (6, "spaced role", "a, b"),
        (7, "long", "one,two"),
    ]
