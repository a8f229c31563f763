"""Mirror wire layer, checked with proton's independent codec (exact AMQP types, spec 2.2-2.4)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from proton import Data, Message, symbol, ulong

from broker_core.amqp.codec import Array, Symbol, encode
from broker_core.amqp.performatives import Attach, Source, Target
from broker_core.vocabulary import AckReason
from mirror import decode, wire
from mirror.attach import (
    check_target_answer,
    mirror_refusal,
    mirror_source_attach,
    mirror_target_answer,
)
from mirror.decode import ControlEvent, MirrorDecodeError, MissingMirrorId, ReplicatedMessage
from mirror.json_shapes import AddressInfo, JsonShapeError, QueueConfiguration, RoutingType

# ------------------------------------------------------------------ proton walk: (type, value) trees


def typed(d: Data) -> Any:
    """The value under the cursor as nested (proton type code, value) pairs."""
    t = d.type()
    if t == Data.DESCRIBED:
        d.enter()
        d.next()
        desc = typed(d)
        d.next()
        value = typed(d)
        d.exit()
        return (t, (desc, value))
    if t in (Data.LIST, Data.MAP, Data.ARRAY):
        d.enter()
        items = []
        while d.next():
            items.append(typed(d))
        d.exit()
        if t == Data.MAP:
            return (t, list(zip(items[::2], items[1::2], strict=True)))
        return (t, items)
    return (t, d.get_object())


def sections(payload: bytes) -> list[tuple[int, Any, bytes]]:
    """(descriptor code, typed value, raw bytes) of each section, decoded by proton."""
    out, pos = [], 0
    while pos < len(payload):
        d = Data()
        used = d.decode(payload[pos:])
        d.rewind()
        d.next()
        t, (desc, value) = typed(d)
        assert t == Data.DESCRIBED and desc[0] == Data.ULONG
        out.append((int(desc[1]), value, payload[pos : pos + used]))
        pos += used
    return out


def section(payload: bytes, code: int) -> Any:
    [value] = [v for c, v, _ in sections(payload) if c == code]
    return value


def annotation_map(value: Any) -> dict[str, tuple[int, Any]]:
    """A typed map whose keys must all be symbols -> {key: (type, value)}."""
    t, items = value
    assert t == Data.MAP
    out = {}
    for (kt, key), v in items:
        assert kt == Data.SYMBOL, f"key {key!r} is not a symbol"
        out[str(key)] = v
    return out


def codes(payload: bytes) -> list[int]:
    return [c for c, _, _ in sections(payload)]


def proton_message(**kwargs: Any) -> bytes:
    return bytes(Message(**kwargs).encode())


# ------------------------------------------------------------------------------------------ symbols


def test_symbols_and_names_are_artemis_spellings() -> None:
    assert wire.EVENT_TYPE == "x-opt-amq-mr-ev-type"
    assert wire.ADDRESS == "x-opt-amq-mr-adr" and wire.QUEUE == "x-opt-amq-mr-qu"
    assert wire.BROKER_ID == "x-opt-amq-bkr-id" and wire.ACK_REASON == "x-opt-amq-mr-ack-reason"
    assert wire.INTERNAL_ID == "x-opt-amq-mr-id" and wire.INTERNAL_DESTINATION == "x-opt-amq-mr-dst"
    assert wire.TARGET_QUEUES == "x-opt-amq-mr-trg-q"
    assert wire.MIRROR_CAPABILITY == "amq.mirror"
    assert wire.CORE_MESSAGE_TUNNELING_SUPPORT == "AMQ_CORE_MESSAGE_TUNNELING"
    assert {str(k) for k in wire.EVENT_KINDS} == {
        "addAddress",
        "deleteAddress",
        "createQueue",
        "deleteQueue",
        "postAck",
    }
    assert all(isinstance(s, Symbol) for s in (wire.EVENT_TYPE, wire.POST_ACK, wire.MIRROR_CAPABILITY))
    assert wire.snf_name("DC2") == "$ACTIVEMQ_ARTEMIS_MIRROR_DC2"
    assert wire.MIRROR_ADDRESS_PREFIX == "$ACTIVEMQ_ARTEMIS_MIRROR"


# ----------------------------------------------------------------------------------- control events

ADDR = AddressInfo(name="orders", routing_types=(RoutingType.ANYCAST,), id=7, created_timestamp=1700)
QCONF = QueueConfiguration(name="orders.q", address="orders", routing_type=RoutingType.ANYCAST, id=9)

EVENTS = {
    "addAddress": wire.add_address_event(ADDR),
    "deleteAddress": wire.delete_address_event(ADDR),
    "createQueue": wire.create_queue_event(QCONF),
    "deleteQueue": wire.delete_queue_event("orders", "orders.q"),
    "postAck": wire.post_ack_event("orders", "orders.q", 42, None),
}


@pytest.mark.parametrize("kind", sorted(EVENTS))
def test_control_event_sections_header_and_event_type(kind: str) -> None:
    payload = EVENTS[kind]
    assert codes(payload) == [0x70, 0x72, 0x77]  # no delivery annotations, no properties
    header_type, header = section(payload, 0x70)
    assert header_type == Data.LIST and header[0] == (Data.BOOL, True)
    ma = annotation_map(section(payload, 0x72))
    assert ma["x-opt-amq-mr-ev-type"] == (Data.SYMBOL, kind)
    assert ma["x-opt-amq-mr-adr"] == (Data.STRING, "orders")


@pytest.mark.parametrize("kind", ["addAddress", "deleteAddress"])
def test_address_events_carry_address_info_json(kind: str) -> None:
    payload = EVENTS[kind]
    assert set(annotation_map(section(payload, 0x72))) == {"x-opt-amq-mr-ev-type", "x-opt-amq-mr-adr"}
    body_type, body = section(payload, 0x77)
    assert body_type == Data.STRING
    assert json.loads(body) == {
        "id": 7,
        "name": "orders",
        "auto-created": False,
        "temporary": False,
        "internal": False,
        "routingTypes": [1],
        "created-timestamp": 1700,
    }


def test_queue_events_carry_queue_annotation_and_body() -> None:
    ma = annotation_map(section(EVENTS["createQueue"], 0x72))
    assert ma["x-opt-amq-mr-qu"] == (Data.STRING, "orders.q")
    body_type, body = section(EVENTS["createQueue"], 0x77)
    doc = json.loads(body)
    assert body_type == Data.STRING
    assert doc["name"] == "orders.q" and doc["address"] == "orders" and doc["routing-type"] == "ANYCAST"
    assert section(EVENTS["deleteQueue"], 0x77) == (Data.STRING, "orders.q")
    assert annotation_map(section(EVENTS["deleteQueue"], 0x72))["x-opt-amq-mr-qu"] == (
        Data.STRING,
        "orders.q",
    )


@pytest.mark.parametrize("message_id", [0, 5, 127, 128, 2**31, 2**63 - 1])
def test_post_ack_body_is_a_long_and_local_origin_sends_no_broker_id(message_id: int) -> None:
    payload = wire.post_ack_event("orders", "orders.q", message_id, None)
    assert section(payload, 0x77) == (Data.LONG, message_id)
    ma = annotation_map(section(payload, 0x72))
    assert set(ma) == {"x-opt-amq-mr-ev-type", "x-opt-amq-mr-adr", "x-opt-amq-mr-qu"}  # NORMAL omitted


def test_post_ack_for_foreign_origin_with_reason() -> None:
    payload = wire.post_ack_event("orders", "orders.q", 42, "node-a", AckReason.EXPIRED)
    ma = annotation_map(section(payload, 0x72))
    assert ma["x-opt-amq-bkr-id"] == (Data.STRING, "node-a")
    assert ma["x-opt-amq-mr-ack-reason"] == (Data.BYTE, 2)
    killed = annotation_map(section(wire.post_ack_event("a", "q", 1, None, AckReason.KILLED), 0x72))
    assert killed["x-opt-amq-mr-ack-reason"] == (Data.BYTE, 1)


def test_symbol_arguments_are_still_sent_as_strings() -> None:
    payload = wire.post_ack_event(Symbol("orders"), Symbol("q"), 1, Symbol("node-a"))
    ma = annotation_map(section(payload, 0x72))
    assert {ma[k][0] for k in ("x-opt-amq-mr-adr", "x-opt-amq-mr-qu", "x-opt-amq-bkr-id")} == {Data.STRING}


# ------------------------------------------------------------------------------ replicated messages


def client_message() -> bytes:
    """A client message with its own delivery annotations and every other section kind."""
    msg = Message(
        body="payload",
        durable=True,
        address="orders",
        properties={"colour": "red"},
        instructions={symbol("x-opt-client-da"): "leak me not"},
        annotations={symbol("x-opt-client-ma"): "keep"},
    )
    footer = Data()
    footer.put_described()
    footer.enter()
    footer.put_ulong(0x78)
    footer.put_map()
    footer.enter()
    footer.put_symbol(symbol("x-checksum"))
    footer.put_string("abc")
    footer.exit()
    footer.exit()
    return bytes(msg.encode()) + bytes(footer.encode())


def test_replicated_message_da_types_and_position() -> None:
    original = client_message()
    assert codes(original) == [0x70, 0x71, 0x72, 0x73, 0x74, 0x77, 0x78]
    out = wire.encode_replicated(original, 42, "node-a", "orders.eu", ["q1", "q2"])
    assert codes(out) == [0x70, 0x71, 0x72, 0x73, 0x74, 0x77, 0x78]
    da = annotation_map(section(out, 0x71))
    assert set(da) == {"x-opt-amq-mr-id", "x-opt-amq-bkr-id", "x-opt-amq-mr-dst", "x-opt-amq-mr-trg-q"}
    assert da["x-opt-amq-mr-id"] == (Data.LONG, 42)
    assert da["x-opt-amq-bkr-id"] == (Data.STRING, "node-a")
    assert da["x-opt-amq-mr-dst"] == (Data.STRING, "orders.eu")
    assert da["x-opt-amq-mr-trg-q"] == (Data.LIST, [(Data.STRING, "q1"), (Data.STRING, "q2")])


def test_replicated_message_keeps_every_other_section_byte_for_byte() -> None:
    original = client_message()
    out = wire.encode_replicated(original, 7)
    before = {c: raw for c, _, raw in sections(original)}
    after = {c: raw for c, _, raw in sections(out)}
    assert before.keys() == after.keys()
    for code in (0x70, 0x72, 0x73, 0x74, 0x77, 0x78):
        assert after[code] == before[code]
    assert after[0x71] != before[0x71]
    assert annotation_map(section(out, 0x71)) == {"x-opt-amq-mr-id": (Data.LONG, 7)}  # optional keys absent


def test_replicated_message_without_header_or_da_gets_da_first() -> None:
    original = b"\x00\x53\x73\x45" + b"\x00\x53\x77\xa1\x01x"  # properties (empty list), amqp-value
    assert 0x70 not in codes(original)
    out = wire.encode_replicated(original, 2**40)
    assert codes(out)[0] == 0x71
    assert out.endswith(original)
    assert annotation_map(section(out, 0x71))["x-opt-amq-mr-id"] == (Data.LONG, 2**40)


def test_destination_annotation_follows_properties_to() -> None:
    with_to = proton_message(body="x", address="orders")
    assert wire.destination_annotation(with_to, "orders") is None
    assert wire.destination_annotation(with_to, "other") == "other"
    assert wire.destination_annotation(proton_message(body="x"), "orders") == "orders"
    assert wire.destination_annotation(with_to, None) is None


def test_encode_replicated_rejects_non_sections() -> None:
    with pytest.raises(ValueError):
        wire.encode_replicated(b"\x01\x02", 1)


# ------------------------------------------------------------------------------------------- decode


def test_decode_control_events_round_trip() -> None:
    add = decode.decode_mirror_delivery(EVENTS["addAddress"])
    assert isinstance(add, ControlEvent) and add.kind == "addAddress" and add.address == "orders"
    assert add.address_info() == AddressInfo(
        name="orders", routing_types=(RoutingType.ANYCAST,), created_timestamp=1700
    )  # id is not read back
    create = decode.decode_mirror_delivery(EVENTS["createQueue"])
    assert isinstance(create, ControlEvent) and create.queue == "orders.q"
    assert create.queue_configuration() == QueueConfiguration(
        name="orders.q", address="orders", routing_type=RoutingType.ANYCAST
    )
    dq = decode.decode_mirror_delivery(EVENTS["deleteQueue"])
    assert isinstance(dq, ControlEvent) and (dq.address, dq.queue, dq.body) == (
        "orders",
        "orders.q",
        "orders.q",
    )
    ack = decode.decode_mirror_delivery(wire.post_ack_event("orders", "q", 2**62, "node-a", AckReason.KILLED))
    assert ack == ControlEvent(
        kind=wire.POST_ACK,
        address="orders",
        queue="q",
        broker_id="node-a",
        reason=AckReason.KILLED,
        message_id=2**62,
        body=None,
    )
    local = decode.decode_mirror_delivery(EVENTS["postAck"])
    assert isinstance(local, ControlEvent)
    assert (local.broker_id, local.reason, local.message_id) == (None, AckReason.NORMAL, 42)


def artemis_event(event: Any, annotations: dict[Any, Any], body: Any) -> bytes:
    """An event as Artemis encodes it, built with proton only."""
    msg = Message(durable=True, annotations={symbol("x-opt-amq-mr-ev-type"): event, **annotations}, body=body)
    return bytes(msg.encode())


def test_decode_event_encoded_by_an_independent_encoder() -> None:
    payload = artemis_event(
        symbol("postAck"),
        {
            symbol("x-opt-amq-mr-qu"): "q",
            symbol("x-opt-amq-mr-adr"): "a",
            symbol("x-opt-amq-mr-ack-reason"): 2,  # any number is accepted
        },
        17,
    )
    event = decode.decode_mirror_delivery(payload)
    assert isinstance(event, ControlEvent)
    assert (event.kind, event.queue, event.reason, event.message_id) == (
        "postAck",
        "q",
        AckReason.EXPIRED,
        17,
    )


def test_unknown_or_string_event_types_are_ignored_like_artemis() -> None:
    unknown = decode.decode_mirror_delivery(artemis_event(symbol("renameQueue"), {}, "x"))
    assert unknown == decode.UnknownEvent("renameQueue")
    as_string = decode.decode_mirror_delivery(artemis_event("postAck", {}, 1))
    assert isinstance(as_string, decode.UnknownEvent) and not isinstance(as_string.event_type, Symbol)


def test_unknown_ack_reason_reads_as_normal() -> None:
    payload = artemis_event(symbol("postAck"), {symbol("x-opt-amq-mr-ack-reason"): 9}, 1)
    event = decode.decode_mirror_delivery(payload)
    assert isinstance(event, ControlEvent) and event.reason == AckReason.NORMAL


@pytest.mark.parametrize(
    ("event", "annotations", "body"),
    [
        ("postAck", {}, "not-a-number"),
        ("postAck", {}, None),
        ("addAddress", {}, 5),
        ("createQueue", {}, None),
        ("deleteQueue", {symbol("x-opt-amq-mr-qu"): 5}, "q"),
    ],
)
def test_malformed_events_are_decode_errors(event: str, annotations: dict[Any, Any], body: Any) -> None:
    with pytest.raises(MirrorDecodeError):
        decode.decode_mirror_delivery(artemis_event(symbol(event), annotations, body))


def test_decode_replicated_message_strips_mirror_da() -> None:
    original = client_message()
    out = wire.encode_replicated(original, 42, "node-a", "orders.eu", ["q1"])
    got = decode.decode_mirror_delivery(out)
    assert isinstance(got, ReplicatedMessage)
    assert (got.mr_id, got.broker_id, got.destination, got.target_queues) == (
        42,
        "node-a",
        "orders.eu",
        ("q1",),
    )
    assert got.to == "orders" and got.address == "orders.eu"
    assert 0x71 not in codes(got.payload)
    assert got.payload == b"".join(raw for c, _, raw in sections(original) if c != 0x71)
    plain = decode.decode_mirror_delivery(wire.encode_replicated(original, 1))
    assert isinstance(plain, ReplicatedMessage)
    assert (plain.broker_id, plain.destination, plain.target_queues, plain.address) == (
        None,
        None,
        None,
        "orders",
    )


def test_target_queues_as_array_are_tolerated() -> None:
    da = encode({wire.INTERNAL_ID: 3, wire.TARGET_QUEUES: Array(0xA1, ["a", "b"])})
    payload = b"\x00\x53\x71" + da + b"\x00\x53\x77\xa1\x01x"
    assert section(payload, 0x71)[1][1][1][0] == Data.ARRAY  # really an array on the wire
    got = decode.decode_mirror_delivery(payload)
    assert isinstance(got, ReplicatedMessage) and got.target_queues == ("a", "b")


def test_message_without_mirror_id_is_an_error() -> None:
    with pytest.raises(MissingMirrorId):
        decode.decode_mirror_delivery(proton_message(body="no da"))
    with pytest.raises(MissingMirrorId):
        decode.decode_mirror_delivery(proton_message(body="x", instructions={symbol("x-other"): 1}))
    with pytest.raises(MirrorDecodeError):
        decode.decode_mirror_delivery(b"\x00\x53")


# ---------------------------------------------------------------------------------------- JSON shapes


def test_address_info_json_matches_artemis_shape_and_parses_tolerantly() -> None:
    info = AddressInfo(
        name="news",
        routing_types=(RoutingType.ANYCAST, RoutingType.MULTICAST),
        first_seen=RoutingType.MULTICAST,
        auto_created=True,
        created_timestamp=5,
        id=3,
    )
    text = info.to_json()
    assert " " not in text
    assert list(json.loads(text)) == [
        "id",
        "name",
        "auto-created",
        "temporary",
        "internal",
        "firstSeen",
        "routingTypes",
        "created-timestamp",
    ]
    assert json.loads(text)["routingTypes"] == [0, 1]
    parsed = AddressInfo.from_json(text.replace('"id":3', '"id":3,"future-key":{"x":1}'))
    assert parsed == AddressInfo(
        name="news",
        routing_types=(RoutingType.MULTICAST, RoutingType.ANYCAST),
        first_seen=RoutingType.MULTICAST,
        auto_created=True,
        created_timestamp=5,
    )
    with pytest.raises(JsonShapeError):
        AddressInfo.from_json('{"id": 1}')
    with pytest.raises(JsonShapeError):
        AddressInfo.from_json("[1]")


def test_queue_configuration_json_keys_and_defaults() -> None:
    doc = json.loads(
        QueueConfiguration(name="q", max_consumers=-1, last_value_key="k", exclusive=True).to_json()
    )
    assert doc == {
        "name": "q",
        "address": "q",
        "durable": True,
        "max-consumers": -1,
        "exclusive": True,
        "last-value-key": "k",
        "configuration-managed": False,
        "temporary": False,
        "internal": False,
        "transient": False,
        "auto-created": False,
        "fqqn": False,
    }


def test_queue_configuration_parses_artemis_json_tolerantly() -> None:
    text = json.dumps(
        {
            "id": 99,
            "name": "orders.q",
            "address": "orders",
            "routing-type": "multicast",
            "durable": "false",
            "max-consumers": "5",
            "filter-string": "colour = 'red'",
            "auto-create-address": True,
            "brand-new-key": 1,
        }
    )
    q = QueueConfiguration.from_json(text)
    assert q.id is None and q.routing_type is RoutingType.MULTICAST and q.durable is False
    assert (q.max_consumers, q.filter_string, q.auto_create_address) == (5, "colour = 'red'", True)
    assert QueueConfiguration.from_json(q.to_json()) == q
    with pytest.raises(JsonShapeError):
        QueueConfiguration.from_json('{"address": "a"}')
    with pytest.raises(JsonShapeError):
        QueueConfiguration.from_json('{"name": "q", "routing-type": "BROADCAST"}')


# -------------------------------------------------------------------------------------------- attach


def proton_attach(attach: Attach) -> dict[str, Any]:
    d = Data()
    d.decode(attach.encode_amqp())
    d.rewind()
    d.next()
    _, (desc, (lt, fields)) = typed(d)
    assert desc == (Data.ULONG, ulong(0x12)) and lt == Data.LIST
    names = [
        "name",
        "handle",
        "role",
        "snd_settle_mode",
        "rcv_settle_mode",
        "source",
        "target",
        "unsettled",
        "incomplete_unsettled",
        "initial_delivery_count",
        "max_message_size",
        "offered_capabilities",
        "desired_capabilities",
        "properties",
    ]
    return dict(zip(names, fields, strict=False))


def symbols_of(typed_value: Any) -> list[str]:
    t, v = typed_value
    if t == Data.SYMBOL:
        return [v]
    assert t == Data.ARRAY
    assert all(et == Data.SYMBOL for et, _ in v)
    return [x for _, x in v]


def test_source_attach_fields() -> None:
    f = proton_attach(mirror_source_attach("DC2", "node-1", "uuid-1", handle=3))
    snf = "$ACTIVEMQ_ARTEMIS_MIRROR_DC2"
    assert f["name"] == (Data.STRING, f"{snf}:uuid-1")
    assert f["handle"] == (Data.UINT, 3) and f["role"] == (Data.BOOL, False)
    assert f["snd_settle_mode"] == (Data.UBYTE, 0) and f["rcv_settle_mode"] == (Data.UBYTE, 0)
    for terminus, code in (("source", 0x28), ("target", 0x29)):
        t, (desc, (_, items)) = f[terminus]
        assert t == Data.DESCRIBED and desc[1] == code and items[0] == (Data.STRING, snf)
    assert symbols_of(f["desired_capabilities"]) == ["amq.mirror"]
    props = annotation_map(f["properties"])
    assert props == {"x-opt-amq-bkr-id": (Data.STRING, "node-1")}
    tunnel = proton_attach(mirror_source_attach("DC2", "node-1", "u", tunnel_core=True))
    assert symbols_of(tunnel["desired_capabilities"]) == ["amq.mirror", "AMQ_CORE_MESSAGE_TUNNELING"]


def answer(**kwargs: Any) -> Attach:
    base: dict[str, Any] = {
        "name": "$ACTIVEMQ_ARTEMIS_MIRROR_DC2:u",
        "handle": 0,
        "role": True,
        "source": Source(address="$ACTIVEMQ_ARTEMIS_MIRROR_DC2"),
        "target": Target(address="$ACTIVEMQ_ARTEMIS_MIRROR_DC2"),
        "offered_capabilities": [Symbol("amq.mirror")],
        "properties": {Symbol("x-opt-amq-bkr-id"): "node-2"},
    }
    base.update(kwargs)
    return Attach(**base)


def test_check_target_answer_cases_in_artemis_order() -> None:
    assert check_target_answer(answer(), "node-1") is None
    assert check_target_answer(answer(offered_capabilities=Symbol("amq.mirror")), "node-1") is None
    refused = check_target_answer(answer(target=None, offered_capabilities=None), "node-1")
    assert refused == "AMQ119023: Sender link refused for address $ACTIVEMQ_ARTEMIS_MIRROR_DC2"
    missing_cap = check_target_answer(answer(offered_capabilities=None, properties=None), "node-1")
    assert missing_cap == "AMQ119018: link is missing an offered capability declaration [amq.mirror]"
    other_cap = check_target_answer(answer(offered_capabilities=[Symbol("AMQ_CORE_MESSAGE_TUNNELING")]), "n")
    assert other_cap is not None and other_cap.startswith("AMQ119018")
    no_id = check_target_answer(answer(properties={Symbol("other"): "x"}), "node-1")
    assert no_id is not None and no_id.startswith("AMQ119019: There is no brokerID defined")
    itself = check_target_answer(answer(), "node-2")
    assert itself is not None and itself.startswith(
        "AMQ119022: The broker connection is trying to connect to itself"
    )


def test_target_answer_offers_mirror_only_and_its_broker_id() -> None:
    remote = mirror_source_attach("DC1", "node-1", "u", handle=5, tunnel_core=True)
    remote.snd_settle_mode = 2
    ours = mirror_target_answer(remote, "node-2", handle=1)
    f = proton_attach(ours)
    assert f["name"] == (Data.STRING, remote.name) and f["handle"] == (Data.UINT, 1)
    assert f["role"] == (Data.BOOL, True)
    assert f["snd_settle_mode"] == (Data.UBYTE, 2) and f["rcv_settle_mode"] == (Data.UBYTE, 0)
    assert symbols_of(f["offered_capabilities"]) == ["amq.mirror"]  # never tunnelling
    assert annotation_map(f["properties"]) == {"x-opt-amq-bkr-id": (Data.STRING, "node-2")}
    assert ours.source == remote.source and ours.target == remote.target
    assert check_target_answer(ours, "node-1") is None


def test_refusal_of_a_mirror_link_without_desired_capability() -> None:
    assert mirror_refusal(mirror_source_attach("DC1", "n", "u")) is None
    remote = mirror_source_attach("DC1", "n", "u")
    remote.desired_capabilities = None
    refusal = mirror_refusal(remote)
    assert refusal is not None
    assert (refusal.condition, refusal.description) == (
        "amqp:illegal-state",
        "AMQ119024: link is missing a desired capability declaration amq.mirror",
    )
    remote.desired_capabilities = [Symbol("other")]
    assert mirror_refusal(remote) is not None
    no_id = mirror_source_attach("DC1", "n", "u")
    no_id.properties = None
    refusal = mirror_refusal(no_id)
    assert refusal is not None and refusal.condition == "amqp:invalid-field"
