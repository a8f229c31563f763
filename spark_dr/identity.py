"""How reconciliation names a message across data centres, and what it hashes of it.

A message's identity is (origin broker id, origin message id): the mirror stores both on the target,
and a locally produced message is (own node id, own message id). A message re-sent by a repair carries
its original identity in a message annotation, so a later reconciliation counts it as the same message.

The digest covers the AMQP *bare message* (properties, application properties, body sections: the part
intermediaries must not change, AMQP 1.0 §3.2), not the header or annotations: the broker rewrites the
header's delivery count, the mirror adds and strips annotations, and the repair adds one.
"""

from __future__ import annotations

import hashlib

from broker_core.amqp.codec import DecodeError, decode_value, skip_value
from broker_core.journal.records import MessageAdded
from broker_core.message import DELIVERY_ANNOTATIONS, FOOTER, HEADER, MESSAGE_ANNOTATIONS, MessageView

REPAIR_ANNOTATION = "x-opt-amqp-mirror-repair-origin"
_REPAIR_BYTES = REPAIR_ANNOTATION.encode()
_ANNOTATED = (HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS)


def bare_message_span(payload: bytes) -> tuple[int, int]:
    """(start, end) of the bare message; the whole payload when it does not parse as sections."""
    pos, end, n = 0, len(payload), len(payload)
    start = -1
    try:
        while pos < n:
            if payload[pos] != 0x00:
                raise DecodeError("not a described section")
            descriptor, vpos = decode_value(payload, pos + 1)
            after = skip_value(payload, vpos)
            if descriptor in _ANNOTATED:
                pass
            elif descriptor == FOOTER:
                end = pos
                break
            elif start < 0:
                start = pos
            pos = after
    except DecodeError:
        return 0, n
    return (start if start >= 0 else n), end


def payload_digest(payload: bytes) -> str:
    """sha256 of the bare message, hex."""
    start, end = bare_message_span(payload)
    return hashlib.sha256(memoryview(payload)[start:end]).hexdigest()


def payload_digests(payload: bytes) -> tuple[str, int]:
    """The bare message's sha256 (hex) and its first 8 bytes as a signed 64-bit integer (``digest64``:
    what reconciliation compares and the plan's content key, in 8 bytes where the hex takes 64)."""
    start, end = bare_message_span(payload)
    digest = hashlib.sha256(memoryview(payload)[start:end]).digest()
    return digest.hex(), int.from_bytes(digest[:8], "big", signed=True)


def hex64(value: int) -> str:
    """A ``digest64`` as 16 hex digits: the first 16 of the sha256's hex."""
    return f"{value & 0xFFFFFFFFFFFFFFFF:016x}"


def content_key(payload: bytes) -> str:
    """What the plan names a message's content by: ``hex64`` of its ``digest64``."""
    return payload_digest(payload)[:16]


def format_identity(broker_id: str, message_id: int) -> str:
    return f"{broker_id}:{message_id}"


def parse_identity(text: str) -> tuple[str, int] | None:
    broker, sep, number = text.rpartition(":")
    if not sep or not broker or not number.isdigit():
        return None
    return broker, int(number)


def repair_origin(payload: bytes) -> tuple[str, int] | None:
    """The identity a repair stamped on this message, if any (cheap byte test before decoding)."""
    if _REPAIR_BYTES not in payload:
        return None
    try:
        annotations = MessageView(payload).section_map(MESSAGE_ANNOTATIONS)
    except DecodeError:
        return None
    for key, value in annotations.items():
        if str(key) == REPAIR_ANNOTATION and isinstance(value, str):
            return parse_identity(value)
    return None


def message_identity(node_id: str, rec: MessageAdded) -> tuple[str, int]:
    """The identity of a journalled message on the side ``node_id``: the origin a repair stamped on a
    client's send, else the origin journalled with it (the mirror's; or the message it is a copy of,
    with no broker when that message was made here: an expiry copy, a mirror's initial sync), else
    (own node id, own message id)."""
    identity = repair_origin(rec.body) if not rec.via_mirror else None
    if identity is not None:
        return identity
    if rec.origin_message_id is not None:
        return rec.origin_broker_id or node_id, rec.origin_message_id
    return node_id, rec.message_id
