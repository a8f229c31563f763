"""Byte encoding of journal records (see docs/journal-format.md, which this module must match).

A frame is ``length u32 | type u8 | crc32 u32 | payload``, little-endian, where length counts the
payload only and the crc covers the type byte followed by the payload. Encoding is on the broker's hot
path (one ``MessageAdded`` per durable message, one ``MessageAcked`` per ack), so it uses precompiled
``struct`` formats and never json or pickle; only the rare ``QueueAdded`` carries json (its ``extra``).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable

from broker_core.journal.errors import JournalFormatError
from broker_core.journal.records import (
    AddressAdded,
    AddressRemoved,
    DeliveryCountUpdated,
    DuplicateIdAdded,
    HighestIds,
    MessageAcked,
    MessageAdded,
    MessagesAcked,
    MetaRecord,
    PageAcked,
    PageCompleted,
    PageRemoved,
    PageWritten,
    QueueAdded,
    QueueRemoved,
    Record,
)
from broker_core.vocabulary import ANYCAST, MULTICAST

FRAME = struct.Struct("<IBI")  # payload length, record type, crc32(type byte + payload)
FRAME_SIZE = FRAME.size
MAX_PAYLOAD = 1 << 30  # a larger length can only be garbage: treat it as corruption, never allocate it

TYPE_ADDRESS_ADDED = 1
TYPE_ADDRESS_REMOVED = 2
TYPE_QUEUE_ADDED = 3
TYPE_QUEUE_REMOVED = 4
TYPE_MESSAGE_ADDED = 5
TYPE_MESSAGE_ACKED = 6
TYPE_DELIVERY_COUNT = 7
TYPE_META = 8
TYPE_HIGHEST_IDS = 9
TYPE_BATCH = 10  # not a record: says how many bytes of frames after it form one all-or-nothing batch
TYPE_MESSAGES_ACKED = 11
TYPE_PAGE_WRITTEN = 12
TYPE_PAGE_ACKED = 13
TYPE_PAGE_COMPLETED = 14
TYPE_PAGE_REMOVED = 15
TYPE_DUPLICATE_ID = 16

_TYPE_CRC = [zlib.crc32(bytes([t])) for t in range(256)]

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_ID = struct.Struct("<Q")
_ADDRESS_HEAD = struct.Struct("<QB")  # address_id, flags
_QUEUE_HEAD = struct.Struct("<QiB")  # queue_id, max_consumers, flags
# message_id, timestamp_ms, expiry_ms, origin_message_id, priority, flags, queue count
_MESSAGE_HEAD = struct.Struct("<QqqQBBI")
_MESSAGE_HEAD_1 = struct.Struct("<QqqQBBIQ")  # ... and the queue ids, for one or two queues
_MESSAGE_HEAD_2 = struct.Struct("<QqqQBBIQQ")
_ADDRESSES: dict[str, bytes] = {}  # an address as a short string: a few per broker, each encoded once
_ACK = struct.Struct("<QQBBq")  # queue_id, message_id, reason, flags, timestamp_ms
_ACKS_HEAD = struct.Struct("<QBBqI")  # queue_id, reason, flags, timestamp_ms, count; then the ids
_DELIVERY_COUNT = struct.Struct("<QQI")
_HIGHEST_IDS = struct.Struct("<QQQ")
_PAGE_WRITTEN_HEAD = struct.Struct("<QQI")  # page, end, queue count; then (queue id, count) pairs
_PAGE_ACK = struct.Struct("<QQQBBq")  # queue_id, message_id, page, reason, flags, timestamp_ms
_PAGE_COMPLETED = struct.Struct("<QQ")  # queue_id, page

_ADDR_AUTO, _ADDR_INTERNAL, _ADDR_ANYCAST, _ADDR_MULTICAST = 1, 2, 4, 8
_Q_DURABLE, _Q_AUTO, _Q_INTERNAL, _Q_FILTER, _Q_MULTICAST = 1, 2, 4, 8, 16
_MSG_VIA_MIRROR, _MSG_ORIGIN_BROKER, _MSG_ORIGIN_ID, _MSG_TRANSIENT = 1, 2, 4, 8
_ACK_VIA_MIRROR = 1


def frame(record_type: int, payload: bytes) -> bytes:
    crc = zlib.crc32(payload, _TYPE_CRC[record_type])
    return FRAME.pack(len(payload), record_type, crc) + payload


def frame_crc(record_type: int, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, _TYPE_CRC[record_type])


def batch_frame(length: int) -> bytes:
    """The frame that makes the next ``length`` bytes of frames one batch: all replayed, or none."""
    return frame(TYPE_BATCH, _U32.pack(length))


def batch_length(payload: bytes | memoryview) -> int:
    if len(payload) != _U32.size:
        raise JournalFormatError(f"batch frame payload of {len(payload)} bytes, expected {_U32.size}")
    return int(_U32.unpack_from(payload)[0])


def encode(record: Record) -> bytes:
    """The framed bytes of ``record``; ValueError when a field does not fit its encoding."""
    return b"".join(encode_parts(record)[0])


def encode_parts(record: Record) -> tuple[list[bytes], int]:
    """``encode``'s bytes as pieces to join, and their total size: a journal batch joins every record's
    pieces once, so a message body is copied once on its way to disk, not at every layer."""
    try:
        # the two records of every message are encoded in one direct call each
        if type(record) is MessageAcked:
            return _ack_parts(record)
        if type(record) is MessageAdded:
            return _message_parts(record)
        record_type, payload = _ENCODERS[type(record)](record)
    except (struct.error, OverflowError, UnicodeEncodeError) as exc:
        raise ValueError(f"cannot encode {type(record).__name__}: {exc}") from exc
    if isinstance(payload, bytes):
        crc = zlib.crc32(payload, _TYPE_CRC[record_type])
        return [FRAME.pack(len(payload), record_type, crc), payload], FRAME_SIZE + len(payload)
    crc, size = _TYPE_CRC[record_type], 0
    for part in payload:
        crc = zlib.crc32(part, crc)
        size += len(part)
    return [FRAME.pack(size, record_type, crc), *payload], FRAME_SIZE + size


def decode(record_type: int, payload: bytes | memoryview) -> Record:
    """The record in a frame whose crc has been checked; JournalFormatError for an unknown type."""
    decoder = _DECODERS.get(record_type)
    if decoder is None:
        raise JournalFormatError(f"unknown record type {record_type} (written by a newer version?)")
    return decoder(memoryview(payload))


# --- strings: u16 (short) or u32 (long) byte length, then UTF-8 ---


def _short(text: str) -> bytes:
    data = text.encode()
    return _U16.pack(len(data)) + data


def _long(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _read_short(buf: memoryview, pos: int) -> tuple[str, int]:
    (size,) = _U16.unpack_from(buf, pos)
    end = pos + 2 + size
    return str(buf[pos + 2 : end], "utf-8"), end


def _read_long(buf: memoryview, pos: int) -> tuple[bytes, int]:
    (size,) = _U32.unpack_from(buf, pos)
    end = pos + 4 + size
    if end > len(buf):
        raise struct.error("length runs past the payload")
    return bytes(buf[pos + 4 : end]), end


# --- encoders ---


def _enc_address_added(r: AddressAdded) -> tuple[int, bytes]:
    flags = (
        (_ADDR_AUTO if r.auto_created else 0)
        | (_ADDR_INTERNAL if r.internal else 0)
        | (_ADDR_ANYCAST if ANYCAST in r.routing_types else 0)
        | (_ADDR_MULTICAST if MULTICAST in r.routing_types else 0)
    )
    return TYPE_ADDRESS_ADDED, _ADDRESS_HEAD.pack(r.address_id, flags) + _short(r.name)


def _enc_address_removed(r: AddressRemoved) -> tuple[int, bytes]:
    return TYPE_ADDRESS_REMOVED, _ID.pack(r.address_id)


def _enc_queue_added(r: QueueAdded) -> tuple[int, bytes]:
    flags = (
        (_Q_DURABLE if r.durable else 0)
        | (_Q_AUTO if r.auto_created else 0)
        | (_Q_INTERNAL if r.internal else 0)
        | (_Q_FILTER if r.filter_string is not None else 0)
        | (_Q_MULTICAST if r.routing_type == MULTICAST else 0)
    )
    parts = [_QUEUE_HEAD.pack(r.queue_id, r.max_consumers, flags), _short(r.name), _short(r.address)]
    if r.filter_string is not None:
        parts.append(_long(r.filter_string.encode()))
    parts.append(_long(json.dumps(r.extra, sort_keys=True, separators=(",", ":")).encode()))
    return TYPE_QUEUE_ADDED, b"".join(parts)


def _enc_queue_removed(r: QueueRemoved) -> tuple[int, bytes]:
    return TYPE_QUEUE_REMOVED, _ID.pack(r.queue_id)


def _message_parts(r: MessageAdded) -> tuple[list[bytes], int]:
    flags = _MSG_VIA_MIRROR if r.via_mirror else 0
    if not r.durable:
        flags |= _MSG_TRANSIENT
    if r.origin_broker_id is not None:
        flags |= _MSG_ORIGIN_BROKER
    origin_id = 0
    if r.origin_message_id is not None:
        flags |= _MSG_ORIGIN_ID
        origin_id = r.origin_message_id
    qids, mid, ts, expiry, priority = r.queue_ids, r.message_id, r.timestamp_ms, r.expiry_ms, r.priority
    n = len(qids)
    if n == 1:
        head = _MESSAGE_HEAD_1.pack(mid, ts, expiry, origin_id, priority, flags, 1, qids[0])
    elif n == 2:  # a message on one queue and a mirror's store-and-forward queue
        head = _MESSAGE_HEAD_2.pack(mid, ts, expiry, origin_id, priority, flags, 2, qids[0], qids[1])
    else:
        refs = struct.pack(f"<{n}Q", *qids)
        head = _MESSAGE_HEAD.pack(mid, ts, expiry, origin_id, priority, flags, n) + refs
    address = _ADDRESSES.get(r.address)
    if address is None:
        address = _short(r.address)
        if len(_ADDRESSES) >= 4096:
            _ADDRESSES.clear()
        _ADDRESSES[r.address] = address
    origin = b"" if r.origin_broker_id is None else _short(r.origin_broker_id)
    body = r.body
    meta = b"".join((head, address, origin, _U32.pack(len(body))))
    size = len(meta) + len(body)
    crc = zlib.crc32(body, zlib.crc32(meta, _TYPE_CRC[TYPE_MESSAGE_ADDED]))
    return [FRAME.pack(size, TYPE_MESSAGE_ADDED, crc), meta, body], FRAME_SIZE + size


def _ack_parts(r: MessageAcked) -> tuple[list[bytes], int]:
    flags = _ACK_VIA_MIRROR if r.via_mirror else 0
    payload = _ACK.pack(r.queue_id, r.message_id, r.reason, flags, r.timestamp_ms)
    crc = zlib.crc32(payload, _TYPE_CRC[TYPE_MESSAGE_ACKED])
    return [FRAME.pack(_ACK.size, TYPE_MESSAGE_ACKED, crc), payload], FRAME_SIZE + _ACK.size


def _enc_messages_acked(r: MessagesAcked) -> tuple[int, bytes]:
    flags = _ACK_VIA_MIRROR if r.via_mirror else 0
    ids = r.message_ids
    head = _ACKS_HEAD.pack(r.queue_id, r.reason, flags, r.timestamp_ms, len(ids))
    return TYPE_MESSAGES_ACKED, head + struct.pack(f"<{len(ids)}Q", *ids)


def _enc_delivery_count(r: DeliveryCountUpdated) -> tuple[int, bytes]:
    return TYPE_DELIVERY_COUNT, _DELIVERY_COUNT.pack(r.queue_id, r.message_id, r.delivery_count)


def _enc_meta(r: MetaRecord) -> tuple[int, bytes]:
    return TYPE_META, _short(r.key) + _long(r.value)


def _enc_highest_ids(r: HighestIds) -> tuple[int, bytes]:
    return TYPE_HIGHEST_IDS, _HIGHEST_IDS.pack(r.address_id, r.queue_id, r.message_id)


def _enc_page_written(r: PageWritten) -> tuple[int, bytes]:
    pairs = [n for pair in r.counts for n in pair]
    counts = struct.pack(f"<{len(pairs)}Q", *pairs)
    return TYPE_PAGE_WRITTEN, _PAGE_WRITTEN_HEAD.pack(r.page, r.end, len(r.counts)) + counts + _short(
        r.address
    )


def _enc_page_acked(r: PageAcked) -> tuple[int, bytes]:
    flags = _ACK_VIA_MIRROR if r.via_mirror else 0
    return TYPE_PAGE_ACKED, _PAGE_ACK.pack(r.queue_id, r.message_id, r.page, r.reason, flags, r.timestamp_ms)


def _enc_page_completed(r: PageCompleted) -> tuple[int, bytes]:
    return TYPE_PAGE_COMPLETED, _PAGE_COMPLETED.pack(r.queue_id, r.page)


def _enc_page_removed(r: PageRemoved) -> tuple[int, bytes]:
    return TYPE_PAGE_REMOVED, _ID.pack(r.page)


def _enc_duplicate_id(r: DuplicateIdAdded) -> tuple[int, bytes]:
    return TYPE_DUPLICATE_ID, _U32.pack(r.cache_size) + _short(r.address) + _long(r.duplicate_id)


_ENCODERS: dict[type, Callable[..., tuple[int, bytes | list[bytes]]]] = {
    AddressAdded: _enc_address_added,
    AddressRemoved: _enc_address_removed,
    QueueAdded: _enc_queue_added,
    QueueRemoved: _enc_queue_removed,
    MessagesAcked: _enc_messages_acked,
    DeliveryCountUpdated: _enc_delivery_count,
    MetaRecord: _enc_meta,
    HighestIds: _enc_highest_ids,
    PageWritten: _enc_page_written,
    PageAcked: _enc_page_acked,
    PageCompleted: _enc_page_completed,
    PageRemoved: _enc_page_removed,
    DuplicateIdAdded: _enc_duplicate_id,
}


# --- decoders (payload already crc-checked; struct.error here means a writer bug or forged crc) ---


def _dec_address_added(buf: memoryview) -> AddressAdded:
    address_id, flags = _ADDRESS_HEAD.unpack_from(buf, 0)
    name, _ = _read_short(buf, _ADDRESS_HEAD.size)
    routing = frozenset(
        rt for rt, bit in ((ANYCAST, _ADDR_ANYCAST), (MULTICAST, _ADDR_MULTICAST)) if flags & bit
    )
    return AddressAdded(address_id, name, routing, bool(flags & _ADDR_AUTO), bool(flags & _ADDR_INTERNAL))


def _dec_address_removed(buf: memoryview) -> AddressRemoved:
    return AddressRemoved(_ID.unpack_from(buf, 0)[0])


def _dec_queue_added(buf: memoryview) -> QueueAdded:
    queue_id, max_consumers, flags = _QUEUE_HEAD.unpack_from(buf, 0)
    name, pos = _read_short(buf, _QUEUE_HEAD.size)
    address, pos = _read_short(buf, pos)
    filter_string = None
    if flags & _Q_FILTER:
        raw, pos = _read_long(buf, pos)
        filter_string = raw.decode()
    extra, pos = _read_long(buf, pos)
    return QueueAdded(
        queue_id=queue_id,
        name=name,
        address=address,
        routing_type=MULTICAST if flags & _Q_MULTICAST else ANYCAST,
        durable=bool(flags & _Q_DURABLE),
        filter_string=filter_string,
        max_consumers=max_consumers,
        auto_created=bool(flags & _Q_AUTO),
        internal=bool(flags & _Q_INTERNAL),
        extra=json.loads(extra),
    )


def _dec_queue_removed(buf: memoryview) -> QueueRemoved:
    return QueueRemoved(_ID.unpack_from(buf, 0)[0])


def _dec_message_added(buf: memoryview) -> MessageAdded:
    message_id, ts, expiry, origin_id, priority, flags, count = _MESSAGE_HEAD.unpack_from(buf, 0)
    pos = _MESSAGE_HEAD.size
    queue_ids = struct.unpack_from(f"<{count}Q", buf, pos)
    address, pos = _read_short(buf, pos + 8 * count)
    origin_broker = None
    if flags & _MSG_ORIGIN_BROKER:
        origin_broker, pos = _read_short(buf, pos)
    body, _ = _read_long(buf, pos)
    return MessageAdded(
        message_id=message_id,
        address=address,
        queue_ids=queue_ids,
        body=body,
        timestamp_ms=ts,
        expiry_ms=expiry,
        priority=priority,
        origin_broker_id=origin_broker,
        origin_message_id=origin_id if flags & _MSG_ORIGIN_ID else None,
        via_mirror=bool(flags & _MSG_VIA_MIRROR),
        durable=not flags & _MSG_TRANSIENT,
    )


def _dec_message_acked(buf: memoryview) -> MessageAcked:
    queue_id, message_id, reason, flags, ts = _ACK.unpack_from(buf, 0)
    return MessageAcked(queue_id, message_id, reason, bool(flags & _ACK_VIA_MIRROR), ts)


def _dec_messages_acked(buf: memoryview) -> MessagesAcked:
    queue_id, reason, flags, ts, count = _ACKS_HEAD.unpack_from(buf, 0)
    if len(buf) != _ACKS_HEAD.size + 8 * count:
        raise struct.error(f"{count} message ids in {len(buf) - _ACKS_HEAD.size} bytes")
    ids = struct.unpack_from(f"<{count}Q", buf, _ACKS_HEAD.size)
    return MessagesAcked(queue_id, ids, reason, bool(flags & _ACK_VIA_MIRROR), ts)


def _dec_delivery_count(buf: memoryview) -> DeliveryCountUpdated:
    return DeliveryCountUpdated(*_DELIVERY_COUNT.unpack_from(buf, 0))


def _dec_meta(buf: memoryview) -> MetaRecord:
    key, pos = _read_short(buf, 0)
    value, _ = _read_long(buf, pos)
    return MetaRecord(key, value)


def _dec_highest_ids(buf: memoryview) -> HighestIds:
    return HighestIds(*_HIGHEST_IDS.unpack_from(buf, 0))


def _dec_page_written(buf: memoryview) -> PageWritten:
    page, end, count = _PAGE_WRITTEN_HEAD.unpack_from(buf, 0)
    pairs = struct.unpack_from(f"<{2 * count}Q", buf, _PAGE_WRITTEN_HEAD.size)
    address, _ = _read_short(buf, _PAGE_WRITTEN_HEAD.size + 16 * count)
    counts = tuple((pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2))
    return PageWritten(page, address, end, counts)


def _dec_page_acked(buf: memoryview) -> PageAcked:
    queue_id, message_id, page, reason, flags, ts = _PAGE_ACK.unpack_from(buf, 0)
    return PageAcked(queue_id, message_id, page, reason, bool(flags & _ACK_VIA_MIRROR), ts)


def _dec_page_completed(buf: memoryview) -> PageCompleted:
    return PageCompleted(*_PAGE_COMPLETED.unpack_from(buf, 0))


def _dec_page_removed(buf: memoryview) -> PageRemoved:
    return PageRemoved(_ID.unpack_from(buf, 0)[0])


def _dec_duplicate_id(buf: memoryview) -> DuplicateIdAdded:
    (cache_size,) = _U32.unpack_from(buf, 0)
    address, pos = _read_short(buf, _U32.size)
    duplicate_id, _ = _read_long(buf, pos)
    return DuplicateIdAdded(address, duplicate_id, cache_size)


_DECODERS: dict[int, Callable[[memoryview], Record]] = {
    TYPE_ADDRESS_ADDED: _dec_address_added,
    TYPE_ADDRESS_REMOVED: _dec_address_removed,
    TYPE_QUEUE_ADDED: _dec_queue_added,
    TYPE_QUEUE_REMOVED: _dec_queue_removed,
    TYPE_MESSAGE_ADDED: _dec_message_added,
    TYPE_MESSAGE_ACKED: _dec_message_acked,
    TYPE_MESSAGES_ACKED: _dec_messages_acked,
    TYPE_DELIVERY_COUNT: _dec_delivery_count,
    TYPE_META: _dec_meta,
    TYPE_HIGHEST_IDS: _dec_highest_ids,
    TYPE_PAGE_WRITTEN: _dec_page_written,
    TYPE_PAGE_ACKED: _dec_page_acked,
    TYPE_PAGE_COMPLETED: _dec_page_completed,
    TYPE_PAGE_REMOVED: _dec_page_removed,
    TYPE_DUPLICATE_ID: _dec_duplicate_id,
}
