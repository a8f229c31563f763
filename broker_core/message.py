"""What the broker needs to know about an encoded AMQP message, read without decoding the body.

The broker stores and forwards the bytes it received. It reads the header (durable, priority, ttl,
delivery-count) and, only when asked, the properties (`to` for anonymous senders, absolute expiry)
and annotations (the mirror). Redelivery rewrites just the header section.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .amqp.codec import (
    DecodeError,
    Described,
    decode_value,
    enc_bool,
    enc_fields,
    enc_list_of_encoded,
    enc_map_of_encoded,
    enc_symbol,
    enc_ubyte,
    enc_uint,
    encode,
    skip_value,
)

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
FOOTER = 0x78
_SYMBOLIC = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": 0x75,
    "amqp:amqp-sequence:list": 0x76,
    "amqp:amqp-value:*": 0x77,
    "amqp:footer:map": FOOTER,
}
DEFAULT_PRIORITY = 4
# Artemis's breadcrumbs on the copy of a message it dead-letters or expires (message annotations of an
# AMQP message), by which management's `retryMessages` sends it back to its queue
ORIG_ADDRESS = "x-opt-ORIG-ADDRESS"
ORIG_QUEUE = "x-opt-ORIG-QUEUE"
ACTUAL_EXPIRY = "x-opt-ACTUAL-EXPIRY"


@dataclass(slots=True, init=False)  # one per message: a compiled __init__ (see journal/records.py)
class Header:
    durable: bool
    priority: int
    ttl: int | None
    first_acquirer: bool
    delivery_count: int

    def __init__(
        self,
        durable: bool = False,
        priority: int = DEFAULT_PRIORITY,
        ttl: int | None = None,
        first_acquirer: bool = False,
        delivery_count: int = 0,
    ) -> None:
        self.durable = durable
        self.priority = priority
        self.ttl = ttl
        self.first_acquirer = first_acquirer
        self.delivery_count = delivery_count

    def encode(self) -> bytes:
        fields = [
            enc_bool(self.durable),
            enc_ubyte(self.priority),
            enc_uint(self.ttl) if self.ttl is not None else b"\x40",
            enc_bool(self.first_acquirer),
            enc_uint(self.delivery_count),
        ]
        return b"\x00\x53\x70" + enc_list_of_encoded(fields)


def sections(payload: bytes, start: int = 0) -> list[tuple[int, int, int]]:
    """(section code, start, end) of every section from `start`, in order; DecodeError when malformed."""
    out = []
    pos, n = start, len(payload)
    while pos < n:
        code, vpos = section_code(payload, pos)
        end = skip_value(payload, vpos)
        out.append((code, pos, end))
        pos = end
    return out


def section_code(payload: bytes, pos: int) -> tuple[int, int]:
    """The code of the section starting at `pos` (-1 if unknown) and where its value starts."""
    if payload[pos] != 0x00:
        raise DecodeError(f"message section at offset {pos} is not a described value")
    if payload[pos + 1 : pos + 2] == b"\x53":  # the usual small-ulong descriptor: no decoding needed
        return (payload[pos + 2] if pos + 2 < len(payload) else -1), pos + 3
    descriptor, vpos = decode_value(payload, pos + 1)
    return (_SYMBOLIC.get(descriptor, -1) if isinstance(descriptor, str) else descriptor), vpos


def list_field(payload: bytes, start: int, index: int) -> Any:
    """Field `index` of the described list section at `start`, skipping (not building) the others."""
    return list_fields(payload, start, index)[0]


def list_fields(payload: bytes, start: int, *indices: int) -> list[Any]:
    """Fields `indices` (increasing) of the described list section at `start`, in one pass that skips
    (does not build) the others; None for a field past the end of the list."""
    pos = start + 3 if payload[start + 1] == 0x53 else decode_value(payload, start + 1)[1]
    code = payload[pos]
    if code == 0x45:
        return [None] * len(indices)
    if code == 0xC0:
        count, pos = payload[pos + 2], pos + 3
    elif code == 0xD0:
        count = int.from_bytes(payload[pos + 5 : pos + 9], "big")
        pos += 9
    else:
        raise DecodeError(f"section at {start} is not a list")
    out: list[Any] = []
    at = 0
    for index in indices:
        if index >= count:
            out.append(None)
            continue
        while at < index:
            pos = skip_value(payload, pos)
            at += 1
        value, pos = decode_value(payload, pos)
        at += 1
        out.append(value)
    return out


def section_value(payload: bytes, start: int) -> Any:
    _, vpos = decode_value(payload, start + 1)
    value, _ = decode_value(payload, vpos)
    return value.value if isinstance(value, Described) else value


class MessageView:
    """Lazily parsed view of one encoded message."""

    __slots__ = ("_expiry", "_props", "_sections", "header", "header_end", "header_start", "payload")

    def __init__(
        self,
        payload: bytes,
        parts: list[tuple[int, int, int]] | None = None,
        expiry: int | None = None,
        header: tuple[Header, int] | None = None,
    ) -> None:
        self.payload = payload
        self._sections = parts  # `sections(payload)`, when the caller has them already
        self._expiry = expiry  # properties.absolute-expiry-time, when the caller read it already
        self._props: list[Any] | None = None
        self.header_start = 0
        if header is not None:  # (header, where it ends), when the caller read it already
            self.header, self.header_end = header
            return
        # Fast path: a header, if present, is the first section and starts with 00 53 70.
        if payload[:3] == b"\x00\x53\x70":
            fast = _short_header(payload)
            if fast is not None:
                self.header, self.header_end = fast
                return
            self.header = Header()
            value, end = decode_value(payload, 3)
            self.header_end = end
            if isinstance(value, list):
                self.header = _header_from_list(value)
            else:
                raise DecodeError("message header is not a list")
            return
        self.header, self.header_end = Header(), 0
        if not payload:
            raise DecodeError("empty message")
        elif payload[0] != 0x00:
            raise DecodeError("message does not start with a described section")

    def all_sections(self) -> list[tuple[int, int, int]]:
        if self._sections is None:
            self._sections = sections(self.payload)
        return self._sections

    def properties(self) -> list[Any]:
        if self._props is None:
            self._props = []
            for code, start, _ in self.all_sections():
                if code == PROPERTIES:
                    value = section_value(self.payload, start)
                    self._props = value if isinstance(value, list) else []
                    break
        return self._props

    def section_map(self, code: int) -> dict[Any, Any]:
        for c, start, _ in self.all_sections():
            if c == code:
                value = section_value(self.payload, start)
                return value if isinstance(value, dict) else {}
        return {}

    def _property(self, index: int) -> Any:
        if self._props is not None:
            return self._props[index] if len(self._props) > index else None
        for code, start, _ in self.all_sections():
            if code == PROPERTIES:
                return list_field(self.payload, start, index)
        return None

    @property
    def to(self) -> str | None:
        value = self._property(2)
        return value if isinstance(value, str) else None

    @property
    def absolute_expiry_time(self) -> int:
        value = self._expiry
        if value is None:  # without the bytes of a properties section, there is no need to walk them
            value = self._property(8) if self.payload.find(b"\x00\x53\x73") >= 0 else 0
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0

    def with_header(self, header: Header) -> bytes:
        """The message with its header section replaced (or added)."""
        return header.encode() + self.payload[self.header_end :]

    def without_delivery_annotations(self, replacement: bytes = b"") -> bytes:
        """The message with delivery-annotations replaced (the mirror sends its own)."""
        out, pos, placed = [], 0, False
        for code, start, end in self.all_sections():
            if code == DELIVERY_ANNOTATIONS:
                out.append(self.payload[pos:start])
                out.append(replacement)
                placed = True
                pos = end
            elif not placed and code not in (HEADER,) and replacement:
                out.append(self.payload[pos:start])
                out.append(replacement)
                placed = True
                pos = start
        out.append(self.payload[pos:])
        if not placed and replacement:
            out.append(replacement)
        return b"".join(out)

    def with_message_annotations(self, extra: dict[str, Any]) -> bytes:
        """The message with `extra` set in its message-annotations (symbol keys): the section's other
        entries kept byte for byte, one of the same key replaced; without such a section, one is added
        where AMQP puts it (after the header and delivery-annotations)."""
        payload = self.payload
        added: list[bytes] = []
        for key, value in extra.items():
            added += [enc_symbol(key), encode(value)]
        section = b"\x00\x53\x72"
        insert_at = 0
        for code, start, end in self.all_sections():
            if code == MESSAGE_ANNOTATIONS:
                kept = _map_items(payload, section_code(payload, start)[1], skip=extra.keys())
                return payload[:start] + section + enc_map_of_encoded(kept + added) + payload[end:]
            if code in (HEADER, DELIVERY_ANNOTATIONS):
                insert_at = end
        return payload[:insert_at] + section + enc_map_of_encoded(added) + payload[insert_at:]


def _map_items(payload: bytes, pos: int, skip: Any) -> list[bytes]:
    """The encoded keys and values of the map at `pos`, as they are, but for the entries keyed in `skip`."""
    code = payload[pos]
    if code == 0x40:  # null: no annotations
        return []
    if code == 0xC1:
        count, pos = payload[pos + 2], pos + 3
    elif code == 0xD1:
        count, pos = int.from_bytes(payload[pos + 5 : pos + 9], "big"), pos + 9
    else:
        raise DecodeError("message-annotations is not a map")
    items: list[bytes] = []
    for _ in range(count // 2):
        key, value_at = decode_value(payload, pos)
        end = skip_value(payload, value_at)
        if key not in skip:
            items += [payload[pos:value_at], payload[value_at:end]]
        pos = end
    return items


_II = struct.Struct(">II").unpack_from

# The one-byte encodings a header's fields usually come in: null, true, false, ubyte, smalluint, uint0.
_SHORT_FIELD = {0x40: 1, 0x41: 1, 0x42: 1, 0x43: 1, 0x50: 2, 0x52: 2, 0x56: 2}


def _short_header(payload: bytes) -> tuple[Header, int] | None:
    """The header as most clients encode it (a list of one-byte-wide fields), read without the general
    decoder; None for any other encoding, which the general decoder then handles (and checks)."""
    kind = payload[3] if len(payload) > 3 else -1
    if kind == 0xC0 and len(payload) >= 6:  # list8
        size, count, pos = payload[4], payload[5], 6
        end = 5 + size
    elif kind == 0xD0 and len(payload) >= 12:  # list32 (rhea, for one)
        size, count = _II(payload, 4)
        pos, end = 12, 8 + size
    else:
        return None
    if count > 5 or end > len(payload):
        return None
    fields: list[Any] = []
    for _ in range(count):
        code = payload[pos] if pos < end else -1
        width = _SHORT_FIELD.get(code)
        if width is None:
            return None
        if code == 0x40:
            fields.append(None)
        elif code == 0x41 or code == 0x42:
            fields.append(code == 0x41)
        elif code == 0x43:
            fields.append(0)
        elif code == 0x56:
            if payload[pos + 1] > 1:
                return None
            fields.append(payload[pos + 1] == 1)
        else:
            fields.append(payload[pos + 1])
        pos += width
    if pos != end:
        return None
    if len(fields) > 3 and isinstance(fields[3], int) and not isinstance(fields[3], bool):
        return None  # first-acquirer must be a boolean: let the general path judge it
    return _header_from_list(fields), end


def _header_from_list(value: list[Any]) -> Header:
    n = len(value)
    h = Header()
    if n > 0 and value[0] is not None:
        h.durable = bool(value[0])
    if n > 1 and value[1] is not None:
        h.priority = min(max(int(value[1]), 0), 255)  # a ubyte on the wire; clamp what a peer mis-encodes
    if n > 2 and value[2] is not None:
        h.ttl = min(max(int(value[2]), 0), 0xFFFFFFFF)
    if n > 3 and value[3] is not None:
        h.first_acquirer = bool(value[3])
    if n > 4 and value[4] is not None:
        h.delivery_count = min(max(int(value[4]), 0), 0xFFFFFFFF)
    return h


def build_message(
    body: Any,
    *,
    durable: bool = False,
    to: str | None = None,
    correlation_id: Any = None,
    message_id: Any = None,
    application_properties: dict[str, Any] | None = None,
    message_annotations: dict[Any, Any] | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> bytes:
    """Encode a message the broker itself produces (management replies, mirror control events)."""
    plain = not durable and priority == DEFAULT_PRIORITY
    out = [] if plain else [Header(durable=durable, priority=priority).encode()]
    if message_annotations:
        out.append(b"\x00\x53\x72" + enc_fields(message_annotations))
    if to is not None or correlation_id is not None or message_id is not None:
        nul = b"\x40"
        props: list[bytes] = [encode(message_id), nul, encode(to), nul, nul, encode(correlation_id)]
        out.append(b"\x00\x53\x73" + enc_list_of_encoded(props))
    if application_properties:
        out.append(b"\x00\x53\x74" + encode(application_properties))
    out.append(b"\x00\x53\x77" + encode(body))
    return b"".join(out)
