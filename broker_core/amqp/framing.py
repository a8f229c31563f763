"""AMQP frame layer: protocol headers and the 8-byte frame header (AMQP 1.0 part 2.3).

A frame is `size:uint32 doff:uint8 type:uint8 channel:uint16`, an extended header of `doff*4-8`
bytes (ignored), then the body: one performative and, for a transfer, the payload that follows it.
"""

from __future__ import annotations

import struct
from typing import Any

from .codec import enc_list_of_encoded
from .performatives import Accepted

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"

FRAME_AMQP = 0
FRAME_SASL = 1
MIN_MAX_FRAME_SIZE = 512  # the spec's floor for max-frame-size

_HEADER = struct.Struct(">IBBH")
HEADER_SIZE = 8
EMPTY_FRAME = _HEADER.pack(8, 2, FRAME_AMQP, 0)

pack_header = _HEADER.pack
unpack_header = _HEADER.unpack_from


def frame(channel: int, body: bytes, frame_type: int = FRAME_AMQP) -> bytes:
    return _HEADER.pack(len(body) + 8, 2, frame_type, channel) + body


# Transfer frames are the hot path: built with a precompiled header instead of the generic encoder.
_TRANSFER_DESC = b"\x00\x53\x14"
_UINT = struct.Struct(">BI").pack


def _uint(v: int) -> bytes:
    if v == 0:
        return b"\x43"
    if v < 256:
        return bytes((0x52, v))
    return _UINT(0x70, v)


_SINGLE_FIXED = HEADER_SIZE + 6 + 2 + 5 + 2 + 2  # every byte of a single-frame transfer but tag and payload
_SINGLE_HEADS: dict[int, struct.Struct] = {}


def single_transfer_head(
    channel: int, handle: int, delivery_id: int, tag: bytes, settled: bool, size: int, max_frame_size: int
) -> bytes | None:
    """The bytes before the payload of the usual delivery (message format 0, a short tag) when it fits
    one frame, else None: frame header, then a list8 of handle (smalluint), delivery-id (uint), binary8
    tag, message-format 0 (uint0) and settled, packed by one struct."""
    n = len(tag)
    size += _SINGLE_FIXED + n
    if n > 32 or handle > 255 or size > max_frame_size:
        return None
    return (_SINGLE_HEADS.get(n) or _single_head(n)).pack(
        size, 2, FRAME_AMQP, channel, 0x00, 0x53, 0x14, 0xC0, 12 + n, 5,
        0x52, handle, 0x70, delivery_id, 0xA0, n, tag, 0x43, 0x41 if settled else 0x42,
    )  # fmt: skip


def _single_head(tag_size: int) -> struct.Struct:
    head = struct.Struct(f">IBBH6B2BBI2B{tag_size}s2B")
    _SINGLE_HEADS[tag_size] = head
    return head


def transfer_frames(
    channel: int,
    handle: int,
    delivery_id: int,
    tag: bytes,
    settled: bool,
    payload: bytes,
    max_frame_size: int,
    message_format: int = 0,
    state: bytes | None = None,
) -> list[bytes]:
    """Encode one delivery as one or more transfer frames, split to fit `max_frame_size`; `state` (an
    encoded delivery state) goes in the first frame."""
    if message_format == 0 and state is None:
        head = single_transfer_head(channel, handle, delivery_id, tag, settled, len(payload), max_frame_size)
        if head is not None:
            return [head + payload]
    fmt = b"\x43" if message_format == 0 else _uint(message_format)
    first_fields = [
        _uint(handle),
        _uint(delivery_id),
        bytes((0xA0, len(tag))) + tag,
        fmt,
        b"\x41" if settled else b"\x42",
    ]
    # after `more` (index 5): rcv-settle-mode (null), then the state
    stated = [] if state is None else [b"\x40", state]
    whole = [*first_fields, b"\x40", *stated] if stated else first_fields
    performative = _TRANSFER_DESC + enc_list_of_encoded(whole)
    room = max_frame_size - HEADER_SIZE - len(performative) - 2  # 2: the `more` field when split
    if len(payload) <= room + 2:
        body = performative + payload
        return [_HEADER.pack(len(body) + 8, 2, FRAME_AMQP, channel) + body]
    frames = []
    more_perf = _TRANSFER_DESC + enc_list_of_encoded([*first_fields, b"\x41", *stated])
    cont_perf = _TRANSFER_DESC + enc_list_of_encoded(
        [_uint(handle), b"\x40", b"\x40", b"\x40", b"\x40", b"\x41"]
    )
    last_perf = _TRANSFER_DESC + enc_list_of_encoded([_uint(handle)])
    pos, n, first = 0, len(payload), True
    while pos < n:
        perf = more_perf if first else cont_perf
        chunk = max_frame_size - HEADER_SIZE - len(perf)
        if n - pos <= max_frame_size - HEADER_SIZE - len(last_perf) and not first:
            perf = last_perf
            chunk = n - pos
        body = perf + payload[pos : pos + chunk]
        frames.append(_HEADER.pack(len(body) + 8, 2, FRAME_AMQP, channel) + body)
        pos += chunk
        first = False
    if first or perf is not last_perf:
        # the final chunk went out with more=true: close the delivery with an empty last frame
        frames.append(frame(channel, last_perf))
    return frames


_BOOLS = {0x41: True, 0x42: False, 0x40: None}
_UINT_AT = struct.Struct(">I").unpack_from
_LIST32_AT = struct.Struct(">II").unpack_from
_UINT_WIDTH = {0x43: 1, 0x52: 2, 0x70: 5}  # uint0, smalluint, uint: constructor and value bytes


def _list_head(buf: bytes | bytearray, start: int, limit: int) -> tuple[int, int, int] | None:
    """(element count, where the first element starts, where the list ends) of the performative's
    fields list after the descriptor at `start`, in list8 or list32 (rhea writes every performative as
    list32); None for any other encoding or a list that runs past `limit`."""
    code = buf[start + 3] if limit - start >= 6 else -1
    if code == 0xC0:
        count, pos, end = buf[start + 5], start + 6, start + 5 + buf[start + 4]
    elif code == 0xD0 and limit - start >= 12:
        size, count = _LIST32_AT(buf, start + 4)
        pos, end = start + 12, start + 8 + size
    else:
        return None
    return (count, pos, end) if end <= limit else None


def _read_uint(body: bytes, pos: int, code: int) -> int:
    if code == 0x43:
        return 0
    if code == 0x52:
        return body[pos + 1]
    return int.from_bytes(body[pos + 1 : pos + 5], "big")


def fast_transfer_fields(
    buf: bytes | bytearray, start: int = 0, limit: int | None = None
) -> tuple[list[Any], int] | None:
    """Decode the transfer performative at `start` (its descriptor) quickly when it uses the usual
    compact encodings; `limit` is where the frame ends (default: the end of `buf`).

    Returns (fields, where the performative ends) or None, in which case the caller uses the generic
    decoder. Covers what clients send: list8 or list32 (rhea), uint as 0x43/0x52/0x70, binary8 tag,
    booleans; a later field in any other encoding stops the fast path.
    """
    if limit is None:
        limit = len(buf)
    head = _list_head(buf, start, limit)
    if head is None:
        return None
    count, pos, end = head
    if count == 5:
        # A single-frame delivery as our own sender writes it (and many others): handle as uint0 or
        # smalluint, delivery-id uint, binary8 tag, message-format uint0, settled. Read in one go.
        code = buf[pos]
        p = pos + 1 if code == 0x43 else pos + 2 if code == 0x52 else end
        if end - p >= 9 and buf[p] == 0x70 and buf[p + 5] == 0xA0:
            q = p + 7 + buf[p + 6]
            if q + 2 == end and buf[q] == 0x43 and (buf[q + 1] == 0x41 or buf[q + 1] == 0x42):
                handle = buf[pos + 1] if code == 0x52 else 0
                return [handle, _UINT_AT(buf, p + 1)[0], bytes(buf[p + 7 : q]), 0, buf[q + 1] == 0x41], end
    fields: list[Any] = []
    for i in range(count):
        if pos >= end:
            return None
        code = buf[pos]
        if code == 0x40:
            fields.append(None)
            pos += 1
        elif i == 0 or i == 1 or i == 3:  # handle, delivery-id, message-format: uint
            if code == 0x52:
                fields.append(buf[pos + 1])
                pos += 2
            elif code == 0x43:
                fields.append(0)
                pos += 1
            elif code == 0x70:
                fields.append(_UINT_AT(buf, pos + 1)[0])
                pos += 5
            else:
                return None
        elif i == 2 and code == 0xA0:  # delivery-tag: binary8
            n = buf[pos + 1]
            fields.append(bytes(buf[pos + 2 : pos + 2 + n]))
            pos += 2 + n
        elif i in (4, 5, 8, 9, 10) and code in _BOOLS:  # settled, more, resume, aborted, batchable
            fields.append(_BOOLS[code])
            pos += 1
        else:
            return None
    return (fields, end) if pos == end else None


_ACCEPTED_STATE = b"\x00\x53\x24\x45"  # accepted, as every peer encodes it: described list0


def fast_disposition_fields(body: bytes) -> list[Any] | None:
    """A disposition's fields when it uses the usual compact encodings and its state, if any, is
    Accepted; None otherwise (the caller then uses the generic decoder, which also checks everything)."""
    head = _list_head(body, 0, len(body))
    if head is None:
        return None
    count, pos, end = head
    if end != len(body) or count > 6:
        return None
    fields: list[Any] = []
    for i in range(count):
        code = body[pos] if pos < end else -1
        if code == 0x40:
            fields.append(None)
            pos += 1
        elif i in (1, 2):  # first, last: uint
            width = _UINT_WIDTH.get(code)
            if width is None:
                return None
            fields.append(_read_uint(body, pos, code))
            pos += width
        elif i in (0, 3, 5) and code in _BOOLS:  # role, settled, batchable
            fields.append(_BOOLS[code])
            pos += 1
        elif i == 4 and body[pos : pos + 4] == _ACCEPTED_STATE:
            fields.append(Accepted())
            pos += 4
        else:
            return None
    return fields if pos == end else None
