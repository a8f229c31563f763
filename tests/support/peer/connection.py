"""One AMQP connection of the scripted peer: socket I/O, a reader thread, and per-performative answers.

Frames are cut by hand (8-byte header) and their bodies decoded with proton (codec.py). In the server
role (`script` given) the reader answers Open/Begin/Attach as scripted, grants credit, records every
transfer and settles it with the scripted outcome; in the client role it only records.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from proton import uint, ushort

from tests.support.peer.codec import (
    EMPTY_FRAME,
    FRAME_AMQP,
    MAX_WINDOW,
    OUTCOMES,
    encode_value,
    error_value,
    performative,
    symbol_array,
    symbol_keys,
)
from tests.support.peer.frames import Frame, LinkReply, TransferRecord, parse_frame


class PeerClosed(ConnectionError):
    """The other end closed the socket."""


class ServerScript(Protocol):
    """What a server-role connection asks of its server (a `ScriptedServer`), typed structurally so that
    this module need not import server.py, which imports this one."""

    container_id: str
    max_frame_size: int
    open_properties: dict[str, Any] | None

    def answer_for(self, attach: Frame) -> LinkReply:
        """How to answer this attach and treat the link's deliveries."""
        ...

    def answered(self, attach: Frame) -> None:
        """The answer to this attach has been sent."""
        ...


class Records:
    """Everything received, shared by the connections of one endpoint; waits are condition-based."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.frames: list[Frame] = []
        self.attaches: list[Frame] = []
        self.transfers: list[TransferRecord] = []
        self.dispositions: list[Frame] = []
        self.sasl: list[dict[str, Any]] = []

    def add(self, kind: str, item: Any) -> None:
        with self.cond:
            getattr(self, kind).append(item)
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        with self.cond:
            result = self.cond.wait_for(predicate, timeout)
        if not result:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        return result


@dataclass
class PeerLink:
    """One link as this peer sees it: its script, and the credit and counts that drive flow control."""

    name: str
    handle: int  # ours (we use the remote's handle number for links the peer opened)
    is_sender: bool  # our role
    reply: LinkReply = field(default_factory=LinkReply)
    remote_handle: int | None = None
    credit: int = 0
    delivery_count: int = 0
    received: int = 0
    granted_count: int = 0
    detached: bool = False


class PeerConnection:
    """One AMQP connection after the headers; a reader thread records frames and answers as scripted."""

    def __init__(self, sock: socket.socket, records: Records, *, server: ServerScript | None = None) -> None:
        self.sock = sock
        self.records = records
        self.server = server
        self.buf = bytearray()
        self.send_lock = threading.Lock()
        self.last_sent = time.monotonic()
        self.closed = False
        self.close_sent = self.end_sent = False
        self.remote_open: Frame | None = None
        self.remote_close: Frame | None = None
        self.remote_max_frame = 512
        self.largest_frame = 0  # the largest frame received (a peer must never exceed our max-frame-size)
        self.links: dict[int, PeerLink] = {}  # by our handle
        self.remote_links: dict[int, PeerLink] = {}  # by the remote's handle
        self.next_outgoing_id = 0
        self.next_incoming_id = 0
        self.partial: dict[int, tuple[Frame, bytearray, int]] = {}
        self.thread: threading.Thread | None = None

    # -- raw I/O
    def send_bytes(self, data: bytes) -> None:
        with self.send_lock:
            try:
                self.sock.sendall(data)
            except OSError as exc:
                raise PeerClosed(f"cannot send: {exc}") from exc
            self.last_sent = time.monotonic()

    def send_frame(self, channel: int, perf: Any, payload: bytes = b"", frame_type: int = FRAME_AMQP) -> None:
        body = encode_value(perf) + payload
        self.send_bytes(struct.pack(">IBBH", len(body) + 8, 2, frame_type, channel) + body)

    def _fill(self, timeout: float) -> None:
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return
        if not chunk:
            raise PeerClosed("connection closed by the peer")
        self.buf += chunk

    def read_exact(self, n: int, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {n} bytes from the peer within {timeout:g}s")
            self._fill(0.2)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_frame(self, timeout: float) -> tuple[int, int, bytes]:
        """(frame type, channel, body); body is empty for a heartbeat."""
        size, doff, ftype, channel = struct.unpack(">IBBH", self.read_exact(8, timeout))
        self.largest_frame = max(self.largest_frame, size)
        rest = self.read_exact(size - 8, timeout)
        return ftype, channel, rest[doff * 4 - 8 :]

    def _poll_frame(self) -> tuple[int, int, bytes] | None:
        if len(self.buf) < 8 or len(self.buf) < struct.unpack(">I", self.buf[:4])[0]:
            self._fill(0.2)
        if len(self.buf) >= 8 and len(self.buf) >= struct.unpack(">I", self.buf[:4])[0]:
            return self.read_frame(0)
        return None

    # -- reader loop
    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="scripted-peer-reader", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.closed:
                item = self._poll_frame()
                self._heartbeat()
                if item is not None and item[2]:
                    self._dispatch(parse_frame(item[1], item[2]))
        except (PeerClosed, OSError):
            pass
        finally:
            self._mark_closed()

    def _heartbeat(self) -> None:
        idle = self.remote_open["idle_time_out"] if self.remote_open else None
        if idle and time.monotonic() - self.last_sent > idle / 2000:
            self.send_bytes(EMPTY_FRAME)

    def _mark_closed(self) -> None:
        with self.records.cond:
            self.closed = True
            self.records.cond.notify_all()
        with contextlib.suppress(OSError):
            self.sock.close()

    def drop(self) -> None:
        """Abrupt disconnect: no Close frame."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._mark_closed()

    def close(self, condition: str | None = None, description: str | None = None) -> None:
        error = error_value(condition, description) if condition else None
        self.close_sent = True
        with contextlib.suppress(OSError):
            self.send_frame(0, performative(0x18, error))

    # -- dispatch
    def _dispatch(self, frame: Frame) -> None:
        self.records.add("frames", frame)
        handler = getattr(self, f"_on_{frame.name.replace('-', '_')}", None)
        if handler is not None:
            handler(frame)

    def _on_open(self, frame: Frame) -> None:
        self.remote_open = frame
        self.remote_max_frame = int(frame["max_frame_size"] or 2**32 - 1)
        if self.server is not None:
            s = self.server
            self.send_frame(
                0,
                performative(
                    0x10, s.container_id, None, uint(s.max_frame_size), ushort(255), None, None, None,
                    None, None, symbol_keys(s.open_properties),
                ),
            )  # fmt: skip

    def _on_begin(self, frame: Frame) -> None:
        self.next_incoming_id = int(frame["next_outgoing_id"])
        if self.server is not None:
            begin = performative(
                0x11, ushort(frame.channel), uint(self.next_outgoing_id), uint(MAX_WINDOW), uint(MAX_WINDOW)
            )
            self.send_frame(frame.channel, begin)

    def _on_attach(self, frame: Frame) -> None:
        if self.server is None:
            for link in self.links.values():
                if link.name == frame["name"]:
                    link.remote_handle = int(frame["handle"])
                    self.remote_links[link.remote_handle] = link
            self.records.add("attaches", frame)
            return
        reply = self.server.answer_for(frame)
        handle = int(frame["handle"])
        link = PeerLink(str(frame["name"]), handle, bool(frame["role"]), reply=reply, remote_handle=handle)
        self.links[handle] = self.remote_links[handle] = link
        self.records.add("attaches", frame)  # after registering: a waiter may use the link at once
        self._answer_attach(frame, link)
        self.server.answered(frame)

    def _answer_attach(self, frame: Frame, link: PeerLink) -> None:
        reply = link.reply
        remote_is_sender = not frame["role"]
        source, target = frame["source"], frame["target"]
        if reply.refuse:
            source, target = (source, None) if remote_is_sender else (None, target)
        answer = performative(
            0x12, link.name, uint(link.handle), bool(remote_is_sender), frame["snd_settle_mode"],
            frame["rcv_settle_mode"], source, target, None, None,
            None if remote_is_sender else uint(0), None,
            None if reply.offered_capabilities is None else symbol_array(reply.offered_capabilities),
            None, symbol_keys(reply.properties),
        )  # fmt: skip
        self.send_frame(frame.channel, answer)
        if reply.refuse:
            link.detached = True
            error = error_value(reply.error_condition, reply.error_description)
            self.send_frame(frame.channel, performative(0x16, uint(link.handle), True, error))
        elif remote_is_sender:
            initial = frame["initial_delivery_count"]
            link.delivery_count = int(initial or 0)
            self._grant(frame.channel, link)

    def _grant(self, channel: int, link: PeerLink) -> None:
        link.granted_count = link.delivery_count + link.received
        flow = performative(
            0x13, uint(self.next_incoming_id), uint(MAX_WINDOW), uint(self.next_outgoing_id),
            uint(MAX_WINDOW), uint(link.handle), uint(link.granted_count), uint(link.reply.credit),
        )  # fmt: skip
        self.send_frame(channel, flow)

    def _on_flow(self, frame: Frame) -> None:
        handle = frame["handle"]
        link = self.remote_links.get(int(handle)) if handle is not None else None
        if link is not None and link.is_sender and frame["link_credit"] is not None:
            with self.records.cond:
                remote_count = frame["delivery_count"]
                base = int(remote_count) if remote_count is not None else 0
                link.credit = base + int(frame["link_credit"]) - link.delivery_count
                self.records.cond.notify_all()

    def _on_transfer(self, frame: Frame) -> None:
        handle = int(frame["handle"])
        first, data, count = self.partial.pop(handle, (frame, bytearray(), 0))
        data += frame.payload
        if frame["more"]:
            self.partial[handle] = (first, data, count + 1)
            return
        if frame["aborted"]:
            return
        link = self.remote_links.get(handle)
        if link is None:
            return  # deliveries to the client role are not scripted
        link.received += 1
        delivery_id = int(first["delivery_id"])
        self.next_incoming_id = delivery_id + 1
        record = TransferRecord(
            link=link.name,
            handle=handle,
            delivery_id=delivery_id,
            delivery_tag=bytes(first["delivery_tag"] or b""),
            message_format=int(first["message_format"] or 0),
            settled=bool(first["settled"]),
            payload=bytes(data),
            frames=count + 1,
            connection=self,
        )
        self.records.add("transfers", record)
        if not record.settled and link.reply.outcome != "hold":
            self.settle(record, link.reply.outcome, channel=frame.channel)
        if (
            link.reply.credit
            and link.granted_count + link.reply.credit - link.delivery_count - link.received
            < (link.reply.credit + 1) // 2
        ):
            self._grant(frame.channel, link)

    def settle(self, transfer: TransferRecord, outcome: str = "accepted", channel: int = 0) -> None:
        state = performative(OUTCOMES[outcome])
        disposition = performative(0x15, True, uint(transfer.delivery_id), None, True, state)
        self.send_frame(channel, disposition)

    def _on_disposition(self, frame: Frame) -> None:
        self.records.add("dispositions", frame)

    def _on_detach(self, frame: Frame) -> None:
        link = self.remote_links.pop(int(frame["handle"]), None)
        if link is None or link.detached:
            return
        link.detached = True
        self.send_frame(frame.channel, performative(0x16, uint(link.handle), True))

    def _on_end(self, frame: Frame) -> None:
        if not self.end_sent:
            self.end_sent = True
            self.send_frame(frame.channel, performative(0x17))

    def _on_close(self, frame: Frame) -> None:
        self.remote_close = frame
        if not self.close_sent:
            self.close_sent = True
            self.send_frame(0, performative(0x18))
        self._mark_closed()

    # -- sending deliveries on a link where we are the sender
    def send_delivery(
        self,
        link: PeerLink,
        payload: bytes,
        *,
        settled: bool,
        message_format: int,
        channel: int,
        timeout: float,
    ) -> int:
        self.records.wait(lambda: link.credit > 0 or self.closed, timeout, f"credit on {link.name}")
        if self.closed:
            raise PeerClosed("connection closed while waiting for credit")
        delivery_id = self.next_outgoing_id
        self.next_outgoing_id += 1
        link.credit -= 1
        link.delivery_count += 1
        head = [uint(link.handle), uint(delivery_id), struct.pack(">I", delivery_id), uint(message_format)]
        head.append(settled)
        # continuation frames carry a shorter performative, so the first frame's room fits them all
        room = min(self.remote_max_frame, 65536) - 8 - len(encode_value(performative(0x14, *head, True)))
        chunks = [payload[i : i + room] for i in range(0, len(payload), room)] or [b""]
        for i, chunk in enumerate(chunks):
            more = True if i < len(chunks) - 1 else None
            fields = head if i == 0 else [uint(link.handle), None, None, None, None]
            self.send_frame(channel, performative(0x14, *fields, more), chunk)
        return delivery_id
