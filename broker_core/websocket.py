"""RFC 6455 WebSocket framing, sans I/O: the transport of the OASIS AMQP WebSocket binding.

The binding carries AMQP's bytes in binary messages; a message boundary means nothing to AMQP, so a
reader hands over the bytes of every binary frame (fragment or whole message) in order, and a writer
may cut the bytes anywhere. A client masks every frame it sends and a server none (RFC 6455 section
5.1); a reader refuses the other kind. Whatever breaks the rules raises `WebSocketError` with the close
code to answer with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# opcodes (RFC 6455 section 5.2)
CONTINUATION = 0x0
TEXT = 0x1
BINARY = 0x2
CLOSE = 0x8
PING = 0x9
PONG = 0xA
_KNOWN = frozenset({CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG})

# close codes (section 7.4.1)
NORMAL = 1000
GOING_AWAY = 1001
PROTOCOL_ERROR = 1002
UNSUPPORTED_DATA = 1003
NO_STATUS = 1005  # never sent: what a close frame without a code means
INVALID_DATA = 1007
TOO_BIG = 1009

MAX_CONTROL_PAYLOAD = 125
# the largest frame read by default: Artemis's webSocketMaxFramePayloadLength default
DEFAULT_MAX_PAYLOAD = 65536
# the largest frame written: whatever is written is cut into frames no larger, so that a reader with
# Artemis's default limit takes them
WRITE_CHUNK = 65536


class WebSocketError(Exception):
    """The peer broke the framing rules: close the connection with `code`, saying `reason`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


@dataclass
class Received:
    """What one `FrameReader.feed` found, in the order it matters: the application bytes, the payloads
    of the pings to answer, and the peer's close (its code, `NO_STATUS` without one, and its reason)."""

    data: bytes = b""
    pings: list[bytes] = field(default_factory=list)
    close: tuple[int, str] | None = None


class FrameReader:
    """Bytes in, `Received` out. `masked`: whether the peer must mask (a server reads a client's frames)."""

    def __init__(self, *, masked: bool, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.masked = masked
        self.max_payload = max_payload
        self._buffer = bytearray()
        self._in_message = False  # a binary message's first frame came without FIN: continuations follow
        self.closed = False  # the peer's close frame came: nothing after it is read

    def feed(self, data: bytes) -> Received:
        received = Received()
        if self.closed:
            return received
        buffer = self._buffer
        buffer += data
        chunks: list[bytes] = []
        pos = 0
        end = len(buffer)
        while end - pos >= 2:
            first, second = buffer[pos], buffer[pos + 1]
            opcode = first & 0x0F
            length = second & 0x7F
            header = 2
            if length == 126:
                header = 4
                if end - pos < header:
                    break
                length = int.from_bytes(buffer[pos + 2 : pos + 4], "big")
            elif length == 127:
                header = 10
                if end - pos < header:
                    break
                length = int.from_bytes(buffer[pos + 2 : pos + 10], "big")
            self._check(first, second, opcode, length)
            mask_at = pos + header
            start = mask_at + 4 if self.masked else mask_at
            if end - start < length:
                break
            payload = bytes(buffer[start : start + length])
            if self.masked:
                payload = unmask(payload, bytes(buffer[mask_at:start]))
            pos = start + length
            if opcode in (BINARY, CONTINUATION):
                self._in_message = not first & 0x80
                if payload:
                    chunks.append(payload)
            elif opcode == PING:
                received.pings.append(payload)
            elif opcode == CLOSE:
                received.close = _close_payload(payload)
                self.closed = True
                pos = end
                break
            # PONG: an answer to nothing we wait for
        del buffer[:pos]
        if chunks:
            received.data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return received

    def _check(self, first: int, second: int, opcode: int, length: int) -> None:
        if first & 0x70:
            raise WebSocketError(PROTOCOL_ERROR, "reserved bits set: no extension was agreed")
        if opcode not in _KNOWN:
            raise WebSocketError(PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
        if bool(second & 0x80) != self.masked:
            raise WebSocketError(
                PROTOCOL_ERROR,
                "a client must mask every frame" if self.masked else "a server must not mask its frames",
            )
        if length >> 63:
            raise WebSocketError(PROTOCOL_ERROR, "a 64-bit payload length with its top bit set")
        if opcode >= CLOSE:
            if not first & 0x80:
                raise WebSocketError(PROTOCOL_ERROR, "a fragmented control frame")
            if length > MAX_CONTROL_PAYLOAD:
                raise WebSocketError(PROTOCOL_ERROR, f"a control frame of {length} bytes (at most 125)")
            return
        if opcode == TEXT:
            raise WebSocketError(UNSUPPORTED_DATA, "a text frame: AMQP's bytes come in binary frames")
        if opcode == CONTINUATION and not self._in_message:
            raise WebSocketError(PROTOCOL_ERROR, "a continuation frame outside a fragmented message")
        if opcode == BINARY and self._in_message:
            raise WebSocketError(PROTOCOL_ERROR, "a new message before the fragmented one ended")
        if length > self.max_payload:
            raise WebSocketError(
                TOO_BIG, f"a frame of {length} bytes, over webSocketMaxFramePayloadLength {self.max_payload}"
            )


def _close_payload(payload: bytes) -> tuple[int, str]:
    if not payload:
        return NO_STATUS, ""
    if len(payload) == 1:
        raise WebSocketError(PROTOCOL_ERROR, "a close frame of one byte")
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise WebSocketError(INVALID_DATA, "a close reason that is not UTF-8") from None
    return int.from_bytes(payload[:2], "big"), reason


def unmask(payload: bytes, key: bytes) -> bytes:
    """XOR with the 4-byte key repeated (masking and unmasking are the same), as one big-int operation."""
    n = len(payload)
    if not n:
        return payload
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(stream, "little")).to_bytes(n, "little")


def frame(opcode: int, payload: bytes, *, masked: bool) -> bytes:
    """One whole frame (FIN set); `masked` for a client's, with a fresh random key."""
    n = len(payload)
    mask_bit = 0x80 if masked else 0
    if n < 126:
        head = bytes((0x80 | opcode, mask_bit | n))
    elif n < 65536:
        head = bytes((0x80 | opcode, mask_bit | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, mask_bit | 127)) + n.to_bytes(8, "big")
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + unmask(payload, key)


def binary_frames(data: bytes, *, masked: bool, chunk: int = WRITE_CHUNK) -> bytes:
    """`data` as binary frames of at most `chunk` bytes each."""
    if len(data) <= chunk:
        return frame(BINARY, data, masked=masked)
    view = memoryview(data)
    return b"".join(
        frame(BINARY, bytes(view[i : i + chunk]), masked=masked) for i in range(0, len(data), chunk)
    )


def close_frame(code: int, reason: str, *, masked: bool) -> bytes:
    """A close frame with a code and a reason (cut to fit a control frame)."""
    text = reason.encode("utf-8")[: MAX_CONTROL_PAYLOAD - 2].decode("utf-8", "ignore").encode("utf-8")
    return frame(CLOSE, code.to_bytes(2, "big") + text, masked=masked)
