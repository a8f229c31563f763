"""What a mirror target reads: one delivery decoded into a control event or a replicated message.

As tolerant as Artemis where Artemis ignores things (an unknown or non-symbol event type is ignored),
more lenient about integer and string flavours, strict only where a target cannot proceed (a message
without `x-opt-amq-mr-id`). The hot paths are memos: a replicated message of a layout seen before
(`shapes.py`), and a postAck like one seen before.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from broker_core.amqp.codec import DecodeError, Symbol, decode_value
from broker_core.message import (
    DELIVERY_ANNOTATIONS,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    Header,
    list_field,
    sections,
)

from .json_shapes import AddressInfo, QueueConfiguration
from .shapes import Shapes, remember
from .wire import (
    ACK_REASON,
    ADDRESS,
    AMQP_VALUE,
    BROKER_ID,
    DELETE_QUEUE,
    EVENT_KINDS,
    EVENT_TYPE,
    INTERNAL_DESTINATION,
    INTERNAL_ID,
    MR_ID_KEY,
    POST_ACK,
    QUEUE,
    TARGET_QUEUES,
    ack_reason_from_wire,
    leading_sections,
)

_II = struct.Struct(">II").unpack_from
_LONG_AT = struct.Struct(">q").unpack_from


class MirrorDecodeError(ValueError):
    """A mirror delivery a target cannot act on (the sending broker's fault)."""


class MissingMirrorId(MirrorDecodeError):
    """A replicated message without `x-opt-amq-mr-id` in its delivery annotations."""


@dataclass(slots=True, init=False)  # one per event: a compiled __init__ (see journal/records.py)
class ControlEvent:
    kind: Symbol  # one of EVENT_KINDS
    address: str | None
    queue: str | None
    broker_id: str | None  # postAck: origin broker; None means "the link's remote broker"
    reason: int  # vocabulary.AckReason
    message_id: int | None  # postAck body
    body: str | None  # JSON (address/queue events) or the queue name (deleteQueue)

    def __init__(
        self,
        kind: Symbol,
        address: str | None,
        queue: str | None,
        broker_id: str | None,
        reason: int,
        message_id: int | None,
        body: str | None,
    ) -> None:
        self.kind = kind
        self.address = address
        self.queue = queue
        self.broker_id = broker_id
        self.reason = reason
        self.message_id = message_id
        self.body = body

    def address_info(self) -> AddressInfo:
        return AddressInfo.from_json(self._json())

    def queue_configuration(self) -> QueueConfiguration:
        return QueueConfiguration.from_json(self._json())

    def _json(self) -> str:
        if self.body is None:
            raise MirrorDecodeError(f"{self.kind} event without an amqp-value string body")
        return self.body


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """An event type Artemis would ignore: unknown name, or not a symbol. Accept and drop it."""

    event_type: Any  # (not `object`: mypyc cannot compile that annotation in a dataclass)


@dataclass(slots=True, init=False)  # one per event: a compiled __init__ (see journal/records.py)
class ReplicatedMessage:
    payload: bytes  # the message without the mirror's delivery annotations: what the target stores
    mr_id: int
    broker_id: str | None  # None: originated on the link's remote broker
    destination: str | None  # x-opt-amq-mr-dst
    target_queues: tuple[str, ...] | None
    to: str | None  # properties.to
    parts: list[tuple[int, int, int]] | None  # `sections(payload)`, when known
    expiry: int | None  # properties.absolute-expiry-time (0: none), when known
    header: tuple[Header, int] | None  # (header, where it ends), when known; shared, read-only

    def __init__(
        self,
        payload: bytes,
        mr_id: int,
        broker_id: str | None,
        destination: str | None,
        target_queues: tuple[str, ...] | None,
        to: str | None,
        parts: list[tuple[int, int, int]] | None = None,
        expiry: int | None = None,
        header: tuple[Header, int] | None = None,
    ) -> None:
        self.payload = payload
        self.mr_id = mr_id
        self.broker_id = broker_id
        self.destination = destination
        self.target_queues = target_queues
        self.to = to
        self.parts = parts
        self.expiry = expiry
        self.header = header

    @property
    def address(self) -> str | None:
        """Where the target routes it: the mirror destination, else `properties.to`."""
        return self.destination if self.destination is not None else self.to


MirrorDelivery = ControlEvent | UnknownEvent | ReplicatedMessage


def decode_mirror_delivery(payload: bytes) -> MirrorDelivery:
    read = _SHAPES.read(payload)  # the target's hot path: a replicated message of a known shape
    if read is not None:
        stored, mr_id, (broker_id, destination, queues), to, expiry, header = read
        to = to if isinstance(to, str) else None
        return ReplicatedMessage(
            stored, mr_id, broker_id, destination, queues, to, None, _expiry(expiry), header
        )
    if payload[-12:-8] == _LONG_BODY:  # perhaps a postAck like one seen before
        k = _POST_ACKS.get(payload[:-8])
        if k is not None:
            mid = _LONG_AT(payload, len(payload) - 8)[0]
            return ControlEvent(k.kind, k.address, k.queue, k.broker_id, k.reason, mid, None)
    try:
        _, da_end, ma_end, _ = leading_sections(payload)
        if ma_end > da_end:
            annotations = _annotations(payload, da_end)
            if annotations.get(EVENT_TYPE) is not None:  # a control event: its body follows
                parts = sections(payload, ma_end)
                event = _decode_event(payload, parts, annotations)
                _remember_post_ack(payload, parts, event)
                return event
        return decode_general(payload)
    except DecodeError as exc:
        raise MirrorDecodeError(f"malformed mirror delivery: {exc}") from exc


# A source sends every postAck of one queue (and origin, and reason) with the same bytes but for the
# message id, a long in the amqp-value body at the very end: such an event is decoded once and
# remembered without those 8 bytes (11 us -> about 2 us a postAck, one per consumed message).
_LONG_BODY = b"\x00\x53\x77\x81"
_POST_ACKS: dict[bytes, ControlEvent] = {}


def _remember_post_ack(payload: bytes, parts: list[tuple[int, int, int]], event: MirrorDelivery) -> None:
    n = len(payload)
    if (
        isinstance(event, ControlEvent)
        and event.kind == POST_ACK
        and parts
        and parts[-1] == (AMQP_VALUE, n - 12, n)  # the long is the last section's whole value
        and payload[n - 12 : n - 8] == _LONG_BODY
    ):
        remember(_POST_ACKS, payload[:-8], event)


def decode_general(payload: bytes) -> MirrorDelivery:
    """`decode_mirror_delivery` by walking every section (raises DecodeError when malformed)."""
    parts = sections(payload)
    for code, start, _ in parts:
        if code == MESSAGE_ANNOTATIONS:
            annotations = _annotations(payload, start)
            if annotations.get(EVENT_TYPE) is not None:
                return _decode_event(payload, parts, annotations)
            break
    return _decode_message(payload, parts)


def _decode_event(payload: bytes, parts: list[tuple[int, int, int]], ma: dict[Any, Any]) -> MirrorDelivery:
    kind = ma[EVENT_TYPE]
    if not isinstance(kind, Symbol) or kind not in EVENT_KINDS:
        return UnknownEvent(kind)
    body = _amqp_value(payload, parts)
    message_id: int | None = None
    text: str | None = None
    if kind == POST_ACK:
        if not isinstance(body, int) or isinstance(body, bool):
            raise MirrorDecodeError(f"postAck body must be a long message ID, got {body!r}")
        message_id = int(body)
    elif isinstance(body, str):
        text = str(body)
    elif kind != DELETE_QUEUE:
        raise MirrorDecodeError(f"{kind} body must be an amqp-value string, got {body!r}")
    return ControlEvent(
        kind=Symbol(kind),
        address=_opt_str(ma, ADDRESS),
        queue=_opt_str(ma, QUEUE),
        broker_id=_opt_str(ma, BROKER_ID),
        reason=ack_reason_from_wire(ma.get(ACK_REASON)),
        message_id=message_id,
        body=text,
    )


def _expiry(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _replicated(
    stored: bytes,
    da: dict[Any, Any],
    to: str | None,
    parts: list[tuple[int, int, int]] | None,
    expiry: int | None,
) -> ReplicatedMessage:
    mr_id = da.get(INTERNAL_ID)
    if not isinstance(mr_id, int) or isinstance(mr_id, bool):
        raise MissingMirrorId(f"replicated message without an integer {INTERNAL_ID} (got {mr_id!r})")
    return ReplicatedMessage(stored, int(mr_id), *_mirror_fields(da), to, parts, expiry)


def _mirror_fields(da: dict[Any, Any]) -> tuple[str | None, str | None, tuple[str, ...] | None]:
    """(origin broker id, destination, target queues) from the mirror's delivery annotations."""
    queues = da.get(TARGET_QUEUES)
    if queues is not None and not (isinstance(queues, list) and all(isinstance(q, str) for q in queues)):
        raise MirrorDecodeError(f"{TARGET_QUEUES} must be a list of strings, got {queues!r}")
    return (
        _opt_str(da, BROKER_ID),
        _opt_str(da, INTERNAL_DESTINATION),
        None if queues is None else tuple(queues),
    )


def _shape_fields(payload: bytes, start: int, mr_id: int) -> tuple[str | None, str | None, Any]:
    """`_mirror_fields` of the delivery annotations at `start`, for the shape memo: raises unless the
    map holds `mr_id` as its only id and no key twice (so its other bytes decide everything else)."""
    da = _annotations(payload, start)
    p = start + 3
    count = payload[p + 2] if payload[p] == 0xC1 else _II(payload, p + 1)[1]
    if da.get(INTERNAL_ID) != mr_id or len(da) * 2 != count:
        raise DecodeError("mirror annotations with a repeated key")
    return _mirror_fields(da)


def _is_event(payload: bytes, start: int) -> bool:
    return _annotations(payload, start).get(EVENT_TYPE) is not None


def _decode_message(payload: bytes, parts: list[tuple[int, int, int]]) -> ReplicatedMessage:
    da: dict[Any, Any] = {}
    cut = (0, 0)
    to: str | None = None
    for code, start, end in parts:
        if code == DELIVERY_ANNOTATIONS and not cut[1]:  # the mirror's: the first (a client's may follow)
            da, cut = _annotations(payload, start), (start, end)
        elif code == PROPERTIES:
            value = list_field(payload, start, 2)  # skips the other fields instead of decoding them
            to = value if isinstance(value, str) else None
    # What is stored is the message without the mirror's section; its section offsets shift with it.
    cut_start, cut_end = cut
    width = cut_end - cut_start
    stored = payload[:cut_start] + payload[cut_end:] if width else payload
    stored_parts = [
        (c, s, e) if s < cut_start else (c, s - width, e - width) for c, s, e in parts if s != cut_start
    ]
    return _replicated(stored, da, to, stored_parts, None)


def _annotations(buf: bytes, start: int) -> dict[Any, Any]:
    """The map of the annotations section at `start`: the target's per-delivery hot path, so the usual
    short symbol keys (as plain strings, equal to their Symbol constants) and short string and symbol
    values are read inline; other values go through the generic decoder."""
    pos = start + 3 if buf[start + 1] == 0x53 else decode_value(buf, start + 1)[1]
    code = buf[pos] if pos < len(buf) else -1
    if code == 0xC1:
        size, count, p = buf[pos + 1], buf[pos + 2], pos + 3
        end = pos + 2 + size
    elif code == 0xD1:
        size, count = _II(buf, pos + 1)
        p, end = pos + 9, pos + 5 + size
    elif code == 0x40:
        return {}
    else:
        raise MirrorDecodeError(f"annotations at offset {start} are not a map")
    if end > len(buf) or count % 2:
        raise DecodeError(f"malformed annotations map at offset {start}")
    out: dict[Any, Any] = {}
    try:
        for _ in range(count // 2):
            if buf[p] == 0xA3:  # sym8
                n = buf[p + 1]
                key: Any = buf[p + 2 : p + 2 + n].decode("ascii")
                p += 2 + n
            else:
                key, p = decode_value(buf, p)
            code = buf[p]
            if code == 0xA1 or code == 0xA3:  # str8, sym8: addresses, queues, broker ids, event types
                n = buf[p + 1]
                text = buf[p + 2 : p + 2 + n].decode("utf-8" if code == 0xA1 else "ascii")
                out[key] = text if code == 0xA1 else Symbol(text)
                p += 2 + n
            else:
                out[key], p = decode_value(buf, p)
    except (IndexError, UnicodeDecodeError) as exc:
        raise DecodeError(f"malformed annotations map at offset {start}: {exc}") from exc
    if p != end:
        raise DecodeError("annotations map size does not match its contents")
    return out


def _amqp_value(payload: bytes, parts: list[tuple[int, int, int]]) -> Any:
    for code, start, end in parts:
        if code == AMQP_VALUE:
            vpos = start + 3 if payload[start + 1] == 0x53 else decode_value(payload, start + 1)[1]
            if payload[vpos] == 0x81 and end == vpos + 9:  # a postAck's long message id
                return _LONG_AT(payload, vpos + 1)[0]
            return decode_value(payload, vpos)[0]
    return None


def _opt_str(annotations: dict[Any, Any], key: Symbol) -> str | None:
    value = annotations.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MirrorDecodeError(f"{key} must be a string, got {value!r}")
    return str(value)


_SHAPES = Shapes(MR_ID_KEY, _shape_fields, _is_event)
