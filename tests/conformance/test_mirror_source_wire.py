"""Our broker as an Artemis mirror SOURCE, checked on the wire against a scripted Artemis target.

The scripted target (tests/support/peer/) decodes with python-qpid-proton, so every type
asserted here (symbol vs string, long vs ulong, byte) is what an Artemis target would see. The rules
come from the mirror protocol spec, sections 1.1-1.4 (connection and link), 2.2-2.5 (deliveries) and 5.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message, byte, symbol, ubyte
from proton.utils import BlockingConnection

from connections.cli import request
from tests.conformance.wire_helpers import (
    ACK_REASON,
    ADR,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    BKR_ID,
    DELIVERY_ANNOTATIONS,
    EV_TYPE,
    FOOTER,
    HEADER,
    MESSAGE_ANNOTATIONS,
    MIRROR_PREFIX,
    MR_DST,
    MR_ID,
    PROPERTIES,
    QU,
    anycast,
    broker,
    connection_xml,
    depth,
    durable_header,
    event_type,
    events,
    is_long,
    messages,
    multicast,
    section,
    section_codes,
    send_to_queue,
    source_status,
    symbols_of,
    wait_for_log,
)
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.peer import (
    Frame,
    LinkReply,
    ScriptedClient,
    ScriptedServer,
    TransferRecord,
)
from tests.support.raw_amqp import taken_then_lost

TARGET_ID = "artemis-target-node"
SNF = f"{MIRROR_PREFIX}_DC2"
ADDRESSES = anycast("orders") + multicast("news", "news.sub")
ORIGIN = "foreign-origin-node"  # a third broker whose messages reach ours by mirror


def mirror_broker(
    home: Path, peer: ScriptedServer, mirror_attrs: str = "", *, addresses: str = ADDRESSES, core: str = ""
) -> BrokerProcess:
    extra = core + connection_xml(peer.port, f"<mirror {mirror_attrs}/>")
    return broker(home, addresses=addresses, extra=extra)


def new_transfers(
    peer: ScriptedServer, start: int, done: Callable[[list[TransferRecord]], Any], what: str
) -> list[TransferRecord]:
    """Transfers received since index `start`, once `done` holds for them."""
    peer.records.wait(lambda: done(peer.transfers[start:]), 10, what)
    return peer.transfers[start:]


def one_event(kind: str, **match: str) -> Callable[[list[TransferRecord]], bool]:
    def found(ts: list[TransferRecord]) -> bool:
        for t in events(ts, kind):
            ma = t.message_annotations
            if all(ma.get(symbol(f"x-opt-amq-mr-{k}")) == v for k, v in match.items()):
                return True
        return False

    return found


def pick(ts: list[TransferRecord], kind: str, **match: str) -> TransferRecord:
    [t] = [
        t
        for t in events(ts, kind)
        if all(t.message_annotations.get(symbol(f"x-opt-amq-mr-{k}")) == v for k, v in match.items())
    ]
    return t


def assert_control_event_shape(t: TransferRecord) -> None:
    """§2.2: durable header, message annotations, optional amqp-value; no DAs, no properties."""
    codes = section_codes(t)
    assert codes[:2] == [HEADER, MESSAGE_ANNOTATIONS], codes
    assert codes[2:] in ([], [AMQP_VALUE]), codes
    assert t.section(HEADER)[0] is True, "control events are durable"
    assert t.message_format == 0
    ma = t.message_annotations
    assert all(type(k) is symbol for k in ma), ma
    assert type(ma[EV_TYPE]) is symbol, "the event type must be a symbol (§2.4)"
    for key in (ADR, QU, BKR_ID):
        if key in ma:
            assert type(ma[key]) is str, f"{key} must be an AMQP string, got {type(ma[key]).__name__}"


# ---------------------------------------------------------------------------------- shared broker


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ScriptedServer, BrokerProcess]]:
    peer = ScriptedServer(LinkReply.mirror_target(TARGET_ID), container_id=TARGET_ID)
    with peer:
        b = mirror_broker(tmp_path_factory.mktemp("source"), peer)
        try:
            peer.wait_for_attach()
            wait_for_log(b, "AMQ111003")
            yield peer, b
        finally:
            b.stop()


def test_open_names_our_node_and_the_connection(mirrored: tuple[ScriptedServer, BrokerProcess]) -> None:
    peer, b = mirrored
    [open_] = [f for f in peer.records.frames if f.name == "open"][:1]
    node = str(request(b.url, "getNodeID", []))
    assert open_["container_id"] == node
    props = open_["properties"]
    assert all(type(k) is symbol for k in props)
    assert type(props[symbol("product")]) is str and props[symbol("product")]
    assert type(props[symbol("version")]) is str and props[symbol("version")]
    info = props[symbol("broker-connection-info")]
    assert info == {"connectionName": "DC2", "nodeId": node}
    assert all(type(k) is str and type(v) is str for k, v in info.items()), "string keys and values"
    assert open_["desired_capabilities"] is None, "mirror-only connections desire nothing"
    assert open_["idle_time_out"] == 60000, "Artemis's default connection TTL"
    assert open_["max_frame_size"] == 131072
    assert peer.records.sasl[0]["mechanism"] == "ANONYMOUS"


def test_attach_fields_are_exactly_artemis(mirrored: tuple[ScriptedServer, BrokerProcess]) -> None:
    peer, b = mirrored
    attach = peer.attaches[0]
    node = str(request(b.url, "getNodeID", []))
    name = str(attach["name"])
    assert name.startswith(f"{SNF}:") and len(name) > len(SNF) + 1
    assert attach["role"] is False, "the source attaches as sender"
    source, target = attach.terminus("source"), attach.terminus("target")
    assert source is not None and target is not None
    assert source["address"] == SNF and target["address"] == SNF
    assert type(attach["snd_settle_mode"]) is ubyte and int(attach["snd_settle_mode"]) == 0  # unsettled
    assert type(attach["rcv_settle_mode"]) is ubyte and int(attach["rcv_settle_mode"]) == 0  # first
    desired = symbols_of(attach["desired_capabilities"])
    assert all(type(c) is symbol for c in desired)
    assert symbol("amq.mirror") in desired
    assert symbol("AMQ_CORE_MESSAGE_TUNNELING") not in desired, "we have no Core messages to tunnel"
    [(key, value)] = attach["properties"].items()
    assert type(key) is symbol and key == BKR_ID
    assert type(value) is str and value == node


def test_existing_topology_is_announced_with_exact_types(
    mirrored: tuple[ScriptedServer, BrokerProcess],
) -> None:
    peer, _ = mirrored
    ts = new_transfers(peer, 0, one_event("createQueue", qu="news.sub"), "the initial createQueue events")
    for t in ts:
        assert_control_event_shape(t)
    add = pick(ts, "addAddress", adr="news")
    info = json.loads(add.amqp_value)
    assert info["name"] == "news" and info["routingTypes"] == [0], info  # MULTICAST = 0
    assert QU not in add.message_annotations
    create = pick(ts, "createQueue", qu="news.sub")
    assert create.message_annotations[ADR] == "news"
    qc = json.loads(create.amqp_value)
    assert (qc["name"], qc["address"], qc["routing-type"]) == ("news.sub", "news", "MULTICAST")
    orders = json.loads(pick(ts, "createQueue", qu="orders").amqp_value)
    assert (orders["address"], orders["routing-type"], orders["durable"]) == ("orders", "ANYCAST", True)
    assert not [t for t in ts if t.message_annotations.get(ADR, "").startswith(MIRROR_PREFIX)], "SNF leaked"


def test_runtime_create_delete_and_ack_events(mirrored: tuple[ScriptedServer, BrokerProcess]) -> None:
    peer, b = mirrored
    start = len(peer.transfers)
    send_to_queue(b.url, "created.q", ["one"])  # auto-creates the address and an anycast queue
    ts = new_transfers(peer, start, lambda ts: messages(ts), "the events of an auto-created queue")
    add = pick(ts, "addAddress", adr="created.q")
    assert json.loads(add.amqp_value)["routingTypes"] == [1]  # ANYCAST = 1
    create = pick(ts, "createQueue", adr="created.q", qu="created.q")
    qc = json.loads(create.amqp_value)
    assert (qc["name"], qc["address"], qc["routing-type"]) == ("created.q", "created.q", "ANYCAST")
    kinds = [event_type(t) for t in ts]
    assert kinds == ["addAddress", "createQueue", None], "creates go before the send (§10)"
    mr_id = messages(ts)[0].delivery_annotations[MR_ID]

    start = len(peer.transfers)
    [got] = receive(b.url, "created.q", 1)
    assert got.body == "one"
    ack = pick(new_transfers(peer, start, one_event("postAck"), "the postAck"), "postAck")
    assert_control_event_shape(ack)
    ma = ack.message_annotations
    assert (ma[ADR], ma[QU]) == ("created.q", "created.q")
    assert BKR_ID not in ma, "a locally produced message's ack carries no broker id"
    assert ACK_REASON not in ma, "NORMAL is omitted"
    assert is_long(ack.amqp_value) and ack.amqp_value == mr_id, "body: the message id as AMQP long"

    start = len(peer.transfers)
    request(b.url, "destroyQueue", ["created.q"])  # (and, if auto-deleted, its auto-created address)
    delete = pick(new_transfers(peer, start, one_event("deleteQueue"), "the deleteQueue"), "deleteQueue")
    assert_control_event_shape(delete)
    assert (delete.message_annotations[ADR], delete.message_annotations[QU]) == ("created.q", "created.q")
    assert delete.amqp_value == "created.q", "Artemis sends the queue name as the body"

    if "created.q" in request(b.url, "getAddressNames", []):  # not auto-deleted with its last queue
        request(b.url, "deleteAddress", ["created.q", True])
    ts = new_transfers(peer, start, one_event("deleteAddress", adr="created.q"), "the deleteAddress")
    gone = pick(ts, "deleteAddress", adr="created.q")
    assert_control_event_shape(gone)
    assert json.loads(gone.amqp_value)["name"] == "created.q", "body: the AddressInfo JSON"


def test_replicated_message_bytes_and_delivery_annotations(
    mirrored: tuple[ScriptedServer, BrokerProcess],
) -> None:
    """§2.3: only the delivery annotations change; `x-opt-amq-mr-dst` only when `to` differs."""
    peer, b = mirrored
    annotations = section(MESSAGE_ANNOTATIONS, {symbol("x-opt-app"): "kept"})
    props_to_orders = section(PROPERTIES, ["id-1", None, "orders"])
    props_to_other = section(PROPERTIES, ["id-2", None, "elsewhere"])
    app = section(APPLICATION_PROPERTIES, {"k": 7, "s": "v"})
    footer = section(FOOTER, {symbol("x-opt-f"): "f"})
    client_da = section(DELIVERY_ANNOTATIONS, {symbol("x-opt-client-da"): "must not leak"})
    bodies = [
        client_da + annotations + props_to_orders + app + section(AMQP_VALUE, "same-to") + footer,
        annotations + props_to_other + app + section(AMQP_VALUE, "other-to"),
        section(AMQP_VALUE, "no-properties"),
    ]
    start = len(peer.transfers)
    with ScriptedClient(b.port) as client:
        client.attach_sender("raw", "orders")
        for body in bodies:
            disposition = client.send(durable_header() + body)
            assert disposition is not None and disposition.state == "accepted"
    ts = new_transfers(peer, start, lambda ts: len(messages(ts)) >= 3, "three replicated messages")
    same, other, bare = messages(ts)
    for t, body in zip((same, other, bare), bodies, strict=True):
        assert t.message_format == 0
        codes = section_codes(t)
        assert codes[:2] == [HEADER, DELIVERY_ANNOTATIONS], codes
        rest = b"".join(s.raw for s in t.sections[2:])
        expected = body[len(client_da) :] if body.startswith(client_da) else body
        assert rest == expected, "sections after the delivery annotations must be byte for byte"
        da = t.delivery_annotations
        assert is_long(da[MR_ID]), f"x-opt-amq-mr-id must be AMQP long, got {type(da[MR_ID]).__name__}"
        assert BKR_ID not in da, "locally produced: no x-opt-amq-bkr-id"
        assert symbol("x-opt-client-da") not in da, "the client's delivery annotations leaked"
    assert MR_DST not in same.delivery_annotations, "properties.to equals the routed address"
    assert other.delivery_annotations[MR_DST] == "orders" and type(other.delivery_annotations[MR_DST]) is str
    assert bare.delivery_annotations[MR_DST] == "orders", "no properties section: the destination is sent"
    ids = [t.delivery_annotations[MR_ID] for t in (same, other, bare)]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert len(receive(b.url, "orders", 3, timeout=2)) == 3  # leave the queue empty for other tests


def test_proton_message_with_delivery_annotations_is_not_leaked(
    mirrored: tuple[ScriptedServer, BrokerProcess],
) -> None:
    peer, b = mirrored
    start = len(peer.transfers)
    conn = BlockingConnection(b.url, allowed_mechs="ANONYMOUS", timeout=10)
    try:
        instructions = {symbol("x-opt-secret"): "da"}
        msg = Message(body="with-da", durable=True, instructions=instructions, properties={"p": 1})
        conn.create_sender("orders").send(msg)
    finally:
        conn.close()
    [t] = messages(new_transfers(peer, start, messages, "the replicated message"))
    assert set(t.delivery_annotations) <= {MR_ID, MR_DST}, t.delivery_annotations
    assert t.amqp_value == "with-da" and t.section(APPLICATION_PROPERTIES) == {"p": 1}
    assert len(receive(b.url, "orders", 1, timeout=2)) == 1


def test_foreign_origin_keeps_its_broker_id_and_id(mirrored: tuple[ScriptedServer, BrokerProcess]) -> None:
    """A message that reached us by mirror from a third broker is forwarded with its origin (§2.3)."""
    peer, b = mirrored
    start = len(peer.transfers)
    payload = (
        durable_header()
        + section(DELIVERY_ANNOTATIONS, {MR_ID: 4242})
        + section(PROPERTIES, [None, None, "orders"])
        + section(AMQP_VALUE, "from-afar")
    )
    with ScriptedClient(b.port) as client:
        client.open(container_id=ORIGIN)
        answer = client.attach_sender(
            f"{MIRROR_PREFIX}_X:1",
            f"{MIRROR_PREFIX}_X",
            source=f"{MIRROR_PREFIX}_X",
            desired_capabilities=["amq.mirror"],
            properties={"x-opt-amq-bkr-id": ORIGIN},
        )
        assert answer.flow is not None
        disposition = client.send(payload)
        assert disposition is not None and disposition.state == "accepted"
    [t] = messages(new_transfers(peer, start, messages, "the forwarded message"))
    da = t.delivery_annotations
    assert da[MR_ID] == 4242 and is_long(da[MR_ID]), "the origin's id, not ours"
    assert da[BKR_ID] == ORIGIN and type(da[BKR_ID]) is str
    start = len(peer.transfers)
    assert [m.body for m in receive(b.url, "orders", 1)] == ["from-afar"]
    ack = pick(new_transfers(peer, start, one_event("postAck"), "the postAck"), "postAck")
    assert ack.message_annotations[BKR_ID] == ORIGIN and type(ack.message_annotations[BKR_ID]) is str
    assert ack.amqp_value == 4242 and is_long(ack.amqp_value)


def test_events_from_the_target_itself_are_not_reflected(
    mirrored: tuple[ScriptedServer, BrokerProcess],
) -> None:
    """§3.2: what our target link applies from broker X never goes back to X."""
    peer, b = mirrored
    start = len(peer.transfers)
    message = (
        durable_header()
        + section(DELIVERY_ANNOTATIONS, {MR_ID: 77})
        + section(PROPERTIES, [None, None, "orders"])
        + section(AMQP_VALUE, "echo?")
    )
    with ScriptedClient(b.port) as client:
        client.attach_sender(
            f"{MIRROR_PREFIX}_Y:1",
            f"{MIRROR_PREFIX}_Y",
            desired_capabilities=["amq.mirror"],
            properties={"x-opt-amq-bkr-id": TARGET_ID},
        )
        assert client.send(message) is not None
    wait_until(lambda: depth(b, "orders") == 1, 5, "the mirrored message to be stored")
    send(b.url, "orders", ["barrier"])
    ts = new_transfers(peer, start, messages, "the barrier message")
    assert [t.amqp_value for t in messages(ts)] == ["barrier"], "a message from the target was reflected"
    assert len(receive(b.url, "orders", 2, timeout=2)) == 2


def test_killed_ack_reason_is_an_amqp_byte(mirrored: tuple[ScriptedServer, BrokerProcess]) -> None:
    peer, b = mirrored
    sent = len(peer.transfers)
    send(b.url, "orders", ["poison"])
    new_transfers(peer, sent, messages, "the poison message")  # not to be counted below
    start = len(peer.transfers)
    for attempt in range(3):  # max-delivery-attempts is 3; a consumer lost with it unsettled counts one
        assert taken_then_lost(b.port, "orders") == attempt
    ts = new_transfers(peer, start, one_event("postAck", qu="orders"), "the KILLED postAck")
    ack = pick(ts, "postAck", qu="orders")
    reason = ack.message_annotations[ACK_REASON]
    assert type(reason) is byte and reason == 1, f"KILLED must be AMQP byte 1, got {reason!r}"
    assert [t.amqp_value for t in messages(ts)] == ["poison"], "the dead-letter copy is mirrored (as Artemis)"
    assert messages(ts)[0].delivery_annotations[MR_DST] == "DLA"
    assert [m.body for m in receive(b.url, "DLA", 1, timeout=2)] == ["poison"]
    new_transfers(peer, start, one_event("postAck", qu="DLA"), "the DLA postAck")  # none left to leak


def test_temporary_reply_queues_are_not_mirrored(mirrored: tuple[ScriptedServer, BrokerProcess]) -> None:
    """§3.2: temporary addresses and queues (dynamic receivers, e.g. management replies) are skipped."""
    peer, b = mirrored
    start = len(peer.transfers)
    conn = BlockingConnection(b.url, allowed_mechs="ANONYMOUS", timeout=10)
    try:
        replies = conn.create_receiver(None, dynamic=True, credit=1)
        temporary = replies.link.remote_source.address
    finally:
        conn.close()
    send(b.url, "orders", ["barrier"])
    ts = new_transfers(peer, start, messages, "the barrier")
    receive(b.url, "orders", 1, timeout=2)
    leaked = [(event_type(t), t.message_annotations.get(ADR)) for t in ts if event_type(t)]
    assert not leaked, f"temporary address {temporary} mirrored: {leaked}"
    assert [t.amqp_value for t in ts] == ["barrier"]


# ------------------------------------------------------------------------------ expiry (own broker)


def test_expiry_sends_only_a_postack_with_reason_expired(tmp_path: Path) -> None:
    with ScriptedServer(LinkReply.mirror_target(TARGET_ID)) as peer:
        scan = "<message-expiry-scan-period>100</message-expiry-scan-period>"
        b = mirror_broker(tmp_path / "b", peer, core=scan)
        try:
            peer.wait_for_attach()
            send(b.url, "orders", ["short-lived"], ttl=0.2)
            wait_until(lambda: depth(b, "ExpiryQueue") == 1, 10, "the message to expire")
            send(b.url, "orders", ["barrier"])
            ts = new_transfers(
                peer, 0, lambda ts: [t for t in messages(ts) if t.amqp_value == "barrier"], "the barrier"
            )
            ack = pick(ts, "postAck")
            reason = ack.message_annotations[ACK_REASON]
            assert type(reason) is byte and reason == 2, f"EXPIRED must be AMQP byte 2, got {reason!r}"
            assert [t.amqp_value for t in messages(ts)] == ["short-lived", "barrier"], (
                "the expiry copy was mirrored too"
            )
        finally:
            b.stop()


# ----------------------------------------------------------------------- §1.4 refusals (own broker)


def test_every_refusal_of_the_target_is_logged_and_retried(tmp_path: Path) -> None:
    """Null target, no amq.mirror, no broker id, our own id: each fails the attempt, the next one comes."""

    def own_id(attach: Frame) -> LinkReply:
        return LinkReply.mirror_target(str(attach["properties"][BKR_ID]))

    # Attaches without a response of their own (the fifth, any after it) get a proper target's reply.
    with ScriptedServer(LinkReply.mirror_target(TARGET_ID)) as peer:
        mirror = {"role": False, "target": SNF}  # every attempt attaches the same mirror sender
        peer.expect_attach(**mirror).respond(
            refuse=True, error_condition="amqp:not-found", error_description="no such node"
        )
        peer.expect_attach(**mirror).respond(
            offered_capabilities=["something-else"], properties={"x-opt-amq-bkr-id": "t"}
        )
        peer.expect_attach(**mirror).respond(offered_capabilities=["amq.mirror"], properties={"other": "t"})
        peer.expect_attach(**mirror).respond(own_id)
        peer.expect_attach(**mirror)
        b = mirror_broker(tmp_path / "b", peer)
        try:
            peer.wait_for_script_to_complete(timeout=50)
            wait_for_log(b, "AMQ111003")
            log = b.log()
            codes = ["AMQ119023", "AMQ119018", "AMQ119019", "AMQ119022"]
            positions = [log.find(c) for c in codes]
            assert all(p >= 0 for p in positions), {c: p for c, p in zip(codes, positions, strict=True)}
            assert positions == sorted(positions), "the refusals must be logged in attempt order"
            assert log.count("AMQ111002") >= 4, "each refusal consumes a retry"
            assert len(peer.connections) >= 5, "each refusal tears the connection down"
            peer.records.wait(lambda: all(c.closed for c in peer.connections[:4]), 5, "refused ones closed")
            assert source_status(b)["connected"] is True
        finally:
            b.stop()


# ------------------------------------------------------------ settlement and redelivery (own broker)


def test_events_leave_the_snf_only_when_accepted_and_are_resent_in_order(tmp_path: Path) -> None:
    # The filter keeps management's temporary reply addresses out (see the temporary-queue test).
    hold = LinkReply.mirror_target(TARGET_ID, outcome="hold")
    with ScriptedServer(hold) as peer:
        b = mirror_broker(tmp_path / "b", peer, 'address-filter="orders"', addresses=anycast("orders"))
        try:
            peer.wait_for_attach()
            send(b.url, "orders", ["m1", "m2", "m3"])
            first = peer.wait_for_transfers(5)  # addAddress, createQueue, 3 messages
            assert [event_type(t) for t in first] == ["addAddress", "createQueue", None, None, None]
            wait_until(lambda: source_status(b)["pendingEvents"] == 5, 5, "5 events held by the target")
            # all five are out on the link, none waits in the queue: their age still counts
            wait_until(lambda: source_status(b)["oldestPendingAgeMs"] >= 300, 5, "held events to age")
            peer.settle(first[0])
            wait_until(lambda: source_status(b)["pendingEvents"] == 4, 5, "the accepted event to leave")
            assert source_status(b)["pendingEvents"] == 4, "an unsettled event must stay in the SNF"
            order = [(event_type(t), t.amqp_value) for t in first[1:]]
            ids = [t.delivery_annotations[MR_ID] for t in first[2:]]

            peer.drop()
            peer.wait_for_attach(timeout=10)
            again = peer.wait_for_transfers(5 + 4)[5:]
            assert [(event_type(t), t.amqp_value) for t in again] == order, "resent in SNF order"
            assert [t.delivery_annotations[MR_ID] for t in again[1:]] == ids, "same ids when resent"
            assert all(t.connection is peer.connections[1] for t in again)
            for t in again:
                peer.settle(t)
            wait_until(lambda: source_status(b)["pendingEvents"] == 0, 5, "the SNF to drain")
            assert source_status(b)["eventsAccepted"] == 5
        finally:
            b.stop()


def test_released_event_is_sent_again(tmp_path: Path) -> None:
    """Released is not a loss (an Artemis target never releases, but a proxy in between may)."""
    with ScriptedServer(LinkReply.mirror_target(TARGET_ID, outcome="hold")) as peer:
        b = mirror_broker(
            tmp_path / "b", peer, addresses=anycast("orders"), mirror_attrs='queue-creation="false"'
        )
        try:
            peer.wait_for_attach()
            send(b.url, "orders", ["r1"])
            [t] = peer.wait_for_transfers(1)
            peer.settle(t, "released")
            [_, again] = peer.wait_for_transfers(2)
            assert (
                again.amqp_value == "r1"
                and again.delivery_annotations[MR_ID] == t.delivery_annotations[MR_ID]
            )
            peer.settle(again)
            wait_until(lambda: source_status(b)["pendingEvents"] == 0, 5, "the SNF to drain")
        finally:
            b.stop()


# ------------------------------------------------------------------ filter and toggles (own brokers)


def test_address_filter_prefixes_with_exclusion_winning(tmp_path: Path) -> None:
    """§5: `eu,!eu.uk`: prefix match without delimiters (`europe` matches `eu`), exclusion wins."""
    with ScriptedServer(LinkReply.mirror_target(TARGET_ID)) as peer:
        b = mirror_broker(tmp_path / "b", peer, 'address-filter="eu,!eu.uk"', addresses="")
        try:
            peer.wait_for_attach()
            for address in ("eu.orders", "eu.uk.orders", "europe", "asia", "eu.last"):
                send_to_queue(b.url, address, [f"to-{address}"])
            ts = new_transfers(
                peer, 0, lambda ts: [t for t in messages(ts) if t.amqp_value == "to-eu.last"], "eu.last"
            )
            seen = {t.message_annotations.get(ADR) for t in ts if event_type(t)}
            seen |= {t.delivery_annotations.get(MR_DST) for t in messages(ts)}
            assert seen == {"eu.orders", "europe", "eu.last"}, seen
            assert [t.amqp_value for t in messages(ts)] == ["to-eu.orders", "to-europe", "to-eu.last"]
            start = len(peer.transfers)
            receive(b.url, "eu.uk.orders", 1)
            receive(b.url, "eu.orders", 1)
            ts = new_transfers(peer, start, one_event("postAck"), "the eu.orders postAck")
            assert [t.message_annotations[QU] for t in events(ts, "postAck")] == ["eu.orders"]
        finally:
            b.stop()


def test_message_acknowledgements_false_sends_no_postack(tmp_path: Path) -> None:
    with ScriptedServer(LinkReply.mirror_target(TARGET_ID)) as peer:
        b = mirror_broker(
            tmp_path / "b", peer, 'message-acknowledgements="false"', addresses=anycast("orders")
        )
        try:
            peer.wait_for_attach()
            send(b.url, "orders", ["a"])
            peer.records.wait(lambda: messages(peer.transfers), 10, "the message")
            start = len(peer.transfers)
            assert len(receive(b.url, "orders", 1)) == 1
            send(b.url, "orders", ["barrier"])
            ts = new_transfers(peer, start, messages, "the barrier")
            assert [event_type(t) for t in ts] == [None], "an ack was mirrored"
        finally:
            b.stop()


def test_tunnelling_is_never_used_even_if_offered(tmp_path: Path) -> None:
    """A target offering core tunnelling still gets plain AMQP (format 0): we never desired it."""
    reply = LinkReply.mirror_target(
        TARGET_ID, offered_capabilities=["amq.mirror", "AMQ_CORE_MESSAGE_TUNNELING"]
    )
    with ScriptedServer(reply) as peer:
        b = mirror_broker(tmp_path / "b", peer, 'queue-creation="false"', addresses=anycast("orders"))
        try:
            peer.wait_for_attach()
            send(b.url, "orders", ["plain"])
            [t] = peer.wait_for_transfers(1)
            assert t.message_format == 0 and t.amqp_value == "plain"
        finally:
            b.stop()


def test_user_and_password_go_as_sasl_plain(tmp_path: Path) -> None:
    with ScriptedServer(LinkReply.mirror_target(TARGET_ID)) as peer:
        extra = connection_xml(peer.port, "<mirror/>", attrs='user="mirror-user" password="s3cret"')
        b = broker(tmp_path / "b", extra=extra)
        try:
            peer.wait_for_attach()
            assert peer.records.sasl[0] == {"mechanism": "PLAIN", "user": "mirror-user", "password": "s3cret"}
            assert "s3cret" not in b.log()
        finally:
            b.stop()
