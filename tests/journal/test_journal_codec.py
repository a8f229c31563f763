"""Every record type survives encode -> frame scan -> decode, and the frame detects damage."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.journal.codec import FRAME_SIZE, decode, encode
from broker_core.journal.errors import JournalFormatError
from broker_core.journal.records import (
    AddressAdded,
    AddressRemoved,
    DeliveryCountUpdated,
    HighestIds,
    MessageAcked,
    MessageAdded,
    MessagesAcked,
    MetaRecord,
    QueueAdded,
    QueueRemoved,
    Record,
)
from broker_core.journal.segment import FrameScanner

ids = st.integers(0, 2**64 - 1)
names = st.text(max_size=40)
routing = st.sampled_from(["ANYCAST", "MULTICAST"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)

records: st.SearchStrategy[Record] = st.one_of(
    st.builds(AddressAdded, ids, names, st.frozensets(routing), st.booleans(), st.booleans()),
    st.builds(AddressRemoved, ids),
    st.builds(
        QueueAdded,
        ids,
        names,
        names,
        routing,
        st.booleans(),
        st.none() | st.text(max_size=80),
        st.integers(-(2**31), 2**31 - 1),
        st.booleans(),
        st.booleans(),
        st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    ),
    st.builds(QueueRemoved, ids),
    st.builds(
        MessageAdded,
        ids,
        names,
        st.lists(ids, min_size=1, max_size=20).map(tuple),
        st.binary(max_size=3000),
        st.integers(-(2**63), 2**63 - 1),
        st.integers(0, 2**63 - 1),
        st.integers(0, 255),
        st.none() | st.text(max_size=40),
        st.none() | ids,
        st.booleans(),
    ),
    st.builds(MessageAcked, ids, ids, st.integers(0, 3), st.booleans(), st.integers(-(2**63), 2**63 - 1)),
    st.builds(
        MessagesAcked,
        ids,
        st.lists(ids, max_size=50).map(tuple),
        st.integers(0, 3),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
    ),
    st.builds(DeliveryCountUpdated, ids, ids, st.integers(0, 2**32 - 1)),
    st.builds(MetaRecord, names, st.binary(max_size=200)),
    st.builds(HighestIds, ids, ids, ids),
)


def scan(data: bytes) -> list[Record]:
    return [decode(f.record_type, f.payload) for f in FrameScanner(data, 0)]


@given(records)
def test_every_record_type_round_trips(record: Record) -> None:
    assert scan(encode(record)) == [record]


@given(st.lists(records, max_size=8))
def test_frames_concatenate(batch: list[Record]) -> None:
    assert scan(b"".join(encode(r) for r in batch)) == batch


@given(records, st.data())
def test_a_flipped_bit_is_detected(record: Record, data: st.DataObject) -> None:
    frame = bytearray(encode(record))
    index = data.draw(st.integers(4, len(frame) - 1), label="byte")  # past the length field
    frame[index] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    scanner = FrameScanner(bytes(frame), 0)
    assert list(scanner) == []
    assert scanner.problem is not None


def test_message_payload_layout_is_little_endian_and_stable() -> None:
    frame = encode(MessageAdded(0x0102, "a", (7,), b"xyz", timestamp_ms=5, priority=9))
    length, record_type = struct.unpack_from("<IB", frame)
    assert (length, record_type) == (len(frame) - FRAME_SIZE, 5)
    payload = frame[FRAME_SIZE:]
    assert payload[:8] == (0x0102).to_bytes(8, "little")
    assert payload.endswith(b"\x03\x00\x00\x00xyz")


def test_a_run_of_acks_is_one_frame_of_eight_bytes_per_message() -> None:
    frame = encode(MessagesAcked(3, (10, 12, 13), timestamp_ms=7))
    length, record_type = struct.unpack_from("<IB", frame)
    assert record_type == 11
    assert length == 8 + 1 + 1 + 8 + 4 + 3 * 8
    assert frame[-24:] == b"".join(i.to_bytes(8, "little") for i in (10, 12, 13))


def test_an_ack_run_whose_count_disagrees_with_its_length_is_a_format_error() -> None:
    payload = encode(MessagesAcked(3, (10, 12)))[FRAME_SIZE:]
    with pytest.raises(struct.error, match="2 message ids in 8 bytes"):
        decode(11, payload[:-8])


def test_fields_that_do_not_fit_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="cannot encode MessageAcked"):
        encode(MessageAcked(-1, 1))
    with pytest.raises(ValueError, match="cannot encode AddressAdded"):
        encode(AddressAdded(1, "x" * 70000, frozenset()))


def test_unknown_routing_type_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown routing type"):
        QueueAdded(1, "q", "a", "BROADCAST")


def test_unknown_record_type_is_a_format_error() -> None:
    with pytest.raises(JournalFormatError, match="unknown record type 200"):
        decode(200, b"")
