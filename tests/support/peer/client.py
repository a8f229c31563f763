"""`ScriptedClient`: plays a remote broker connecting to ours (e.g. an Artemis mirror source).

SASL, open, begin, attach a sender with arbitrary fields, send raw payload bytes, report dispositions;
every call blocks until the broker answered.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from proton import symbol, ubyte, uint, ushort

from tests.peers.ports import LOOPBACK
from tests.support.peer.codec import (
    AMQP_HEADER,
    FRAME_SASL,
    MAX_WINDOW,
    SASL_HEADER,
    performative,
    symbol_array,
    symbol_keys,
)
from tests.support.peer.connection import PeerClosed, PeerConnection, PeerLink, Records
from tests.support.peer.frames import Frame, parse_frame


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
        self._last_sender: PeerLink | None = None

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
        link = PeerLink(name, handle, is_sender=True)
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
