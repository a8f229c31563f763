"""Artemis mirror deliveries on the wire: control events and replicated messages (pure, no I/O).

Everything here is byte-compatible with Apache ActiveMQ Artemis (see the mirror protocol spec,
section 2). Invariants:
- Encoders are strict: every annotation has the exact AMQP type an Artemis target casts it to
  (event type symbol; address, queue, broker IDs and destination string; IDs long; target queues a list).
  A wrong type there is not rejected by Artemis, it is logged and the event is silently lost.
- Control events carry a durable header, message annotations and an optional amqp-value body, never
  delivery annotations or properties: the target tells events from messages by `x-opt-amq-mr-ev-type`.
- A replicated message is the stored message byte for byte, except that its own delivery annotations
  are replaced by the mirror's, placed right after the header.
- The decoder is as tolerant as Artemis where Artemis ignores things (an unknown or non-symbol event
  type is ignored) and more lenient about integer and string flavours; it is strict only where a target
  cannot proceed (a message without `x-opt-amq-mr-id`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from typing import Any

from broker_core.amqp.codec import (
    Byte,
    DecodeError,
    Symbol,
    decode_value,
    enc_map_of_encoded,
    encode,
    skip_value,
)
from broker_core.message import (
    DELIVERY_ANNOTATIONS,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    Header,
    list_field,
    section_code,
    sections,
)

from .json_shapes import AddressInfo, QueueConfiguration
from .shapes import Shapes, remember

# Artemis QueueConfiguration.MIRROR_ADDRESS: the SNF queue prefix and the target's link-address test.
MIRROR_ADDRESS_PREFIX = "$ACTIVEMQ_ARTEMIS_MIRROR"

EVENT_TYPE = Symbol("x-opt-amq-mr-ev-type")
ADDRESS = Symbol("x-opt-amq-mr-adr")
QUEUE = Symbol("x-opt-amq-mr-qu")
BROKER_ID = Symbol("x-opt-amq-bkr-id")
ACK_REASON = Symbol("x-opt-amq-mr-ack-reason")
INTERNAL_ID = Symbol("x-opt-amq-mr-id")
INTERNAL_DESTINATION = Symbol("x-opt-amq-mr-dst")
TARGET_QUEUES = Symbol("x-opt-amq-mr-trg-q")

MIRROR_CAPABILITY = Symbol("amq.mirror")
QPID_DISPATCH_WAYPOINT_CAPABILITY = Symbol("qd.waypoint")
CORE_MESSAGE_TUNNELING_SUPPORT = Symbol("AMQ_CORE_MESSAGE_TUNNELING")
BROKER_CONNECTION_INFO = Symbol("broker-connection-info")

ADD_ADDRESS = Symbol("addAddress")
DELETE_ADDRESS = Symbol("deleteAddress")
CREATE_QUEUE = Symbol("createQueue")
DELETE_QUEUE = Symbol("deleteQueue")
POST_ACK = Symbol("postAck")
EVENT_KINDS = frozenset({ADD_ADDRESS, DELETE_ADDRESS, CREATE_QUEUE, DELETE_QUEUE, POST_ACK})

AMQP_VALUE = 0x77
_II = struct.Struct(">II").unpack_from
_II_PACK = struct.Struct(">II").pack
_LONG = struct.Struct(">Bq").pack
_LONG_AT = struct.Struct(">q").unpack_from
_DURABLE_HEADER = Header(durable=True).encode()
_MR_ID_KEY = b"\xa3" + bytes((len(INTERNAL_ID),)) + INTERNAL_ID.encode("ascii")


class AckReason(IntEnum):
    """Artemis `AckReason`; sent as an AMQP byte, omitted when NORMAL."""

    NORMAL = 0
    KILLED = 1
    EXPIRED = 2
    REPLACED = 3  # LVQ replacement: never mirrored, listed for completeness

    @classmethod
    def from_wire(cls, value: object) -> AckReason:
        """Like Artemis: absent or unknown values (a newer sender) mean NORMAL."""
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            return cls.NORMAL
        return _ACK_REASONS.get(int(value), cls.NORMAL)


_ACK_REASONS = {int(r): r for r in AckReason}


class MirrorDecodeError(ValueError):
    """A mirror delivery a target cannot act on (the sending broker's fault)."""


class MissingMirrorId(MirrorDecodeError):
    """A replicated message without `x-opt-amq-mr-id` in its delivery annotations."""


def snf_name(connection_name: str) -> str:
    """The store-and-forward address and queue of a mirror broker connection."""
    return f"{MIRROR_ADDRESS_PREFIX}_{connection_name}"


def is_mirror_address(address: str | None) -> bool:
    """Artemis treats any link whose target address has the mirror prefix as a mirror link."""
    return address is not None and address.startswith(MIRROR_ADDRESS_PREFIX)


# ------------------------------------------------------------------------------------ control events


def encode_control_event(
    event: Symbol,
    *,
    address: str | None = None,
    queue: str | None = None,
    broker_id: str | None = None,
    reason: AckReason = AckReason.NORMAL,
    body: str | int | None = None,
) -> bytes:
    """One control event message: durable header, message annotations, optional amqp-value body.

    `body` is a string (JSON or queue name) or, for postAck, an int sent as AMQP long.
    """
    annotations: dict[Any, Any] = {EVENT_TYPE: Symbol(event)}
    if address is not None:
        annotations[ADDRESS] = str(address)
    if queue is not None:
        annotations[QUEUE] = str(queue)
    if broker_id is not None:
        annotations[BROKER_ID] = str(broker_id)
    if reason != AckReason.NORMAL:
        annotations[ACK_REASON] = Byte(int(reason))
    out = _DURABLE_HEADER + _section(MESSAGE_ANNOTATIONS, _plain_map(annotations))
    if body is not None:
        value = str(body) if isinstance(body, str) else int(body)
        out += _section(AMQP_VALUE, encode(value))
    return out


def add_address(info: AddressInfo) -> bytes:
    return encode_control_event(ADD_ADDRESS, address=info.name, body=info.to_json())


def delete_address(info: AddressInfo) -> bytes:
    return encode_control_event(DELETE_ADDRESS, address=info.name, body=info.to_json())


def create_queue(config: QueueConfiguration) -> bytes:
    return encode_control_event(
        CREATE_QUEUE, address=config.effective_address, queue=config.name, body=config.to_json()
    )


def delete_queue(address: str, queue: str) -> bytes:
    # Artemis sends the queue name as the body too; its target never reads it.
    return encode_control_event(DELETE_QUEUE, address=address, queue=queue, body=queue)


def post_ack(
    address: str,
    queue: str,
    message_id: int,
    origin_broker_id: str | None,
    reason: AckReason = AckReason.NORMAL,
) -> bytes:
    """An acknowledgement; `origin_broker_id` is None when the message originated on the sender."""
    return encode_control_event(
        POST_ACK, address=address, queue=queue, broker_id=origin_broker_id, reason=reason, body=message_id
    )


# ------------------------------------------------------------------------------- replicated messages


# The common case, a locally produced message: delivery annotations {x-opt-amq-mr-id: <long>} only.
# map8 of 2 items: sym8 key, then a long (0x81 + 8 bytes): built with struct instead of the generic encoder.
_MR_ID_ONLY = struct.Struct(f">BBBBBB{len(_MR_ID_KEY)}sBq")


def _mr_id_only(mr_id: int) -> bytes:
    size = 1 + len(_MR_ID_KEY) + 9
    return _MR_ID_ONLY.pack(0x00, 0x53, DELIVERY_ANNOTATIONS, 0xC1, size, 2, _MR_ID_KEY, 0x81, mr_id)


def _da_section(mr_id: int, origin_broker_id: str | None, destination: str | None) -> bytes:
    """The mirror's delivery annotations: the id, then the origin and destination when there are any."""
    if origin_broker_id is None and destination is None:
        return _mr_id_only(mr_id)
    before, after = _da_around_id(origin_broker_id, destination)
    return before + _LONG(0x81, mr_id) + after


@lru_cache(maxsize=4096)
def _da_around_id(origin_broker_id: str | None, destination: str | None) -> tuple[bytes, bytes]:
    """The delivery annotations' bytes before and after the id's long: one origin and one address
    give the same bytes every time, so the source's hot path only packs the id between them."""
    after = b""
    count = 2
    if origin_broker_id is not None:
        after += _string_entry(BROKER_ID, origin_broker_id)
        count += 2
    if destination is not None:
        after += _string_entry(INTERNAL_DESTINATION, destination)
        count += 2
    size = len(_MR_ID_KEY) + 9 + len(after)
    if size < 255:
        lead = bytes((0x00, 0x53, DELIVERY_ANNOTATIONS, 0xC1, size + 1, count))
    else:
        lead = bytes((0x00, 0x53, DELIVERY_ANNOTATIONS, 0xD1)) + _II_PACK(size + 4, count)
    return lead + _MR_ID_KEY, after


@lru_cache(maxsize=4096)
def _string_entry(key: Symbol, value: str) -> bytes:
    """One annotation (symbol key, string value), encoded; addresses and broker ids repeat endlessly."""
    return encode(key) + encode(str(value))


def _head(payload: bytes) -> tuple[int, int, int]:
    """(end of the header, end of the delivery annotations, start of the properties or -1)."""
    # The source's hot path: sections with the usual small-ulong descriptors are stepped over here;
    # anything else (a symbolic descriptor, an unexpected section) goes to the general reader.
    if len(payload) > 3 and payload[1] == 0x53 and not payload[0]:
        pos = skip_value(payload, 3) if payload[2] == HEADER else 0
        head_end = pos
        lead = payload[pos : pos + 3]
        if lead == _DA_LEAD:
            pos = skip_value(payload, pos + 3)
            lead = payload[pos : pos + 3]
        da_end = pos
        if lead == _MA_LEAD:
            pos = skip_value(payload, pos + 3)
            lead = payload[pos : pos + 3]
        if lead == _PROPERTIES_LEAD:
            return head_end, da_end, pos
        if lead[1:2] == b"\x53" or pos == len(payload):
            return head_end, da_end, -1
    head_end, da_end, _, props = _leading(payload)
    return head_end, da_end, props


_DA_LEAD = bytes((0x00, 0x53, DELIVERY_ANNOTATIONS))
_MA_LEAD = bytes((0x00, 0x53, MESSAGE_ANNOTATIONS))
_PROPERTIES_LEAD = bytes((0x00, 0x53, PROPERTIES))


def _leading(payload: bytes) -> tuple[int, int, int, int]:
    """(end of the header, end of the delivery annotations, end of the message annotations, start of
    the properties or -1); an absent section ends where it would have started.

    AMQP fixes the order of the leading sections (header, delivery annotations, message annotations,
    properties), so they are found without walking the rest of the message."""
    if not payload:
        raise DecodeError("empty message")
    n = len(payload)
    pos = 0
    code, vpos = section_code(payload, pos)
    if code == HEADER:
        pos = skip_value(payload, vpos)
        code, vpos = section_code(payload, pos) if pos < n else (-1, pos)
    head_end = pos
    if code == DELIVERY_ANNOTATIONS:
        pos = skip_value(payload, vpos)
        code, vpos = section_code(payload, pos) if pos < n else (-1, pos)
    da_end = pos
    if code == MESSAGE_ANNOTATIONS:
        pos = skip_value(payload, vpos)
        code, vpos = section_code(payload, pos) if pos < n else (-1, pos)
    return head_end, da_end, pos, pos if code == PROPERTIES else -1


def encode_replicated(
    payload: bytes,
    mr_id: int,
    origin_broker_id: str | None = None,
    destination: str | None = None,
    target_queues: list[str] | None = None,
) -> bytes:
    """The stored message with its delivery annotations replaced by the mirror's (right after the header).

    Raises `DecodeError` when `payload` does not start with an AMQP section.
    """
    head_end, da_end, _ = _head(payload)
    if target_queues is None:
        da_section = _da_section(int(mr_id), origin_broker_id, destination)
    else:
        da: dict[Any, Any] = {INTERNAL_ID: int(mr_id)}
        if origin_broker_id is not None:
            da[BROKER_ID] = str(origin_broker_id)
        if destination is not None:
            da[INTERNAL_DESTINATION] = str(destination)
        da[TARGET_QUEUES] = [str(q) for q in target_queues]
        da_section = _section(DELIVERY_ANNOTATIONS, _plain_map(da))
    return payload[:head_end] + da_section + payload[da_end:]


def replicate(payload: bytes, mr_id: int, origin_broker_id: str | None, routed_address: str | None) -> bytes:
    """A stored message as the mirror sends it (the source's hot path: one look at the leading sections)."""
    head_end, da_end, props = _head(payload)
    destination = _destination(payload, props, routed_address)
    return payload[:head_end] + _da_section(int(mr_id), origin_broker_id, destination) + payload[da_end:]


def destination_annotation(payload: bytes, routed_address: str | None) -> str | None:
    """Artemis's rule for `x-opt-amq-mr-dst`: only when `properties.to` is missing or differs."""
    return _destination(payload, _head(payload)[2], routed_address)


def _destination(payload: bytes, props: int, routed_address: str | None) -> str | None:
    if routed_address is None:
        return None
    if props < 0 or payload[props + 1 : props + 4] == _EMPTY_PROPERTIES:
        return routed_address
    return None if list_field(payload, props, 2) == routed_address else routed_address


_EMPTY_PROPERTIES = bytes((0x53, PROPERTIES, 0x45))  # a list0: no `to`


# -------------------------------------------------------------------------------------------- decode


@dataclass(slots=True)
class ControlEvent:
    kind: Symbol  # one of EVENT_KINDS
    address: str | None
    queue: str | None
    broker_id: str | None  # postAck: origin broker; None means "the link's remote broker"
    reason: AckReason
    message_id: int | None  # postAck body
    body: str | None  # JSON (address/queue events) or the queue name (deleteQueue)

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

    event_type: object


@dataclass(slots=True)
class ReplicatedMessage:
    payload: bytes  # the message without the mirror's delivery annotations: what the target stores
    mr_id: int
    broker_id: str | None  # None: originated on the link's remote broker
    destination: str | None  # x-opt-amq-mr-dst
    target_queues: tuple[str, ...] | None
    to: str | None  # properties.to
    parts: list[tuple[int, int, int]] | None = None  # `sections(payload)`, when known
    expiry: int | None = None  # properties.absolute-expiry-time (0: none), when known
    header: tuple[Header, int] | None = None  # (header, where it ends), when known; shared, read-only

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
        _, da_end, ma_end, _ = _leading(payload)
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
        reason=AckReason.from_wire(ma.get(ACK_REASON)),
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


# ------------------------------------------------------------------------------------------- helpers


def _section(code: int, encoded_value: bytes) -> bytes:
    return bytes((0x00, 0x53, code)) + encoded_value


def _plain_map(items: dict[Any, Any]) -> bytes:
    # Keys are already Symbols and values carry their exact types; `encode` keeps both as given.
    parts: list[bytes] = []
    for key, value in items.items():
        parts.append(encode(key))
        parts.append(encode(value))
    return enc_map_of_encoded(parts)


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


_SHAPES = Shapes(_MR_ID_KEY, _shape_fields, _is_event)
