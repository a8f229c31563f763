"""A scripted AMQP 1.0 peer over real sockets, with a codec independent of ours (for conformance tests).

Frames are cut by hand (8-byte header); every performative and message section is encoded and decoded
with python-qpid-proton's `Data`, so a bug in our codec cannot hide itself. Decoded values keep their
exact AMQP types as proton objects: `symbol` vs `str`, `Array` vs `list`, `ulong`/`uint`/`ubyte`/`byte`,
a plain `int` is an AMQP long.

Two roles:
- `ScriptedServer` plays a remote endpoint our broker connects out to (e.g. an Artemis mirror target):
  answers SASL/Open/Begin/Attach as scripted by `LinkReply`, grants credit, records every transfer and
  settles it with the scripted outcome; it can drop or close connections on command.
- `ScriptedClient` plays a remote broker connecting to ours (e.g. an Artemis mirror source): SASL, open,
  begin, attach a sender with arbitrary fields, send raw payload bytes, report dispositions.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proton import UNDESCRIBED, Array, Data, Described, symbol, ubyte, uint, ulong, ushort

from tests.peers.ports import LOOPBACK

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
FRAME_AMQP, FRAME_SASL = 0, 1
MAX_WINDOW = 2**31 - 1
EMPTY_FRAME = struct.pack(">IBBH", 8, 2, FRAME_AMQP, 0)

FIELDS: dict[int, tuple[str, tuple[str, ...]]] = {
    0x10: ("open", ("container_id", "hostname", "max_frame_size", "channel_max", "idle_time_out",
                    "outgoing_locales", "incoming_locales", "offered_capabilities", "desired_capabilities",
                    "properties")),
    0x11: ("begin", ("remote_channel", "next_outgoing_id", "incoming_window", "outgoing_window", "handle_max",
                     "offered_capabilities", "desired_capabilities", "properties")),
    0x12: ("attach", ("name", "handle", "role", "snd_settle_mode", "rcv_settle_mode", "source", "target",
                      "unsettled", "incomplete_unsettled", "initial_delivery_count", "max_message_size",
                      "offered_capabilities", "desired_capabilities", "properties")),
    0x13: ("flow", ("next_incoming_id", "incoming_window", "next_outgoing_id", "outgoing_window", "handle",
                    "delivery_count", "link_credit", "available", "drain", "echo", "properties")),
    0x14: ("transfer", ("handle", "delivery_id", "delivery_tag", "message_format", "settled", "more",
                        "rcv_settle_mode", "state", "resume", "aborted", "batchable")),
    0x15: ("disposition", ("role", "first", "last", "settled", "state", "batchable")),
    0x16: ("detach", ("handle", "closed", "error")),
    0x17: ("end", ("error",)),
    0x18: ("close", ("error",)),
    0x1D: ("error", ("condition", "description", "info")),
    0x23: ("received", ("section_number", "section_offset")),
    0x24: ("accepted", ()),
    0x25: ("rejected", ("error",)),
    0x26: ("released", ()),
    0x27: ("modified", ("delivery_failed", "undeliverable_here", "message_annotations")),
    0x28: ("source", ("address", "durable", "expiry_policy", "timeout", "dynamic", "dynamic_node_properties",
                      "distribution_mode", "filter", "default_outcome", "outcomes", "capabilities")),
    0x29: ("target", ("address", "durable", "expiry_policy", "timeout", "dynamic", "dynamic_node_properties",
                      "capabilities")),
    0x40: ("sasl-mechanisms", ("sasl_server_mechanisms",)),
    0x41: ("sasl-init", ("mechanism", "initial_response", "hostname")),
    0x44: ("sasl-outcome", ("code", "additional_data")),
}  # fmt: skip
_SYMBOLIC = {f"amqp:{name}:list": code for code, (name, _) in FIELDS.items()}
OUTCOMES = {"accepted": 0x24, "rejected": 0x25, "released": 0x26, "modified": 0x27}


class PeerClosed(ConnectionError):
    """The other end closed the socket."""


# --------------------------------------------------------------------------------------- proton codec


def encode_value(value: Any) -> bytes:
    data = Data()
    data.put_object(value)
    return bytes(data.encode())


def decode_one(buf: bytes) -> tuple[Any, int]:
    """Decode the first value of `buf` with proton; return it and how many bytes it took."""
    data = Data()
    used = data.decode(bytes(buf))
    data.rewind()
    data.next()
    return _owned(data.get_object()), used


def _owned(value: Any) -> Any:
    """Copy binaries out of proton's buffer (`get_object` returns memoryviews into it)."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, Described):
        return Described(_owned(value.descriptor), _owned(value.value))
    if isinstance(value, Array):
        return Array(value.descriptor, value.type, *[_owned(v) for v in value.elements])
    if isinstance(value, list):
        return [_owned(v) for v in value]
    if isinstance(value, dict):
        return {_owned(k): _owned(v) for k, v in value.items()}
    return value


def descriptor_code(value: Any) -> int | None:
    if not isinstance(value, Described):
        return None
    d = value.descriptor
    return _SYMBOLIC.get(str(d)) if isinstance(d, symbol) else int(d)


def composite_fields(value: Any) -> dict[str, Any] | None:
    """A described list (terminus, error, outcome...) as {field name: value}; None stays None."""
    if value is None:
        return None
    code = descriptor_code(value)
    names = FIELDS[code][1] if code in FIELDS else ()
    items = list(value.value) if isinstance(value.value, list) else []
    out = {name: (items[i] if i < len(items) else None) for i, name in enumerate(names)}
    out["$descriptor"] = code
    return out


def symbol_array(values: Sequence[str]) -> Array:
    return Array(UNDESCRIBED, Data.SYMBOL, *[symbol(v) for v in values])


def symbol_keys(mapping: dict[str, Any] | None) -> dict[Any, Any] | None:
    """Map with symbol keys (AMQP `fields`); values are kept with the types given."""
    return None if mapping is None else {symbol(k): v for k, v in mapping.items()}


def performative(code: int, *values: Any) -> Described:
    items = list(values)
    while items and items[-1] is None:
        items.pop()
    return Described(ulong(code), items)


def error_value(condition: str, description: str | None = None) -> Described:
    return performative(0x1D, symbol(condition), description)


@dataclass
class Frame:
    """One received performative; `fields` by spec name with proton types, absent fields are None."""

    code: int
    channel: int
    fields: dict[str, Any]
    raw: list[Any]
    payload: bytes = b""

    @property
    def name(self) -> str:
        return FIELDS[self.code][0] if self.code in FIELDS else hex(self.code)

    def __getitem__(self, key: str) -> Any:
        return self.fields.get(key)

    def terminus(self, which: str) -> dict[str, Any] | None:
        """`source` / `target` of an attach as a field dict."""
        return composite_fields(self.fields[which])

    @property
    def state(self) -> str | None:
        """Outcome name of a disposition or transfer state ("accepted", ...)."""
        code = descriptor_code(self.fields.get("state"))
        return None if code is None else FIELDS[code][0]


def parse_frame(channel: int, body: bytes) -> Frame:
    value, used = decode_one(body)
    code = descriptor_code(value)
    if code is None:
        raise ValueError(f"frame body is not a described performative: {value!r}")
    raw = list(value.value) if isinstance(value.value, list) else [value.value]
    names = FIELDS.get(code, ("", ()))[1]
    fields = {name: (raw[i] if i < len(raw) else None) for i, name in enumerate(names)}
    return Frame(code, channel, fields, raw, bytes(body[used:]))


@dataclass
class Section:
    code: int
    value: Any  # the section's value (a proton object), without the descriptor
    raw: bytes


def decode_sections(payload: bytes) -> list[Section]:
    out, pos = [], 0
    while pos < len(payload):
        value, used = decode_one(payload[pos:])
        code = descriptor_code(value)
        out.append(Section(code if code is not None else -1, value.value, bytes(payload[pos : pos + used])))
        pos += used
    return out


@dataclass
class TransferRecord:
    link: str
    handle: int
    delivery_id: int
    delivery_tag: bytes
    message_format: int
    settled: bool
    payload: bytes
    frames: int
    connection: PeerConnection

    @property
    def sections(self) -> list[Section]:
        return decode_sections(self.payload)

    def section(self, code: int) -> Any:
        for s in self.sections:
            if s.code == code:
                return s.value
        return None

    @property
    def delivery_annotations(self) -> Any:
        return self.section(0x71)

    @property
    def message_annotations(self) -> Any:
        return self.section(0x72)

    @property
    def amqp_value(self) -> Any:
        return self.section(0x77)


@dataclass
class LinkReply:
    """How the server answers one attach and treats the link's deliveries."""

    offered_capabilities: Sequence[str] | None = None
    properties: dict[str, Any] | None = None  # keys sent as symbols, values as given (str -> string)
    refuse: bool = False  # answer with a null terminus, then detach with the error below
    error_condition: str = "amqp:not-found"
    error_description: str = "refused by the scripted peer"
    credit: int = 1000
    outcome: str = "accepted"  # accepted | released | rejected | modified | hold (no disposition)

    @classmethod
    def mirror_target(cls, node_id: str, **overrides: Any) -> LinkReply:
        """What an Artemis mirror target answers (never offering core tunnelling)."""
        kwargs: dict[str, Any] = {
            "offered_capabilities": ["amq.mirror"],
            "properties": {"x-opt-amq-bkr-id": node_id},
        }
        kwargs.update(overrides)
        return cls(**kwargs)


Reply = LinkReply | Callable[[Frame], LinkReply]


# ----------------------------------------------------------------------------------------- records


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


# ------------------------------------------------------------------------------------ one connection


@dataclass
class _Link:
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

    def __init__(
        self, sock: socket.socket, records: Records, *, server: ScriptedServer | None = None
    ) -> None:
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
        self.links: dict[int, _Link] = {}  # by our handle
        self.remote_links: dict[int, _Link] = {}  # by the remote's handle
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
        reply = self.server.reply(frame) if callable(self.server.reply) else self.server.reply
        handle = int(frame["handle"])
        link = _Link(str(frame["name"]), handle, bool(frame["role"]), reply=reply, remote_handle=handle)
        self.links[handle] = self.remote_links[handle] = link
        self.records.add("attaches", frame)  # after registering: a waiter may use the link at once
        self._answer_attach(frame, link)

    def _answer_attach(self, frame: Frame, link: _Link) -> None:
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

    def _grant(self, channel: int, link: _Link) -> None:
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
        self, link: _Link, payload: bytes, *, settled: bool, message_format: int, channel: int, timeout: float
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


def _plain_response(records: Records, init: Frame) -> dict[str, Any]:
    info = {"mechanism": str(init["mechanism"]), "user": None, "password": None}
    response = init["initial_response"]
    if info["mechanism"] == "PLAIN" and response:
        parts = bytes(response).split(b"\x00")
        if len(parts) == 3:
            info["user"], info["password"] = parts[1].decode(), parts[2].decode()
    records.add("sasl", info)
    return info


# --------------------------------------------------------------------------------------------- server


class ScriptedServer:
    """Plays a remote AMQP endpoint on a loopback port; see the module docstring."""

    def __init__(
        self,
        reply: Reply | None = None,
        *,
        sasl_mechanisms: Sequence[str] | None = ("ANONYMOUS", "PLAIN"),
        sasl_outcome: int = 0,
        container_id: str = "scripted-peer",
        open_properties: dict[str, Any] | None = None,
        max_frame_size: int = 65536,
        host: str = LOOPBACK,
        port: int = 0,
    ) -> None:
        self.reply: Reply = reply if reply is not None else LinkReply()
        self.sasl_mechanisms = sasl_mechanisms
        self.sasl_outcome = sasl_outcome
        self.container_id = container_id
        self.open_properties = open_properties
        self.max_frame_size = max_frame_size
        self.records = Records()
        self.connections: list[PeerConnection] = []
        self._attach_cursor = 0
        self._listener = socket.create_server((host, port))
        self.host, self.port = host, self._listener.getsockname()[1]
        self._stopping = False
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="scripted-peer-accept", daemon=True
        )

    def __enter__(self) -> ScriptedServer:
        self._accept_thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    @property
    def attaches(self) -> list[Frame]:
        return self.records.attaches

    @property
    def transfers(self) -> list[TransferRecord]:
        return self.records.transfers

    def shutdown(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() on Linux
        self._listener.close()
        for conn in list(self.connections):
            conn.drop()
        if self._accept_thread.is_alive():
            self._accept_thread.join(timeout=5)

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), name="scripted-peer-conn", daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        conn = PeerConnection(sock, self.records, server=self)
        try:
            if not self._handshake(conn):
                conn.drop()
                return
        except (PeerClosed, OSError, TimeoutError):
            conn.drop()
            return
        with self.records.cond:
            self.connections.append(conn)
            self.records.cond.notify_all()
        conn._run()

    def _handshake(self, conn: PeerConnection) -> bool:
        header = conn.read_exact(8, 10)
        if self.sasl_mechanisms is not None:
            if header != SASL_HEADER:
                conn.send_bytes(SASL_HEADER)
                return False
            conn.send_bytes(SASL_HEADER)
            mechs = performative(0x40, symbol_array(self.sasl_mechanisms))
            conn.send_frame(0, mechs, frame_type=FRAME_SASL)
            _, channel, body = conn.read_frame(10)
            _plain_response(self.records, parse_frame(channel, body))
            conn.send_frame(0, performative(0x44, ubyte(self.sasl_outcome)), frame_type=FRAME_SASL)
            if self.sasl_outcome != 0:
                return False
            header = conn.read_exact(8, 10)
        if header != AMQP_HEADER:
            conn.send_bytes(AMQP_HEADER)
            return False
        conn.send_bytes(AMQP_HEADER)
        return True

    # -- waiting
    def wait_for_connection(self, timeout: float = 10.0, count: int = 1) -> PeerConnection:
        self.records.wait(lambda: len(self.connections) >= count, timeout, f"{count} connection(s)")
        return self.connections[count - 1]

    def wait_for_attach(self, timeout: float = 10.0) -> Frame:
        """The next attach not yet returned by this method (a cursor over `attaches`)."""
        index = self._attach_cursor
        self.records.wait(lambda: len(self.attaches) > index, timeout, f"attach #{index + 1}")
        self._attach_cursor += 1
        return self.attaches[index]

    def wait_for_transfers(self, count: int, timeout: float = 10.0) -> list[TransferRecord]:
        self.records.wait(lambda: len(self.transfers) >= count, timeout, f"{count} transfer(s)")
        return self.transfers[:count]

    def wait_for_disconnect(self, connection: PeerConnection, timeout: float = 10.0) -> None:
        self.records.wait(lambda: connection.closed, timeout, "the connection to close")

    # -- commands
    def settle(self, transfer: TransferRecord, outcome: str = "accepted") -> None:
        """Settle a held delivery later (LinkReply(outcome="hold"))."""
        transfer.connection.settle(transfer, outcome)

    def drop(self) -> None:
        """Cut every open connection abruptly (no Close); the server keeps listening."""
        for conn in self.connections:
            if not conn.closed:
                conn.drop()

    def close_connections(self, condition: str | None = None, description: str | None = None) -> None:
        """Send Close (with an optional error) on every open connection."""
        for conn in self.connections:
            if not conn.closed:
                conn.close(condition, description)

    def send(self, link_name: str, payload: bytes, *, timeout: float = 10.0, message_format: int = 0) -> int:
        """Send a delivery on a link the remote attached as receiver; returns its delivery id."""
        for conn in reversed(self.connections):
            for link in conn.links.values():
                if link.name == link_name and link.is_sender and not conn.closed:
                    return conn.send_delivery(
                        link,
                        payload,
                        settled=False,
                        message_format=message_format,
                        channel=0,
                        timeout=timeout,
                    )
        raise KeyError(f"no receiving link named {link_name!r}")


# --------------------------------------------------------------------------------------------- client


@dataclass
class AttachAnswer:
    attach: Frame | None
    detach: Frame | None
    flow: Frame | None


class SaslFailed(ConnectionError):
    pass


class ScriptedClient:
    """Plays a remote broker connecting to ours; every call blocks until the broker answered."""

    def __init__(
        self,
        port: int,
        host: str = LOOPBACK,
        *,
        user: str | None = None,
        password: str | None = None,
        mechanism: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.host, self.port = host, port
        self.user, self.password = user, password
        self.mechanism = mechanism
        self.timeout = timeout
        self.records = Records()
        self.offered_mechanisms: list[str] = []
        self.conn: PeerConnection | None = None
        self.remote_open: Frame | None = None
        self.remote_begin: Frame | None = None
        self._next_handle = 0
        self._last_sender: _Link | None = None

    def __enter__(self) -> ScriptedClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.drop()

    @property
    def frames(self) -> list[Frame]:
        return self.records.frames

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        conn = PeerConnection(sock, self.records)
        conn.send_bytes(SASL_HEADER)
        if conn.read_exact(8, self.timeout) != SASL_HEADER:
            raise SaslFailed("the broker did not answer with a SASL header")
        _, ch, body = conn.read_frame(self.timeout)
        offered = parse_frame(ch, body)["sasl_server_mechanisms"]
        self.offered_mechanisms = [str(m) for m in ([offered] if isinstance(offered, str) else offered)]
        mech = self.mechanism or ("PLAIN" if self.user is not None else "ANONYMOUS")
        response = f"\0{self.user}\0{self.password}".encode() if mech == "PLAIN" else b""
        conn.send_frame(0, performative(0x41, symbol(mech), response), frame_type=FRAME_SASL)
        _, ch, body = conn.read_frame(self.timeout)
        code = int(parse_frame(ch, body)["code"])
        if code != 0:
            sock.close()
            raise SaslFailed(f"SASL outcome {code}")
        conn.send_bytes(AMQP_HEADER)
        if conn.read_exact(8, self.timeout) != AMQP_HEADER:
            raise ConnectionError("the broker did not answer with an AMQP header")
        self.conn = conn
        conn.start()

    def _conn(self) -> PeerConnection:
        if self.conn is None:
            raise RuntimeError("not connected")
        return self.conn

    def wait_frame(
        self, predicate: Callable[[Frame], bool], what: str, start: int = 0, timeout: float | None = None
    ) -> Frame:
        """The first received frame (from index `start`) matching `predicate`; PeerClosed if none can come."""

        def find() -> Frame | None:
            for f in self.records.frames[start:]:
                if predicate(f):
                    return f
            if self._conn().closed:
                raise PeerClosed(f"connection closed while waiting for {what}")
            return None

        found: Frame = self.records.wait(find, timeout or self.timeout, what)
        return found

    def open(
        self,
        container_id: str = "scripted-client",
        properties: dict[str, Any] | None = None,
        *,
        hostname: str | None = None,
        max_frame_size: int = 65536,
        idle_time_out: int | None = None,
        desired_capabilities: Sequence[str] | None = None,
    ) -> Frame:
        """Send Open (properties keys as symbols, values as given) and return the broker's Open."""
        conn = self._conn()
        desired = None if desired_capabilities is None else symbol_array(desired_capabilities)
        idle = None if idle_time_out is None else uint(idle_time_out)
        conn.send_frame(0, performative(
            0x10, container_id, hostname, uint(max_frame_size), ushort(255), idle, None, None, None,
            desired, symbol_keys(properties),
        ))  # fmt: skip
        self.remote_open = self.wait_frame(lambda f: f.name == "open", "the broker's Open")
        conn.remote_open = self.remote_open
        conn.remote_max_frame = int(self.remote_open["max_frame_size"] or 2**32 - 1)
        return self.remote_open

    def begin(self) -> Frame:
        if self.remote_open is None:
            self.open()
        conn = self._conn()
        conn.send_frame(0, performative(0x11, None, uint(0), uint(MAX_WINDOW), uint(MAX_WINDOW)))
        self.remote_begin = self.wait_frame(lambda f: f.name == "begin", "the broker's Begin")
        return self.remote_begin

    def attach_sender(
        self,
        name: str,
        target: str | None,
        *,
        source: str | None = None,
        target_capabilities: Sequence[str] | None = None,
        desired_capabilities: Sequence[str] | None = None,
        offered_capabilities: Sequence[str] | None = None,
        properties: dict[str, Any] | None = None,
        snd_settle_mode: int = 0,
        rcv_settle_mode: int = 0,
        answer_timeout: float = 5.0,
    ) -> AttachAnswer:
        """Attach a sender; return the broker's attach plus its credit flow or its detach, if either came."""
        if self.remote_begin is None:
            self.begin()
        conn = self._conn()
        handle = self._next_handle
        self._next_handle += 1
        link = _Link(name, handle, is_sender=True)
        conn.links[handle] = link
        tcaps = None if target_capabilities is None else symbol_array(target_capabilities)
        start = len(self.records.frames)
        conn.send_frame(0, performative(
            0x12, name, uint(handle), False, ubyte(snd_settle_mode), ubyte(rcv_settle_mode),
            performative(0x28, source), performative(0x29, target, None, None, None, None, None, tcaps),
            None, None, uint(0), None,
            None if offered_capabilities is None else symbol_array(offered_capabilities),
            None if desired_capabilities is None else symbol_array(desired_capabilities),
            symbol_keys(properties),
        ))  # fmt: skip
        attach = self.wait_frame(
            lambda f: f.name == "attach" and f["name"] == name, "the attach answer", start
        )
        remote = int(attach["handle"])

        def settled_link() -> bool:
            return any(
                f.name in ("flow", "detach") and f["handle"] is not None and int(f["handle"]) == remote
                for f in self.records.frames[start:]
            )

        with contextlib.suppress(TimeoutError):
            self.records.wait(lambda: settled_link() or conn.closed, answer_timeout, "flow or detach")
        after = [f for f in self.records.frames[start:] if f["handle"] is not None and f.name != "attach"]
        mine = [f for f in after if f.name in ("flow", "detach") and int(f["handle"]) == remote]
        self._last_sender = link
        return AttachAnswer(
            attach=attach,
            detach=next((f for f in mine if f.name == "detach"), None),
            flow=next((f for f in mine if f.name == "flow"), None),
        )

    def send(
        self,
        payload: bytes,
        *,
        link: str | None = None,
        settled: bool = False,
        message_format: int = 0,
        timeout: float | None = None,
    ) -> Frame | None:
        """Send one delivery; return the broker's disposition (None when sent settled)."""
        delivery_id = self.send_nowait(payload, link=link, settled=settled, message_format=message_format)
        return None if settled else self.disposition_of(delivery_id, timeout)

    def send_nowait(
        self, payload: bytes, *, link: str | None = None, settled: bool = False, message_format: int = 0
    ) -> int:
        """Send one delivery (waiting only for credit); return its delivery id."""
        conn = self._conn()
        target = self._last_sender
        if link is not None:
            target = next(lk for lk in conn.links.values() if lk.name == link)
        if target is None:
            raise RuntimeError("no sender link attached")
        return conn.send_delivery(
            target, payload, settled=settled, message_format=message_format, channel=0, timeout=self.timeout
        )

    def disposition_of(self, delivery_id: int, timeout: float | None = None) -> Frame:
        """Wait for the broker's disposition covering `delivery_id`."""

        def covers(f: Frame) -> bool:
            if f.name != "disposition" or f["role"] is not True:
                return False
            first = int(f["first"])
            last = int(f["last"]) if f["last"] is not None else first
            return first <= delivery_id <= last

        return self.wait_frame(covers, f"the disposition of delivery {delivery_id}", timeout=timeout)

    def detach(self, name: str) -> Frame:
        conn = self._conn()
        link = next(lk for lk in conn.links.values() if lk.name == name)
        start = len(self.records.frames)
        link.detached = True
        conn.send_frame(0, performative(0x16, uint(link.handle), True))
        remote = link.remote_handle
        return self.wait_frame(
            lambda f: f.name == "detach" and f["handle"] is not None and int(f["handle"]) == remote,
            f"the detach of {name}",
            start,
        )

    def close(self) -> Frame | None:
        conn = self._conn()
        conn.close_sent = True
        conn.send_frame(0, performative(0x18))
        try:
            return self.wait_frame(lambda f: f.name == "close", "the broker's Close")
        except PeerClosed:
            return conn.remote_close
