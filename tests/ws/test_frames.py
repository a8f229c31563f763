"""RFC 6455 framing (broker_core/websocket.py): what a reader takes and refuses, what a writer makes.

Frames are built here by hand from the RFC's layout (not with the writer under test) where the reader
is checked, so a reader and writer that agree on a mistake cannot pass together.
"""

from __future__ import annotations

import os
import struct

import pytest

from broker_core.websocket import (
    BINARY,
    CLOSE,
    CONTINUATION,
    NO_STATUS,
    PING,
    PONG,
    PROTOCOL_ERROR,
    TEXT,
    TOO_BIG,
    UNSUPPORTED_DATA,
    FrameReader,
    WebSocketError,
    binary_frames,
    close_frame,
    frame,
    unmask,
)


def raw(opcode: int, payload: bytes, *, fin: bool = True, key: bytes | None = None, rsv: int = 0) -> bytes:
    """A frame laid out byte by byte as RFC 6455 section 5.2 draws it."""
    first = (0x80 if fin else 0) | rsv | opcode
    n = len(payload)
    if n < 126:
        head = bytes([first, (0x80 if key else 0) | n])
    elif n < 1 << 16:
        head = bytes([first, (0x80 if key else 0) | 126]) + struct.pack("!H", n)
    else:
        head = bytes([first, (0x80 if key else 0) | 127]) + struct.pack("!Q", n)
    if key is None:
        return head + payload
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


KEY = b"\x37\xfa\x21\x3d"


def test_the_rfc_example_masked_hello() -> None:
    # RFC 6455 section 5.7: a single-frame masked text message "Hello"; here its binary twin
    data = bytes([0x82, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58])
    assert FrameReader(masked=True).feed(data).data == b"Hello"


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 200_000])
def test_every_length_encoding_round_trips_masked_and_not(size: int) -> None:
    payload = os.urandom(size)
    server = FrameReader(masked=True, max_payload=1 << 20)
    assert server.feed(raw(BINARY, payload, key=KEY)).data == payload
    client = FrameReader(masked=False, max_payload=1 << 20)
    assert client.feed(raw(BINARY, payload)).data == payload


def test_bytes_arriving_one_at_a_time_make_the_same_stream() -> None:
    payloads = [b"AMQP\x00\x01\x00\x00", os.urandom(300), b"", os.urandom(70_000)]
    wire = b"".join(raw(BINARY, p, key=KEY) for p in payloads)
    reader = FrameReader(masked=True, max_payload=1 << 20)
    got = b"".join(reader.feed(wire[i : i + 1]).data for i in range(len(wire)))
    assert got == b"".join(payloads)


def test_a_fragmented_message_is_one_stream_and_pings_between_fragments_are_answered() -> None:
    wire = (
        raw(BINARY, b"AM", fin=False, key=KEY)
        + raw(PING, b"are you there", key=KEY)
        + raw(CONTINUATION, b"QP", fin=False, key=KEY)
        + raw(CONTINUATION, b"\x00\x01\x00\x00", key=KEY)
        + raw(PONG, b"unasked", key=KEY)
    )
    got = FrameReader(masked=True).feed(wire)
    assert got.data == b"AMQP\x00\x01\x00\x00"
    assert got.pings == [b"are you there"]
    assert got.close is None


def test_a_close_ends_reading_and_says_its_code_and_reason() -> None:
    reader = FrameReader(masked=True)
    wire = raw(BINARY, b"before", key=KEY) + raw(CLOSE, struct.pack("!H", 1001) + "bye ü".encode(), key=KEY)
    got = reader.feed(wire + raw(BINARY, b"after", key=KEY))
    assert got.data == b"before"
    assert got.close == (1001, "bye ü")
    assert reader.feed(raw(BINARY, b"later", key=KEY)).data == b""
    assert FrameReader(masked=True).feed(raw(CLOSE, b"", key=KEY)).close == (NO_STATUS, "")


@pytest.mark.parametrize(
    ("wire", "code", "why"),
    [
        (raw(BINARY, b"x"), PROTOCOL_ERROR, "must mask"),  # a client's frame unmasked
        (raw(BINARY, b"x", key=KEY, rsv=0x40), PROTOCOL_ERROR, "reserved bits"),
        (raw(0x3, b"x", key=KEY), PROTOCOL_ERROR, "unknown opcode"),
        (raw(TEXT, b"AMQP", key=KEY), UNSUPPORTED_DATA, "text frame"),
        (raw(CONTINUATION, b"x", key=KEY), PROTOCOL_ERROR, "continuation"),
        (raw(BINARY, b"a", fin=False, key=KEY) + raw(BINARY, b"b", key=KEY), PROTOCOL_ERROR, "new message"),
        (raw(PING, b"x", fin=False, key=KEY), PROTOCOL_ERROR, "fragmented control"),
        (raw(PING, b"x" * 126, key=KEY), PROTOCOL_ERROR, "control frame of 126"),
        (raw(CLOSE, b"\x03", key=KEY), PROTOCOL_ERROR, "one byte"),
        (raw(CLOSE, b"\x03\xe8\xff", key=KEY), 1007, "UTF-8"),
        (bytes([0x82, 0xFF]) + b"\x80" + b"\x00" * 7 + KEY, PROTOCOL_ERROR, "top bit"),
    ],
)
def test_a_broken_frame_is_refused_with_its_close_code(wire: bytes, code: int, why: str) -> None:
    with pytest.raises(WebSocketError) as refused:
        FrameReader(masked=True).feed(wire)
    assert refused.value.code == code
    assert why in refused.value.reason


def test_a_server_frame_must_not_be_masked() -> None:
    with pytest.raises(WebSocketError, match="must not mask"):
        FrameReader(masked=False).feed(raw(BINARY, b"x", key=KEY))


def test_a_frame_over_the_limit_is_refused_before_its_payload_arrives() -> None:
    reader = FrameReader(masked=True, max_payload=1000)
    assert reader.feed(raw(BINARY, b"x" * 1000, key=KEY)).data == b"x" * 1000
    header_only = raw(BINARY, b"x" * 1001, key=KEY)[:8]  # the length is known from the header
    with pytest.raises(WebSocketError) as refused:
        reader.feed(header_only)
    assert refused.value.code == TOO_BIG
    assert "1001 bytes" in refused.value.reason


def test_the_writer_frames_as_the_rfc_lays_out() -> None:
    assert frame(BINARY, b"Hello", masked=False) == bytes([0x82, 0x05]) + b"Hello"
    assert frame(PONG, b"", masked=False) == bytes([0x8A, 0x00])
    assert frame(BINARY, b"x" * 300, masked=False)[:4] == bytes([0x82, 126, 0x01, 0x2C])
    assert frame(BINARY, b"x" * 70_000, masked=False)[:10] == bytes([0x82, 127]) + struct.pack("!Q", 70_000)
    masked = frame(BINARY, b"Hello", masked=True)
    assert masked[:2] == bytes([0x82, 0x85])
    assert unmask(masked[6:], masked[2:6]) == b"Hello"
    assert close_frame(1000, "", masked=False) == bytes([0x88, 0x02, 0x03, 0xE8])


def test_the_writer_cuts_big_writes_into_frames_a_default_reader_takes() -> None:
    data = os.urandom(200_000)
    wire = binary_frames(data, masked=True)
    reader = FrameReader(masked=True)  # Artemis's default limit: 65536
    assert reader.feed(wire).data == data
    assert _payload_sizes(wire, masked=True) == [65536, 65536, 65536, 3392]
    assert FrameReader(masked=False).feed(binary_frames(data, masked=False)).data == data


def _payload_sizes(wire: bytes, *, masked: bool) -> list[int]:
    sizes, pos = [], 0
    while pos < len(wire):
        n = wire[pos + 1] & 0x7F
        pos += 2
        if n == 126:
            n, pos = struct.unpack("!H", wire[pos : pos + 2])[0], pos + 2
        elif n == 127:
            n, pos = struct.unpack("!Q", wire[pos : pos + 8])[0], pos + 8
        pos += (4 if masked else 0) + n
        sizes.append(n)
    return sizes


def test_a_close_reason_is_cut_to_fit_a_control_frame() -> None:
    wire = close_frame(1002, "é" * 100, masked=True)
    code, reason = FrameReader(masked=True).feed(wire).close or (0, "")
    assert code == 1002
    assert len(reason.encode()) <= 123 and set(reason) == {"é"}
