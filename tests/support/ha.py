"""HA pairs of broker processes (tests/ha/): shared store on one data directory, or replicated with a
lock manager (a ZooKeeper ensemble, or lock files on one host); traffic through the failover client
across a failure, with a send cut off in doubt after the broker stored it (a `Relay` that loses the
broker's frames); and a scripted backup that settles the replication stream when the test says."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from proton import Message, ubyte, uint

from broker_core.ha.replication_wire import LIVE, REPLICATION_ADDRESS, SYNCHRONIZED
from connections.failover import FailoverConnection, InDoubtError, ReceiveTimeout
from tests.peers.ports import LOOPBACK, WaitTimeout, free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.certs import CertFiles
from tests.support.client import receive, send
from tests.support.peer import Frame, LinkReply, ScriptedClient, TransferRecord, performative
from tests.support.peer.connection import PeerLink

FAST = "initialReconnectDelay=10&maxReconnectDelay=200&randomize=false"
ZOOKEEPER = "org.apache.activemq.artemis.lockmanager.zookeeper.CuratorDistributedLockManager"
FILE_LOCKS = "org.apache.activemq.artemis.lockmanager.file.FileBasedLockManager"
CLUSTER = "<cluster-user>cluster</cluster-user><cluster-password>cluster-secret</cluster-password>"
ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
IN_DOUBT = "orders.in-doubt"  # the queue of `InDoubtSend`'s messages: nothing takes them but its check
PROBE = "orders.probe"  # what `still_serving` sends and takes back
PAIR_ADDRESSES = ORDERS + "".join(
    f'<address name="{name}"><anycast><queue name="{name}"/></anycast></address>'
    for name in (IN_DOUBT, PROBE)
)


def ha_xml(role: str, other_port: int, options: str = "") -> str:
    return (
        f"<ha-policy><shared-store><{role}>{options}</{role}></shared-store></ha-policy>"
        f'<connectors><connector name="partner">tcp://127.0.0.1:{other_port}</connector></connectors>'
    )


def shared_pair(
    home: Path, primary_options: str = "", backup_options: str = "", extra: str = ""
) -> tuple[BrokerProcess, BrokerProcess]:
    """Two brokers whose data directories are one (`home/shared`), each with the other as its partner."""
    primary, backup = shared_servers(
        home, [("primary", "primary", primary_options), ("backup", "backup", backup_options)], extra
    )
    return primary, backup


def shared_servers(
    home: Path, members: Sequence[tuple[str, str, str]], extra: str = ""
) -> list[BrokerProcess]:
    """Brokers whose data directories are one (`home/shared`), each (name, role, options); the first
    member is every other's partner (where a passive one sends clients), and the second the first's."""
    ports = [free_port() for _ in members]
    shared = home / "shared"
    brokers = []
    for i, (name, role, options) in enumerate(members):
        port, other = ports[i], ports[1] if i == 0 else ports[0]
        b = BrokerProcess(
            home / name,
            name=name,
            port=port,
            xml_kwargs={"addresses": PAIR_ADDRESSES, "extra": ha_xml(role, other, options) + extra},
            ready_text="AMQ221007" if role == "primary" else "passive on",
        )
        b.write_config()
        text = b.config_path.read_text()
        for kind in ("journal", "bindings", "paging", "large-messages"):
            text = text.replace(f"<{kind}-directory>data/{kind}<", f"<{kind}-directory>{shared}/{kind}<")
        b.config_path.write_text(text)
        brokers.append(b)
    return brokers


def lock_manager(class_name: str, **properties: str) -> str:
    """A `<manager>` element: its class and properties (keys with '-' given with '_')."""
    props = "".join(f'<property key="{k.replace("_", "-")}" value="{v}"/>' for k, v in properties.items())
    return f"<manager><class-name>{class_name}</class-name><properties>{props}</properties></manager>"


def replicated_primary(home: Path, manager: str, options: str = "") -> BrokerProcess:
    """A replicated primary alone (no partner): what a scripted backup replicates from."""
    policy = f"<ha-policy><replication><primary>{manager}{options}</primary></replication></ha-policy>"
    return BrokerProcess(
        home,
        name="primary",
        xml_kwargs={"addresses": ORDERS, "extra": policy + CLUSTER},
        ready_text="AMQ221007",
    )


def replicated_pair(
    home: Path,
    connect_string: str,
    namespace: str,
    primary_options: str = "",
    backup_options: str = "",
    *,
    roles: tuple[str, str] = ("primary", "backup"),
    ttl: int = 60000,
    tls: CertFiles | None = None,
    extra: str = "",
    cluster: str = "",
) -> tuple[BrokerProcess, BrokerProcess]:
    """Two brokers, each with its own data directories, replicating through the cluster user, with a
    ZooKeeper lock manager (a short session: failover takes about session-ms). Each finds the other as
    an Artemis pair does: a `<cluster-connection>` whose static connector is the partner; `ttl` is its
    connection-ttl (how soon a silent partner counts as gone), `cluster` more of its elements. With `tls`,
    both acceptors serve TLS only and each connector trusts the certificate: replication runs over TLS."""
    first, second = replicated_servers(
        home,
        connect_string,
        namespace,
        [("primary", roles[0], primary_options), ("backup", roles[1], backup_options)],
        ttl=ttl,
        tls=tls,
        extra=extra,
        cluster=cluster,
    )
    return first, second


def replicated_servers(
    home: Path,
    connect_string: str,
    namespace: str,
    members: Sequence[tuple[str, str, str]],
    *,
    ttl: int = 60000,
    tls: CertFiles | None = None,
    extra: str = "",
    cluster: str = "",
    partners: dict[str, list[int]] | None = None,
    hosts: dict[str, str] | None = None,
    prefixes: dict[str, tuple[str, ...]] | None = None,
    port: int | None = None,
    manager: str | None = None,
) -> list[BrokerProcess]:
    """Replicated servers of one lock manager, each (name, role, options): each one's static connectors
    are the others', in order (or `partners[name]`: ports of relays, say). `hosts`, `prefixes`: where each
    listens and what it runs under (a network namespace of its own: then `port` is everyone's).
    `manager`: the `<manager>` element (ZooKeeper's at `connect_string` by default; "" for quorum voting)."""
    if manager is None:
        zookeeper = {"connect_string": connect_string, "namespace": namespace, "session_ms": "2000"}
        manager = lock_manager(ZOOKEEPER, **zookeeper)
    acceptor = f"sslEnabled=true;sslCertPath={tls.cert};sslKeyPath={tls.key}" if tls else ""
    trust = f"?sslEnabled=true;trustStorePath={tls.cert}" if tls else ""
    ports = {name: port or free_port() for name, _, _ in members}
    where = {name: (hosts or {}).get(name, "127.0.0.1") for name, _, _ in members}
    brokers = []
    for name, role, options in members:
        others = [(where[o], p) for o, p in ports.items() if o != name]
        if partners and name in partners:
            others = [("127.0.0.1", p) for p in partners[name]]
        policy = f"<ha-policy><replication><{role}>{manager}{options}</{role}></replication></ha-policy>"
        connectors = (
            f'<connectors><connector name="self">tcp://{where[name]}:{ports[name]}{trust}</connector>'
            + "".join(
                f'<connector name="partner{i}">tcp://{host}:{p}{trust}</connector>'
                for i, (host, p) in enumerate(others)
            )
            + '</connectors><cluster-connections><cluster-connection name="pair">'
            f"<connector-ref>self</connector-ref><connection-ttl>{ttl}</connection-ttl>{cluster}"
            "<static-connectors>"
            + "".join(f"<connector-ref>partner{i}</connector-ref>" for i in range(len(others)))
            + "</static-connectors></cluster-connection></cluster-connections>"
        )
        brokers.append(
            BrokerProcess(
                home / name,
                name=name,
                port=ports[name],
                xml_kwargs={
                    "addresses": PAIR_ADDRESSES,
                    "extra": policy + connectors + CLUSTER + extra,
                    "acceptor_params": acceptor,
                },
                ready_text="AMQ221007" if role == "primary" else "passive on",
                host=where[name],
                prefix=(prefixes or {}).get(name, ()),
            )
        )
    return brokers


def journal_of(broker: BrokerProcess) -> Path:
    return broker.home / "data" / "journal"


# ------------------------------------------------------------------------------------------- waiting


def stays(condition: Callable[[], bool], seconds: float, what: str) -> None:
    """Assert `condition()` stays false for `seconds` (an absence has no event to wait for: it is
    polled until the window closes)."""
    try:
        wait_until(condition, seconds, what)
    except WaitTimeout:
        return
    raise AssertionError(f"{what} happened within {seconds:g}s")


def still_serving(broker: BrokerProcess, seconds: float, what: str) -> None:
    """A server that took over still serves `seconds` later: it did not halt (`AMQ222325`) or exit in
    that window, and then a durable send to it is Accepted."""
    assert broker.proc is not None

    def gone() -> bool:
        return (broker.proc is not None and broker.proc.poll() is not None) or "AMQ222325" in broker.log()

    stays(gone, seconds, f"{what} halting")
    assert send(broker.url, PROBE, ["still serving"]) == 1
    assert [m.body for m in receive(broker.url, PROBE, 1, timeout=5)] == ["still serving"]


def journal_holds(directories: Sequence[Path], text: str) -> bool:
    """Whether the files of every one of `directories` (a broker's journal) contain `text`: a record
    of it was written there (a message's bytes are journalled as they came)."""
    needle = text.encode()
    for directory in directories:
        files = [f for f in directory.iterdir() if f.is_file()] if directory.is_dir() else []
        if not any(needle in f.read_bytes() for f in files):
            return False
    return True


# ------------------------------------------------------------------------------------ a lossy network

_EMPTY_FRAME = struct.pack(">IBBH", 8, 2, 0, 0)  # an AMQP heartbeat
_HEARTBEAT = 0.25  # seconds between heartbeats to a client whose broker's frames are held back


class Relay:
    """A TCP relay in front of one broker. `hold()` makes the connections open at that moment lose
    every frame the broker sends from then on (what a client sends still goes through), while the
    relay keeps each client's connection alive with heartbeats, until the broker gives the connection
    up: it closes it (it stopped or stepped down: its Close goes through) or its socket goes (it died).
    So a send that reached the broker has its outcome cut off whatever the broker does next: the client
    holds it in doubt. Connections made later go through untouched.

    `pause_when(matches)`: the first frame from the broker that `matches` (a replication packet of some
    type, say) and everything after it on that connection is kept back, not lost, until `resume()`."""

    def __init__(self, port: int, host: str = LOOPBACK) -> None:
        self.target = port
        self.host = host  # the broker's
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port: int = self._listener.getsockname()[1]
        self._pipes: list[_Pipe] = []
        self._lock = threading.Lock()
        self._closed = False
        self.pause_matches: Callable[[bytes], bool] | None = None
        self.paused = threading.Event()  # a connection's frames are kept back
        threading.Thread(target=self._accept, name=f"relay-{port}", daemon=True).start()

    @property
    def url(self) -> str:
        return f"amqp://{LOOPBACK}:{self.port}"

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def hold(self) -> None:
        with self._lock:
            for pipe in self._pipes:
                pipe.held.set()

    def pause_when(self, matches: Callable[[bytes], bool]) -> None:
        self.pause_matches = matches

    def resume(self) -> None:
        """Deliver what was kept back, in order, and relay as before (the pause happens once)."""
        self.pause_matches = None
        with self._lock:
            pipes = list(self._pipes)
        for pipe in pipes:
            pipe.resume()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            pipes, self._pipes = self._pipes, []
        for pipe in pipes:
            pipe.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.host, self.target), timeout=2)
            except OSError:
                client.close()  # nothing listens there: as if the broker refused
                continue
            upstream.settimeout(None)
            pipe = _Pipe(client, upstream, self)
            with self._lock:
                self._pipes = [p for p in self._pipes if not p.closed.is_set()] + [pipe]
            pipe.start()


def _unit_size(buffer: bytes) -> int | None:
    """The size of the unit `buffer` begins with, None until that can be told: an HTTP upgrade's answer
    (a client with httpUpgradeEnabled), a protocol header, or an AMQP frame."""
    if buffer.startswith(b"HTTP/"):
        end = buffer.find(b"\r\n\r\n")
        return None if end < 0 else end + 4
    if len(buffer) < 8:
        return None
    return 8 if buffer.startswith(b"AMQP") else max(int.from_bytes(buffer[:4], "big"), 8)


class _Pipe:
    """One relayed connection; the broker's bytes go to the client whole frames at a time, so that a
    hold falls between two frames and heartbeats can go in their place."""

    def __init__(self, client: socket.socket, upstream: socket.socket, relay: Relay) -> None:
        self.client, self.upstream, self.relay = client, upstream, relay
        self.held = threading.Event()
        self.closed = threading.Event()
        self._send = threading.Lock()
        self._kept: list[bytes] | None = None  # paused: the frames kept back

    def resume(self) -> None:
        with self._send:
            kept, self._kept = self._kept, None
            for unit in kept or ():
                with contextlib.suppress(OSError):
                    self.client.sendall(unit)

    def _pausing(self, unit: bytes) -> bool:
        """Whether `unit` is kept back (the pause begins with the first frame that matches)."""
        with self._send:
            if self._kept is None:
                matches = self.relay.pause_matches
                if matches is None or not matches(unit):
                    return False
                self._kept = []
                self.relay.pause_matches = None
                self.relay.paused.set()
            self._kept.append(unit)
            return True

    def start(self) -> None:
        for target in (self._up, self._down, self._beat):
            threading.Thread(target=target, daemon=True).start()

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _to_client(self, data: bytes) -> None:
        with self._send:
            self.client.sendall(data)

    def _up(self) -> None:
        with contextlib.suppress(OSError):
            while data := self.client.recv(65536):
                self.upstream.sendall(data)
        self.close()

    def _down(self) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while data := self.upstream.recv(65536):
                buffer += data
                while True:
                    size = _unit_size(buffer)
                    if size is None or len(buffer) < size:
                        break
                    unit, buffer = buffer[:size], buffer[size:]
                    if self._pausing(unit):
                        continue
                    if not self.held.is_set():
                        self._to_client(unit)
                    elif _is_close(unit):
                        self._to_client(unit)
                        self.close()
                        return
        self.close()

    def _beat(self) -> None:
        while not self.closed.wait(_HEARTBEAT):
            if self.held.is_set():
                with contextlib.suppress(OSError):
                    self._to_client(_EMPTY_FRAME)


def packet_of_type(kind: int) -> Callable[[bytes], bool]:
    """Matches a frame carrying a replication packet of `kind` (replication_wire.py): the first data
    section of its message starts with that type byte."""
    section = b"\x00\x53\x75\xb0"

    def matches(frame: bytes) -> bool:
        at = frame.find(section)
        return at >= 0 and len(frame) > at + 8 and frame[at + 8] == kind

    return matches


def _is_close(frame: bytes) -> bool:
    """Whether an AMQP frame carries a Close performative (descriptor 0x18, small or long form)."""
    if len(frame) < 8 or frame.startswith(b"AMQP"):
        return False
    body = frame[frame[4] * 4 :]
    return body.startswith(b"\x00\x53\x18") or body.startswith(b"\x00\x80" + (0x18).to_bytes(8, "big"))


# ---------------------------------------------------------------------------------- once and only once


def failover_uri(urls: Sequence[str], nested: str = "") -> str:
    """The failover client's URI over `urls`, reconnecting fast; `nested` options go to each one."""
    inner = ",".join(f"{url}?{nested}" if nested else url for url in urls)
    return f"failover:({inner})?{FAST}"


class Producer:
    """Sends bodies through the failover client, each once: every message carries its own
    `_AMQ_DUPL_ID`, and a send left in doubt is sent again with it (seed 001 §5); the broker's duplicate
    detection stores it once. `sending` is the body in flight; `retried` has a body for each retry."""

    def __init__(self, address: str = "orders") -> None:
        self.address = address
        self.run = uuid.uuid4().hex[:8]  # duplicate ids of their own: another producer's are new
        self.sending: int | None = None
        self.confirmed: list[int] = []
        self.retried: list[int] = []
        self.stop = threading.Event()  # a failed test must not leave it retrying for ever
        self.errors: list[BaseException] = []
        self._thread: threading.Thread | None = None
        self._hold: tuple[int, Sequence[Relay]] | None = None  # (from which body, relays): see hold_at
        self._held: list[int] = []  # the body sent first once the relays held

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()

    def id_of(self, body: int) -> str:
        return f"{self.run}-{body:08d}"  # fixed width: no id is a prefix of another

    def start(self, uri: str, bodies: Iterable[int]) -> None:
        """Send `bodies` on a thread of its own, through a failover client on `uri`; `join` waits."""

        def run() -> None:
            try:
                with FailoverConnection(uri) as conn:
                    self.send_all(conn, bodies)
            except BaseException as exc:
                self.errors.append(exc)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def join(self, seconds: float) -> None:
        assert self._thread is not None
        self._thread.join(seconds)
        unfinished = self._thread.is_alive()
        self.stop.set()
        assert not unfinished, f"sends unfinished after {seconds:g}s: {self.summary()}"
        assert not self.errors, self.errors

    def summary(self) -> str:
        doing = f", {self.sending} in flight" if self.sending is not None else ""
        return f"{len(self.confirmed)} confirmed ({len(self.retried)} retried in doubt{doing})"

    def send_all(self, conn: FailoverConnection, bodies: Iterable[int]) -> None:
        sender = conn.sender(self.address)
        for body in bodies:
            message = Message(body=body, durable=True, properties={"_AMQ_DUPL_ID": self.id_of(body)})
            hold = self._hold
            if hold is not None and body >= hold[0]:
                self._hold = None
                for relay in hold[1]:
                    relay.hold()  # between two sends: this one's outcome is lost whatever comes
                self._held.append(body)
            self.sending = body
            while not self.stop.is_set():
                try:
                    sender.send(message)
                except InDoubtError:
                    self.retried.append(body)
                    continue
                self.confirmed.append(body)
                break
            self.sending = None
            if self.stop.is_set():
                return

    def hold_at(self, relays: Sequence[Relay], body: int) -> None:
        """Before the first send of `body` or a later one, hold back the brokers' frames on the producer's
        connections through `relays`: that send's outcome is lost, whatever the broker does."""
        self._hold = (body, relays)

    def wait_held_and_stored(self, journals: Sequence[Path], what: str) -> int:
        """Wait for the send held back (`hold_at`) to be in every one of `journals`, unconfirmed: from
        then on a failure leaves it in doubt, stored. Its body."""
        wait_until(lambda: bool(self._held), 30, f"the producer's next send, before {what}")
        body = self._held[0]
        wait_until(lambda: journal_holds(journals, self.id_of(body)), 30, f"send {body} to be stored")
        assert self.sending == body and body not in self.confirmed, self.summary()
        return body

    def check_retried(self, body: int) -> None:
        """The send cut off in doubt was sent again (and, a test checks, stored once)."""
        assert body in self.retried, f"the send of {body} left in doubt was never retried: {self.retried}"


class InDoubtSend:
    """One send stored by the active server and then cut off in doubt by a failure, every run: a producer
    of its own, on a failover client through relays in front of the pair, sends a first message (0) to
    `IN_DOUBT`, then a second (1) with the brokers' frames held back, until it is in `journals` (whatever
    serves next): `ready`. The failure that comes next leaves the client in doubt, and it sends the
    second again with its `_AMQ_DUPL_ID` to whichever server serves then: duplicate detection must store
    it once, which `check` counts (it fails with duplicate detection off)."""

    def __init__(self, pair: tuple[BrokerProcess, BrokerProcess], nested: str = "") -> None:
        self.relays = [Relay(broker.port, broker.host) for broker in pair]
        self.uri = failover_uri([broker.url for broker in pair], nested)
        self.relayed = failover_uri([relay.url for relay in self.relays], nested)
        self.producer = Producer(IN_DOUBT)

    def __enter__(self) -> InDoubtSend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.producer.stop.set()
        for relay in self.relays:
            relay.close()

    def ready(self, journals: Sequence[Path], what: str) -> None:
        self.producer.hold_at(self.relays, 1)
        self.producer.start(self.relayed, range(2))
        self.producer.wait_held_and_stored(journals, what)

    def check(self, seconds: float = 30) -> None:
        """The send cut off was retried, and each message is stored once (drained through the pair)."""
        self.producer.join(seconds)
        self.producer.check_retried(1)
        got: list[int] = []
        with FailoverConnection(self.uri) as conn:
            receiver = conn.receiver(IN_DOUBT)
            with contextlib.suppress(ReceiveTimeout):
                while True:
                    got.append(receiver.receive(timeout=1).body)
                    receiver.accept()
        assert got == [0, 1], f"stored and retried in doubt, then found {got}: {self.producer.summary()}"


TRAFFIC_SECONDS = 45.0  # a traffic run's wait for its last message: two fit in the 120 s test timeout


@dataclass
class Traffic:
    """What a producer and a consumer on the failover client saw across a failure (counts printed)."""

    producer: Producer
    received: list[int] = field(default_factory=list)
    accepts_in_doubt: int = 0  # the broker may deliver these again
    # the consumer's connection (its generation) each message first came on, and the last one it used:
    # an accept is not confirmed by the broker, so any message taken on a connection that was then lost
    # may come again (at-least-once delivery); one taken on the connection still in use may not
    first_taken_on: dict[int, int] = field(default_factory=dict)
    last_connection: int = 0
    errors: list[BaseException] = field(default_factory=list)

    @property
    def sent(self) -> int:
        """Sends confirmed so far (each is retried while in doubt: all of them in the end)."""
        return len(self.producer.confirmed)

    def redelivered(self) -> list[int]:
        return sorted(body for body, n in Counter(self.received).items() if n > 1)

    def summary(self) -> str:
        return (
            f"{self.producer.summary()}, {len(self.received)} received: {len(set(self.received))} "
            f"distinct, {len(self.redelivered())} redelivered after their connection was lost "
            f"({self.accepts_in_doubt} accepts known to be in doubt)"
        )


class FailoverTraffic:
    """A producer (`Producer`: each message once, by duplicate detection) and a consumer, each on its
    own failover client and thread, until `count` distinct messages are received."""

    def __init__(self, uri: str, count: int, address: str = "orders") -> None:
        self.uri, self.count, self.address = uri, count, address
        self.producer = Producer(address)
        self.traffic = Traffic(self.producer)
        self._threads = [
            threading.Thread(target=self._guard(self._produce), daemon=True),
            threading.Thread(target=self._guard(self._consume), daemon=True),
        ]

    def __enter__(self) -> FailoverTraffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.producer.stop.set()  # a failed test must not leave them retrying for ever

    def join(self, timeout: float) -> Traffic:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0))
        unfinished = any(t.is_alive() for t in self._threads)
        assert not unfinished, f"traffic unfinished after {timeout:g}s: {self.traffic.summary()}"
        assert not self.traffic.errors, self.traffic.errors
        return self.traffic

    def _guard(self, run: Callable[[], None]) -> Callable[[], None]:
        def guarded() -> None:
            try:
                run()
            except BaseException as exc:
                self.traffic.errors.append(exc)

        return guarded

    def _produce(self) -> None:
        with FailoverConnection(self.uri) as conn:
            self.producer.send_all(conn, range(self.count))

    def _consume(self) -> None:
        seen: set[int] = set()
        with FailoverConnection(self.uri) as conn:
            receiver = conn.receiver(self.address)
            while len(seen) < self.count and not self.producer.stop.is_set():
                try:
                    message = receiver.receive(timeout=1)
                except ReceiveTimeout:
                    continue
                self.traffic.received.append(message.body)
                self.traffic.first_taken_on.setdefault(message.body, conn.generation)
                self.traffic.last_connection = conn.generation
                seen.add(message.body)
                try:
                    receiver.accept()
                except InDoubtError:
                    self.traffic.accepts_in_doubt += 1


def traffic_through(
    pair: tuple[BrokerProcess, BrokerProcess],
    act: Callable[[], object],
    what: str,
    journals: Sequence[Path],
    *,
    count: int = 600,
    nested: str = "",
    seconds: float = TRAFFIC_SECONDS,
) -> Traffic:
    """Run `count` messages through the failover client while `act()` fails the pair over (once a third
    are confirmed), with one more send stored in `journals` (whatever serves next) and cut off in doubt
    by the failure (`InDoubtSend`). Asserts every message was received, nothing never sent was, a message
    came twice only after an accept left in doubt, and the send cut off was retried and stored once. The
    counts are printed. `seconds` bounds the wait for the last message (its own diagnostic, well inside
    the test timeout)."""
    uri = failover_uri([broker.url for broker in pair], nested)
    with InDoubtSend(pair, nested) as in_doubt, FailoverTraffic(uri, count) as running:
        in_doubt.ready(journals, what)
        wait_until(lambda: running.traffic.sent >= count // 3, 30, f"sends before {what}")
        act()
        seen = running.join(timeout=seconds)
        in_doubt.check()
    print(
        f"{what}: {seen.summary()}; and a send stored, then cut off in doubt: {in_doubt.producer.summary()}"
    )
    check_traffic(seen, count)
    return seen


def check_traffic(seen: Traffic, count: int) -> None:
    """Every message received, nothing never sent; a message came twice only if the connection it was
    first taken on was lost (its accept may not have reached the broker: at-least-once delivery). That
    bound cannot tell a message *stored* twice (a retried send) from a redelivery around the failure:
    `InDoubtSend` counts the copies of the one it cut off exactly, and the producer-only tests, drained
    at the end, count stored copies exactly."""
    assert sorted(set(seen.received)) == list(range(count)), seen.summary()
    for body in seen.redelivered():
        assert seen.first_taken_on[body] < seen.last_connection, (body, seen.summary())


# ------------------------------------------------------------------------------------ a scripted backup


class ScriptedBackup(ScriptedClient):
    """Plays a backup on the replication link, frame by frame (tests/support/peer): it attaches from
    `REPLICATION_ADDRESS` as the cluster user, and settles each packet only when the test says, so the
    test decides when the primary learns that its backup has a batch."""

    def __init__(self, port: int, user: str = "cluster", password: str = "cluster-secret") -> None:
        super().__init__(port, user=user, password=password, mechanism="PLAIN")
        self.link: PeerLink | None = None
        self.settled: set[int] = set()  # delivery ids

    def attach_replication(self, name: str = "replication:backup:scripted", credit: int = 1000) -> Frame:
        """Attach the receiving link and give it credit; the primary's attach answer."""
        if self.remote_begin is None:
            self.begin()
        conn = self._conn()
        handle = len(conn.links)
        self.link = PeerLink(name, handle, is_sender=False, reply=LinkReply(credit=credit, outcome="hold"))
        conn.links[handle] = self.link
        start = len(self.records.frames)
        conn.send_frame(0, performative(
            0x12, name, uint(handle), True, ubyte(0), ubyte(0),
            performative(0x28, REPLICATION_ADDRESS), performative(0x29, None),
        ))  # fmt: skip
        answer = self.wait_frame(
            lambda f: f.name == "attach" and f["name"] == name, "the attach answer", start
        )
        conn._grant(0, self.link)
        return answer

    def packets(self) -> list[tuple[int, TransferRecord]]:
        """(packet type, delivery) of every packet received so far (replication_wire.py's types)."""
        with self.records.cond:
            transfers = list(self.records.transfers)
        return [(_packet_type(t), t) for t in transfers]

    def settle_through(self, last: TransferRecord) -> None:
        """Settle Accepted every packet not settled yet up to `last`, in order (the backup has them)."""
        for _, transfer in self.packets():
            if transfer.delivery_id > last.delivery_id:
                break
            if transfer.delivery_id not in self.settled:
                self.settled.add(transfer.delivery_id)
                self._conn().settle(transfer, "accepted")

    def wait_packet(
        self, matches: Callable[[int, TransferRecord], bool], what: str, timeout: float = 10
    ) -> TransferRecord:
        def found() -> TransferRecord | None:
            return next((t for kind, t in self.packets() if matches(kind, t)), None)

        result: TransferRecord = self.records.wait(found, timeout, what)
        return result

    def synchronize(self, timeout: float = 10) -> None:
        """Take the initial copy and settle it up to `synchronized`: the primary's confirmations wait for
        this backup from then on."""
        done = self.wait_packet(lambda kind, _: kind == SYNCHRONIZED, "the end of the initial copy", timeout)
        self.settle_through(done)

    def live_packet_with(self, marker: bytes, timeout: float = 10) -> TransferRecord:
        """The live packet (a journal batch) whose frames carry `marker` (a message body's bytes)."""
        return self.wait_packet(
            lambda kind, t: kind == LIVE and marker in t.payload,
            f"a live packet carrying {marker!r}",
            timeout,
        )


def _packet_type(transfer: TransferRecord) -> int:
    """The replication packet's type: the first byte of the message's one data section."""
    data = next((s.value for s in transfer.sections if s.code == 0x75), b"")
    return data[0] if data else -1
