"""What a filter sees of a stored message: the names Artemis's filters give an AMQP message's fields.

Artemis (its FilterImpl and AMQPMessage) answers a name in this order:
- `AMQUserID` (JMSMessageID): the message-id as a string, `ID:` in front unless it starts with it;
  `AMQPriority` (the header's, 9 at most, 4 without one); `AMQTimestamp` (creation-time, 0 without);
  `AMQDurable` ('DURABLE' or 'NON_DURABLE'); `AMQExpiration` (when it expires, 0: never); `AMQSize` (its
  encoded size); `AMQAddress`; `AMQGroupID` (group-id);
- `m.NAME`: the message annotation NAME;
- `JMSType` (subject), `JMSCorrelationID` (correlation-id, a non-string id in Qpid JMS's `ID:AMQP_...`
  form), `JMSXGroupID`, `JMSXGroupSeq` (group-sequence, 0 without), `JMSXUserID` (user-id as text),
  `__AMQ_CID` (the container id of the connection that sent it);
- anything else: the application property of that name (an absent one is None).

Values are plain Python for filters/selector.py: integers of every AMQP width as int, but a timestamp,
a symbol, binary or a UUID as themselves, which never equal a number or a string there (as in Artemis,
where they are other Java classes).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from filters.selector import Selector, Unsupported, jms_to_core, parse

from .amqp.types import Timestamp, _TypedInt
from .errors import InvalidField, NotImplementedHere
from .message import MessageView
from .queues import StoredMessage

APPLICATION_PROPERTIES = 0x74
MESSAGE_ANNOTATIONS = 0x72
ANNOTATION_PREFIX = "m."
CONNECTION_ID = "__AMQ_CID"  # Artemis's name for the sending connection's container id (no-local)


def selector(text: str | None, jms: bool = False) -> Selector | None:
    """Parse a filter (a consumer's JMS selector when `jms`: JMS header names rewritten first); None for
    none. InvalidField (Artemis answers an invalid selector with amqp:invalid-field) when it is invalid."""
    if text is None:
        return None
    try:
        return parse(jms_to_core(text) if jms else text)
    except Unsupported as exc:
        raise NotImplementedHere(f"filter {text!r}: {exc}") from exc
    except ValueError as exc:
        raise InvalidField(f"invalid filter {text!r}: {exc}") from exc


def matcher(sel: Selector | None) -> Callable[[StoredMessage], bool] | None:
    """The predicate a queue keeps for a selector (None: everything)."""
    if sel is None:
        return None
    return lambda msg: sel.matches(Fields(msg).get)


class Fields:
    """One message's fields by filter name, each section decoded once, when first asked for."""

    __slots__ = ("_annotations", "_application", "_properties", "_view", "msg")

    def __init__(self, msg: StoredMessage) -> None:
        self.msg = msg
        self._view: MessageView | None = None
        self._properties: list[Any] | None = None
        self._application: dict[Any, Any] | None = None
        self._annotations: dict[Any, Any] | None = None

    def view(self) -> MessageView:
        if self._view is None:
            self._view = MessageView(self.msg.payload)
        return self._view

    def prop(self, index: int) -> Any:
        if self._properties is None:
            self._properties = self.view().properties()
        return self._properties[index] if len(self._properties) > index else None

    def get(self, name: str) -> object:
        if name.startswith("AMQ"):
            value = self._header_field(name)
            if value is not None:
                return value
        if name.startswith(ANNOTATION_PREFIX):
            if self._annotations is None:
                self._annotations = self.view().section_map(MESSAGE_ANNOTATIONS)
            return _plain(self._annotations.get(name[len(ANNOTATION_PREFIX) :]))
        if name == "JMSType":
            return _plain(self.prop(3))
        if name == "JMSCorrelationID":
            return _correlation_id(self.prop(5))
        if name == "JMSXGroupID":
            return _plain(self.prop(10))
        if name == "JMSXGroupSeq":
            seq = self.prop(11)
            return int(seq) if isinstance(seq, int) else 0
        if name == "JMSXUserID":
            user = self.prop(1)
            return user.decode("utf-8", "replace") if isinstance(user, bytes) else None
        if name == CONNECTION_ID:
            return self.msg.connection_id
        if self._application is None:
            self._application = self.view().section_map(APPLICATION_PROPERTIES)
        return _plain(self._application.get(name))

    def _header_field(self, name: str) -> object:
        msg = self.msg
        if name == "AMQUserID":
            return _message_id(self.prop(0))
        if name == "AMQPriority":
            return min(msg.priority, 9)
        if name == "AMQTimestamp":
            created = self.prop(9)
            return int(created) if isinstance(created, int) else 0
        if name == "AMQDurable":
            return "DURABLE" if self.view().header.durable else "NON_DURABLE"
        if name == "AMQExpiration":
            return msg.expiry_ms
        if name == "AMQSize":
            return len(msg.payload)
        if name == "AMQAddress":
            return msg.address
        if name == "AMQGroupID":
            return _plain(self.prop(10))
        return None


def _plain(value: Any) -> object:
    """An AMQP value as filters/selector.py compares it: every integer width as int, a symbol as a symbol
    (not a string), a timestamp as a timestamp (not a number)."""
    if isinstance(value, _TypedInt) and not isinstance(value, Timestamp):
        return int(value)
    return value


def _message_id(value: Any) -> str | None:
    """Artemis's AMQUserID of an AMQP message-id."""
    if value is None:
        return None
    text = value.hex() if isinstance(value, bytes) else str(value)
    return text if text.startswith("ID:") else "ID:" + text


_ENCODINGS = ("AMQP_BINARY:", "AMQP_UUID:", "AMQP_ULONG:", "AMQP_STRING:", "AMQP_NO_PREFIX:")


def _correlation_id(value: Any) -> object:
    """JMSCorrelationID as Qpid JMS and Artemis spell a correlation-id of each AMQP type."""
    if value is None:
        return None
    if isinstance(value, str):
        if value.startswith("ID:") and value[3:].startswith(_ENCODINGS):
            return "ID:AMQP_STRING:" + value
        return value
    if isinstance(value, bytes):
        return value
    if isinstance(value, uuid.UUID):
        return f"ID:AMQP_UUID:{value}"
    if isinstance(value, int):
        return f"ID:AMQP_ULONG:{value}"
    return None
