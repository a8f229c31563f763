"""A raw-socket AMQP peer for tests that must send what no well-behaved client library would.

Frames are built with our engine's encoders and the broker's replies decoded with its codec; the
peer reads with deadlines, so a broker that goes silent fails the test instead of hanging it.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from broker_core.amqp.codec import Symbol, decode_value
from broker_core.amqp.framing import AMQP_HEADER, FRAME_AMQP, FRAME_SASL, SASL_HEADER, frame
from broker_core.amqp.performatives import (
    Attach,
    Begin,
    Close,
    Flow,
    Open,
    SaslInit,
    Source,
    Target,
    Transfer,
)
from broker_core.message import MessageView

_HEADER = struct.Struct(">IBBH")


@dataclass
class Frame:
    """One frame from the broker: its type, channel, decoded performative and any payload after it."""

    frame_type: int
    channel: int
    performative: Any
    payload: bytes


class RawPeer:
    """A TCP connection to the broker speaking bytes; `frames()` parses what the broker sends back."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.timeout = timeout
        self.buffer = b""
        self.headers: list[bytes] = []  # protocol headers the broker sent, in order
        self.eof = False
        self.last_payload = b""  # what followed the performative `wait_for` returned (a transfer's message)

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, channel: int, body: bytes, frame_type: int = FRAME_AMQP) -> None:
        self.send(frame(channel, body, frame_type))

    def _fill(self, deadline: float) -> bool:
        """Read more bytes; False on EOF or deadline."""
        if self.eof:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return False
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buffer += chunk
        return True

    def _next(self, deadline: float) -> Frame | None:
        """The next frame (protocol headers are recorded in `headers` and skipped); None on EOF/deadline."""
        while True:
            if self.buffer.startswith(b"AMQP") and len(self.buffer) >= 8:
                self.headers.append(self.buffer[:8])
                self.buffer = self.buffer[8:]
                continue
            if len(self.buffer) >= 8 and not self.buffer.startswith(b"AMQP"):
                size, doff, ftype, channel = _HEADER.unpack_from(self.buffer)
                if len(self.buffer) >= size:
                    body = self.buffer[doff * 4 : size]
                    self.buffer = self.buffer[size:]
                    if not body:
                        continue  # an empty (heartbeat) frame
                    perf, end = decode_value(body, 0)
                    return Frame(ftype, channel, perf, body[end:])
            if not self._fill(deadline):
                return None

    def wait_for(self, kind: type, timeout: float | None = None) -> Any:
        """Read frames until one whose performative is a `kind`; AssertionError naming what came instead."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        seen: list[str] = []
        while True:
            f = self._next(deadline)
            if f is None:
                end = "EOF" if self.eof else "timeout"
                raise AssertionError(f"no {kind.__name__} from the broker ({end}); saw {seen}")
            if isinstance(f.performative, kind):
                self.last_payload = f.payload
                return f.performative
            seen.append(type(f.performative).__name__)

    def wait_closed(self, timeout: float | None = None) -> Close | None:
        """Read until the socket closes; the Close frame seen on the way (None if there was none)."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        close: Close | None = None
        while True:
            f = self._next(deadline)
            if f is None:
                if not self.eof:
                    raise AssertionError("the broker did not close the socket before the deadline")
                return close
            if isinstance(f.performative, Close):
                close = f.performative

    # ------------------------------------------------------------------------- conversation steps

    def sasl_init(self, mechanism: str = "ANONYMOUS", response: bytes = b"") -> None:
        """Send the SASL header and a sasl-init; the broker answers with mechanisms, then an outcome."""
        self.send(SASL_HEADER)
        init = SaslInit(mechanism=Symbol(mechanism), initial_response=response)
        self.send_frame(0, init.encode_amqp(), FRAME_SASL)

    def open(self, container_id: str = "raw-peer", max_frame_size: int = 65536) -> Open:
        """SASL ANONYMOUS, AMQP header and open; returns the broker's Open."""
        self.sasl_init()
        self.send(AMQP_HEADER)
        self.send_frame(0, Open(container_id=container_id, max_frame_size=max_frame_size).encode_amqp())
        opened: Open = self.wait_for(Open)
        return opened

    def begin(self, channel: int = 0) -> Begin:
        begin = Begin(next_outgoing_id=0, incoming_window=10_000, outgoing_window=10_000)
        self.send_frame(channel, begin.encode_amqp())
        reply: Begin = self.wait_for(Begin)
        return reply

    def attach_sender(
        self, name: str, address: str, handle: int = 0, capabilities: list[str] | None = None
    ) -> Attach:
        """Attach a link on which we send to `address`; returns the broker's Attach (its flow follows)."""
        target = Target(address=address, capabilities=[Symbol(c) for c in capabilities or []] or None)
        attach = Attach(name=name, handle=handle, role=False, source=Source(address=name), target=target)
        self.send_frame(0, attach.encode_amqp())
        reply: Attach = self.wait_for(Attach)
        self.wait_for(Flow)
        return reply


def condition_of(close: Close | None) -> str | None:
    """The error condition a Close carried (None for a clean close or no Close at all)."""
    if close is None or close.error is None:
        return None
    return str(close.error.condition)


def taken_then_lost(port: int, queue: str, host: str = "127.0.0.1") -> int:
    """Receive one message of `queue` on a raw connection, then lose the socket without settling it or
    closing (a failed consumer: the broker counts the delivery); the delivery count it came with."""
    with RawPeer(host, port) as peer:
        peer.open()
        peer.begin()
        attach = Attach(name="r", handle=0, role=True, source=Source(address=queue), target=Target())
        peer.send_frame(0, attach.encode_amqp())
        peer.wait_for(Attach)
        flow = Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0, outgoing_window=100,
                    handle=0, delivery_count=0, link_credit=1)  # fmt: skip
        peer.send_frame(0, flow.encode_amqp())
        peer.wait_for(Transfer)
        payload = peer.last_payload
    return MessageView(payload).header.delivery_count
