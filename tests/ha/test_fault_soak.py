"""A fault-schedule soak, Jepsen's method, for each HA mode: shared store, replication with ZooKeeper,
with quorum voting (three pairs), and with PostgreSQL. The replicated servers, the lock manager and the
clients are each on a host of their own (network namespaces, tests/support/netns.py); the shared-store
pair shares one host, as its directory must.

Clients: for each node id a producer and a consumer, each on the failover client over the pair, the
producer sending numbered messages with duplicate detection (a send cut off in doubt is sent again with
its id). Meanwhile a seeded random schedule, one fault at a time (each kind once first, in the seed's
order): kill -9 of a server, SIGSTOP of one for longer than the lock manager's session, the cluster
connection's ttl and the vote's wait (then SIGCONT), symmetric and one-way partitions between any two
hosts, ZooKeeper losing its majority or PostgreSQL stopped, and a server's wall clock jumped one to three
days forward or back, then set right again (its monotonic clock keeps going: the timeouts of the lock
managers, the votes and the cluster connection are measured on it; tests/support/faketime.py). After each
fault: healed, every server that is not running started again (as a service manager would), and the
clients must make progress again. At the end, the consumers drain, and the checker
(tests/support/history.py) reads the clients' records and the servers' logs: every confirmed send
received, nothing received that was never sent, no message stored twice, and never two servers active for
one node id. Each mode prints its counts, its history of who was active when, and its seed.

Short by default (a CI form: ZooKeeper and PostgreSQL on seed 11); `AMQP_MIRROR_SOAK_SECONDS` sets how
long each mode's schedule runs, `AMQP_MIRROR_SOAK_SEED` replays a schedule (`random` draws a new one),
`AMQP_MIRROR_SOAK_MODES` picks modes (comma-separated, or `all`). The long form: `AMQP_MIRROR_SOAK_SEED=random
AMQP_MIRROR_SOAK_MODES=all AMQP_MIRROR_SOAK_SECONDS=3600`."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from connections.failover import FailoverConnection, InDoubtError, ReceiveTimeout
from tests.peers.ports import WaitTimeout, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.ha import Producer, failover_uri
from tests.support.ha_modes import MAKERS, SESSION_MS, Heal, Setup
from tests.support.history import ClientRecord, Event, Receipt, check, intervals, log_events, overlaps

SECONDS = float(os.environ.get("AMQP_MIRROR_SOAK_SECONDS", "20"))  # each mode's schedule
pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(SECONDS * 2 + 400))]
# CI's short form replays one schedule known to pass (a failure there is a regression, not bad luck);
# AMQP_MIRROR_SOAK_SEED=random draws a new one (printed, to replay), as the long form should
_SEED = os.environ.get("AMQP_MIRROR_SOAK_SEED", "11")
SEED = random.randrange(1 << 32) if _SEED == "random" else int(_SEED)
MODES = ("shared-store", "zookeeper", "quorum", "postgresql")
# by default the replication modes with a lock manager (CI's short form); "all", or some, comma-separated
CHOSEN = (
    os.environ.get("AMQP_MIRROR_SOAK_MODES", "zookeeper,postgresql")
    .replace("all", ",".join(MODES))
    .split(",")
)
NESTED = "amqp.idleTimeout=1000&transport.connectTimeout=1000"
PAUSE = (SESSION_MS / 1000 + 1, SESSION_MS / 1000 + 3)  # longer than the session, the ttl, a vote's wait
HOLD = (2.0, 6.0)  # how long a partition, a coordinator outage or a wrong wall clock lasts
# a clock jump, in whole days: farther than any timeout, and a log line's true time is never in doubt
# (tests/support/history.py reads it back: two offsets of a clock always differ by more than a run lasts)
JUMP_DAYS = (-3, -2, -1, 1, 2, 3)
PROGRESS = 90.0  # after a fault is healed, each node id's producer must confirm again within this
# A paused active server wakes up still active in its own view, beside the server that took over, until
# it notices. With a lock manager, its first lock check does, due at once (its timer expired while it was
# paused) and measured on the monotonic clock, which went on: AMQ222325 came 1-3 ms (ZooKeeper) and 1-16
# ms (PostgreSQL) after SIGCONT, and a send that reached it meanwhile was not confirmed (its backup is
# gone: a confirmation waits for the fence, which fails). Under quorum voting nothing is leased: it
# notices when its cluster connections, reconnected, show the newer activation (AMQ951170; 126 ms
# measured, bounded by the members' retry-interval, 500 ms), and it confirms nothing meanwhile either
# (vote-on-replication-failure: the fence is a vote it cannot win beside the newer activation). Only an
# overlap that begins with such a wake-up is allowed, and only this long; every overlap is printed, and
# any other fails the test.
WOKEN_TOLERANCE = {"quorum": 1.0}
WOKEN_TOLERANCE_WITH_A_LOCK = 0.25

BODIES = (
    10**9
)  # each client's bodies (and its consumer's connections) are numbered from its number times this


class Clients:
    """One node id's producer and consumer, each on the failover client over the node's servers."""

    def __init__(self, uri: str, number: int) -> None:
        self.uri = uri
        self.first = number * BODIES  # bodies of its own: the checker merges every client's record
        self.consumer = number
        self.record = ClientRecord()
        self.producer = Producer()
        self.done = threading.Event()
        self.errors: list[BaseException] = []
        self._consumer = threading.Thread(target=self._consume, daemon=True)

    def start(self) -> None:
        self.producer.start(self.uri, self._numbers())
        self._consumer.start()

    def _numbers(self) -> Iterator[int]:
        n = self.first
        while True:
            self.record.attempted.add(n)
            yield n
            n += 1

    def confirmed(self) -> int:
        return len(self.producer.confirmed)

    def _consume(self) -> None:
        try:
            with FailoverConnection(self.uri) as conn:
                receiver = conn.receiver("orders")
                while not self.done.is_set():
                    try:
                        message = receiver.receive(timeout=1)
                    except ReceiveTimeout:
                        continue
                    connection = self.consumer * BODIES + conn.generation  # one of this consumer's
                    self.record.receipts.append(Receipt(message.body, connection))
                    with suppress(InDoubtError):  # it may come again: a redelivery, the checker tells
                        receiver.accept()
        except BaseException as exc:
            self.errors.append(exc)

    def stop_producing(self) -> None:
        self.producer.stop.set()
        thread = self.producer._thread
        assert thread is not None
        thread.join(30)
        self.record.confirmed = set(self.producer.confirmed)


def drain(clients: list[Clients], confirmed: set[int]) -> None:
    """Until every confirmed send came to some consumer and then nothing more for two seconds (or 20 s
    passed: what is missing may be on a server no consumer is on, which the sweep takes)."""

    def received() -> set[int]:
        return {r.body for client in clients for r in client.record.receipts}

    with suppress(WaitTimeout):
        wait_until(lambda: confirmed <= received(), 20, "the consumers to drain")
    count = -1
    while count != sum(len(client.record.receipts) for client in clients):
        count = sum(len(client.record.receipts) for client in clients)
        time.sleep(2)  # a window: anything still to come (a phantom, a duplicate) comes in it
    for client in clients:
        client.done.set()
    for client in clients:
        client._consumer.join(10)


@dataclass
class Soak(Setup):
    """A mode under the schedule: the faults it can suffer, its history."""

    events: list[Event] = field(default_factory=list)
    schedule: list[str] = field(default_factory=list)
    began: float = field(default_factory=time.monotonic)
    since: float = field(default_factory=time.time)  # no log line of its servers is older

    def servers(self) -> list[BrokerProcess]:
        return [server for servers in self.nodes.values() for server in servers]

    def running(self) -> list[BrokerProcess]:
        return [s for s in self.servers() if s.proc is not None and s.proc.poll() is None]

    def faults(self) -> list[Callable[[random.Random], tuple[str, Heal]]]:
        faults = [self.kill, self.pause]
        if self.topology is not None:
            faults += [self.cut, self.cut_one_way]
        if self.coordinator is not None:
            faults.append(self.coordinator[1])
        if self.clocks:
            faults.append(self.jump_clock)
        return faults

    # ------------------------------------------------------------------------------------- faults

    def kill(self, rng: random.Random) -> tuple[str, Heal]:
        server = rng.choice(self.running())
        server.kill()
        return f"kill -9 {server.name}", lambda: None

    def pause(self, rng: random.Random) -> tuple[str, Heal]:
        server = rng.choice(self.running())
        assert server.proc is not None
        pid, seconds = server.proc.pid, rng.uniform(*PAUSE)
        os.kill(pid, signal.SIGSTOP)
        self.events.append(Event(time.time(), server.name, "paused"))

        def resume() -> None:
            os.kill(pid, signal.SIGCONT)
            self.events.append(Event(time.time(), server.name, "resumed"))

        return f"SIGSTOP {server.name} ({seconds:.1f}s)", self._after(seconds, resume)

    def jump_clock(self, rng: random.Random) -> tuple[str, Heal]:
        server = rng.choice(self.running())
        clock, offset = self.clocks[server.name], rng.choice(JUMP_DAYS) * 86400
        clock.set(offset)
        self.events.append(Event(time.time(), server.name, "clock", offset))

        def set_right() -> None:
            clock.set(0)
            self.events.append(Event(time.time(), server.name, "clock", 0))

        return f"{server.name}'s wall clock jumps {offset // 86400:+d} days", set_right

    def hosts(self) -> list[str]:
        assert self.topology is not None
        return list(self.topology.addresses)

    def cut(self, rng: random.Random) -> tuple[str, Heal]:
        assert self.topology is not None
        a, b = rng.sample(self.hosts(), 2)
        self.topology.cut(a, b)
        topology = self.topology
        return f"partition {a} | {b}", lambda: topology.heal(a, b)

    def cut_one_way(self, rng: random.Random) -> tuple[str, Heal]:
        assert self.topology is not None
        a, b = rng.sample(self.hosts(), 2)
        self.topology.cut_one_way(a, b)
        topology = self.topology
        return f"one-way partition {a} -> {b}", lambda: topology.heal(a, b)

    @staticmethod
    def _after(seconds: float, heal: Heal) -> Heal:
        """A fault that lasts `seconds` whatever the schedule's hold: the heal waits out the rest."""
        until = time.monotonic() + seconds

        def healed() -> None:
            time.sleep(max(until - time.monotonic(), 0))
            heal()

        return healed

    # ----------------------------------------------------------------------------------- the run

    def say(self, what: str) -> None:
        line = f"{time.monotonic() - self.began:7.1f}s {what}"
        self.schedule.append(line)
        print(f"[{self.mode}] {line}", flush=True)

    def restart_dead(self) -> None:
        for server in self.servers():
            if server.proc is not None and server.proc.poll() is not None:
                self.say(f"start {server.name} again (it exited with {server.proc.returncode})")
                server.ready_text = ""  # it may wait as a backup, or replicate before failing back
                server.start()

    def run(self, clients: dict[str, Clients], seed: int, seconds: float) -> None:
        rng = random.Random(seed)
        faults = self.faults()
        # each kind of fault once, in the seed's order, however long that takes; then drawn at random
        first = rng.sample(faults, len(faults))
        deadline = time.monotonic() + seconds
        while first or time.monotonic() < deadline:
            fault = first.pop(0) if first else rng.choice(faults)
            what, heal = fault(rng)
            hold = rng.uniform(*HOLD)
            self.say(what)
            time.sleep(hold)  # the fault's length: the schedule, not a wait for something
            heal()
            self.say("healed")
            self.restart_dead()
            self.wait_progress(clients, seed)

    def wait_progress(self, clients: dict[str, Clients], seed: int) -> None:
        for node, client in clients.items():
            before = client.confirmed()

            def progressed(client: Clients = client, before: int = before) -> bool:
                self.restart_dead()  # as a service manager would, meanwhile (a woken server may halt)
                return client.confirmed() >= before + 3

            wait_until(
                progressed,
                PROGRESS,
                f"{self.mode}: node {node}'s producer to confirm again after a fault (seed {seed}, "
                f"schedule: {self.schedule})",
            )

    def sweep(self) -> list[Receipt]:
        """What is left on each running server's queue, taken directly (a passive one refuses)."""
        left = []
        for i, server in enumerate(self.running()):
            with suppress(Exception):
                left += [Receipt(m.body, -1 - i) for m in receive(server.url, "orders", 10**6, timeout=2)]
        return left

    def history(self) -> list[Event]:
        events = list(self.events)
        for server in self.servers():
            logs = sorted(server.home.glob("broker-*.log"), key=lambda p: int(p.stem.split("-")[1]))
            alive = server.proc is not None and server.proc.poll() is None
            clock = self.clocks.get(server.name)
            offsets = [offset for _, offset in clock.settings] if clock is not None else []
            span = (self.since, time.time()) if clock is not None else None
            for i, path in enumerate(logs):
                ended = i < len(logs) - 1 or not alive
                events += log_events(server.name, path.read_text(errors="replace"), ended, offsets, span)
        return events


def soak(make: Callable[..., Setup], tmp_path: Path) -> None:
    seed = SEED
    with ExitStack() as stack:
        since = time.time()
        setup = make(stack, tmp_path, wall_clocks=True)
        mode = Soak(setup.mode, setup.nodes, setup.topology, setup.coordinator, setup.clocks, since=since)
        stack.callback(lambda: [s.kill() for s in mode.servers()])
        clients = {
            node: Clients(failover_uri([s.url for s in servers], NESTED), i + 1)
            for i, (node, servers) in enumerate(mode.nodes.items())
        }
        for client in clients.values():
            stack.callback(client.producer.stop.set)
            stack.callback(client.done.set)
            client.start()
        mode.wait_progress(clients, seed)
        mode.say(f"schedule of {SECONDS:g}s, seed {seed}")
        mode.run(clients, seed, SECONDS)
        if mode.topology is not None:
            mode.topology.heal_all()
        mode.restart_dead()
        mode.wait_progress(clients, seed)
        for client in clients.values():
            client.stop_producing()
        # one record: a client learns the cluster (failover-server-list) and may fail over to another
        # node id's server, where its messages then are
        record = ClientRecord()
        for client in clients.values():
            record.attempted |= client.record.attempted
            record.confirmed |= client.record.confirmed
        drain(list(clients.values()), record.confirmed)
        for client in clients.values():
            record.receipts += client.record.receipts
        record.receipts += mode.sweep()
        node_of = {s.name: node for node, servers in mode.nodes.items() for s in servers}
        active = intervals(mode.history(), node_of, time.time())
        verdict = check(record, active, WOKEN_TOLERANCE.get(mode.mode, WOKEN_TOLERANCE_WITH_A_LOCK))
        print(f"[{mode.mode}] {verdict.counts()} (seed {seed})")
        problems = verdict.problems()
        for node, client in clients.items():
            problems += [f"node {node}: client error {e!r}" for e in client.errors + client.producer.errors]
        for i in active:
            print(f"[{mode.mode}] {i.server} active for node {i.node}: {i.end - i.start:.1f}s")
        found = overlaps(active)  # every one, to print; the verdict allows a woken server's brief one
        if found:
            seconds = [(a.server, b.server, round(s, 3), a.woken or b.woken) for a, b, s in found]
            print(f"[{mode.mode}] overlaps (first, second, seconds, one of them woken): {seconds}")
        replay = f"AMQP_MIRROR_SOAK_SEED={seed} AMQP_MIRROR_SOAK_MODES={mode.mode}"
        print(f"[{mode.mode}] seed {seed}: replay with {replay}")
        assert not problems, f"{mode.mode}, seed {seed}: {problems}\nschedule: {mode.schedule}"


@pytest.mark.parametrize("mode", MODES)
def test_no_confirmed_send_is_lost_and_never_two_actives_under_a_fault_schedule(
    mode: str, tmp_path: Path
) -> None:
    if mode not in CHOSEN:
        pytest.skip(
            f"this run soaks {','.join(CHOSEN)} (seed {SEED}; AMQP_MIRROR_SOAK_MODES=all for every mode)"
        )
    soak(MAKERS[mode], tmp_path)
