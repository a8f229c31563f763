"""Brokers joined in memory: the fast, deterministic tier beneath the process tests.

Two (or more) whole brokers, wired by the composition root exactly as `amqp-mirror run` wires them,
share one `MemoryLoop` instead of asyncio's: their sockets are `MemoryTransport` pairs that hand bytes
across when the test pumps, and time is a virtual clock that moves only when the test says. This is
proton's `pump()` and h11's `ConnectionPair`, one level up: every engine, endpoint, broker connection,
mirror source and target is the production code; only the loop and the wire are ours.

    net = Network(tmp_path)
    dc1, dc2 = net.broker("dc1", mirror_to="dc2"), net.broker("dc2", mirror_to="dc1")
    net.start_all()
    client = net.client("dc1")
    client.send("orders", b"hello")
    net.pump()
    assert net.depth("dc2", "orders") == 1
"""

from __future__ import annotations

import errno
import heapq
import itertools
import shutil
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from amqp_mirror.broker import Broker
from broker_core.acceptor import AmqpSocket
from broker_core.amqp.codec import Symbol
from broker_core.amqp.connection import Connection, Link, Session
from broker_core.amqp.performatives import (
    Accepted,
    Attach,
    Coordinator,
    Declare,
    Declared,
    Discharge,
    Rejected,
    Source,
    Target,
    TransactionalState,
)
from broker_core.config import load_config
from broker_core.journal.node_id import NODE_ID_FILE
from broker_core.message import build_message

BROKER_XML = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq">
  <core xmlns="urn:activemq:core">
    <name>{name}</name>
    <persistence-enabled>{persistence}</persistence-enabled>
    <security-enabled>false</security-enabled>{extra}
    <journal-directory>{home}/journal</journal-directory>
    <paging-directory>{home}/paging</paging-directory>
    <large-messages-directory>{home}/large-messages</large-messages-directory>
    <acceptors><acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP;anycastPrefix=anycast://;multicastPrefix=multicast://{acceptor_params}</acceptor></acceptors>
    <broker-connections>{connections}</broker-connections>
    <address-settings>{settings}</address-settings>
    <addresses>{addresses}</addresses>
  </core>
</configuration>
"""


class Handle:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class MemoryLoop:
    """Just enough of an asyncio loop: ready callbacks, timers on a virtual clock, tasks that never
    really wait, and connections to the brokers of its `Network`."""

    def __init__(self, network: Network) -> None:
        self.network = network
        self.now = 0.0
        self.ready: deque[Handle] = deque()
        self.from_threads: deque[Callable[[], None]] = deque()  # journal writer threads append here
        self.threads_held = False  # `Network.hold_disk`: what the writer threads say waits
        self.timers: list[tuple[float, int, Handle]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_soon(self, callback: Callable[..., None], *args: Any) -> Handle:
        handle = Handle(lambda: callback(*args))
        self.ready.append(handle)
        return handle

    def call_soon_threadsafe(self, callback: Callable[..., None], *args: Any) -> None:
        self.from_threads.append(lambda: callback(*args))

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Handle:
        handle = Handle(lambda: callback(*args))
        heapq.heappush(self.timers, (self.now + delay, next(self._order), handle))
        return handle

    def create_task(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            coro.send(None)
        except StopIteration:
            return
        raise AssertionError("a task awaited something the memory loop cannot provide")

    async def create_connection(
        self, factory: Callable[[], Any], host: str, port: int, **_tls: Any
    ) -> tuple[MemoryTransport, Any]:
        return self.network.connect(port, factory)

    def run_ready(self) -> bool:
        """Run what is ready now; whether anything ran."""
        ran = False
        while self.from_threads and not self.threads_held:
            self.from_threads.popleft()()
            ran = True
        while self.ready:
            handle = self.ready.popleft()
            if not handle.cancelled:
                handle.callback()
            ran = True
        return ran

    def advance(self, seconds: float) -> None:
        """Move the clock, firing the timers that fall due on the way."""
        end = self.now + seconds
        while self.timers and self.timers[0][0] <= end:
            at, _, handle = heapq.heappop(self.timers)
            self.now = at
            if not handle.cancelled:
                handle.callback()
            self.network.pump()
        self.now = end


class MemoryTransport:
    """One end of an in-memory socket: what is written reaches the other end's protocol when pumped."""

    def __init__(self, network: Network, name: str) -> None:
        self.network = network
        self.name = name
        self.protocol: Any = None
        self.peer: MemoryTransport | None = None
        self.inbox: deque[bytes] = deque()
        self.closing = False
        self.lost = False

    def get_extra_info(self, key: str) -> Any:
        return ("memory", hash(self.name) & 0xFFFF) if key == "peername" else None

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes) -> None:
        if not self.closing and self.peer is not None and not self.peer.closing:
            self.peer.inbox.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.inbox.clear()  # what was in flight on a cut connection is lost with it
            if self.peer is not None:
                self.peer.inbox.clear()
            self.network.to_lose.append(self)
            if self.peer is not None and not self.peer.closing:
                self.peer.closing = True
                self.network.to_lose.append(self.peer)

    abort = close

    def deliver(self) -> bool:
        moved = False
        if self.name in self.network.held:
            return False
        while self.inbox and not self.lost:
            self.protocol.data_received(self.inbox.popleft())
            moved = True
        return moved


class Network:
    """Brokers on one memory loop, reachable by their acceptor ports; a test's whole world."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.loop = MemoryLoop(self)
        self.brokers: dict[str, Broker] = {}
        self.ports: dict[int, Broker] = {}
        self.sockets: dict[str, set[AmqpSocket]] = {}
        self.transports: list[MemoryTransport] = []
        self.to_lose: list[MemoryTransport] = []
        self.down: set[int] = set()
        self.held: set[str] = set()  # brokers whose outgoing bytes wait (see hold_from)
        self._ports = itertools.count(10001)
        self._assigned: dict[str, int] = {}
        self._options: dict[str, dict[str, Any]] = {}  # each broker's `broker` arguments, for `crash`

    # --------------------------------------------------------------------------------- brokers

    def broker(
        self,
        name: str,
        *,
        mirror_to: str | None = None,
        mirror: str = "<mirror/>",
        persistence: bool = False,
        addresses: str = '<address name="orders"><anycast><queue name="orders"/></anycast></address>',
        settings: str = "",
        extra: str = "",
        port: int | None = None,
        acceptor_params: str = "",
        node_id: str | None = None,
    ) -> Broker:
        """A broker; `mirror_to` names the broker its `<mirror>` connection (named after it) goes to.
        `acceptor_params` are added to its acceptor's URI (`key=value;...`); `node_id` fixes its id."""
        self._options[name] = dict(
            mirror_to=mirror_to,
            mirror=mirror,
            persistence=persistence,
            addresses=addresses,
            settings=settings,
            extra=extra,
            port=port,
            acceptor_params=acceptor_params,
        )
        port = port or self._port_of(name)
        connections = ""
        if mirror_to is not None:
            uri = f"tcp://127.0.0.1:{self._port_of(mirror_to)}"
            attributes = f'uri="{uri}" name="{mirror_to}" retry-interval="100"'
            connections = f"<amqp-connection {attributes}>{mirror}</amqp-connection>"
        home = self.home / name
        home.mkdir(parents=True, exist_ok=True)
        if node_id is not None:
            (home / "journal").mkdir(exist_ok=True)
            (home / "journal" / NODE_ID_FILE).write_text(node_id + "\n")
        xml = BROKER_XML.format(
            name=name,
            persistence=str(persistence).lower(),
            home=home,
            port=port,
            connections=connections,
            addresses=addresses,
            settings=settings,
            extra=extra,
            acceptor_params=f";{acceptor_params}" if acceptor_params else "",
        )
        (home / "broker.xml").write_text(xml)
        config, _ = load_config(home / "broker.xml")
        broker = Broker(config, self.loop)  # type: ignore[arg-type]  # a MemoryLoop stands for asyncio's
        self.brokers[name] = broker
        return broker

    def _port_of(self, name: str) -> int:
        if name not in self._assigned:
            self._assigned[name] = next(self._ports)
        return self._assigned[name]

    def start(self, name: str) -> Broker:
        broker = self.brokers[name]
        broker.assemble()
        self.ports[self._port_of(name)] = broker
        self.sockets[name] = set()
        self.down.discard(self._port_of(name))
        assert broker.connections is not None
        broker.connections.start()
        self.pump()
        return broker

    def start_all(self) -> None:
        for name in self.brokers:
            broker = self.brokers[name]
            broker.assemble()
            self.ports[self._port_of(name)] = broker
            self.sockets[name] = set()
        for broker in self.brokers.values():
            assert broker.connections is not None
            broker.connections.start()
        self.pump()

    def stop(self, name: str) -> None:
        """The broker goes away: its sockets are cut and its port refuses connections."""
        broker = self.brokers[name]
        self.down.add(self._port_of(name))
        for sock in list(self.sockets.get(name, ())):
            if sock.transport is not None:
                sock.transport.close()
        if broker.connections is not None:
            broker.connections.stop()
        self.pump()
        for timer in (broker._retry_timer, broker._disk_timer, broker._write_retry):
            if timer is not None:
                timer.cancel()
        broker.server.stop()

    def crash(self, name: str) -> Broker:
        """kill -9 of broker `name`, then a new broker on what its disk held at that instant.

        The journal batches already handed to the writer thread are on disk (a batch is written whole or
        cut off by recovery); nothing the loop would still have done is: no confirmation, no Accepted, no
        clean stop. Its connections drop as a killed process's do."""
        broker, callbacks = self.brokers[name], self.loop.from_threads
        before = len(callbacks)
        journal = broker.server.journal
        if journal is not None and broker.config.persistence_enabled:
            journal.flush()  # the writer thread's queue, not the loop's callbacks
        while len(callbacks) > before:  # what the writer handed back to this broker's loop dies with it
            callbacks.pop()
        home, snapshot = self.home / name, self.home / f"{name}.at-crash"
        shutil.rmtree(snapshot, ignore_errors=True)
        shutil.copytree(home, snapshot)
        self.stop(name)  # what the old broker does from here on is thrown away with its files
        shutil.rmtree(home)
        snapshot.rename(home)
        self.broker(name, **self._options[name])
        return self.start(name)

    def server(self, name: str) -> Any:
        return self.brokers[name].server

    def depth(self, name: str, queue: str) -> int:
        q = self.brokers[name].server.queues.get(queue)
        return 0 if q is None else q.depth

    # ------------------------------------------------------------------------------------ wire

    def connect(self, port: int, factory: Callable[[], Any]) -> tuple[MemoryTransport, Any]:
        broker = self.ports.get(port)
        if broker is None or port in self.down:
            raise ConnectionRefusedError(f"nothing listens on memory port {port}")
        name = broker.server.name
        client, server = MemoryTransport(self, f"to-{name}"), MemoryTransport(self, f"{name}-in")
        client.peer, server.peer = server, client
        client.protocol = factory()
        acceptor = broker.config.acceptors[0]
        registry = self.sockets[name]
        sock = AmqpSocket(broker.server, acceptor, broker.services, broker.turn, registry)
        server.protocol = sock
        self.transports += [client, server]
        sock.connection_made(server)
        client.protocol.connection_made(client)
        return client, client.protocol

    def hold_from(self, name: str) -> None:
        """Bytes broker `name` writes to the connections made to it wait (e.g. its Accepted), until
        `release_from` or a cut, which loses them."""
        self.held.add(f"to-{name}")

    def release_from(self, name: str) -> None:
        self.held.discard(f"to-{name}")

    def cut(self, name: str) -> None:
        """Cut every socket into broker `name` (a network partition of its listener), keeping it up."""
        for sock in list(self.sockets.get(name, ())):
            if sock.transport is not None:
                sock.transport.close()
        self.pump()

    def pump(self, limit: int = 100_000) -> None:
        """Run callbacks and move bytes until nothing moves (journal writes included)."""
        for _ in range(limit):
            moved = self.loop.run_ready()
            for t in list(self.transports):
                moved = t.deliver() or moved
            while self.to_lose:
                t = self.to_lose.pop(0)
                if not t.lost:
                    t.lost = True
                    t.protocol.connection_lost(None)
                    moved = True
            if moved:
                continue
            if self._flush_journals():
                continue
            self.transports = [t for t in self.transports if not t.lost]
            return
        raise AssertionError("the pump never came to rest")

    def _flush_journals(self) -> bool:
        """Wait for the journals' writer threads (the only other threads there are)."""
        for broker in self.brokers.values():
            journal = broker.server.journal
            if journal is not None and broker.server.started and broker.config.persistence_enabled:
                journal.flush()
        return bool(self.loop.from_threads) and not self.loop.threads_held

    def hold_disk(self) -> None:
        """The journals' writes complete, but their completions wait (a slow disk): nothing confirmed
        waits for them until `release_disk`."""
        self.loop.threads_held = True

    def release_disk(self) -> None:
        self.loop.threads_held = False
        self.pump()

    def disk_full(self, name: str) -> None:
        """Broker `name`'s journal refuses its next batch as a full disk does (ENOSPC), until the broker's
        persistence retries (`persistence.retry()`, as it does once the disk has room)."""
        journal = self.server(name).journal
        journal._no_space = OSError(errno.ENOSPC, "No space left on device")

    # --------------------------------------------------------------------------------- clients

    def client(self, name: str) -> MemoryClient:
        client = MemoryClient(self)
        self.connect(self._port_of(name), lambda: client)
        self.pump()
        return client


class MemoryClient:
    """An AMQP client on our engine over a memory transport: send, receive, settle, and see outcomes."""

    def __init__(self, network: Network) -> None:
        self.network = network
        self.transport: MemoryTransport | None = None
        self.conn = Connection(self, server=False, container_id=f"client-{id(self)}")
        self.session: Session | None = None
        self.senders: dict[str, Link] = {}
        self.receivers: dict[str, Link] = {}
        self.outcomes: dict[int, Any] = {}  # delivery id -> settled state
        # the broker's word on what it sent us (settled, state): its settlement after a commit
        self.sent_states: dict[int, tuple[bool, Any]] = {}
        self.received_states: dict[int, Any] = {}  # the state a transfer to us carried (transactional)
        self.received: dict[str, list[tuple[int, bytes]]] = {}
        self.tag = 0
        self.refusals: list[tuple[str, str]] = []  # (condition, description) of links the broker detached

    # asyncio-protocol side
    def connection_made(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self.conn.start_client(sasl=True)
        self._write()

    def data_received(self, data: bytes) -> None:
        self.conn.receive(data)
        self._write()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def _write(self) -> None:
        out = self.conn.take_output()
        if out and self.transport is not None:
            self.transport.write(out)

    # engine handler
    def on_sasl_mechanisms(self, conn: Connection, offered: list[str]) -> None:
        conn.sasl_init("ANONYMOUS", b"")

    def on_open(self, conn: Connection, open_: Any) -> None:
        self.session = conn.begin()

    def on_delivery(
        self, link: Link, delivery_id: int, tag: bytes, settled: bool, payload: bytes, message_format: int
    ) -> None:
        self.received.setdefault(link.name, []).append((delivery_id, payload))
        if link.delivery_state is not None:
            self.received_states[delivery_id] = link.delivery_state

    def on_disposition(
        self, session: Session, role: bool, first: int, last: int, settled: bool, state: Any
    ) -> None:
        if not role:  # the broker, as the sender, about a delivery it sent us (settled after a commit)
            for i in range(first, last + 1):
                self.sent_states[i] = (settled, state)
            return
        for i in range(first, last + 1):
            if i in session.outgoing_unsettled:
                self.outcomes[i] = state
                if settled:
                    session.outgoing_unsettled.pop(i, None)

    def on_detach(self, link: Link, detach: Any) -> None:
        if detach.error is not None:
            self.refusals.append((str(detach.error.condition), str(detach.error.description)))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *args: None
        raise AttributeError(name)

    # the test's side
    def send(
        self,
        address: str | None,
        body: str,
        durable: bool = True,
        to: str | None = None,
        properties: dict[str, Any] | None = None,
        priority: int = 4,
        txn: bytes | None = None,
    ) -> int:
        """Send one message (`address` None: an anonymous sender, the message's `to` decides), in
        transaction `txn` if given; returns its delivery id (its outcome lands in `outcomes` when
        settled)."""
        key = address or ""
        link = self.senders.get(key)
        if link is None:
            assert self.session is not None, "the client is not connected"
            attach = Attach(name=f"send-{key}", role=False, source=Source(), target=Target(address=address))
            link = self.senders[key] = self.conn.attach(self.session, attach)
            self._write()
            self.network.pump()
        assert link.credit > 0, f"no credit to send to {address}"
        self.tag += 1
        payload = build_message(
            body, durable=durable, to=to, application_properties=properties, priority=priority
        )
        state = None if txn is None else TransactionalState(txn).encode_amqp()
        delivery_id = self.conn.send_delivery(link, self.tag.to_bytes(4, "big"), payload, False, state=state)
        self._write()
        return delivery_id

    # transactions: a coordinator link, declares and discharges as a transaction controller sends them

    def _controller(self) -> Link:
        link = self.senders.get("$coordinator")
        if link is None:
            assert self.session is not None, "the client is not connected"
            attach = Attach(name="txn-controller", role=False, source=Source(), target=Coordinator())
            link = self.senders["$coordinator"] = self.conn.attach(self.session, attach)
            self._write()
            self.network.pump()
        return link

    def control(self, request: Declare | Discharge) -> Any:
        """Send a declare or a discharge, pump, and return the coordinator's answer (its settled state;
        None while unanswered)."""
        link = self._controller()
        assert link.credit > 0, "no credit on the coordinator link"
        self.tag += 1
        delivery_id = self.conn.send_delivery(
            link, self.tag.to_bytes(4, "big"), build_message(request), False
        )
        self._write()
        self.network.pump()
        return self.outcomes.get(delivery_id)

    def declare(self) -> bytes:
        answer = self.control(Declare())
        assert isinstance(answer, Declared), f"declare answered {answer!r}"
        return bytes(answer.txn_id)

    def discharge(self, txn: bytes, fail: bool = False) -> Any:
        """Commit (or roll back, `fail`) and return the answer: Accepted, or Rejected with the reason."""
        return self.control(Discharge(txn, fail))

    def take(self, address: str, credit: int, txn: bytes | None = None) -> list[tuple[int, bytes]]:
        """Grant `credit` on a receiver of `address` (acquiring in transaction `txn` if given), pump, and
        return what arrived (delivery id, payload), left unsettled (see `settle`)."""
        link = self.receivers.get(address)
        if link is None:
            assert self.session is not None, "the client is not connected"
            attach = Attach(
                name=f"recv-{address}", role=True, source=Source(address=address), target=Target()
            )
            link = self.receivers[address] = self.conn.attach(self.session, attach)
        properties = None if txn is None else {Symbol("txn-id"): txn}
        self.conn.flow(link, credit=credit, properties=properties)
        self._write()
        self.network.pump()
        return self.received.pop(link.name, [])

    def settle(
        self, delivery_id: int, state: Any = None, settled: bool = True, txn: bytes | None = None
    ) -> None:
        """The outcome of a received delivery (Accepted by default), in transaction `txn` if given."""
        assert self.session is not None
        outcome = Accepted() if state is None else state
        if txn is not None:
            outcome = TransactionalState(txn, outcome)
        self.conn.settle_incoming(self.session, delivery_id, delivery_id, outcome.encode_amqp(), settled)
        self._write()
        self.network.pump()

    def mirror_link(self, remote_id: str, name: str = "scripted") -> Link:
        """Attach a mirror link as the source broker `remote_id` would (a scripted mirror source: its
        deliveries are raw payloads, sent with `send_raw`, in whatever order a test needs)."""
        from mirror.attach import mirror_source_attach

        assert self.session is not None, "the client is not connected"
        link = self.conn.attach(self.session, mirror_source_attach(name, remote_id, f"{name}-{id(self)}"))
        self._write()
        self.network.pump()
        assert link.remote_attach is not None, "the mirror link was not answered"
        return link

    def send_raw(self, link: Link, payload: bytes) -> int:
        """One delivery of these exact bytes, unsettled; returns its delivery id (see `settled`)."""
        assert link.credit > 0, "no credit on the link"
        self.tag += 1
        delivery_id = self.conn.send_delivery(link, self.tag.to_bytes(4, "big"), payload, False)
        self._write()
        return delivery_id

    def settled(self, delivery_id: int) -> bool:
        """Whether the broker settled the delivery (with any outcome)."""
        return delivery_id in self.outcomes

    def accepted(self, delivery_id: int) -> bool:
        return isinstance(self.outcomes.get(delivery_id), Accepted)

    def rejected(self, delivery_id: int) -> str | None:
        """The condition a delivery was rejected with (None: not rejected)."""
        state = self.outcomes.get(delivery_id)
        if isinstance(state, Rejected) and state.error is not None:
            return str(state.error.condition)
        return None

    def receive(self, address: str, credit: int) -> list[bytes]:
        """Grant `credit` on a receiver of `address`, pump, accept and return what arrived."""
        link = self.receivers.get(address)
        if link is None:
            assert self.session is not None, "the client is not connected"
            attach = Attach(
                name=f"recv-{address}", role=True, source=Source(address=address), target=Target()
            )
            link = self.receivers[address] = self.conn.attach(self.session, attach)
        self.conn.flow(link, credit=credit)
        self._write()
        self.network.pump()
        got = self.received.pop(link.name, [])
        for delivery_id, _ in got:
            assert self.session is not None
            self.conn.settle_incoming(self.session, delivery_id, delivery_id, Accepted().encode_amqp())
        self._write()
        self.network.pump()
        return [payload for _, payload in got]
