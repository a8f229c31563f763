"""The AMQP engine on its own: two engines joined in memory, no sockets."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from broker_core.amqp import errors
from broker_core.amqp.codec import Array, Symbol, UInt, ULong, decode, decode_value, encode
from broker_core.amqp.connection import Connection, Link, Session
from broker_core.amqp.framing import transfer_frames
from broker_core.amqp.performatives import Accepted, Attach, Source, Target, Transfer


class Recorder:
    """A handler that accepts everything and remembers what happened."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[int, bytes]] = []
        self.attaches: list[Attach] = []
        self.dispositions: list[tuple[bool, int, int, Any]] = []
        self.sessions: list[Session] = []
        self.links: list[Link] = []
        self.closed = False
        self.conn: Connection  # set once the connection it hears is made

    def on_sasl_init(self, conn: Connection, mechanism: str, response: bytes | None) -> None:
        conn.sasl_outcome(mechanism == "ANONYMOUS", None)

    def on_sasl_mechanisms(self, conn: Connection, offered: list[str]) -> None:
        conn.sasl_init("ANONYMOUS", b"")

    def on_sasl_response(self, conn: Connection, response: bytes) -> None: ...
    def on_sasl_challenge(self, conn: Connection, challenge: bytes) -> None: ...
    def on_sasl_outcome(self, conn: Connection, code: int) -> None: ...

    def on_open(self, conn: Connection, open_: Any) -> None:
        conn.accept_open()

    def on_begin(self, session: Session, begin: Any) -> None:
        if session.remote_channel is not None and not self.sessions:
            self.sessions.append(session)
            if self.conn.server:
                self.conn.begin(session)

    def on_attach(self, link: Link, attach: Attach) -> None:
        self.attaches.append(attach)
        self.links.append(link)
        if link.attach is None:
            self.conn.attach(
                link.session,
                Attach(
                    name=link.name,
                    source=attach.source,
                    target=attach.target,
                    offered_capabilities=[Symbol("amq.mirror")],
                ),
                link,
            )
            if not link.is_sender:
                self.conn.flow(link, credit=10)

    def on_flow(self, link: Link) -> None: ...
    def on_session_flow(self, session: Session) -> None: ...

    def on_delivery(
        self, link: Link, delivery_id: int, tag: bytes, settled: bool, payload: bytes, fmt: int
    ) -> None:
        self.deliveries.append((delivery_id, payload))

    def on_disposition(
        self, session: Session, role: bool, first: int, last: int, settled: bool, state: Any
    ) -> None:
        self.dispositions.append((role, first, last, state))

    def on_detach(self, link: Link, detach: Any) -> None: ...
    def on_end(self, session: Session, end: Any) -> None: ...

    def on_close(self, conn: Connection, close: Any) -> None:
        self.closed = True


def pump(a: Connection, b: Connection) -> None:
    for _ in range(100):
        out_a, out_b = a.take_output(), b.take_output()
        if not out_a and not out_b:
            return
        if out_a:
            b.receive(out_a)
        if out_b:
            a.receive(out_b)


def pair(max_frame: int = 131072) -> tuple[Connection, Recorder, Connection, Recorder]:
    sh, ch = Recorder(), Recorder()
    server = Connection(sh, server=True, container_id="server", max_frame_size=max_frame)
    client = Connection(ch, server=False, container_id="client", max_frame_size=max_frame)
    sh.conn, ch.conn = server, client
    client.start_client(sasl=True)
    pump(client, server)
    return client, ch, server, sh


def test_codec_round_trips_typed_values() -> None:
    values = [
        None,
        True,
        False,
        0,
        -1,
        2**40,
        "héllo",
        b"\x00\x01",
        Symbol("amq.mirror"),
        [1, "a"],
        {Symbol("k"): "v"},
        1.5,
    ]
    for v in values:
        assert decode(encode(v)) == v
    assert type(decode(encode(Symbol("x")))) is Symbol
    assert encode(ULong(5))[0] == 0x53 and encode(UInt(300))[0] == 0x70 and encode(7)[0] == 0x55
    arr = decode(encode(Array(0xA3, [Symbol("a"), Symbol("b")])))
    assert list(arr) == ["a", "b"] and arr.code == 0xA3


def test_link_capabilities_cross_the_wire_both_ways() -> None:
    client, ch, server, sh = pair()
    assert client.opened and server.opened
    session = client.begin()
    pump(client, server)
    client.attach(
        session,
        Attach(
            name="m",
            role=False,
            source=Source(address="s"),
            target=Target(address="t"),
            desired_capabilities=[Symbol("amq.mirror")],
            properties={Symbol("x-opt-amq-bkr-id"): "abc"},
        ),
    )
    pump(client, server)
    seen = sh.attaches[0]
    assert seen.desired_capabilities == "amq.mirror"
    assert seen.properties == {"x-opt-amq-bkr-id": "abc"}
    assert ch.attaches[0].offered_capabilities == "amq.mirror"


def test_large_message_spans_many_frames_and_arrives_whole() -> None:
    client, ch, server, sh = pair(max_frame=512)
    session = client.begin()
    pump(client, server)
    link = client.attach(session, Attach(name="big", role=False, target=Target(address="q")))
    pump(client, server)
    payload = bytes(range(256)) * 40
    assert len(transfer_frames(0, 0, 0, b"t", False, payload, 512)) > 10
    client.send_delivery(link, b"t", payload, False)
    pump(client, server)
    assert sh.deliveries == [(0, payload)]
    server.settle_incoming(sh.links[0].session, 0, 0, Accepted().encode_amqp())
    pump(client, server)
    assert ch.dispositions and isinstance(ch.dispositions[0][3], Accepted)


@pytest.mark.parametrize(
    ("handle", "delivery_id", "tag", "settled"),
    [(0, 0, b"", False), (7, 255, b"\x00\x00\x00\x01", True), (300, 2**32 - 1, b"t" * 32, False)],
)
def test_single_frame_transfer_decodes_with_the_general_decoder(
    handle: int, delivery_id: int, tag: bytes, settled: bool
) -> None:
    payload = b"\x00\x53\x77\xa1\x01x"
    [frame] = transfer_frames(3, handle, delivery_id, tag, settled, payload, 512)
    assert int.from_bytes(frame[:4], "big") == len(frame) and frame[4:8] == b"\x02\x00\x00\x03"
    performative, end = decode_value(frame, 8)
    assert isinstance(performative, Transfer)
    got = (performative.handle, performative.delivery_id, performative.delivery_tag)
    assert got == (handle, delivery_id, tag)
    assert (performative.message_format, performative.settled, performative.more) == (0, settled, None)
    assert frame[end:] == payload


def test_transfer_without_credit_closes_the_connection_with_a_condition() -> None:
    client, ch, server, _sh = pair()
    session = client.begin()
    pump(client, server)
    link = client.attach(session, Attach(name="l", role=False, target=Target(address="q")))
    pump(client, server)
    for _ in range(11):  # the recorder granted 10
        link.credit = 1
        client.send_delivery(link, b"t", b"\x00\x53\x77\xa1\x01x", False)
    pump(client, server)
    assert server.closed and server.error is not None
    assert server.error.condition == errors.TRANSFER_LIMIT_EXCEEDED
    assert ch.closed


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x10\x02\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff",
        b"\x00\x00\x00\x04\x02\x00\x00\x00",
        # a transfer whose last field (a smalluint) is cut off by the end of the frame
        b"\x00\x00\x00\x10\x02\x00\x00\x00\x00\x53\x14\xc0\x03\x02\x43\x52",
    ],
)
def test_malformed_frames_close_with_an_amqp_error(garbage: bytes) -> None:
    _client, _ch, server, _sh = pair()
    server.receive(garbage)
    assert server.closed
    assert server.error is not None
    assert server.error.condition in (errors.DECODE_ERROR, errors.FRAMING_ERROR)


def test_fast_transfer_decoder_agrees_with_the_generic_one() -> None:
    from broker_core.amqp.codec import decode_value
    from broker_core.amqp.framing import fast_transfer_fields
    from broker_core.amqp.performatives import Transfer

    cases = [
        Transfer(handle=0, delivery_id=0, delivery_tag=b"", message_format=0, settled=False),
        Transfer(
            handle=3, delivery_id=70000, delivery_tag=b"tag-1", message_format=0, settled=True, more=True
        ),
        Transfer(handle=300, delivery_id=5),
        Transfer(handle=1, delivery_id=2, delivery_tag=b"t", message_format=0, settled=False, aborted=True),
    ]
    for t in cases:
        body = t.encode_amqp() + b"payload"
        fast = fast_transfer_fields(body)
        assert fast is not None
        assert fast == decode_value(body, 3)
    # an unusual encoding (uint delivery-id as ulong) is left to the generic decoder
    odd = b"\x00\x53\x14\xc0\x04\x02\x43\x44"
    assert fast_transfer_fields(odd) is None
    # rhea writes performatives as list32: its transfers as captured from rhea 3.x, then a message
    for head in RHEA_TRANSFERS:
        body = bytes.fromhex(head) + b"\x00\x53\x70\x45"
        fields, end = decode_value(body, 3)
        assert fast_transfer_fields(body) == (fields, end)
        assert fast_transfer_fields(body, 0, end - 1) is None  # a list that runs past the frame
    # our own sender's single-frame layout, read in one go, also inside a larger buffer
    for handle, delivery_id, tag, settled in itertools.product(
        (0, 7, 300), (0, 255, 2**32 - 1), (b"", b"tag-1"), (True, False)
    ):
        body = transfer_frames(0, handle, delivery_id, tag, settled, b"payload", 65536)[0][8:]
        fields, end = decode_value(body, 3)
        assert fast_transfer_fields(body) == (fields, end)
        assert fast_transfer_fields(bytearray(b"xx" + body), 2, 2 + len(body)) == (fields, end + 2)


RHEA_TRANSFERS = [  # handle uint0, delivery-id uint0 / smalluint, binary8 tag, format uint0, settled, more
    "005314d00000000c000000064343a00130434242",
    "005314d00000000d00000006435201a00131434242",
]
RHEA_DISPOSITIONS = [  # receiver, first and last as uint0 / smalluint / uint, settled, accepted
    "005315d00000000c000000054143434100532445",
    "005315d00000000e0000000541520152024100532445",
    "005315d000000014000000054170000001307000000169" + "4100532445",
]


def _disposition(*fields: str) -> bytes:
    body = bytes.fromhex("".join(fields))
    return b"\x00\x53\x15\xc0" + bytes((len(body) + 1, len(fields))) + body


ACCEPTED_HEX, REJECTED_HEX = "00532445", "00532545"
USUAL_DISPOSITIONS = [
    _disposition("41", "5205", "5209", "41", ACCEPTED_HEX),  # receiver accepts 5..9 (smalluint)
    _disposition("41", "43", "40", "41", ACCEPTED_HEX),  # delivery 0 (uint0), no last
    _disposition("42", "7000011170", "40", "41", ACCEPTED_HEX),  # sender role, uint
    _disposition("41", "5201", "40", "42", "40", "41"),  # no state, batchable
    _disposition("41", "5203"),  # only role and first
    *(bytes.fromhex(h) for h in RHEA_DISPOSITIONS),
]


@pytest.mark.parametrize("body", USUAL_DISPOSITIONS, ids=lambda b: b.hex())
def test_disposition_fast_path_reads_what_the_generic_decoder_reads(body: bytes) -> None:
    from broker_core.amqp.framing import fast_disposition_fields

    fast = fast_disposition_fields(body)
    assert fast is not None, "the usual encodings take the fast path"
    assert fast == decode(body[3:])


def test_disposition_fast_path_declines_what_it_does_not_know() -> None:
    from broker_core.amqp.framing import fast_disposition_fields

    assert fast_disposition_fields(_disposition("41", "5201", "40", "41", REJECTED_HEX)) is None
    assert fast_disposition_fields(_disposition("41", "a10178")) is None  # first as a string: generic judges
    assert fast_disposition_fields(b"\x00\x53\x15\x45") is None  # list0
    short = _disposition("41", "5205")[:-1]
    assert fast_disposition_fields(short) is None
    assert fast_disposition_fields(bytes.fromhex(RHEA_DISPOSITIONS[0])[:-1]) is None  # list32, cut


def frame_sizes(data: bytes) -> list[int]:
    """The size of each frame in a stretch of output (after the protocol headers)."""
    sizes, pos = [], 0
    while pos < len(data):
        if data[pos : pos + 4] == b"AMQP":
            pos += 8
            continue
        size = int.from_bytes(data[pos : pos + 4], "big")
        sizes.append(size)
        pos += size
    return sizes


def small_peer() -> tuple[Connection, Recorder, Connection, Recorder]:
    """A client that declares the smallest max-frame-size AMQP allows, and a server that does not."""
    sh, ch = Recorder(), Recorder()
    server = Connection(sh, server=True, container_id="server")
    client = Connection(ch, server=False, container_id="client", max_frame_size=512)
    sh.conn, ch.conn = server, client
    client.start_client(sasl=True)
    pump(client, server)
    return client, ch, server, sh


def test_an_attach_that_does_not_fit_the_peers_max_frame_size_is_never_sent() -> None:
    client, _ch, server, sh = small_peer()
    session = client.begin()
    pump(client, server)
    [server_session] = sh.sessions
    too_long = Attach(name="ours", role=False, target=Target(address="t" * 600))
    with pytest.raises(errors.FrameTooLarge, match="exceeds the peer's max-frame-size 512"):
        server.attach(server_session, too_long)
    assert not server.has_output() and not server_session.local_links  # nothing sent, nothing kept
    # the peer's attach whose echo would not fit: the recorder's answer raises, the connection closes
    client.attach(session, Attach(name="l", role=False, target=Target(address="q" * 600)))
    client_out = client.take_output()
    server.receive(client_out)
    out = server.take_output()
    assert server.closed and server.error is not None
    assert server.error.condition == errors.FRAME_SIZE_TOO_SMALL
    assert frame_sizes(out) and max(frame_sizes(out)) <= 512


def test_error_descriptions_are_cut_short_to_fit_the_peers_max_frame_size() -> None:
    client, ch, server, sh = small_peer()
    session = client.begin()
    pump(client, server)
    client.attach(session, Attach(name="l", role=False, target=Target(address="q")))
    pump(client, server)
    [link] = sh.links
    server.detach(link, condition=errors.NOT_FOUND, description="é" * 2000)  # two bytes a character
    out = server.take_output()
    assert max(frame_sizes(out)) <= 512
    client.receive(out)
    server.close(errors.INTERNAL_ERROR, "why " * 1000)
    out = server.take_output()
    assert max(frame_sizes(out)) <= 512
    client.receive(out)
    assert ch.closed and client.remote_close is not None and client.remote_close.error is not None
    description = str(client.remote_close.error.description)
    assert description.startswith("why why") and description.endswith("...")
