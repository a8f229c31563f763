"""Acceptor and broker-connection URIs in Artemis's syntax.

``tcp://host:port?key=value;key=value`` -- Artemis separates parameters with ``;``; ``&`` is accepted
too. IPv6 hosts go in brackets (``tcp://[::1]:5672``). A broker-connection URI may list alternates after
``#``, comma separated, each ``host:port`` or ``tcp://host:port``, optionally with its own parameters;
an alternate without parameters inherits the primary's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from broker_core.config.values import BadValue, parse_int

SCHEME = "tcp"
_HOST_PORT = re.compile(r"^(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:/?#\[\]]+)):(?P<port>[^/?#]*)$")
_URI_EXPECTED = "tcp://host:port?key=value;key=value"


@dataclass(frozen=True)
class ParsedUri:
    host: str
    port: int
    params: dict[str, str] = field(default_factory=dict)


def parse_params(query: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in re.split(r"[;&]", query):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadValue(f"bad URI parameter {item!r}", "key=value")
        params[key.strip()] = value.strip()
    return params


def _parse_host_port(text: str) -> tuple[str, int]:
    match = _HOST_PORT.match(text.strip())
    if not match:
        raise BadValue(f"bad host:port {text!r}", "host:port, or [ipv6]:port")
    try:
        port = parse_int(match.group("port"), 1, 65535)
    except BadValue:
        raise BadValue(f"bad port {match.group('port')!r}", "an integer 1-65535") from None
    return match.group("ipv6") or match.group("host"), port


def _parse_endpoint(text: str, require_scheme: bool) -> ParsedUri:
    rest = text.strip()
    scheme, sep, after = rest.partition("://")
    if sep:
        if scheme.lower() != SCHEME:
            raise BadValue(f"unsupported scheme {scheme!r}", _URI_EXPECTED)
        rest = after
    elif require_scheme:
        raise BadValue(f"bad URI {text!r}", _URI_EXPECTED)
    authority, _, query = rest.partition("?")
    host, port = _parse_host_port(authority.rstrip("/"))
    return ParsedUri(host, port, parse_params(query))


def parse_acceptor_uri(text: str) -> ParsedUri:
    if "#" in text:
        raise BadValue("alternates ('#') are not allowed on an acceptor", _URI_EXPECTED)
    return _parse_endpoint(text, require_scheme=True)


def parse_connection_uri(text: str) -> list[ParsedUri]:
    """The primary endpoint first, then each alternate."""
    primary_text, _, alternates_text = text.partition("#")
    primary = _parse_endpoint(primary_text, require_scheme=True)
    endpoints = [primary]
    if alternates_text.strip():
        for item in alternates_text.split(","):
            if not item.strip():
                raise BadValue(f"empty alternate in {text!r}", "tcp://A:5672#B:5672,C:5672")
            alternate = _parse_endpoint(item, require_scheme=False)
            endpoints.append(
                alternate if alternate.params else ParsedUri(alternate.host, alternate.port, primary.params)
            )
    return endpoints
