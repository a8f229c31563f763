"""The mirror's hot paths agree with the general code they shortcut (pure: no sockets)."""

from __future__ import annotations

import contextlib
import itertools

import pytest
from proton import Message, symbol

from broker_core.amqp.codec import DecodeError, Symbol, decode_value, encode
from broker_core.message import (
    Header,
    MessageView,
    _header_from_list,
    _short_header,
    list_field,
    sections,
)
from broker_core.vocabulary import AckReason
from mirror import decode, wire
from mirror.dedup import RecentIds
from mirror.json_shapes import AddressInfo, RoutingType


def _general_header(payload: bytes) -> tuple[Header, int]:
    value, end = decode_value(payload, 3)
    return _header_from_list(value), end


HEADERS = [
    Header(),
    Header(durable=True),
    Header(durable=True, priority=9, ttl=100, first_acquirer=True, delivery_count=3),
    Header(priority=0, ttl=0, delivery_count=255),
    Header(ttl=70000, delivery_count=300),  # wider fields: the general decoder's case
]


@pytest.mark.parametrize("header", HEADERS, ids=repr)
def test_short_header_reads_what_the_general_decoder_reads(header: Header) -> None:
    payload = header.encode() + b"\x00\x53\x77\xa1\x01x"
    view = MessageView(payload)
    assert (view.header, view.header_end) == _general_header(payload)


def test_header_encodings_other_clients_use() -> None:
    """Trailing fields left out, and booleans as 0x56 xx: both read as the general decoder reads them."""
    fields = [b"\x41", b"\x50\x07", b"\x40", b"\x56\x01", b"\x52\x02"]
    for n in range(len(fields) + 1):
        body = b"".join(fields[:n])
        payload = b"\x00\x53\x70\xc0" + bytes((len(body) + 1, n)) + body + b"\x00\x53\x77\x40"
        view = MessageView(payload)
        assert (view.header, view.header_end) == _general_header(payload), n
    assert MessageView(b"\x00\x53\x70\x45\x00\x53\x77\x40").header == Header()  # list0
    rhea = bytes.fromhex("005370d0000000050000000141") + b"\x00\x53\x77\x40"  # list32, as rhea sends it
    view = MessageView(rhea)
    assert (view.header, view.header_end) == _general_header(rhea) and view.header.durable
    assert _short_header(rhea) is not None


def test_replicate_equals_the_general_encoder_and_the_destination_rule() -> None:
    with_to = Message(body="x", address="orders", durable=True)
    with_to.annotations = {symbol("m"): 1}
    plain = Message(body=b"y" * 300)
    plain.instructions = {symbol("x-client-da"): "dropped"}
    for msg, (routed, origin, mr_id) in itertools.product(
        (with_to, plain), itertools.product(("orders", "other", None), (None, "node-a"), (1, 2**40))
    ):
        payload = bytes(msg.encode())
        dst = wire.destination_annotation(payload, routed)
        general = wire.encode_replicated(payload, mr_id, origin, dst)
        assert wire.replicate(payload, mr_id, origin, routed) == general
        decoded = decode.decode_mirror_delivery(general)
        assert isinstance(decoded, decode.ReplicatedMessage)
        assert (decoded.mr_id, decoded.broker_id, decoded.destination) == (mr_id, origin, dst)


def _leading_layouts() -> list[bytes]:
    """Messages whose leading sections use either descriptor form, or are absent, cut or odd."""

    def section(code: int, name: str, value: bytes, symbolic: bool) -> bytes:
        descriptor = encode(Symbol(name)) if symbolic else bytes((0x53, code))
        return b"\x00" + descriptor + value

    to = encode(["id-1", None, "orders"])  # message-id, user-id, to
    choices = [
        [None, (0x70, "amqp:header:list", b"\xc0\x02\x01\x41")],
        [None, (0x71, "amqp:delivery-annotations:map", b"\xc1\x01\x00")],
        [None, (0x72, "amqp:message-annotations:map", encode({Symbol("m"): 1}))],
        [None, (0x73, "amqp:properties:list", b"\x45"), (0x73, "amqp:properties:list", to)],
    ]
    body = b"\x00\x53\x77\xa1\x01x"
    out = []
    for picked in itertools.product(*choices):
        present = [c for c in picked if c is not None]
        for symbolic in itertools.product((False, True), repeat=len(present)):
            lead = b"".join(section(*c, sym) for c, sym in zip(present, symbolic, strict=True))
            out += [lead + body, lead]
    out += [b"\x00\x53\x70\xc0\x09\x01", b"\x00\x53\x99\x40", b"\x00\x53"]  # cut, unknown, short
    return out


def test_the_source_fast_path_finds_the_sections_the_general_reader_finds() -> None:
    for payload in _leading_layouts():
        try:
            head_end, da_end, _, props = wire.leading_sections(payload)
        except (DecodeError, IndexError) as exc:
            with pytest.raises(type(exc)):
                wire._head(payload)
            continue
        assert wire._head(payload) == (head_end, da_end, props), payload.hex()
        for routed in ("orders", "other"):
            to = list_field(payload, props, 2) if props >= 0 else None
            expected = None if to == routed else routed
            assert wire.destination_annotation(payload, routed) == expected, payload.hex()


def test_long_destinations_use_a_map32() -> None:
    payload = bytes(Message(body="x").encode())
    address = "a" * 300
    out = wire.encode_replicated(payload, 5, "node-b", address)
    decoded = decode.decode_mirror_delivery(out)
    assert isinstance(decoded, decode.ReplicatedMessage)
    assert (decoded.mr_id, decoded.broker_id, decoded.destination) == (5, "node-b", address)


def _messages() -> list[bytes]:
    """Replicated messages in the layouts a target meets, each as the source would send it."""
    with_all = Message(body="x", address="orders", durable=True, properties={"k": 1}, ttl=5)
    with_all.annotations = {symbol("m"): 1}
    expiring = Message(body=b"z" * 2000, address="a.b", expiry_time=1234.5)
    bare = Message(body=None)
    out = []
    for msg, queues in itertools.product((with_all, expiring, bare), (None, ["q1", "q2"])):
        out.append(wire.encode_replicated(bytes(msg.encode()), 9, "node-a", "elsewhere", queues))
        out.append(wire.encode_replicated(bytes(msg.encode()), 2**40, None, None, queues))
    client_da = Message(body="y", address="orders")
    client_da.instructions = {symbol("x-client-da"): "kept"}
    da = wire.encode_replicated(bytes(Message(body="y").encode()), 3, None, "orders")
    # two delivery-annotations sections, the mirror's and then the client's: the general path's case
    header_end = MessageView(da).header_end
    mirror_da_end = header_end + (len(da) - len(bytes(Message(body="y").encode())))
    out.append(da[:mirror_da_end] + bytes(client_da.encode())[header_end:])
    return out


@pytest.mark.parametrize("payload", _messages(), ids=lambda p: p[:12].hex())
def test_the_target_fast_path_decodes_what_the_general_path_decodes(payload: bytes) -> None:
    fast, general = decode.decode_mirror_delivery(payload), decode.decode_general(payload)
    assert isinstance(fast, decode.ReplicatedMessage) and isinstance(general, decode.ReplicatedMessage)
    same = ("payload", "mr_id", "broker_id", "destination", "target_queues", "to")
    assert [getattr(fast, f) for f in same] == [getattr(general, f) for f in same]
    assert general.parts == sections(general.payload)
    view, reference = MessageView(fast.payload, fast.parts, fast.expiry), MessageView(general.payload)
    assert view.absolute_expiry_time == reference.absolute_expiry_time
    assert (view.header, view.to) == (reference.header, reference.to)


def test_annotations_reject_a_map_that_lies_about_its_size() -> None:
    body = encode(symbol("x-opt-amq-mr-id")) + b"\x81" + (7).to_bytes(8, "big")
    good = b"\x00\x53\x71\xc1" + bytes((len(body) + 1, 2)) + body + b"\x00\x53\x77\x40"
    decoded = decode.decode_mirror_delivery(good)
    assert isinstance(decoded, decode.ReplicatedMessage) and decoded.mr_id == 7
    bad = b"\x00\x53\x71\xc1" + bytes((len(body) + 3, 2)) + body + b"\x40\x40" + b"\x00\x53\x77\x40"
    with pytest.raises(decode.MirrorDecodeError):
        decode.decode_mirror_delivery(bad)


def test_recent_ids_window_and_floor() -> None:
    recent = RecentIds()
    window = RecentIds.WINDOW
    for mid in range(1, window + 1):
        recent.add(mid)
    assert recent.floor == 0 and recent.seen(1) and not recent.seen(window + 1)
    recent.add(window + 5)  # the oldest id leaves the window and becomes the floor
    assert recent.floor == 1 and recent.seen(1) and recent.seen(window + 5)
    assert not recent.seen(window + 2)  # a gap inside the window is still expected
    recent.add(window + 2)  # late, out of order: remembered, not a duplicate
    assert recent.seen(window + 2) and recent.high == window + 5
    recent.add(window + 2)  # a repeat changes nothing
    assert len(recent.ids) == len(recent.order) == window


def test_events_decode_as_the_general_path_decodes_them() -> None:
    info = AddressInfo(name="orders", routing_types=(RoutingType.ANYCAST,), id=3)
    events = [
        wire.post_ack_event("orders", "orders", 2**40, "node-a", AckReason.EXPIRED),
        wire.post_ack_event("a", "q", 0, None, AckReason.NORMAL),
        wire.add_address_event(info),
        wire.delete_address_event(info),
        wire.delete_queue_event("orders", "orders"),
    ]
    for payload in events:
        fast, general = decode.decode_mirror_delivery(payload), decode.decode_general(payload)
        assert isinstance(fast, decode.ControlEvent) and fast == general


def test_a_known_shape_is_read_from_the_memo_with_its_own_id_and_body() -> None:
    """The second message of a shape is read from the memo: each keeps its own id, body and expiry."""
    first, second = (Message(body=f"m{i}", durable=True, expiry_time=1000.0 + i) for i in range(2))
    for msg in (first, second):
        msg.annotations = {symbol("x-opt-jms-dest"): 1}  # message annotations that are not an event
    for mr_id, msg in ((41, first), (42, second)):
        payload = wire.encode_replicated(bytes(msg.encode()), mr_id, "node-a", "orders")
        fast, general = decode.decode_mirror_delivery(payload), decode.decode_general(payload)
        assert isinstance(fast, decode.ReplicatedMessage) and fast.header is not None
        assert (fast.mr_id, fast.payload, fast.destination, fast.broker_id) == (
            general.mr_id,
            general.payload,
            general.destination,
            general.broker_id,
        )
        view = MessageView(fast.payload, fast.parts, fast.expiry, fast.header)
        expected_expiry = 1_000_000 + 1000 * (mr_id - 41)
        assert (view.header, view.absolute_expiry_time) == (
            MessageView(general.payload).header,
            expected_expiry,
        )


def test_a_stream_of_mixed_layouts_reads_as_the_general_path_reads_it() -> None:
    """Whatever came before (the last layout is reused only when the bytes either side of the id are
    the same), each delivery decodes as the general path decodes it, with its own id and body."""
    plain = Message(body="a", durable=True)
    annotated = Message(body="b", durable=True)
    annotated.annotations = {symbol("x-opt-jms-dest"): 1}
    other_annotations = Message(body="c", durable=True)
    other_annotations.annotations = {symbol("x-opt-jms-dest"): 2}  # same length, other bytes
    with_to = Message(body="d", address="elsewhere", durable=True, id="m-1")
    stream = []
    for i, msg in enumerate([plain, plain, annotated, annotated, other_annotations, with_to, plain] * 3):
        origin = (None, "node-a", "node-b")[i % 3]  # node-a and node-b: same length, other bytes
        stream.append(wire.encode_replicated(bytes(msg.encode()), 100 + i, origin, "orders"))
    stream.insert(3, wire.post_ack_event("orders", "orders", 7, None, AckReason.NORMAL))
    same = ("payload", "mr_id", "broker_id", "destination", "target_queues", "to")
    for payload in stream:
        fast, general = decode.decode_mirror_delivery(payload), decode.decode_general(payload)
        assert type(fast) is type(general)
        if isinstance(general, decode.ReplicatedMessage):
            assert isinstance(fast, decode.ReplicatedMessage)
            assert [getattr(fast, f) for f in same] == [getattr(general, f) for f in same]
            view = MessageView(fast.payload, fast.parts, fast.expiry, fast.header)
            assert view.absolute_expiry_time == MessageView(general.payload).absolute_expiry_time


def test_post_acks_decode_as_the_general_path_decodes_them() -> None:
    """Each postAck, the first time and again from the memo, and another id on remembered bytes."""
    cases = itertools.product(
        ("q1", "q2"),
        (None, "node-a"),
        (AckReason.NORMAL, AckReason.EXPIRED),
        (5, 300, 2**40, -(2**40)),  # 5: a smalllong, which is not remembered
    )
    for queue, origin, reason, mid in cases:
        payload = wire.post_ack_event("orders", queue, mid, origin, reason)
        for _ in range(2):
            assert decode.decode_mirror_delivery(payload) == decode.decode_general(payload)
    again = wire.post_ack_event("orders", "q1", 777_777, "node-a", AckReason.NORMAL)
    event = decode.decode_mirror_delivery(again)
    assert isinstance(event, decode.ControlEvent)
    assert (event.message_id, event.queue, event.broker_id) == (777_777, "q1", "node-a")


def test_a_post_ack_whose_last_bytes_are_not_its_body_is_never_remembered() -> None:
    """A footer whose last 12 bytes look like an amqp-value long: the id comes from the real body."""
    for lookalike_id in (98, 99):
        lookalike = b"\x00\x53\x77\x81" + lookalike_id.to_bytes(8, "big")
        footer = b"\x00\x53\x78" + encode({Symbol("x"): lookalike})
        payload = wire.post_ack_event("orders", "q9", 1000, None, AckReason.NORMAL) + footer
        assert payload.endswith(lookalike)
        event = decode.decode_mirror_delivery(payload)
        assert isinstance(event, decode.ControlEvent) and event.message_id == 1000


def test_an_event_never_takes_the_message_memo() -> None:
    ack = wire.post_ack_event("orders", "orders", 7, "node-a", AckReason.NORMAL)
    for _ in range(2):
        assert isinstance(decode.decode_mirror_delivery(ack), decode.ControlEvent)


def test_a_shape_too_long_to_keep_is_read_every_time() -> None:
    queues = [f"queue-with-a-long-name-{i:04d}" for i in range(100)]  # annotations over Shapes.LONGEST
    for mr_id in (7, 8):
        payload = wire.encode_replicated(bytes(Message(body="x").encode()), mr_id, "node-a", None, queues)
        decoded = decode.decode_mirror_delivery(payload)
        assert isinstance(decoded, decode.ReplicatedMessage)
        assert (decoded.mr_id, decoded.target_queues) == (mr_id, tuple(queues))
        assert decoded.payload == decode.decode_general(payload).payload


def test_every_truncation_of_a_replicated_message_is_a_decode_error_or_a_message() -> None:
    """Cut anywhere, a delivery never raises anything but MirrorDecodeError (a peer's bad bytes are
    logged and dropped by the target, never an internal error on the mirror connection)."""
    full = wire.encode_replicated(bytes(Message(body="x" * 40, durable=True).encode()), 3, "node-a", "q")
    decode.decode_mirror_delivery(full)  # the shape is now known
    for cut in range(1, len(full)):
        with contextlib.suppress(decode.MirrorDecodeError):
            decode.decode_mirror_delivery(full[:cut])
