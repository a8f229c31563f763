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
from typing import Any

from broker_core.amqp.codec import Byte, DecodeError, Symbol, decode_value, enc_map_of_encoded, encode
from broker_core.message import (
    DELIVERY_ANNOTATIONS,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    Header,
    list_field,
    sections,
)

from .json_shapes import AddressInfo, QueueConfiguration

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
_DURABLE_HEADER = Header(durable=True).encode()


class AckReason(IntEnum):
    """Artemis `AckReason`; sent as an AMQP byte, omitted when NORMAL."""

    NORMAL = 0
    KILLED = 1
    EXPIRED = 2
    REPLACED = 3  # LVQ replacement: never mirrored, listed for completeness

    @classmethod
    def from_wire(cls, value: object) -> AckReason:
        """Like Artemis: absent or unknown values (a newer sender) mean NORMAL."""
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                return cls.NORMAL
        return cls.NORMAL


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
_MR_ID_KEY = b"\xa3" + bytes((len(INTERNAL_ID),)) + INTERNAL_ID.encode("ascii")
_MR_ID_ONLY = struct.Struct(f">BBBBBB{len(_MR_ID_KEY)}sBq")


def _mr_id_only(mr_id: int) -> bytes:
    size = 1 + len(_MR_ID_KEY) + 9
    return _MR_ID_ONLY.pack(0x00, 0x53, DELIVERY_ANNOTATIONS, 0xC1, size, 2, _MR_ID_KEY, 0x81, mr_id)


def encode_replicated(
    payload: bytes,
    mr_id: int,
    origin_broker_id: str | None = None,
    destination: str | None = None,
    target_queues: list[str] | None = None,
    parts: list[tuple[int, int, int]] | None = None,
) -> bytes:
    """The stored message with its delivery annotations replaced by the mirror's (right after the header).

    `parts` are the payload's `sections()` when the caller has them already.
    Raises `DecodeError` when `payload` is not a sequence of AMQP sections.
    """
    if origin_broker_id is None and destination is None and target_queues is None:
        da_section = _mr_id_only(int(mr_id))
    else:
        da: dict[Any, Any] = {INTERNAL_ID: int(mr_id)}
        if origin_broker_id is not None:
            da[BROKER_ID] = str(origin_broker_id)
        if destination is not None:
            da[INTERNAL_DESTINATION] = str(destination)
        if target_queues is not None:
            da[TARGET_QUEUES] = [str(q) for q in target_queues]
        da_section = _section(DELIVERY_ANNOTATIONS, _plain_map(da))
    if parts is None:
        parts = sections(payload)
    if not any(
        code == DELIVERY_ANNOTATIONS for code, _, _ in parts
    ):  # the usual case: insert, no copy of parts
        head_end = parts[0][2] if parts and parts[0][0] == HEADER else 0
        return payload[:head_end] + da_section + payload[head_end:]
    head_end = parts[0][2] if parts and parts[0][0] == HEADER else 0
    rest = [payload[start:end] for code, start, end in parts if code not in (HEADER, DELIVERY_ANNOTATIONS)]
    return payload[:head_end] + da_section + b"".join(rest)


def destination_annotation(
    payload: bytes, routed_address: str | None, parts: list[tuple[int, int, int]] | None = None
) -> str | None:
    """Artemis's rule for `x-opt-amq-mr-dst`: only when `properties.to` is missing or differs."""
    if routed_address is None:
        return None
    to = _properties_to(payload, parts if parts is not None else sections(payload))
    return None if to == routed_address else routed_address


# -------------------------------------------------------------------------------------------- decode


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class ReplicatedMessage:
    payload: bytes  # the message without the mirror's delivery annotations: what the target stores
    mr_id: int
    broker_id: str | None  # None: originated on the link's remote broker
    destination: str | None  # x-opt-amq-mr-dst
    target_queues: tuple[str, ...] | None
    to: str | None  # properties.to

    @property
    def address(self) -> str | None:
        """Where the target routes it: the mirror destination, else `properties.to`."""
        return self.destination if self.destination is not None else self.to


MirrorDelivery = ControlEvent | UnknownEvent | ReplicatedMessage


def decode_mirror_delivery(payload: bytes) -> MirrorDelivery:
    try:
        parts = sections(payload)
        annotations = _section_map(payload, parts, MESSAGE_ANNOTATIONS)
        if annotations.get(EVENT_TYPE) is not None:
            return _decode_event(payload, parts, annotations)
        return _decode_message(payload, parts)
    except DecodeError as exc:
        raise MirrorDecodeError(f"malformed mirror delivery: {exc}") from exc


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


def _decode_message(payload: bytes, parts: list[tuple[int, int, int]]) -> ReplicatedMessage:
    da = _section_map(payload, parts, DELIVERY_ANNOTATIONS)
    mr_id = da.get(INTERNAL_ID)
    if not isinstance(mr_id, int) or isinstance(mr_id, bool):
        raise MissingMirrorId(f"replicated message without an integer {INTERNAL_ID} (got {mr_id!r})")
    queues = da.get(TARGET_QUEUES)
    if queues is not None and not (isinstance(queues, list) and all(isinstance(q, str) for q in queues)):
        raise MirrorDecodeError(f"{TARGET_QUEUES} must be a list of strings, got {queues!r}")
    stored = b"".join(payload[s:e] for code, s, e in parts if code != DELIVERY_ANNOTATIONS)
    return ReplicatedMessage(
        payload=stored,
        mr_id=int(mr_id),
        broker_id=_opt_str(da, BROKER_ID),
        destination=_opt_str(da, INTERNAL_DESTINATION),
        target_queues=None if queues is None else tuple(str(q) for q in queues),
        to=_properties_to(payload, parts),
    )


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


def _section_value(payload: bytes, parts: list[tuple[int, int, int]], code: int) -> tuple[bool, Any]:
    for c, start, _ in parts:
        if c == code:
            _, pos = decode_value(payload, start + 1)
            value, _ = decode_value(payload, pos)
            return True, value
    return False, None


def _section_map(payload: bytes, parts: list[tuple[int, int, int]], code: int) -> dict[Any, Any]:
    present, value = _section_value(payload, parts, code)
    if present and not isinstance(value, dict):
        raise MirrorDecodeError(f"section 0x{code:02x} is not a map")
    return value if present else {}


def _amqp_value(payload: bytes, parts: list[tuple[int, int, int]]) -> Any:
    return _section_value(payload, parts, AMQP_VALUE)[1]


def _properties_to(payload: bytes, parts: list[tuple[int, int, int]]) -> str | None:
    for code, start, _ in parts:
        if code == PROPERTIES:
            to = list_field(payload, start, 2)  # skips the other fields instead of decoding them
            return str(to) if isinstance(to, str) else None
    return None


def _opt_str(annotations: dict[Any, Any], key: Symbol) -> str | None:
    value = annotations.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MirrorDecodeError(f"{key} must be a string, got {value!r}")
    return str(value)
