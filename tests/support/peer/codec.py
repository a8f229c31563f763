"""The scripted peer's codec: AMQP frame vocabulary and value encoding, all through python-qpid-proton.

Nothing here uses our broker's codec, so a bug in it cannot hide itself in a test. Decoded values keep
their exact AMQP types as proton objects: `symbol` vs `str`, `Array` vs `list`, `ulong`/`uint`/`ubyte`/
`byte`, a plain `int` is an AMQP long.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from proton import UNDESCRIBED, Array, Data, Described, symbol, ulong

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
FRAME_AMQP, FRAME_SASL = 0, 1
MAX_WINDOW = 2**31 - 1
EMPTY_FRAME = struct.pack(">IBBH", 8, 2, FRAME_AMQP, 0)

FIELDS: dict[int, tuple[str, tuple[str, ...]]] = {
    0x10: ("open", ("container_id", "hostname", "max_frame_size", "channel_max", "idle_time_out",
                    "outgoing_locales", "incoming_locales", "offered_capabilities", "desired_capabilities",
                    "properties")),
    0x11: ("begin", ("remote_channel", "next_outgoing_id", "incoming_window", "outgoing_window", "handle_max",
                     "offered_capabilities", "desired_capabilities", "properties")),
    0x12: ("attach", ("name", "handle", "role", "snd_settle_mode", "rcv_settle_mode", "source", "target",
                      "unsettled", "incomplete_unsettled", "initial_delivery_count", "max_message_size",
                      "offered_capabilities", "desired_capabilities", "properties")),
    0x13: ("flow", ("next_incoming_id", "incoming_window", "next_outgoing_id", "outgoing_window", "handle",
                    "delivery_count", "link_credit", "available", "drain", "echo", "properties")),
    0x14: ("transfer", ("handle", "delivery_id", "delivery_tag", "message_format", "settled", "more",
                        "rcv_settle_mode", "state", "resume", "aborted", "batchable")),
    0x15: ("disposition", ("role", "first", "last", "settled", "state", "batchable")),
    0x16: ("detach", ("handle", "closed", "error")),
    0x17: ("end", ("error",)),
    0x18: ("close", ("error",)),
    0x1D: ("error", ("condition", "description", "info")),
    0x23: ("received", ("section_number", "section_offset")),
    0x24: ("accepted", ()),
    0x25: ("rejected", ("error",)),
    0x26: ("released", ()),
    0x27: ("modified", ("delivery_failed", "undeliverable_here", "message_annotations")),
    0x28: ("source", ("address", "durable", "expiry_policy", "timeout", "dynamic", "dynamic_node_properties",
                      "distribution_mode", "filter", "default_outcome", "outcomes", "capabilities")),
    0x29: ("target", ("address", "durable", "expiry_policy", "timeout", "dynamic", "dynamic_node_properties",
                      "capabilities")),
    0x40: ("sasl-mechanisms", ("sasl_server_mechanisms",)),
    0x41: ("sasl-init", ("mechanism", "initial_response", "hostname")),
    0x44: ("sasl-outcome", ("code", "additional_data")),
}  # fmt: skip
_SYMBOLIC = {f"amqp:{name}:list": code for code, (name, _) in FIELDS.items()}
OUTCOMES = {"accepted": 0x24, "rejected": 0x25, "released": 0x26, "modified": 0x27}


def encode_value(value: Any) -> bytes:
    data = Data()
    data.put_object(value)
    return bytes(data.encode())


def decode_one(buf: bytes) -> tuple[Any, int]:
    """Decode the first value of `buf` with proton; return it and how many bytes it took."""
    data = Data()
    used = data.decode(bytes(buf))
    data.rewind()
    data.next()
    return _owned(data.get_object()), used


def _owned(value: Any) -> Any:
    """Copy binaries out of proton's buffer (`get_object` returns memoryviews into it)."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, Described):
        return Described(_owned(value.descriptor), _owned(value.value))
    if isinstance(value, Array):
        return Array(value.descriptor, value.type, *[_owned(v) for v in value.elements])
    if isinstance(value, list):
        return [_owned(v) for v in value]
    if isinstance(value, dict):
        return {_owned(k): _owned(v) for k, v in value.items()}
    return value


def descriptor_code(value: Any) -> int | None:
    if not isinstance(value, Described):
        return None
    d = value.descriptor
    return _SYMBOLIC.get(str(d)) if isinstance(d, symbol) else int(d)


def composite_fields(value: Any) -> dict[str, Any] | None:
    """A described list (terminus, error, outcome...) as {field name: value}; None stays None."""
    if value is None:
        return None
    code = descriptor_code(value)
    names = FIELDS[code][1] if code in FIELDS else ()
    items = list(value.value) if isinstance(value.value, list) else []
    out = {name: (items[i] if i < len(items) else None) for i, name in enumerate(names)}
    out["$descriptor"] = code
    return out


def symbol_array(values: Sequence[str]) -> Array:
    return Array(UNDESCRIBED, Data.SYMBOL, *[symbol(v) for v in values])


def symbol_keys(mapping: dict[str, Any] | None) -> dict[Any, Any] | None:
    """Map with symbol keys (AMQP `fields`); values are kept with the types given."""
    return None if mapping is None else {symbol(k): v for k, v in mapping.items()}


def performative(code: int, *values: Any) -> Described:
    items = list(values)
    while items and items[-1] is None:
        items.pop()
    return Described(ulong(code), items)


def error_value(condition: str, description: str | None = None) -> Described:
    return performative(0x1D, symbol(condition), description)
