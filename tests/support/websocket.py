"""A bare WebSocket client for tests, written from RFC 6455 by hand (not with the broker's own code), so
that what the broker answers is checked by something that does not share its mistakes."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import struct
from dataclasses import dataclass, field

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@dataclass
class Answer:
    """The broker's answer to an upgrade request: status, headers (lower-case names), body, the socket."""

    status: int
    headers: dict[str, str]
    body: bytes
    sock: socket.socket
    rest: bytes = field(default=b"")

    def close(self) -> None:
        self.sock.close()


def websocket_request(host: str, port: int, path: str = "/", key: str | None = None, **extra: str) -> bytes:
    key = key or base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in extra.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def request(host: str, port: int, data: bytes, timeout: float = 10.0) -> Answer:
    """Send `data` (an HTTP request) and read the answer's head, and its body when it has one."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.sendall(data)
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed after {buffer!r}")
        buffer += chunk
    head, rest = buffer.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(4096)
        if not chunk:
            break
        rest += chunk
    if status == 101:
        return Answer(status, headers, b"", sock, rest)
    return Answer(status, headers, rest[:length], sock)


def accept_for(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def masked_frame(opcode: int, payload: bytes, *, mask: bool = True) -> bytes:
    n = len(payload)
    bit = 0x80 if mask else 0
    head = (
        bytes([0x80 | opcode, bit | n])
        if n < 126
        else bytes([0x80 | opcode, bit | 126]) + struct.pack("!H", n)
    )
    if n >= 1 << 16:
        head = bytes([0x80 | opcode, bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def read_frame(sock: socket.socket, buffered: bytearray) -> tuple[int, bytes]:
    """The next (opcode, payload) of an unmasked frame from the server; `buffered` holds what was read."""

    def need(n: int) -> None:
        while len(buffered) < n:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buffered.extend(chunk)

    need(2)
    opcode, length, at = buffered[0] & 0x0F, buffered[1] & 0x7F, 2
    assert not buffered[1] & 0x80, "a server frame was masked"
    if length == 126:
        need(4)
        length, at = struct.unpack("!H", bytes(buffered[2:4]))[0], 4
    elif length == 127:
        need(10)
        length, at = struct.unpack("!Q", bytes(buffered[2:10]))[0], 10
    need(at + length)
    payload = bytes(buffered[at : at + length])
    del buffered[: at + length]
    return opcode, payload
