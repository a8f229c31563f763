"""`ScriptedServer`: plays a remote endpoint our broker connects out to (e.g. an Artemis mirror target).

It answers SASL/Open/Begin/Attach as scripted by `LinkReply` (or by `expect_attach(...).respond(...)`),
grants credit, records every transfer and settles it with the scripted outcome; it can drop or close
connections on command.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Sequence
from typing import Any

from proton import ubyte

from tests.peers.ports import LOOPBACK
from tests.support.peer.codec import AMQP_HEADER, FRAME_SASL, SASL_HEADER, performative, symbol_array
from tests.support.peer.connection import PeerClosed, PeerConnection, Records
from tests.support.peer.frames import Frame, LinkReply, Reply, TransferRecord, parse_frame
from tests.support.peer.script import AttachExpectation, Script


def _plain_response(records: Records, init: Frame) -> dict[str, Any]:
    info = {"mechanism": str(init["mechanism"]), "user": None, "password": None}
    response = init["initial_response"]
    if info["mechanism"] == "PLAIN" and response:
        parts = bytes(response).split(b"\x00")
        if len(parts) == 3:
            info["user"], info["password"] = parts[1].decode(), parts[2].decode()
    records.add("sasl", info)
    return info


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
        self.script = Script(self.records)
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

    # -- answering (called by the connections' reader threads)
    def answer_for(self, attach: Frame) -> LinkReply:
        expectation = self.script.take(attach)
        reply = self.reply if expectation is None or expectation.reply is None else expectation.reply
        return reply(attach) if callable(reply) else reply

    def answered(self, attach: Frame) -> None:
        self.script.answered(attach)

    # -- scripting, as the protonj2 test peer does
    def expect_attach(self, **checks: Any) -> AttachExpectation:
        """Expect the next attach (in arrival order) to have these fields; `.respond(...)` to answer it
        other than with the server's reply. Field checks are described in `Script.expect_attach`."""
        return self.script.expect_attach(**checks)

    def wait_for_script_to_complete(self, timeout: float = 10.0) -> None:
        """Until every expected attach arrived and was answered; AssertionError if one did not match."""
        self.script.wait_complete(timeout)

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
