"""Just enough HTTP/1.1 for the console, on the broker's event loop: one request per connection.

A request is its method, path, query, headers, cookies and (for a POST) its form, read with bounds: a
head past `MAX_HEAD` bytes, a body past `MAX_BODY` or one not form-encoded, or a client slower than
`READ_TIMEOUT`, is answered with an error or dropped, never waited on for ever. Every answer carries the
headers that keep a page from being framed, sniffed, cached or made to load anything from elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlsplit

READ_TIMEOUT = 10.0  # seconds for a client to send its whole request
MAX_HEAD = 16 * 1024
MAX_BODY = 64 * 1024

# Nothing but this server's own styles, script and forms; no frame may hold a page
SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),  # (no-referrer would make a form's Origin "null")
)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names in lower case
    form: dict[str, str]
    peer: str  # the client's host, for log lines
    secure: bool  # over TLS

    def cookie(self, name: str) -> str | None:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(self.headers.get("cookie", ""))
        except CookieError:
            return None
        morsel = jar.get(name)
        return morsel.value if morsel is not None else None

    def origin(self) -> str:
        """This server's origin as the client reached it (what a same-origin form's Origin says)."""
        return f"{'https' if self.secure else 'http'}://{self.headers.get('host', '')}"


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    cache: str = "no-store"

    def encode(self) -> bytes:
        reason = HTTPStatus(self.status).phrase
        lines = [
            f"HTTP/1.1 {self.status} {reason}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            f"Cache-Control: {self.cache}",
            "Connection: close",
            *(f"{name}: {value}" for name, value in (*SECURITY_HEADERS, *self.headers)),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


def text(status: int, message: str) -> Response:
    return Response(status, message.encode() + b"\n", "text/plain; charset=utf-8")


def redirect(location: str, headers: list[tuple[str, str]] | None = None) -> Response:
    """303 See Other: after a POST, the browser asks for the page with a GET."""
    return Response(303, b"", headers=[("Location", location), *(headers or [])])


Handler = Callable[[Request], Awaitable[Response]]


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handle: Handler) -> None:
    """Read one request, answer it, close the connection."""
    try:
        request = await asyncio.wait_for(_read(reader, writer), READ_TIMEOUT)
        response = text(400, "bad request") if request is None else await handle(request)
    except (
        asyncio.IncompleteReadError,
        asyncio.LimitOverrunError,
        TimeoutError,
        ConnectionError,
        ValueError,
    ):
        writer.close()
        return
    with contextlib.suppress(ConnectionError):
        writer.write(response.encode())
        await writer.drain()
    writer.close()


async def _read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Request | None:
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > MAX_HEAD:
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    form: dict[str, str] = {}
    length = int(headers.get("content-length") or 0)
    if length < 0 or length > MAX_BODY:
        return None
    if length:
        body = await reader.readexactly(length)
        if not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return None
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    target = urlsplit(parts[1])
    peer = writer.get_extra_info("peername")
    return Request(
        method=parts[0],
        path=target.path,
        query=dict(parse_qsl(target.query, keep_blank_values=True)),
        headers=headers,
        form=form,
        peer=str(peer[0]) if isinstance(peer, tuple) else "?",
        secure=writer.get_extra_info("sslcontext") is not None,
    )
