"""The target's hot path: a replicated message read by the shape of its leading sections.

A mirror stream repeats itself. One producer's messages share a header byte for byte, and the mirror's
delivery annotations differ from one message to the next only in the 8 bytes of `x-opt-amq-mr-id`.
So each distinct header, delivery-annotations section (id cut out) and message-annotations section
is parsed once, by the general code, and remembered; a message of a known shape then costs a few
slices and lookups. First of all, the last message's whole layout is tried: when the bytes either
side of the id are the same as last time, nothing before the properties is read again.

Anything else (no header list, the id not first or not a long, a client's own delivery annotations,
properties that are not a list) is not read here: `read` returns None and the caller takes its
general path, which also reports what is malformed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar

from broker_core.amqp.codec import DecodeError, skip_value
from broker_core.message import Header, MessageView, list_fields

_HEADER = b"\x00\x53\x70"
_DELIVERY_ANNOTATIONS = b"\x00\x53\x71"
_MESSAGE_ANNOTATIONS = b"\x00\x53\x72"
_PROPERTIES = b"\x00\x53\x73"
_NO_PROPERTIES = b"\x00\x53\x73\x45"  # a properties section that is an empty list
_II = struct.Struct(">II").unpack_from
_LONG_AT = struct.Struct(">q").unpack_from

# (stored payload, mirror id, (broker id, destination, target queues), to, absolute expiry, header)
Read = tuple[bytes, int, tuple[Any, Any, Any], Any, Any, "tuple[Header, int] | None"]
# (bytes before the id, bytes from after the id to `pos`, where the id starts, end of the header, end of
# the delivery annotations, end of the message annotations (`pos`), annotation fields, header)
_Layout = tuple[bytes, bytes, int, int, int, int, tuple[Any, Any, Any], "tuple[Header, int] | None"]


class Shapes:
    """Memo of the leading sections seen on mirror links (a broker-wide cache; entries are small).

    `annotations(payload, start, mr_id)` reads the delivery annotations at `start` as (broker id,
    destination, target queues), raising unless `mr_id` is their only id; `is_event(payload, start)`
    says whether the message annotations at `start` make the delivery a control event."""

    LIMIT: ClassVar[int] = 1024  # entries per memo: a stream has a handful of shapes; others start over
    LONGEST: ClassVar[int] = 1024  # bytes of a section kept as a key (target-queue lists can be long)

    def __init__(
        self,
        id_key: bytes,
        annotations: Callable[[bytes, int, int], tuple[Any, Any, Any]],
        is_event: Callable[[bytes, int], bool],
    ) -> None:
        self.id_key = id_key  # the encoded `x-opt-amq-mr-id` symbol, followed on the wire by 0x81 (long)
        self.annotations = annotations
        self.is_event = is_event
        # Headers parsed once and shared by every message of that shape: read them, never change them.
        self.headers: dict[bytes, tuple[Header, int]] = {}
        self.delivery: dict[bytes, tuple[Any, Any, Any]] = {}
        self.message: dict[bytes, bool] = {}
        # The last message's whole layout up to its properties, the id cut out: when the next message
        # has the same bytes either side of its id, nothing before the properties is read again.
        self.last_layout: _Layout | None = None

    def read(self, payload: bytes) -> Read | None:
        try:
            return self._read(payload)
        except (IndexError, struct.error, DecodeError):
            return None  # truncated or lying sizes: the general path says what is wrong

    def _read(self, payload: bytes) -> Read | None:
        layout = self.last_layout
        if layout is not None:
            # unpacked in full: a tuple slice and a starred call would cost half the fast path
            lead, tail, at, h_end, d_end, m_end, known_fields, known_header = layout
            if payload.startswith(lead) and payload.startswith(tail, at + 8):
                mr_id = _LONG_AT(payload, at)[0]
                return self._rest(payload, mr_id, h_end, d_end, m_end, known_fields, known_header)
        n = len(payload)
        header: tuple[Header, int] | None = None
        head_end = 0
        if payload[:3] == _HEADER and n > 8:
            code = payload[3]
            if code == 0xD0:  # list32 (rhea, for one)
                head_end = 8 + _II(payload, 4)[0]
            elif code == 0xC0:  # list8
                head_end = 5 + payload[4]
            elif code == 0x45:  # list0
                head_end = 4
            else:
                return None
            head = payload[:head_end]
            header = self.headers.get(head) or self._header(head)
            if header is None:
                return None
        # The mirror's delivery annotations: a map whose first entry is the id, a long.
        p = head_end + 3
        if payload[head_end:p] != _DELIVERY_ANNOTATIONS or p >= n:
            return None
        code = payload[p]
        if code == 0xC1:
            da_end, items = p + 2 + payload[p + 1], p + 3
        elif code == 0xD1:
            da_end, items = p + 5 + _II(payload, p + 1)[0], p + 9
        else:
            return None
        key = self.id_key
        at = items + len(key)
        if da_end > n or at + 9 > da_end or payload[items:at] != key or payload[at] != 0x81:
            return None
        mr_id = _LONG_AT(payload, at + 1)[0]
        shape = payload[head_end:at] + payload[at + 9 : da_end]  # the annotations, the id cut out
        fields = self.delivery.get(shape)
        if fields is None:
            try:
                fields = self.annotations(payload, head_end, mr_id)
            except (DecodeError, IndexError):
                return None
            remember(self.delivery, shape, fields)
        pos = da_end
        if payload[pos : pos + 3] == _MESSAGE_ANNOTATIONS:
            try:
                end = skip_value(payload, pos + 3)
            except (DecodeError, IndexError):
                return None
            section = payload[pos:end]
            plain = self.message.get(section)
            if plain is None:
                try:
                    plain = not self.is_event(payload, pos)
                except (DecodeError, IndexError):
                    return None
                remember(self.message, section, plain)
            if not plain:
                return None
            pos = end
        lead, tail = payload[: at + 1], payload[at + 9 : pos]
        self.last_layout = (lead, tail, at + 1, head_end, da_end, pos, fields, header)
        return self._rest(payload, mr_id, head_end, da_end, pos, fields, header)

    def _rest(
        self,
        payload: bytes,
        mr_id: int,
        head_end: int,
        da_end: int,
        pos: int,
        fields: tuple[Any, Any, Any],
        header: tuple[Header, int] | None,
    ) -> Read | None:
        """From the end of the message annotations (`pos`): the properties' `to` and expiry, and the
        message as the target stores it (without the mirror's delivery annotations)."""
        to: Any = None
        expiry: Any = None
        head = payload[pos : pos + 3]
        if head == _DELIVERY_ANNOTATIONS:  # a client's own, after the mirror's: the general path's case
            return None
        if head == _PROPERTIES and payload[pos : pos + 4] != _NO_PROPERTIES:
            try:
                to, expiry = list_fields(payload, pos, 2, 8)
            except (DecodeError, IndexError):
                return None
        return payload[:head_end] + payload[da_end:], mr_id, fields, to, expiry, header

    def _header(self, head: bytes) -> tuple[Header, int] | None:
        try:
            view = MessageView(head)
        except (DecodeError, IndexError):
            return None
        if view.header_end != len(head):
            return None
        header = (view.header, view.header_end)
        remember(self.headers, head, header)
        return header


def remember(memo: dict[bytes, Any], key: bytes, value: Any) -> None:
    """Keep `value` under `key`, within bounds: keys over LONGEST bytes are not kept, and a memo that
    reaches LIMIT entries starts over."""
    if len(key) > Shapes.LONGEST:
        return  # read every time rather than kept: memory stays bounded whatever a peer sends
    if len(memo) >= Shapes.LIMIT:
        memo.clear()
    memo[key] = value
