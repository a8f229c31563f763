"""A stored message as Artemis's management describes it: `listMessages` maps and `browse` items.

Both are read from the bytes the broker stores; nothing is delivered, nothing is acquired.

- `listMessages` / `listMessagesAsJSON`: one flat map a message, Artemis's keys (`messageID`, `address`,
  `durable`, `priority`, `expiration`, `timestamp`, `userID`, `subject`, `correlationId`, ...) with the
  application properties beside them by their own names.
- `browse`: Artemis answers over AMQP with its JMX `CompositeData` Java-serialized (base64 in a map), which
  no client but a JVM can read. Here each item is the same record as plain JSON: the same item names
  (`messageID`, `text`, `type`, `protocol`, `persistentSize`, `PropertiesText`, `StringProperties`, ...),
  properties named as Artemis names them (`properties.subject`, `applicationProperties.color`,
  `messageAnnotations.x-opt-k`), and the body as `text`.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from .message import APPLICATION_PROPERTIES, MESSAGE_ANNOTATIONS, MessageView, section_value
from .queues import MessageRef

# the properties section's fields (AMQP 1.0 3.2.4) as Artemis's JSON names them
_PROPERTY_NAMES = (
    "messageId",
    "userId",
    "to",
    "subject",
    "replyTo",
    "correlationId",
    "contentType",
    "contentEncoding",
    "absoluteExpiryTime",
    "creationTime",
    "groupId",
    "groupSequence",
    "replyToGroupId",
)
_LIST_NAMES = {"subject": "subject", "correlationId": "correlationId", "replyTo": "replyTo"}

# Artemis's message types (org.apache.activemq.artemis.api.core.Message), as `browse` reports them
DEFAULT_TYPE, TEXT_TYPE, BYTES_TYPE, MAP_TYPE, STREAM_TYPE = 0, 3, 4, 5, 6
DATA, SEQUENCE, VALUE = 0x75, 0x76, 0x77

# `browse`'s typed property maps: Artemis has eight, by Java type; a value decoded here is one of four
_TYPED = {
    bool: "BooleanProperties",
    int: "LongProperties",
    float: "DoubleProperties",
    str: "StringProperties",
}
_GROUPS = ("BooleanProperties", "ByteProperties", "DoubleProperties", "FloatProperties", "IntProperties",
           "LongProperties", "ShortProperties", "StringProperties")  # fmt: skip


def jsonable(value: Any) -> Any:
    """An AMQP value as JSON can carry it: binary as base64, a UUID as its text, a map's keys as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return str(value)


def user_id(view: MessageView) -> str:
    """Artemis's `userID` of an AMQP message: its message-id, `ID:`-prefixed as Artemis's helper writes it."""
    props = view.properties()
    mid = props[0] if props else None
    if mid is None:
        return ""
    text = str(jsonable(mid))
    return text if text.startswith("ID:") else f"ID:{text}"


def _properties(view: MessageView) -> dict[str, Any]:
    props = view.properties()
    return {
        name: props[i] for i, name in enumerate(_PROPERTY_NAMES) if i < len(props) and props[i] is not None
    }


def list_entry(ref: MessageRef) -> dict[str, Any]:
    """One message as `listMessages` answers it."""
    msg = ref.message
    view = MessageView(msg.payload)
    props = _properties(view)
    entry: dict[str, Any] = {
        "durable": msg.durable,
        "_AMQ_AD": msg.address,
        "address": msg.address,
    }
    for key, value in view.section_map(APPLICATION_PROPERTIES).items():
        entry[str(key)] = jsonable(value)
    for name, key in _LIST_NAMES.items():
        if name in props:
            entry[key] = jsonable(props[name])
    entry.update(
        messageID=msg.id,
        expiration=msg.expiry_ms,
        priority=msg.priority,
        timestamp=int(props.get("creationTime") or 0),
    )
    uid = user_id(view)
    if uid:
        entry["userID"] = uid
    if ref.delivery_count:
        entry["deliveryCount"] = ref.delivery_count
    return entry


def browse_item(ref: MessageRef) -> dict[str, Any]:
    """One message as `browse` describes it (the items of Artemis's CompositeData, as plain JSON)."""
    msg = ref.message
    view = MessageView(msg.payload)
    named: dict[str, Any] = {}
    for name, value in _properties(view).items():
        if name != "messageId":
            named[f"properties.{name}"] = jsonable(value)
    for key, value in view.section_map(APPLICATION_PROPERTIES).items():
        named[f"applicationProperties.{key}"] = jsonable(value)
    for key, value in view.section_map(MESSAGE_ANNOTATIONS).items():
        named[f"messageAnnotations.{key}"] = jsonable(value)
    kind, text = _body(view)
    item: dict[str, Any] = {
        "messageID": str(msg.id),
        "userID": user_id(view),
        "address": msg.address,
        "durable": msg.durable,
        "expiration": msg.expiry_ms,
        "priority": msg.priority,
        "protocol": "AMQP",
        "redelivered": ref.delivery_count > 0,
        "timestamp": int(_properties(view).get("creationTime") or 0),
        "type": kind,
        "text": text,
        "largeMessage": False,
        "persistentSize": len(msg.payload),
        "PropertiesText": "{" + ", ".join(f"{k}={v}" for k, v in named.items()) + "}",
    }
    groups: dict[str, dict[str, Any]] = {}
    for key, value in named.items():
        group = _TYPED.get(type(value))
        if group is not None:
            groups.setdefault(group, {})[key] = value
    for group in _GROUPS:
        item[group] = groups.get(group)
    return item


def _body(view: MessageView) -> tuple[int, str]:
    """(Artemis's message type, the body as text) of the first body section."""
    for code, start, _ in view.all_sections():
        if code not in (DATA, SEQUENCE, VALUE):
            continue
        value = section_value(view.payload, start)
        if code == DATA:
            return BYTES_TYPE, _readable(value if isinstance(value, bytes) else b"")
        if code == SEQUENCE:
            return STREAM_TYPE, str(jsonable(value))
        if isinstance(value, str):
            return TEXT_TYPE, value
        if isinstance(value, bytes):
            return BYTES_TYPE, _readable(value)
        if isinstance(value, dict):
            return MAP_TYPE, "{" + ", ".join(f"{k}={v}" for k, v in jsonable(value).items()) + "}"
        return DEFAULT_TYPE, "" if value is None else str(jsonable(value))
    return DEFAULT_TYPE, ""


def _readable(raw: bytes) -> str:
    """Binary as text a terminal shows safely: UTF-8 where it is, `\\xNN` for other bytes and controls."""
    text = raw.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() or c in "\n\t" else f"\\x{ord(c):02x}" for c in text)
