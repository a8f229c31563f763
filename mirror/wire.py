"""Artemis mirror deliveries on the wire: the vocabulary, and what a source sends (pure, no I/O).

What a target reads is `decode.py`. Everything here is byte-compatible with Apache ActiveMQ Artemis
(see the mirror protocol spec, section 2). Invariants:
- Encoders are strict: every annotation has the exact AMQP type an Artemis target casts it to
  (event type symbol; address, queue, broker IDs and destination string; IDs long; target queues a list).
  A wrong type there is not rejected by Artemis, it is logged and the event is silently lost.
- Control events carry a durable header, message annotations and an optional amqp-value body, never
  delivery annotations or properties: the target tells events from messages by `x-opt-amq-mr-ev-type`.
- A replicated message is the stored message byte for byte, except that its own delivery annotations
  are replaced by the mirror's, placed right after the header.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Any

from broker_core.amqp.codec import (
    Byte,
    DecodeError,
    Symbol,
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
)
from broker_core.vocabulary import AckReason

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
CORE_MESSAGE_TUNNELING_SUPPORT = Symbol("AMQ_CORE_MESSAGE_TUNNELING")

ADD_ADDRESS = Symbol("addAddress")
DELETE_ADDRESS = Symbol("deleteAddress")
CREATE_QUEUE = Symbol("createQueue")
DELETE_QUEUE = Symbol("deleteQueue")
POST_ACK = Symbol("postAck")
EVENT_KINDS = frozenset({ADD_ADDRESS, DELETE_ADDRESS, CREATE_QUEUE, DELETE_QUEUE, POST_ACK})

AMQP_VALUE = 0x77
_II_PACK = struct.Struct(">II").pack
_LONG = struct.Struct(">Bq").pack
_DURABLE_HEADER = Header(durable=True).encode()
# `x-opt-amq-mr-id` as a sym8 key: the bytes either side of a message's id (see shapes.py)
MR_ID_KEY = b"\xa3" + bytes((len(INTERNAL_ID),)) + INTERNAL_ID.encode("ascii")


def ack_reason_from_wire(value: object) -> int:
    """An `AckReason` (sent as an AMQP byte, omitted when NORMAL). Like Artemis, an absent or unknown
    value (from a newer sender) means NORMAL."""
    if isinstance(value, int) and not isinstance(value, bool) and value in AckReason.ALL:
        return int(value)
    return AckReason.NORMAL


def snf_name(connection_name: str) -> str:
    """The store-and-forward address and queue of a mirror broker connection."""
    return f"{MIRROR_ADDRESS_PREFIX}_{connection_name}"


# ------------------------------------------------------------------------------------ control events


def encode_control_event(
    event: Symbol,
    *,
    address: str | None = None,
    queue: str | None = None,
    broker_id: str | None = None,
    reason: int = AckReason.NORMAL,
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


def add_address_event(info: AddressInfo) -> bytes:
    return encode_control_event(ADD_ADDRESS, address=info.name, body=info.to_json())


def delete_address_event(info: AddressInfo) -> bytes:
    return encode_control_event(DELETE_ADDRESS, address=info.name, body=info.to_json())


def create_queue_event(config: QueueConfiguration) -> bytes:
    return encode_control_event(
        CREATE_QUEUE, address=config.effective_address, queue=config.name, body=config.to_json()
    )


def delete_queue_event(address: str, queue: str) -> bytes:
    # Artemis sends the queue name as the body too; its target never reads it.
    return encode_control_event(DELETE_QUEUE, address=address, queue=queue, body=queue)


def post_ack_event(
    address: str,
    queue: str,
    message_id: int,
    origin_broker_id: str | None,
    reason: int = AckReason.NORMAL,
) -> bytes:
    """An acknowledgement; `origin_broker_id` is None when the message originated on the sender."""
    return encode_control_event(
        POST_ACK, address=address, queue=queue, broker_id=origin_broker_id, reason=reason, body=message_id
    )


# ------------------------------------------------------------------------------- replicated messages


# The common case, a locally produced message: delivery annotations {x-opt-amq-mr-id: <long>} only.
# map8 of 2 items: sym8 key, then a long (0x81 + 8 bytes): built with struct instead of the generic encoder.
_MR_ID_ONLY = struct.Struct(f">BBBBBB{len(MR_ID_KEY)}sBq")


def _mr_id_only(mr_id: int) -> bytes:
    size = 1 + len(MR_ID_KEY) + 9
    return _MR_ID_ONLY.pack(0x00, 0x53, DELIVERY_ANNOTATIONS, 0xC1, size, 2, MR_ID_KEY, 0x81, mr_id)


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
    size = len(MR_ID_KEY) + 9 + len(after)
    if size < 255:
        lead = bytes((0x00, 0x53, DELIVERY_ANNOTATIONS, 0xC1, size + 1, count))
    else:
        lead = bytes((0x00, 0x53, DELIVERY_ANNOTATIONS, 0xD1)) + _II_PACK(size + 4, count)
    return lead + MR_ID_KEY, after


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
    head_end, da_end, _, props = leading_sections(payload)
    return head_end, da_end, props


_DA_LEAD = bytes((0x00, 0x53, DELIVERY_ANNOTATIONS))
_MA_LEAD = bytes((0x00, 0x53, MESSAGE_ANNOTATIONS))
_PROPERTIES_LEAD = bytes((0x00, 0x53, PROPERTIES))


def leading_sections(payload: bytes) -> tuple[int, int, int, int]:
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

    The general encoder, every annotation as a plain map: the readable statement of the format, which the
    tests hold the source's fast path (`replicate`) and the target's decoder to; the broker itself sends
    with `replicate`. Raises `DecodeError` when `payload` does not start with an AMQP section.
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
    """Artemis's rule for `x-opt-amq-mr-dst`: only when `properties.to` is missing or differs (what
    `replicate` applies inline; the tests check the rule through this)."""
    return _destination(payload, _head(payload)[2], routed_address)


def _destination(payload: bytes, props: int, routed_address: str | None) -> str | None:
    if routed_address is None:
        return None
    if props < 0 or payload[props + 1 : props + 4] == _EMPTY_PROPERTIES:
        return routed_address
    return None if list_field(payload, props, 2) == routed_address else routed_address


_EMPTY_PROPERTIES = bytes((0x53, PROPERTIES, 0x45))  # a list0: no `to`


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
