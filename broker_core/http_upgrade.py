"""HTTP/1.1 upgrades into AMQP, sans I/O: both sides of the two handshakes an acceptor answers.

- The OASIS AMQP WebSocket binding: RFC 6455's opening handshake, subprotocol ``amqp``; AMQP's bytes
  then travel in WebSocket binary frames (websocket.py). Browsers and clients behind HTTP-only
  firewalls connect this way.
- Artemis's own HTTP upgrade (``Upgrade: activemq-remoting``), which its connectors send with
  ``httpUpgradeEnabled=true``; after the 101 the bytes are the protocol's own, unframed.

Either request may name the server that is to take the connection in an ``activemqServerName`` header
(absent: the server whose acceptor it reached; a colocated backup of that process by its name), and the
acceptor in an ``httpUpgradeEndpoint`` header. A browser cannot add headers to its WebSocket request, so
the name may come as a query parameter of the path instead (``ws://host:port/?activemqServerName=b``).
A request this side cannot serve is answered with an HTTP status and a plain-text line saying why
(`Refusal`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import parse_qs, urlsplit

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3
REMOTING_MAGIC = "CF70DEB8-70F9-4FBA-8B4F-DFC3E723B4CD"  # Artemis's NettyConnector.MAGIC_NUMBER
SUBPROTOCOL = "amqp"  # the binding's registered WebSocket subprotocol
SERVER_NAME_HEADER = "activemqServerName"
ENDPOINT_HEADER = "httpUpgradeEndpoint"
REMOTING_KEY_HEADER = "Sec-ActiveMQRemoting-Key"
REMOTING_ACCEPT_HEADER = "Sec-ActiveMQRemoting-Accept"
MAX_HEAD = 8192  # bytes of request line and headers read before answering 431
HTTP_METHODS = (
    b"GET ",
    b"POST ",
    b"PUT ",
    b"HEAD ",
    b"OPTIONS ",
    b"PATCH ",
    b"DELETE ",
    b"TRACE ",
    b"CONNECT ",
)

_REASONS = {
    101: "Switching Protocols",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    426: "Upgrade Required",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class Upgrade(StrEnum):
    WEBSOCKET = "websocket"
    REMOTING = "activemq-remoting"


@dataclass(frozen=True)
class UpgradeRequest:
    """An upgrade this side can answer with 101."""

    kind: Upgrade
    key: str
    path: str = "/"
    server_name: str | None = None  # activemqServerName: the server of this process to hand it to
    endpoint: str | None = None  # httpUpgradeEndpoint: the acceptor it is meant for
    subprotocol: str | None = None  # the client's spelling of `amqp`, answered back (None: it offered none)


class Refusal(Exception):
    """An HTTP answer that refuses a request: its status, why (the body, one line) and extra headers."""

    def __init__(self, status: int, why: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(f"{status} {_REASONS.get(status, '')}: {why}")
        self.status = status
        self.why = why
        self.headers = headers

    def response(self) -> bytes:
        body = (self.why + "\n").encode("utf-8")
        lines = [f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Error')}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        lines += [
            "Content-Type: text/plain; charset=utf-8",
            f"Content-Length: {len(body)}",
            "Connection: close",
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class UpgradeFailed(Exception):
    """Client side: the server did not switch protocols (its status and what it said, or what was wrong
    with its answer)."""


def sniff_http(first: bytes | bytearray) -> bool | None:
    """Whether a connection's first bytes are an HTTP request (None: too few bytes to tell yet). AMQP's
    header ("AMQP") starts with no method's letters."""
    for method in HTTP_METHODS:
        n = min(len(first), len(method))
        if first[:n] == method[:n]:
            return True if n == len(method) else None
    return False


def head_end(buffer: bytes | bytearray) -> int:
    """Where the request's (or response's) head ends: the index after its blank line, -1 while it has
    not come; `Refusal` 431 once more than MAX_HEAD bytes came without one."""
    at = buffer.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
    if at >= 0:
        return at + 4
    if len(buffer) > MAX_HEAD:
        raise Refusal(431, f"the request's head is over {MAX_HEAD} bytes")
    return -1


# ------------------------------------------------------------------------------------------ server side


def parse_request(head: bytes) -> UpgradeRequest:
    """The upgrade a request's head asks for, or `Refusal` saying what is wrong with it."""
    start, headers = _parse_head(head)
    parts = start.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise Refusal(400, f"not an HTTP/1.1 request line: {start[:80]!r}")
    method, path, version = parts
    if version == "HTTP/1.0":
        raise Refusal(400, "an upgrade needs HTTP/1.1")
    upgrade = _tokens(headers.get("upgrade", ""))
    if method != "GET":
        raise Refusal(
            405,
            f"{method}: this is an AMQP acceptor; upgrade a GET to websocket (subprotocol amqp)",
            (("Allow", "GET"),),
        )
    if "websocket" in upgrade:
        return _websocket_request(path, headers)
    if Upgrade.REMOTING in upgrade:
        key = headers.get(REMOTING_KEY_HEADER.lower())
        if not key:
            raise Refusal(400, f"an activemq-remoting upgrade without {REMOTING_KEY_HEADER}")
        return UpgradeRequest(Upgrade.REMOTING, key, path, *_routing(path, headers))
    if upgrade:
        raise Refusal(
            400,
            f"Upgrade: {headers['upgrade']}: this acceptor upgrades to websocket (AMQP "
            "WebSocket binding, subprotocol amqp) or activemq-remoting",
        )
    raise Refusal(
        426,
        "this is an AMQP acceptor: connect with AMQP, or with AMQP over WebSocket (subprotocol amqp)",
        (("Upgrade", "websocket"), ("Connection", "Upgrade")),
    )


def _websocket_request(path: str, headers: dict[str, str]) -> UpgradeRequest:
    """RFC 6455 section 4.2.1's checks, and the binding's subprotocol."""
    if "host" not in headers:
        raise Refusal(400, "a WebSocket upgrade without a Host header")
    if "upgrade" not in _tokens(headers.get("connection", "")):
        raise Refusal(400, "a WebSocket upgrade without 'Connection: Upgrade'")
    if headers.get("sec-websocket-version", "").strip() != "13":
        raise Refusal(
            426,
            f"WebSocket version {headers.get('sec-websocket-version', 'none')!r}: this acceptor "
            "speaks version 13",
            (("Sec-WebSocket-Version", "13"),),
        )
    key = headers.get("sec-websocket-key", "").strip()
    try:
        valid = len(base64.b64decode(key, validate=True)) == 16
    except (binascii.Error, ValueError):
        valid = False
    if not valid:
        raise Refusal(400, "a WebSocket upgrade whose Sec-WebSocket-Key is not 16 bytes in base64")
    offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    subprotocol = next((p for p in offered if p.lower() == SUBPROTOCOL), None)
    if offered and subprotocol is None:
        raise Refusal(
            400,
            f"WebSocket subprotocols {', '.join(offered)} offered: this acceptor speaks the "
            "AMQP WebSocket binding, subprotocol amqp",
        )
    return UpgradeRequest(Upgrade.WEBSOCKET, key, path, *_routing(path, headers), subprotocol=subprotocol)


def _routing(path: str, headers: dict[str, str]) -> tuple[str | None, str | None]:
    """The server and acceptor a request names: its headers, else its path's query parameters."""
    query = parse_qs(urlsplit(path).query)
    names: list[str | None] = []
    for header in (SERVER_NAME_HEADER, ENDPOINT_HEADER):
        value = headers.get(header.lower(), "").strip() or (query.get(header) or [""])[0].strip()
        names.append(value or None)
    return names[0], names[1]


def accept_key(kind: Upgrade, key: str) -> str:
    """What proves the answer read the request: base64 of SHA-1 of the key and the kind's constant."""
    magic = WEBSOCKET_GUID if kind is Upgrade.WEBSOCKET else REMOTING_MAGIC
    return base64.b64encode(hashlib.sha1((key + magic).encode("utf-8")).digest()).decode("ascii")


def switching(request: UpgradeRequest) -> bytes:
    """The 101 that accepts `request`."""
    lines = ["HTTP/1.1 101 Switching Protocols", f"Upgrade: {request.kind.value}", "Connection: Upgrade"]
    if request.kind is Upgrade.WEBSOCKET:
        lines.append(f"Sec-WebSocket-Accept: {accept_key(request.kind, request.key)}")
        if request.subprotocol is not None:
            lines.append(f"Sec-WebSocket-Protocol: {request.subprotocol}")
    else:
        lines.append(f"{REMOTING_ACCEPT_HEADER}: {accept_key(request.kind, request.key)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# ------------------------------------------------------------------------------------------ client side


@dataclass(frozen=True)
class ClientUpgrade:
    """What a connector asks for: the kind, where, and the names it routes by."""

    kind: Upgrade
    host: str
    port: int
    path: str = "/"
    server_name: str | None = None
    endpoint: str | None = None
    key: str = field(default_factory=lambda: base64.b64encode(os.urandom(16)).decode("ascii"))

    def request(self) -> bytes:
        host = f"[{self.host}]" if ":" in self.host else self.host
        lines = [
            f"GET {self.path or '/'} HTTP/1.1",
            f"Host: {host}:{self.port}",
            f"Upgrade: {self.kind.value}",
            "Connection: Upgrade",
        ]
        if self.kind is Upgrade.WEBSOCKET:
            lines += [
                f"Sec-WebSocket-Key: {self.key}",
                "Sec-WebSocket-Version: 13",
                f"Sec-WebSocket-Protocol: {SUBPROTOCOL}",
            ]
        else:
            lines.append(f"{REMOTING_KEY_HEADER}: {self.key}")
        if self.server_name is not None:
            lines.append(f"{SERVER_NAME_HEADER}: {self.server_name}")
        if self.endpoint is not None:
            lines.append(f"{ENDPOINT_HEADER}: {self.endpoint}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")

    def check(self, head: bytes, body: bytes = b"") -> None:
        """`UpgradeFailed` unless `head` is the 101 that accepts this request (`body`: what followed a
        refusal's head, its reason)."""
        try:
            start, headers = _parse_head(head)
        except Refusal as exc:
            raise UpgradeFailed(f"not an HTTP response: {exc.why}") from None
        parts = start.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise UpgradeFailed(f"not an HTTP response: {start[:80]!r}")
        if parts[1] != "101":
            said = body.decode("utf-8", "replace").strip().splitlines()
            why = f": {said[0][:200]}" if said else ""
            raise UpgradeFailed(f"HTTP {parts[1]} {parts[2] if len(parts) > 2 else ''}".rstrip() + why)
        if self.kind.value not in _tokens(headers.get("upgrade", "")):
            raise UpgradeFailed(f"101 without 'Upgrade: {self.kind.value}'")
        accept_header = (
            "sec-websocket-accept" if self.kind is Upgrade.WEBSOCKET else REMOTING_ACCEPT_HEADER.lower()
        )
        if headers.get(accept_header, "").strip() != accept_key(self.kind, self.key):
            raise UpgradeFailed("101 whose accept key does not answer our key")
        if self.kind is Upgrade.WEBSOCKET:
            chosen = headers.get("sec-websocket-protocol", "").strip()
            if chosen and chosen.lower() != SUBPROTOCOL:
                raise UpgradeFailed(f"101 with subprotocol {chosen!r}, not amqp")
            if headers.get("sec-websocket-extensions", "").strip():
                raise UpgradeFailed("101 with WebSocket extensions we did not ask for")


def content_length(head: bytes) -> int:
    """A response head's Content-Length (0 without one)."""
    try:
        text = _parse_head(head)[1].get("content-length", "0")
    except Refusal:
        return 0
    return int(text) if text.strip().isdigit() else 0


# ------------------------------------------------------------------------------------------ both


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """The start line and the headers (names lower-cased; a repeated one joined with commas)."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise Refusal(400, "undecodable head") from None
    lines = text.split("\r\n")
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise Refusal(400, "an empty request")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or " " in name:
            raise Refusal(400, f"a malformed header line {line[:80]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return lines[0], headers


def _tokens(value: str) -> set[str]:
    return {token.strip().lower() for token in value.split(",") if token.strip()}
