"""Hostile and broken clients, spoken to byte by byte: each costs its own connection only.

Every test ends by checking that a well-behaved proton client is still served.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from proton import Message

from broker_core.amqp import errors
from broker_core.amqp.framing import AMQP_HEADER, FRAME_AMQP
from broker_core.amqp.performatives import (
    Accepted,
    Attach,
    Begin,
    Disposition,
    Open,
    Rejected,
    Source,
    Target,
    Transfer,
)
from broker_core.endpoint import DEFAULT_MAX_MESSAGE_SIZE
from tests.peers.ports import LOOPBACK
from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive, send
from tests.support.raw_amqp import RawPeer, condition_of

MALFORMED = {
    "not-described": b"\xff\xfe\xfd",
    "empty": b"",
    "truncated-header": b"\x00\x53\x70\xc0\x03\x01\x41",
    "value-missing": b"\x00\x53\x77",
    "data-runs-past-the-end": b"\x00\x53\x75\xb0\x00\x00\x10\x00ab",
}
QUEUES = ("big", "partial", "aborted", "violations", *(f"malformed.{name}" for name in MALFORMED))
ADDRESSES = "".join(f'<address name="{q}"><anycast><queue name="{q}"/></anycast></address>' for q in QUEUES)
FRAME_SIZE = 1024 * 1024  # fewer, larger frames keep the 100 MiB test quick


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("bad-input"),
        xml_kwargs={"addresses": ADDRESSES, "acceptor_params": f"maxFrameSize={FRAME_SIZE}"},
    )
    b.start()
    yield b
    assert b.stop() == 0
    assert "internal error" not in b.log()


def _assert_serving(broker: BrokerProcess, address: str = "violations") -> None:
    body = f"still served after a bad client on {address}"
    assert send(broker.url, address, [body]) == 1
    assert [m.body for m in receive(broker.url, address, 1)] == [body]


def _data_section_header(size: int) -> bytes:
    """The start of a message whose single data section holds `size` bytes."""
    return b"\x00\x53\x75\xb0" + struct.pack(">I", size)


def _transfer(first: bool, more: bool, tag: bytes = b"t", delivery_id: int = 0) -> bytes:
    if first:
        return Transfer(
            handle=0, delivery_id=delivery_id, delivery_tag=tag, message_format=0, more=more
        ).encode_amqp()
    return Transfer(handle=0, more=more).encode_amqp()


def _sender_peer(broker: BrokerProcess, address: str) -> tuple[RawPeer, Attach, Open]:
    peer = RawPeer(LOOPBACK, broker.port)
    opened = peer.open()
    peer.begin()
    return peer, peer.attach_sender(f"raw-{address}", address), opened


# ----------------------------------------------------------------------------------- message size


def test_oversized_delivery_closes_its_connection_only(broker: BrokerProcess) -> None:
    with connect(broker.url) as bystander:
        bystander_sender = bystander.create_sender("big")
        peer, attach, opened = _sender_peer(broker, "big")
        with peer:
            assert attach.max_message_size == DEFAULT_MAX_MESSAGE_SIZE
            frame_size = min(FRAME_SIZE, int(opened.max_frame_size or FRAME_SIZE))
            total = DEFAULT_MAX_MESSAGE_SIZE + 1  # one byte over; the last frame crosses the limit
            chunk = frame_size - 64
            sent = 0
            first = True
            while sent < total:
                n = min(chunk, total - sent)
                head = _data_section_header(total - 8) if first else b""
                body = _transfer(first, more=True) + head + b"x" * (n - len(head))
                peer.send_frame(0, body, FRAME_AMQP)
                sent += n
                first = False
            close = peer.wait_closed(timeout=30)
            assert condition_of(close) == errors.MESSAGE_SIZE_EXCEEDED
        bystander_sender.send(Message(body="small and fine", durable=True))
    assert [m.body for m in receive(broker.url, "big", 2, timeout=1)] == ["small and fine"]


# -------------------------------------------------------------------------------- partial messages


def test_client_vanishing_mid_delivery_delivers_nothing(broker: BrokerProcess) -> None:
    peer, _, _ = _sender_peer(broker, "partial")
    with peer:
        peer.send_frame(0, _transfer(True, more=True) + _data_section_header(3 * 1000) + b"a" * 1000)
        peer.send_frame(0, _transfer(False, more=True) + b"b" * 1000)
    _assert_serving(broker, "partial")  # the served message is the only one on the queue
    assert receive(broker.url, "partial", 1, timeout=0.5) == []


def test_aborted_delivery_is_dropped_and_the_link_goes_on(broker: BrokerProcess) -> None:
    peer, _, _ = _sender_peer(broker, "aborted")
    with peer:
        peer.send_frame(0, _transfer(True, more=True) + _data_section_header(2000) + b"a" * 1000)
        peer.send_frame(0, Transfer(handle=0, more=False, aborted=True).encode_amqp())
        whole = b"\x00\x53\x77\xa1\x05whole"  # amqp-value "whole"
        peer.send_frame(0, _transfer(True, more=False, tag=b"u", delivery_id=1) + whole)
        got = receive(broker.url, "aborted", 1)
    assert [m.body for m in got] == ["whole"]
    assert receive(broker.url, "aborted", 1, timeout=0.5) == []


@pytest.mark.parametrize(
    "name",
    [
        "not-described",
        "empty",
        "truncated-header",
        pytest.param("value-missing"),
        pytest.param("data-runs-past-the-end"),
    ],
)
def test_malformed_message_is_rejected_and_never_delivered(broker: BrokerProcess, name: str) -> None:
    address = f"malformed.{name}"
    peer, _, _ = _sender_peer(broker, address)
    with peer:
        peer.send_frame(0, _transfer(True, more=False) + MALFORMED[name])
        disposition = peer.wait_for(Disposition)
        good = b"\x00\x53\x77\xa1\x04good"  # the same link goes on working
        peer.send_frame(0, _transfer(True, more=False, tag=b"g", delivery_id=1) + good)
        accepted = peer.wait_for(Disposition)
    assert isinstance(disposition.state, Rejected), disposition
    assert disposition.state.error is not None
    assert str(disposition.state.error.condition) == errors.DECODE_ERROR
    assert isinstance(accepted.state, Accepted) and accepted.first == 1
    assert [m.body for m in receive(broker.url, address, 2, timeout=0.5)] == ["good"]


# ----------------------------------------------------------------------------- protocol violations


def _violation_close(broker: BrokerProcess, *steps: bytes, session: bool = True) -> str | None:
    """Open (and begin), send `steps` verbatim, and return the condition of the broker's Close."""
    with RawPeer(LOOPBACK, broker.port) as peer:
        peer.open()
        if session:
            peer.begin()
        for data in steps:
            peer.send(data)
        return condition_of(peer.wait_closed())


def _frame(body: bytes, channel: int = 0) -> bytes:
    return struct.pack(">IBBH", len(body) + 8, 2, FRAME_AMQP, channel) + body


def test_begin_before_open_is_refused(broker: BrokerProcess) -> None:
    with RawPeer(LOOPBACK, broker.port) as peer:
        peer.send(AMQP_HEADER)
        peer.send(_frame(Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10).encode_amqp()))
        condition = condition_of(peer.wait_closed())
    assert condition in (errors.ILLEGAL_STATE, errors.FRAMING_ERROR)
    _assert_serving(broker)


def test_transfer_on_an_unattached_handle(broker: BrokerProcess) -> None:
    transfer = Transfer(handle=7, delivery_id=0, delivery_tag=b"t", message_format=0).encode_amqp()
    assert _violation_close(broker, _frame(transfer + b"\x00\x53\x77\x40")) == errors.UNATTACHED_HANDLE
    _assert_serving(broker)


def test_transfer_on_a_channel_without_a_session(broker: BrokerProcess) -> None:
    transfer = Transfer(handle=0, delivery_id=0, delivery_tag=b"t", message_format=0).encode_amqp()
    condition = _violation_close(broker, _frame(transfer + b"\x00\x53\x77\x40", channel=3), session=False)
    assert condition in (errors.ILLEGAL_STATE, errors.FRAMING_ERROR)
    _assert_serving(broker)


def test_second_open(broker: BrokerProcess) -> None:
    again = _frame(Open(container_id="again").encode_amqp())
    assert _violation_close(broker, again, session=False) == errors.ILLEGAL_STATE
    _assert_serving(broker)


def test_attach_on_a_handle_already_in_use(broker: BrokerProcess) -> None:
    def attach(name: str) -> bytes:
        link = Attach(
            name=name, handle=0, role=False, source=Source(address=name), target=Target("violations")
        )
        return _frame(link.encode_amqp())

    assert _violation_close(broker, attach("one"), attach("two")) == errors.HANDLE_IN_USE
    _assert_serving(broker)


def test_frame_larger_than_the_negotiated_maximum(broker: BrokerProcess) -> None:
    huge_header = struct.pack(">IBBH", FRAME_SIZE * 16, 2, FRAME_AMQP, 0)
    assert _violation_close(broker, huge_header + b"\x00" * 64) == errors.FRAMING_ERROR
    _assert_serving(broker)


def test_malformed_frame_body_is_a_decode_error(broker: BrokerProcess) -> None:
    assert _violation_close(broker, _frame(b"\x00\x53\x12\xd0\xff\xff\xff\xff")) == errors.DECODE_ERROR
    _assert_serving(broker)


def test_unknown_protocol_header_is_answered_and_hung_up(broker: BrokerProcess) -> None:
    with RawPeer(LOOPBACK, broker.port) as peer:
        peer.send(b"XMPP\x00\x01\x00\x00 and more")
        assert peer.wait_closed() is None
        assert peer.headers and peer.headers[0].startswith(b"AMQP")
    _assert_serving(broker)


def test_a_plain_http_request_is_told_this_port_speaks_amqp(broker: BrokerProcess) -> None:
    """A request that is HTTP but no upgrade (a browser pointed at the AMQP port): an HTTP answer, then
    hung up; the acceptor serves on."""
    with socket.create_connection((LOOPBACK, broker.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 426 "), answer[:80]
    _assert_serving(broker)
