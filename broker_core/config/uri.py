"""Acceptor and broker-connection URIs in Artemis's syntax.

``tcp://host:port?key=value;key=value`` -- Artemis separates parameters with ``;``; ``&`` is accepted
too. IPv6 hosts go in brackets (``tcp://[::1]:5672``). A broker-connection URI may list alternates after
``#``, comma separated, each ``host:port`` or ``tcp://host:port``, optionally with its own parameters;
an alternate without parameters inherits the primary's. A broker connection may also go over WebSocket:
``ws://host:port/path`` (``wss://``: over TLS), the path being what its upgrade request asks for; an
alternate without a scheme inherits the primary's scheme and path. An acceptor's (and a connector's)
URI is ``tcp://``: an acceptor takes WebSocket and HTTP upgrades on it, and a connector upgrades with
``httpUpgradeEnabled=true``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from broker_core.config.values import BadValue, parse_int

SCHEME = "tcp"
WEBSOCKET_SCHEMES = ("ws", "wss")  # a broker connection's, over WebSocket (wss: with TLS)
_HOST_PORT = re.compile(r"^(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:/?#\[\]]+)):(?P<port>[^/?#]*)$")
_URI_EXPECTED = "tcp://host:port?key=value;key=value"
_CONNECTION_EXPECTED = "tcp://host:port?key=value;key=value, or ws://host:port/path or wss://... (WebSocket)"


@dataclass(frozen=True)
class ParsedUri:
    host: str
    port: int
    params: dict[str, str] = field(default_factory=dict)
    scheme: str = SCHEME
    path: str = "/"


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


def _parse_endpoint(text: str, schemes: tuple[str, ...], inherit: ParsedUri | None = None) -> ParsedUri:
    """One endpoint; without a scheme (an alternate), the scheme and path of `inherit`."""
    rest = text.strip()
    scheme, sep, after = rest.partition("://")
    expected = _URI_EXPECTED if schemes == (SCHEME,) else _CONNECTION_EXPECTED
    if sep:
        scheme = scheme.lower()
        if scheme not in schemes:
            if scheme in WEBSOCKET_SCHEMES:
                raise BadValue(
                    f"scheme {scheme}:// is for broker connections",
                    f"{_URI_EXPECTED} (an acceptor "
                    "takes WebSocket on it; a connector upgrades with httpUpgradeEnabled=true)",
                )
            raise BadValue(f"unsupported scheme {scheme!r}", expected)
        rest = after
    elif inherit is None:
        raise BadValue(f"bad URI {text!r}", expected)
    else:
        scheme = inherit.scheme
    authority, _, query = rest.partition("?")
    authority, slash, path = authority.partition("/")
    if scheme in WEBSOCKET_SCHEMES:
        path = "/" + path if slash else (inherit.path if inherit is not None and not sep else "/")
    elif path:
        raise BadValue(f"a path ({'/' + path!r}) in {scheme}:// URI {text.strip()!r}", expected)
    host, port = _parse_host_port(authority)
    return ParsedUri(host, port, parse_params(query), scheme, path if scheme in WEBSOCKET_SCHEMES else "/")


def parse_acceptor_uri(text: str) -> ParsedUri:
    if "#" in text:
        raise BadValue("alternates ('#') are not allowed on an acceptor", _URI_EXPECTED)
    return _parse_endpoint(text, (SCHEME,))


def parse_connection_uri(text: str) -> list[ParsedUri]:
    """The primary endpoint first, then each alternate."""
    primary_text, _, alternates_text = text.partition("#")
    schemes = (SCHEME, *WEBSOCKET_SCHEMES)
    primary = _parse_endpoint(primary_text, schemes)
    endpoints = [primary]
    if alternates_text.strip():
        for item in alternates_text.split(","):
            if not item.strip():
                raise BadValue(f"empty alternate in {text!r}", "tcp://A:5672#B:5672,C:5672")
            alternate = _parse_endpoint(item, schemes, inherit=primary)
            if not alternate.params:
                alternate = ParsedUri(
                    alternate.host, alternate.port, primary.params, alternate.scheme, alternate.path
                )
            endpoints.append(alternate)
    return endpoints


def format_uri(parsed: ParsedUri) -> str:
    """The URI text of `parsed` (parameters in Artemis's `;` form): what parsing it gives back."""
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    path = parsed.path if parsed.scheme in WEBSOCKET_SCHEMES and parsed.path != "/" else ""
    query = ";".join(f"{key}={value}" for key, value in parsed.params.items())
    return f"{parsed.scheme}://{host}:{parsed.port}{path}{'?' + query if query else ''}"
