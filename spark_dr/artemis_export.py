"""Apache ActiveMQ Artemis's journal export (``artemis data exp``) as a reconciliation input.

The export is the XML Artemis's own tool writes from a stopped broker's data directory: its addresses
and queues (``<bindings>``) and every message still live (``<messages>``), each with the queues it is
on, its properties and its body, converted to Artemis's core format. It holds no acknowledgement and no
history: it is a journal compacted down to what is live, and reconciliation already reads a compacted
journal that way (``transforms``: a message a side certainly had and no longer holds is *gone*,
settled). So each message becomes one ``send`` row of ``rows.COLUMNS``:

- identity: the mirror's own properties on a mirrored message (``x-opt-amq-bkr-id``,
  ``x-opt-amq-mr-id``), the repair's mark on a repaired copy, else (Artemis's node id, the export's
  message id). The export does not hold the node id: it is given, or inferred from the other side,
  whose mirror target recorded it as an origin (``infer_node_id``);
- its history (``history``): everything settled may be gone, and the queues are its bindings';
- the dedup mark per origin, which says what the side certainly received: the highest mirrored id
  among the live messages. A lower bound of what Artemis received: a message it received and settled
  above that id counts as never received (kept on the survivor, delivered at least once) rather than
  settled (removed), the safe side of the doubt;
- no digest: the body is Artemis's core conversion, not the bytes the client sent, so payloads are not
  compared with the other side (``digest`` null); ``size`` is the converted body's. The row's
  ``message_id`` is Artemis's own id, which a repair on an Artemis survivor removes a message by.

For a repair from an export, ``message_bytes`` turns an exported message back into an AMQP message
following the mapping Artemis's converter applied (properties, annotations, application properties,
a string, binary or absent body); it is not byte-identical to what the client sent, and a body Artemis
converted to a core map or stream is not rebuilt (the repair says so, one line per message).
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirror.target import DEDUP_PREFIX as DEDUP  # the key of a dedup mark's meta record, + origin
from mirror.wire import MIRROR_ADDRESS_PREFIX

from .history import EVERYTHING, QUEUE, VERSION, history_row, lost_key
from .identity import REPAIR_ANNOTATION, parse_identity
from .rows import COLUMNS, Row

ROOT = "activemq-journal"
KIND = "artemis-export"  # what a reconciliation result and a plan call a side read from an export
# Artemis's `data exp` stops half way, exiting 0, on a journal that ends in a message without its queue
# reference (Artemis killed between the two records); loading the journal once drops that message
CUT_SHORT = (
    "if `artemis data exp` printed an exception, start the data directory once on an Artemis without its "
    "broker connections, stop it and export again: docs/dr-reconciliation.md, 'An export cut short'"
)
BROKER_ID, MESSAGE_ID = "x-opt-amq-bkr-id", "x-opt-amq-mr-id"  # the mirror's identity, as properties
_ANNOTATION = "JMS_AMQP_MA_"  # message annotation k becomes the property JMS_AMQP_MA_k
_REPAIR_PROPERTY = _ANNOTATION + REPAIR_ANNOTATION
_COL = {name: i for i, (name, _) in enumerate(COLUMNS)}


def is_export(path: Path) -> bool:
    """A file that starts like an ``artemis data exp`` export."""
    try:
        with Path(path).open("rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return Path(path).is_file() and f"<{ROOT}".encode() in head


@dataclass
class Exported:
    """One ``<message>`` of an export."""

    id: int
    ordinal: int  # its place in the export (the row's offset)
    queues: list[str]
    properties: dict[str, tuple[str, str]]  # name -> (type, value as written)
    kind: str  # Artemis's message type: text, bytes, map, stream, object, default
    priority: int = 4
    expiration: int = 0
    timestamp: int = 0
    body_text: str = ""  # as written: base64, in one or several CDATA chunks

    @property
    def body(self) -> bytes:
        """The body in Artemis's core encoding: each chunk (a large message has several) decoded alone."""
        chunks = self.body_text.split()
        if all(len(c) % 4 == 0 for c in chunks):
            return b"".join(base64.b64decode(c) for c in chunks)
        return base64.b64decode("".join(chunks))

    @property
    def size(self) -> int:
        """The body's length, from its base64 text (not decoded: a reconciliation never needs it)."""
        total = 0
        for chunk in self.body_text.split():
            padding = len(chunk) - len(chunk.rstrip("="))
            total += len(chunk) * 3 // 4 - padding
        return total

    def identity(self, node_id: str) -> tuple[str, int, bool]:
        """(broker, id, repaired): the repair's mark, the mirror's identity, or the local one."""
        mark = self.properties.get(_REPAIR_PROPERTY)
        parsed = parse_identity(mark[1]) if mark else None
        if parsed is not None:
            return parsed[0], parsed[1], True
        origin = self.mirror_origin()
        if origin is not None:
            return origin[0], origin[1], False
        return node_id, self.id, False

    def mirror_origin(self) -> tuple[str, int] | None:
        broker, number = self.properties.get(BROKER_ID), self.properties.get(MESSAGE_ID)
        if broker is None or number is None:
            return None
        try:
            return broker[1], int(number[1])
        except ValueError:
            return None


@dataclass
class Bindings:
    """Addresses and queues of an export (queue name -> address)."""

    addresses: list[str] = field(default_factory=list)
    queues: dict[str, str] = field(default_factory=dict)

    def address_of(self, queues: list[str]) -> str | None:
        """The address a message on ``queues`` was sent to: a client queue's address first (a message
        waiting for the mirror is also on the store-and-forward queue)."""
        named = [q for q in queues if not q.startswith(MIRROR_ADDRESS_PREFIX)] or queues
        return next((self.queues[q] for q in named if q in self.queues), named[0] if named else None)


_READ = ("address-binding", "queue-binding", "bindings", "message")


class ExportError(ValueError):
    """An export that cannot be read; the message is the one line to print (file, line, what)."""


def read_export(path: Path) -> Iterator[Bindings | Exported]:
    """The export's bindings (once, when ``<bindings>`` ends), then each message, streamed: memory
    follows one message, not the export. ExportError on the first thing that is not an export's (a
    file cut short, say, by a full disk while Artemis wrote it)."""
    from lxml import etree

    with Path(path).open("rb") as f:  # closed however reading ends
        try:
            yield from _read(path, etree.iterparse(
                f, events=("end",), tag=_READ, huge_tree=True, resolve_entities=False
            ))  # fmt: skip
        except etree.XMLSyntaxError as exc:
            why = f"{path}: line {exc.lineno}: not a whole Artemis export: {exc.msg}"
            if "Premature end of data" in exc.msg:
                why += f" ({CUT_SHORT})"
            raise ExportError(why) from None


def _read(path: Path, events: Any) -> Iterator[Bindings | Exported]:
    """Only the tags of ``_READ`` come back to Python: a message's own elements are read from it."""
    bindings, ordinal = Bindings(), 0
    for _, elem in events:
        tag = elem.tag
        if tag == "message":
            yield _message(path, elem, ordinal)
            ordinal += 1
        elif tag == "address-binding":
            bindings.addresses.append(elem.get("name", ""))
        elif tag == "queue-binding":
            bindings.queues[elem.get("name", "")] = elem.get("address", "")
        else:
            yield bindings
            continue
        elem.clear(keep_tail=False)
        while elem.getprevious() is not None:  # drop what was already read, for a large export
            del elem.getparent()[0]


_NUMBERS = (("id", "0"), ("priority", "4"), ("expiration", "0"), ("timestamp", "0"))  # attributes


def _message(path: Path, elem: Any, ordinal: int) -> Exported:
    props = {p.get("name", ""): (p.get("type", ""), p.get("value", "")) for p in elem.iter("property")}
    body = elem.find("body")
    try:
        numbers = [int(elem.get(name, default)) for name, default in _NUMBERS]
    except ValueError as exc:
        raise ExportError(
            f"{path}: line {elem.sourceline}: message: {exc}; expected whole numbers in "
            + ", ".join(name for name, _ in _NUMBERS)
        ) from None
    return Exported(
        id=numbers[0],
        ordinal=ordinal,
        queues=[q.get("name", "") for q in elem.iter("queue")],
        properties=props,
        kind=elem.get("type", "default"),
        priority=numbers[1],
        expiration=numbers[2],
        timestamp=numbers[3],
        body_text=(body.text or "") if body is not None else "",
    )


def export_rows(path: Path, node_id: str) -> Iterator[Row]:
    """Every binding and message of the export at ``path`` as rows (see the module's docstring), then
    the dedup marks."""
    blank: list[Any] = [None] * len(COLUMNS)
    bindings = Bindings()
    marks: dict[str, int] = {}
    for item in read_export(path):
        if isinstance(item, Bindings):
            bindings = item
            yield from _binding_rows(bindings, node_id, blank)
            continue
        row = list(blank)
        broker, number, repaired = item.identity(node_id)
        origin = item.mirror_origin()
        if origin is not None and not repaired:
            marks[origin[0]] = max(marks.get(origin[0], -1), origin[1])
        row[_COL["node_id"]], row[_COL["offset"]] = node_id, item.ordinal
        row[_COL["event"]], row[_COL["message_id"]] = "send", item.id
        if origin is not None:
            row[_COL["origin_broker_id"]], row[_COL["origin_message_id"]] = origin
        row[_COL["identity_broker"]], row[_COL["identity_id"]] = broker, number
        row[_COL["address"]] = bindings.address_of(item.queues)
        row[_COL["queues"]] = item.queues
        row[_COL["via_mirror"]] = origin is not None
        row[_COL["timestamp_ms"]] = item.timestamp or None
        row[_COL["expiry_ms"]] = item.expiration or None
        row[_COL["size"]] = item.size
        row[_COL["repaired"]] = repaired
        yield tuple(row)
    for broker_id, mark in sorted(marks.items()):
        row = list(blank)
        row[_COL["node_id"]], row[_COL["event"]] = node_id, "meta"
        row[_COL["meta_key"]], row[_COL["meta_value"]] = DEDUP + broker_id, str(mark)
        yield tuple(row)
    # its history: only live state, so anything settled is gone; its queues are those of its bindings
    facts = [(VERSION, 1), (lost_key("", ""), EVERYTHING)] + [(QUEUE + q, 1) for q in sorted(bindings.queues)]
    for key, value in facts:
        yield history_row(node_id, key, value, len(COLUMNS), _COL["meta_key"])


def _binding_rows(bindings: Bindings, node_id: str, blank: list[Any]) -> Iterator[Row]:
    for address in bindings.addresses:
        row = list(blank)
        row[_COL["node_id"]], row[_COL["event"]], row[_COL["address"]] = node_id, "address_create", address
        yield tuple(row)
    for queue, address in bindings.queues.items():
        row = list(blank)
        row[_COL["node_id"]], row[_COL["event"]] = node_id, "queue_create"
        row[_COL["address"]], row[_COL["queue"]] = address, queue
        yield tuple(row)


# ------------------------------------------------------------------------------------------ node id


def infer_node_id(other: Path) -> str | None:
    """Artemis's node id as the other side knows it: the one origin, other than itself, its mirror
    target keeps a dedup mark for (None when there is not exactly one)."""
    from .rows import journal_dir, read_node_id

    directory = journal_dir(Path(other))
    if directory.is_dir() and any(directory.glob("*.jnl")):
        own, origins = read_node_id(directory), _dedup_origins(directory)
    elif is_export(other):
        return None
    else:
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        table = ds.dataset(str(other), format="parquet").to_table(
            columns=["node_id", "meta_key"], filter=pc.field("event") == "meta"
        )
        keys = [k for k in table.column("meta_key").to_pylist() if k and k.startswith(DEDUP)]
        origins = {k[len(DEDUP) :] for k in keys}
        nodes = {n for n in table.column("node_id").to_pylist() if n}
        own = next(iter(nodes), "")
    origins.discard(own)
    return origins.pop() if len(origins) == 1 else None


def _dedup_origins(directory: Path) -> set[str]:
    """The origins of a journal's dedup marks: its frames scanned in replay order, only the meta
    records decoded (a few among millions of messages)."""
    from broker_core.journal.codec import TYPE_META
    from broker_core.journal.layout import plan
    from broker_core.journal.recovery import ReplayScan, decode_frame

    origins = set()
    for _, frame in ReplayScan(plan(directory).replay):
        if frame.record_type == TYPE_META:
            key = getattr(decode_frame(frame), "key", "")
            if key.startswith(DEDUP):
                origins.add(key[len(DEDUP) :])
    return origins


# ------------------------------------------------------------------------------------------ repair


class NotRebuilt(ValueError):
    """An exported message that cannot be turned back into AMQP; the message is the one line to print."""


# JMS_AMQP_ORIGINAL_ENCODING: how the AMQP body was encoded before Artemis converted it
_NULL, _DATA, _VALUE_NULL, _VALUE_STRING, _VALUE_BINARY = 1, 2, 4, 5, 6
_PROPERTIES = {  # core property -> AMQP properties field (proton's name)
    "JMSType": "subject",
    "JMSCorrelationID": "correlation_id",
    "JMS_AMQP_ContentType": "content_type",
    "JMS_AMQP_ContentEncoding": "content_encoding",
    "_AMQ_GROUP_ID": "group_id",
    "_AMQ_GROUP_SEQUENCE": "group_sequence",
    "JMS_AMQP_ReplyToGroupID": "reply_to_group_id",
}
_MAPPED = {*_PROPERTIES, "JMSReplyTo", "NATIVE_MESSAGE_ID"}  # properties that are not application's
_NOT_APPLICATION = ("JMS_AMQP_", "_AMQ_", "JMSX", "x-opt-amq-")  # nor those of Artemis's own
_ID_PREFIXES = ("ID:AMQP_NO_PREFIX:", "ID:AMQP_STRING:")


def message_bytes(message: Exported) -> bytes:
    """The exported message as an encoded AMQP message (NotRebuilt when it cannot be)."""
    try:
        return _rebuilt(message)
    except NotRebuilt:
        raise
    except (ValueError, struct.error) as exc:  # a number, a string or a body that does not read
        raise NotRebuilt(f"message {message.id} does not read as Artemis writes one: {exc}") from None


def _rebuilt(message: Exported) -> bytes:
    from proton import Message, symbol

    amqp = Message()
    props = message.properties
    amqp.durable = _value(props.get("JMS_AMQP_HEADERDURABLE", ("boolean", "false"))) is True
    amqp.priority = message.priority
    if message.expiration:
        amqp.expiry_time = message.expiration / 1000.0
        amqp.ttl = max(message.expiration / 1000.0 - time.time(), 0.001)
    if message.timestamp:
        amqp.creation_time = message.timestamp / 1000.0
    _set_body(amqp, message)
    native = props.get("NATIVE_MESSAGE_ID")
    if native is not None:
        amqp.id = _message_id(native[1])
    reply_to = props.get("JMSReplyTo")
    if reply_to is not None:
        amqp.reply_to = reply_to[1].split("://", 1)[-1]
    for name, attr in _PROPERTIES.items():
        if name in props:
            setattr(amqp, attr, _value(props[name]))
    annotations: dict[Any, Any] = {}
    application: dict[Any, Any] = {}
    for name, typed in props.items():
        if name.startswith(_ANNOTATION):
            annotations[symbol(name[len(_ANNOTATION) :])] = _value(typed)
        elif not name.startswith(_NOT_APPLICATION) and name not in _MAPPED:
            application[name] = _value(typed)
    amqp.annotations = annotations or None
    amqp.properties = application or None  # type: ignore[assignment]
    return bytes(amqp.encode())


def _set_body(amqp: Any, message: Exported) -> None:
    encoding = message.properties.get("JMS_AMQP_ORIGINAL_ENCODING")
    code = int(encoding[1]) if encoding else None
    if code is None:  # a message a core client produced: its type says what the body is
        code = {"text": _VALUE_STRING, "bytes": _DATA}.get(message.kind)
    if code in (_NULL, _VALUE_NULL):
        amqp.body = None
    elif code == _DATA:
        amqp.inferred, amqp.body = True, message.body
    elif code == _VALUE_BINARY:
        amqp.body = message.body
    elif code == _VALUE_STRING:
        amqp.body = _simple_string(message.body)
    else:
        raise NotRebuilt(
            f"its body was converted by Artemis to a core {message.kind} message (AMQP encoding "
            f"{code}), which is not rebuilt from an export: re-send it from Artemis's own tools"
        )


def _simple_string(body: bytes) -> str | None:
    """A core text body: a nullable SimpleString (flag byte, byte length, UTF-16LE characters)."""
    if not body or body[0] == 0:
        return None
    (length,) = struct.unpack_from(">i", body, 1)
    if len(body) < 5 + length:
        raise ValueError(f"a text body of {len(body) - 5} bytes says it holds {length}")
    return body[5 : 5 + length].decode("utf-16-le")


def _message_id(native: str) -> Any:
    from proton import ulong

    for prefix in _ID_PREFIXES:
        if native.startswith(prefix):
            return native[len(prefix) :]
    if native.startswith("ID:AMQP_ULONG:"):
        return ulong(int(native[len("ID:AMQP_ULONG:") :]))
    return native


def _value(typed: tuple[str, str]) -> Any:
    """A property's value as the export wrote it, in the AMQP type it maps to."""
    from proton import byte, char, float32, int32, short

    kind, text = typed
    if kind == "boolean":
        return text == "true"
    if kind == "long":
        return int(text)
    if kind == "integer":
        return int32(int(text))
    if kind == "short":
        return short(int(text))
    if kind == "byte":
        return byte(int(text))
    if kind == "double":
        return float(text)
    if kind == "float":
        return float32(float(text))
    if kind == "char":
        return char(text[:1])
    if kind == "bytes":
        return base64.b64decode(text)
    return text  # simple-string, string


def fetch_exported(path: Path, wanted: dict[str, str], node_id: str) -> dict[str, Exported]:
    """identity -> the exported message, for each wanted identity (identity -> queue) that the export
    holds on that queue."""
    from .identity import format_identity

    out: dict[str, Exported] = {}
    for item in read_export(path):
        if isinstance(item, Exported):
            broker, number, _ = item.identity(node_id)
            identity = format_identity(broker, number)
            if identity in wanted and wanted[identity] in item.queues:
                out[identity] = item
    return out
