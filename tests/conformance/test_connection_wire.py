"""Connection and link flow control of our broker on the wire: heartbeats, idle timeout, credit drain.

The peer here is driven step by step from the test thread (no reader thread, so it sends nothing the test
does not send, not even heartbeats), over a real socket to a broker process; frames are encoded and
decoded with proton's codec (tests/support/peer/), never ours. Rules: AMQP 1.0 §2.4.5 (idle
timeout), §2.6.7 and §2.7.4 (flow control, drain).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Timeout, symbol, ubyte, uint, ushort
from proton.utils import BlockingConnection

from connections.cli import request
from tests.conformance.wire_helpers import AMQP_VALUE, anycast, broker
from tests.peers.ports import LOOPBACK, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.peer import Frame, PeerConnection, Records, ScriptedClient, parse_frame, performative
from tests.support.peer.codec import AMQP_HEADER, FRAME_SASL, MAX_WINDOW, SASL_HEADER
from tests.support.peer.frames import decode_sections

QUEUES = ("drain.full", "drain.empty")


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Stock acceptor settings: amqpIdleTimeout 60 s, so a quiet test peer is never timed out here."""
    started = broker(tmp_path_factory.mktemp("wire"), addresses="".join(anycast(q) for q in QUEUES))
    yield started
    started.stop()


class StepPeer:
    """One AMQP connection whose every frame is sent and read explicitly by the test."""

    def __init__(self, port: int) -> None:
        self.conn = PeerConnection(socket.create_connection((LOOPBACK, port), timeout=10), Records())
        self.remote_open: Frame | None = None

    def __enter__(self) -> StepPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.drop()

    def send(self, channel: int, perf: Any) -> None:
        self.conn.send_frame(channel, perf)

    def read(self, timeout: float) -> Frame | None:
        """The next frame, or None for an empty (heartbeat) frame; TimeoutError if none came in time."""
        _, channel, body = self.conn.read_frame(timeout)
        return parse_frame(channel, body) if body else None

    def next_performative(self, timeout: float = 5.0) -> Frame:
        """The next frame that is not a heartbeat."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.read(max(0.0, deadline - time.monotonic()))
            if frame is not None:
                return frame

    def open(self, idle_time_out: int | None = None) -> Frame:
        """SASL ANONYMOUS, the AMQP header and Open; returns the broker's Open."""
        conn = self.conn
        conn.send_bytes(SASL_HEADER)
        assert conn.read_exact(8, 10) == SASL_HEADER
        conn.read_frame(10)  # sasl-mechanisms
        conn.send_frame(0, performative(0x41, symbol("ANONYMOUS"), b""), frame_type=FRAME_SASL)
        _, channel, body = conn.read_frame(10)
        assert int(parse_frame(channel, body)["code"]) == 0, "SASL ANONYMOUS refused"
        conn.send_bytes(AMQP_HEADER)
        assert conn.read_exact(8, 10) == AMQP_HEADER
        idle = None if idle_time_out is None else uint(idle_time_out)
        self.send(0, performative(0x10, "step-peer", None, uint(65536), ushort(255), idle))
        self.remote_open = self.next_performative()
        assert self.remote_open.name == "open", self.remote_open
        return self.remote_open

    def begin(self) -> Frame:
        self.send(0, performative(0x11, None, uint(0), uint(MAX_WINDOW), uint(MAX_WINDOW)))
        frame = self.next_performative()
        assert frame.name == "begin", frame
        return frame

    def attach_receiver(self, address: str, handle: int = 0) -> Frame:
        """Attach a link on which the broker sends us `address`'s messages, with no credit yet."""
        source, target = performative(0x28, address), performative(0x29, None)
        self.send(
            0, performative(0x12, f"rcv-{address}", uint(handle), True, ubyte(0), ubyte(0), source, target)
        )
        frame = self.next_performative()
        assert frame.name == "attach" and frame["source"] is not None, frame
        return frame

    def flow(
        self, handle: int, delivery_count: int, credit: int, *, drain: bool, next_incoming_id: int
    ) -> None:
        self.send(
            0,
            performative(
                0x13, uint(next_incoming_id), uint(MAX_WINDOW), uint(0), uint(MAX_WINDOW), uint(handle),
                uint(delivery_count), uint(credit), None, drain,
            ),
        )  # fmt: skip

    def until_flow(self, timeout: float = 5.0) -> tuple[list[Frame], Frame]:
        """Transfers received up to the broker's next link flow, and that flow."""
        transfers = []
        while True:
            frame = self.next_performative(timeout)
            if frame.name == "flow" and frame["handle"] is not None:
                return transfers, frame
            assert frame.name == "transfer", f"unexpected {frame.name}: {frame.fields}"
            transfers.append(frame)

    def expect_silence(self, seconds: float) -> None:
        """Nothing but heartbeats for `seconds` (a bounded wait for something that must not happen)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                frame = self.read(left)
            except TimeoutError:
                return
            assert frame is None, f"unexpected {frame.name}: {frame.fields}"


def statistics(b: BrokerProcess, queue: str) -> dict[str, Any]:
    return dict(request(b.url, "getStatistics", [], resource=f"queue.{queue}"))


def flow_state(flow: Frame) -> tuple[int, int, bool]:
    """(delivery-count, link-credit, drain) of a link flow."""
    return int(flow["delivery_count"]), int(flow["link_credit"]), bool(flow["drain"])


def body_of(transfer: Frame) -> Any:
    [value] = [s.value for s in decode_sections(transfer.payload) if s.code == AMQP_VALUE]
    return value


# ------------------------------------------------------------------------------------ heartbeats


def heartbeat_gaps(port: int, idle_time_out: int, count: int) -> list[float]:
    """Seconds between the broker's Open and each of its next `count` empty frames, one after the other."""
    with StepPeer(port) as peer:
        peer.open(idle_time_out)
        last = time.monotonic()
        gaps = []
        while len(gaps) < count:
            frame = peer.read(timeout=idle_time_out / 1000 * 2)  # a missing heartbeat fails, not hangs
            assert frame is None, f"unexpected {frame.name} on an idle connection"
            now = time.monotonic()
            gaps.append(now - last)
            last = now
    return gaps


def about_half(gaps: list[float], idle_time_out: int) -> bool:
    """Every gap between 0.4 T and 0.75 T: about T/2 (the spec's advice), safely inside T, and no flood."""
    half = idle_time_out / 2000
    return all(0.8 * half <= gap <= 1.5 * half for gap in gaps)


def test_broker_sends_empty_frames_at_about_half_the_clients_idle_timeout(b: BrokerProcess) -> None:
    """§2.4.5: a peer that says idle-time-out T must get a frame within T; the broker sends one every T/2."""
    gaps = heartbeat_gaps(b.port, 1000, 3)
    assert about_half(gaps, 1000), f"gaps {[round(g, 3) for g in gaps]} s for idle-time-out 1000 ms"


def test_a_proton_client_with_a_short_heartbeat_stays_connected(b: BrokerProcess) -> None:
    """The same rule as a client sees it: proton with heartbeat=0.6 s expects a frame every 0.6 s and drops
    the connection by itself when one is late (the broker's 1 s timer used to make it late)."""
    conn = BlockingConnection(b.url, heartbeat=0.6, allowed_mechs="ANONYMOUS", timeout=10)
    try:
        with pytest.raises(Timeout):  # 3 idle seconds: only a dropped connection ends the wait sooner
            conn.wait(lambda: False, timeout=3, msg="three idle seconds")
    finally:
        conn.close()


def test_heartbeats_follow_half_the_idle_timeout_on_a_fine_grained_timer(tmp_path: Path) -> None:
    """The same rule where the broker's timer runs every 100 ms anyway (it follows
    message-expiry-scan-period): the heartbeat keeps to T/2 whatever else sets the timer."""
    fine = broker(tmp_path / "fine", extra="<message-expiry-scan-period>100</message-expiry-scan-period>")
    try:
        gaps = heartbeat_gaps(fine.port, 1000, 4)
    finally:
        fine.stop()
    assert about_half(gaps, 1000), f"gaps {[round(g, 3) for g in gaps]} s for idle-time-out 1000 ms"


def test_a_silent_peer_is_closed_with_resource_limit_exceeded_a_talking_one_is_not(tmp_path: Path) -> None:
    """The acceptor's amqpIdleTimeout: a peer that sends nothing for that long is closed with
    amqp:resource-limit-exceeded; a peer that sends heartbeats (ScriptedClient's reader sends one every
    half of the broker's advertised idle-time-out) stays connected on the same broker."""
    idle_ms = 1000
    quick = broker(
        tmp_path / "idle", addresses=anycast("drain.full"), acceptor_params=f"amqpIdleTimeout={idle_ms}"
    )
    try:
        with ScriptedClient(quick.port) as talking, StepPeer(quick.port) as silent:
            # the broker advertises its acceptor's amqpIdleTimeout; the scripted client heartbeats at half
            assert talking.open()["idle_time_out"] == idle_ms
            silent.open()
            opened = time.monotonic()  # the silent peer sends nothing from here on
            close = silent.next_performative(timeout=idle_ms / 1000 + 5)
            waited = time.monotonic() - opened
            assert close.name == "close", close
            condition, description = close["error"].value[:2]
            assert condition == "amqp:resource-limit-exceeded", (condition, description)
            # not before the timeout; after it within the broker's 1 s timer granularity (and some slack)
            assert idle_ms / 1000 * 0.9 <= waited <= idle_ms / 1000 + 2, f"closed after {waited:.2f} s"
            # the talking peer has been connected longer than the silent one and is still answered
            assert not talking.conn.closed
            talking.begin()
            assert talking.attach_sender("still-here", "drain.full").flow is not None
            assert not talking.conn.closed
    finally:
        quick.stop()


# --------------------------------------------------------------------------------------- drain


def test_drain_with_messages_available_delivers_them_then_uses_up_the_credit(b: BrokerProcess) -> None:
    send(b.url, "drain.full", ["d1", "d2"])
    with StepPeer(b.port) as peer:
        peer.open()
        begin = peer.begin()
        attach = peer.attach_receiver("drain.full")
        initial = int(attach["initial_delivery_count"])
        peer.flow(0, initial, 5, drain=True, next_incoming_id=int(begin["next_outgoing_id"]))
        transfers, flow = peer.until_flow()
        assert [body_of(t) for t in transfers] == ["d1", "d2"], "the available messages come first"
        # §2.6.7: having sent what it had, the sender advances delivery-count by the credit left (3)
        assert flow_state(flow) == (initial + 5, 0, True)
        send(b.url, "drain.full", ["after-drain"])
        peer.expect_silence(0.5)  # no credit left: the new message must stay on the queue
    wait_until(lambda: statistics(b, "drain.full")["delivering-count"] == 0, 5, "d1 and d2 to come back")
    got = [m.body for m in receive(b.url, "drain.full", 10, timeout=0.5)]
    assert got == ["d1", "d2", "after-drain"], "the unsettled transfers return to the queue, in order"


def test_drain_with_nothing_available_answers_with_the_credit_used_up(b: BrokerProcess) -> None:
    with StepPeer(b.port) as peer:
        peer.open()
        begin = peer.begin()
        attach = peer.attach_receiver("drain.empty")
        initial = int(attach["initial_delivery_count"])
        next_in = int(begin["next_outgoing_id"])
        peer.flow(0, initial, 7, drain=True, next_incoming_id=next_in)
        transfers, flow = peer.until_flow()
        assert transfers == []
        assert flow_state(flow) == (initial + 7, 0, True)
        send(b.url, "drain.empty", ["later"])
        peer.expect_silence(0.5)  # the drain used the credit up: nothing may be sent
        peer.flow(0, initial + 7, 1, drain=False, next_incoming_id=next_in)
        transfer = peer.next_performative()
        assert transfer.name == "transfer" and body_of(transfer) == "later", "new credit delivers again"
