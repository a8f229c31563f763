"""Engine cost per message, no sockets: our sans-I/O engine vs proton's C engine driven from Python.

Both sides receive the same bytes: a client's open/begin/attach and N transfers of a 1 KiB message,
and produce an Accepted disposition per message (ours batched per read, as the broker does; proton's
through its event collector, the cheapest way its Python binding allows). Prints CPU microseconds per
message for each. Run: python bench/engine_cost.py [N]
"""

from __future__ import annotations

import sys
import time
from typing import Any

from broker_core.amqp.connection import Connection
from broker_core.amqp.performatives import ACCEPTED_BYTES, Attach, Target

PAYLOAD = b"\x00\x53\x70\xc0\x02\x01\x41" + b"\x00\x53\x75\xb0\x00\x00\x04\x00" + b"x" * 1024


class Sink:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.conn: Connection  # set once the connection it hears is made

    def on_sasl_init(self, conn: Connection, m: str, r: Any) -> None:
        conn.sasl_outcome(True, None)

    def on_sasl_mechanisms(self, conn: Connection, offered: list[str]) -> None:
        conn.sasl_init("ANONYMOUS", b"")

    def on_open(self, conn: Connection, o: Any) -> None:
        conn.accept_open()

    def on_begin(self, s: Any, b: Any) -> None:
        if self.conn.server:
            self.conn.begin(s)

    def on_attach(self, link: Any, a: Any) -> None:
        if link.attach is None:
            self.conn.attach(link.session, Attach(name=link.name, target=a.target), link)
            self.conn.flow(link, credit=10**9)

    def on_delivery(self, link: Any, did: int, tag: bytes, settled: bool, payload: bytes, fmt: int) -> None:
        self.ids.append(did)

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def client_bytes(n: int) -> tuple[bytes, bytes]:
    """The handshake and the transfers a client would send, produced by a client engine."""
    sink, srv_sink = Sink(), Sink()
    client = Connection(sink, server=False, container_id="c")
    server = Connection(srv_sink, server=True, container_id="s")
    sink.conn, srv_sink.conn = client, server
    client.start_client(sasl=True)
    hs = bytearray()
    for _ in range(6):
        out = client.take_output()
        hs += out
        server.receive(out)
        client.receive(server.take_output())
    s = client.begin()
    link = client.attach(s, Attach(name="l", role=False, target=Target(address="q")))
    out = client.take_output()
    hs += out
    server.receive(out)
    client.receive(server.take_output())
    link.credit = n
    for i in range(n):
        client.send_delivery(link, i.to_bytes(4, "big"), PAYLOAD, False)
    return bytes(hs), client.take_output()


def ours(hs: bytes, transfers: bytes, n: int, chunk: int = 65536) -> float:
    sink = Sink()
    server = Connection(sink, server=True, container_id="s")
    sink.conn = server
    server.receive(hs)
    server.take_output()
    t0 = time.process_time()
    session = next(iter(server.sessions.values()))
    for i in range(0, len(transfers), chunk):
        before = len(sink.ids)
        server.receive(transfers[i : i + chunk])
        if len(sink.ids) > before:
            server.settle_incoming(session, sink.ids[before], sink.ids[-1], ACCEPTED_BYTES)
        server.take_output()
    assert len(sink.ids) == n, len(sink.ids)
    return (time.process_time() - t0) / n * 1e6


def proton_engine(hs: bytes, transfers: bytes, n: int, chunk: int = 65536) -> float:
    from proton import SASL, Collector, Delivery, Event, Transport
    from proton import Connection as PConn

    t = Transport(Transport.SERVER)
    sasl = t.sasl()
    sasl.allowed_mechs("ANONYMOUS")
    sasl.done(SASL.OK)
    c = PConn()
    coll = Collector()
    c.collect(coll)
    t.bind(c)
    got = 0

    def pump(data: bytes) -> None:
        while data:
            cap = max(t.capacity(), 1)
            t.push(data[:cap])
            data = data[cap:]
            drain()

    def drain() -> None:
        nonlocal got
        while True:
            ev = coll.peek()
            if ev is None:
                break
            et = ev.type
            if et == Event.CONNECTION_REMOTE_OPEN:
                ev.connection.open()
            elif et == Event.SESSION_REMOTE_OPEN:
                ev.session.open()
            elif et == Event.LINK_REMOTE_OPEN:
                ev.link.target.copy(ev.link.remote_target)
                ev.link.open()
                ev.link.flow(10**6)
            elif et == Event.DELIVERY:
                d = ev.delivery
                if not d.partial:
                    ev.link.recv(d.pending)
                    ev.link.advance()
                    d.update(Delivery.ACCEPTED)
                    d.settle()
                    got += 1
            coll.pop()
        while t.pending() > 0:
            t.pop(t.pending())

    pump(hs)
    t0 = time.process_time()
    for i in range(0, len(transfers), chunk):
        pump(transfers[i : i + chunk])
    assert got == n, got
    return (time.process_time() - t0) / n * 1e6


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
    hs, transfers = client_bytes(n)
    for _ in range(2):
        print(f"ours:   {ours(hs, transfers, n):6.1f} us/msg (receive transfer + batched accept)")
        print(f"proton: {proton_engine(hs, transfers, n):6.1f} us/msg (C engine + Python event loop)")
