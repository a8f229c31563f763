"""Mirroring cost, lag and catch-up, measured against the same broker without mirroring, in one run;
ours<->ours against Artemis<->Artemis (`--systems ours,artemis`), alternated run by run.

    .venv/bin/python bench/mirror_bench.py --count 20000 --rate 1000 --repeat 3
    .venv/bin/python bench/mirror_bench.py --only catch-up --outage 30000 --repeat 5   # one measure
    .venv/bin/python bench/mirror_bench.py --systems ours,artemis --repeat 3          # against Artemis

1. throughput of durable 1 KiB sends (rhea sender and receiver on DC1) with DC1<->DC2 dual mirroring,
   as a ratio of a single broker with no mirror (floor 0.6);
2. mirror lag at a fixed rate: rhea sends to DC1, a rhea receiver on DC2 measures now - sent_at
   (end to end: DC1 journal, store-and-forward, link, DC2 journal, DC2 delivery) (floor p99 < 50 ms);
3. catch-up: the mirror link is stopped, `--outage` messages are produced, the link is started again;
   events drained per second as a ratio of the produce rate (floor 2x): the rate at which the
   outage's messages were produced, as fast as one sender could;
4. catch-up while traffic goes on: the same outage, then the link is started while a sender keeps
   producing at `--rate`; events drained per second (backlog plus what arrived meanwhile) as a ratio
   of that rate, and how long the backlog took to clear (what an operator waits for after an outage).
Broker CPU per message is DC1's own accounting. Every broker is a separate process on loopback.
Artemis runs the same broker.xml (its default journal, journal-datasync on); its pending events are its
store-and-forward queue's messageCount, and the end of a drain is seen by polling (ours reports when the
last event was accepted).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.load import ThroughputResult, rhea_throughput  # noqa: E402
from bench.targets import Endpoint  # noqa: E402
from broker_core import compiled  # noqa: E402
from connections.cli import Management  # noqa: E402
from tests.peers.artemis import ArtemisProcess  # noqa: E402
from tests.peers.ports import free_port, wait_until  # noqa: E402
from tests.peers.procs import tree_cpu_seconds  # noqa: E402
from tests.peers.rhea import Rhea  # noqa: E402
from tests.support.broker import BrokerProcess, broker_xml  # noqa: E402

Broker = BrokerProcess | ArtemisProcess
T = TypeVar("T")

SETTINGS = """<address-setting match="#">
  <default-address-routing-type>ANYCAST</default-address-routing-type>
  <default-queue-routing-type>ANYCAST</default-queue-routing-type>
</address-setting>"""


def mirror_xml(name: str, port: int) -> str:
    attrs = f'uri="tcp://127.0.0.1:{port}" name="{name}" retry-interval="100"'
    return f"<broker-connections><amqp-connection {attrs}><mirror/></amqp-connection></broker-connections>"


def start(system: str, home: Path, name: str, port: int, mirror_to: tuple[str, int] | None) -> Broker:
    """One broker of ``system`` (ours or artemis) from the same broker.xml text."""
    extra = mirror_xml(*mirror_to) if mirror_to else ""
    text = broker_xml(name, port, address_settings=SETTINGS, extra=extra)
    if system == "artemis":
        return ArtemisProcess(home / f"artemis-{name}", text, port=port).start()
    b = BrokerProcess(home / name, name=name, port=port, config=text)
    b.start()
    return b


def log_of(b: Broker) -> str:
    return b.log()


def pid_of(b: Broker) -> int:
    assert b.proc is not None
    return b.proc.pid


def endpoint(b: Broker, prefix: str) -> Endpoint:
    n = [0]

    def address(durable: bool) -> str:
        n[0] += 1
        return f"{prefix}-{n[0]}"

    return Endpoint(type(b).__name__, b.url, pid_of(b), address)


_CLIENTS: dict[str, Management] = {}


def _client(b: Broker) -> Management:
    """One kept management connection per broker: a new connection per poll would cost the machine
    about 90 ms of CPU, which the brokers being measured share."""
    client = _CLIENTS.get(b.url)
    if client is None:
        client = _CLIENTS[b.url] = Management(b.url)
    return client


def manage(b: Broker, operation: str, params: list[object]) -> object:
    return _kept(b, lambda client: client.call(operation, params))


def _kept(b: Broker, request: Callable[[Management], T]) -> T:
    """``request`` on the kept connection; once more on a new one if the broker closed the kept one (an
    idle connection is closed after the idle timeout, e.g. while another system's brokers warm up)."""
    from proton import ConnectionException

    try:
        return request(_client(b))
    except ConnectionException:
        with contextlib.suppress(Exception):
            _CLIENTS.pop(b.url).close()
        return request(_client(b))


def _snf_attribute(b: Broker, attribute: str) -> int:
    """An attribute of an Artemis broker's store-and-forward queues (its only mirror figures)."""
    names = manage(b, "getQueueNames", [])
    assert isinstance(names, list)
    snfs = [str(n) for n in names if str(n).startswith("$ACTIVEMQ_ARTEMIS_MIRROR_")]
    return sum(int(str(_kept(b, _getter(attribute, f"queue.{name}")))) for name in snfs)


def _getter(attribute: str, resource: str) -> Callable[[Management], object]:
    return lambda client: client.get(attribute, resource=resource)


def sources(b: Broker) -> list[dict[str, object]]:
    status = manage(b, "getMirrorStatus", [])
    assert isinstance(status, dict)
    return list(status["sources"])


def pending(b: Broker) -> int:
    if isinstance(b, ArtemisProcess):
        return _snf_attribute(b, "messageCount")
    return sum(int(str(s["pendingEvents"])) for s in sources(b))


def accepted(b: Broker) -> int:
    if isinstance(b, ArtemisProcess):
        return _snf_attribute(b, "messagesAcknowledged")
    return sum(int(str(s["eventsAccepted"])) for s in sources(b))


def drained_at(b: Broker) -> float:
    """Once drained: when the broker's mirror sources last had an event accepted (epoch seconds); for
    Artemis, which does not say, now (the poll that saw the queue empty)."""
    if isinstance(b, ArtemisProcess):
        return time.time()
    return max(int(str(s["lastAcceptedAt"])) for s in sources(b)) / 1000


def median_range(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):8.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


MEASURES = ("throughput", "lag", "catch-up", "loaded")
SYSTEMS = ("ours", "artemis")


class Setup:
    """One system's brokers: DC1 and DC2 mirroring each other, and a broker with no mirror."""

    def __init__(self, system: str, home: Path, with_solo: bool) -> None:
        self.system = system
        self.solo = start(system, home, "solo", free_port(), None) if with_solo else None
        p1, p2 = free_port(), free_port()
        self.dc2 = start(system, home, "dc2", p2, ("DC1", p1))
        self.dc1 = start(system, home, "dc1", p1, ("DC2", p2))
        wait_until(lambda: "AMQ111003" in log_of(self.dc1) and "AMQ111003" in log_of(self.dc2), 60, "mirrors")

    def stop(self) -> None:
        for b in (self.dc1, self.dc2, self.solo):
            if b is not None:
                b.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--latency-count", type=int, default=5000)
    parser.add_argument("--outage", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--warmup", type=int, default=5000, help="unmeasured sends through each broker first (a JVM's JIT)"
    )
    parser.add_argument(
        "--only", choices=MEASURES, action="append", help="run only this measure (repeatable; default: all)"
    )
    parser.add_argument("--systems", default="ours", help="comma-separated subset of " + str(SYSTEMS))
    args = parser.parse_args()
    chosen = args.only or list(MEASURES)
    systems = [x for x in args.systems.split(",") if x]
    if set(systems) - set(SYSTEMS):
        raise SystemExit(f"unknown systems {sorted(set(systems) - set(SYSTEMS))}; choose from {SYSTEMS}")
    print(compiled.status(), flush=True)  # a stale build means plain Python is measured

    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as tmp:
        setups: list[Setup] = []
        try:
            for system in systems:
                setups.append(Setup(system, Path(tmp) / system, "throughput" in chosen))
                warm_up(setups[-1], args)
            for measure, run in (
                ("throughput", throughput),
                ("lag", lag),
                ("catch-up", catch_ups),
                ("loaded", loaded),
            ):
                if measure in chosen:
                    run(args, setups)
        finally:
            for client in _CLIENTS.values():
                client.close()
            _CLIENTS.clear()
            for setup in setups:
                setup.stop()


def warm_up(setup: Setup, args: argparse.Namespace) -> None:
    """Unmeasured traffic through every broker of the setup: a JVM runs interpreted until its JIT has seen
    the hot paths, and the first figures would measure that."""
    if not args.warmup:
        return
    for b in (setup.solo, setup.dc1, setup.dc2):
        if b is not None:
            rhea_throughput(endpoint(b, "warmup"), args.warmup, args.size, True)
    wait_until(lambda: pending(setup.dc1) == 0 and pending(setup.dc2) == 0, 300, "warm-up to drain")


def alternate(
    args: argparse.Namespace, setups: list[Setup], run: Callable[[Setup, int], T]
) -> dict[str, list[T]]:
    """``run`` once per repeat for each system, the systems alternated within each repeat."""
    results: dict[str, list[T]] = {s.system: [] for s in setups}
    for i in range(args.repeat):
        order = setups[i % len(setups) :] + setups[: i % len(setups)]
        for setup in order:
            results[setup.system].append(run(setup, i))
    return results


def ratio_line(label: str, results: dict[str, list[float]], digits: int = 2) -> None:
    """ours ÷ artemis, run by run (the runs of one repeat were next to each other)."""
    if "ours" in results and "artemis" in results:
        ratios = [o / a for o, a in zip(results["ours"], results["artemis"], strict=True) if a]
        if ratios:
            print(f"  ours / artemis {label}: {median_range(ratios, digits)}")


def throughput(args: argparse.Namespace, setups: list[Setup]) -> None:
    def one(setup: Setup, i: int) -> tuple[ThroughputResult, ThroughputResult, float]:
        assert setup.solo is not None
        plain = rhea_throughput(endpoint(setup.solo, f"solo{i}"), args.count, args.size, True)
        before = _cpu(setup.dc2)
        dual = rhea_throughput(endpoint(setup.dc1, f"dual{i}"), args.count, args.size, True)
        dc2_us = (_cpu(setup.dc2) - before) / args.count * 1e6
        wait_until(lambda: pending(setup.dc1) == 0 and pending(setup.dc2) == 0, 300, "mirrors to drain")
        return plain, dual, dc2_us

    results = alternate(args, setups, one)
    print(f"durable {args.size} B, {args.count} msgs, 1 sender + 1 receiver (rhea), {args.repeat} runs")
    cost: dict[str, list[float]] = {}
    for system, runs in results.items():
        plain = [r[0] for r in runs]
        dual = [r[1] for r in runs]
        print(f" {system}")
        for label, phase in (("no mirror  ", plain), ("dual mirror", dual)):
            print(
                f"  {label}  msgs/s {median_range([r.msgs_per_s for r in phase])}"
                f"   DC1 CPU us/msg {median_range([r.broker_us_per_msg or 0.0 for r in phase])}"
            )
        cost[system] = [m.msgs_per_s / p.msgs_per_s for m, p in zip(dual, plain, strict=True)]
        print(f"  ratio mirrored/plain      {median_range([x * 100 for x in cost[system]])} %   (floor 60 %)")
        # What the brokers share the machine's cores with: the load clients' CPU (node start-up included).
        print(
            f"  CPU us/msg in the run: no mirror: broker {_median_us(plain)}"
            f" + rhea {_median_client_us(plain)};"
            f"  dual: DC1 {_median_us(dual)} + DC2 {statistics.median([r[2] for r in runs]):.0f}"
            f" + rhea {_median_client_us(dual)}"
        )
    ratio_line("dual-mirror cost ratio (mirrored/plain)", cost)
    ratio_line("dual-mirror msgs/s", {k: [r[1].msgs_per_s for r in v] for k, v in results.items()})


def _median_us(runs: list[ThroughputResult]) -> str:
    return f"{statistics.median([r.broker_us_per_msg or 0.0 for r in runs]):.0f}"


def _median_client_us(runs: list[ThroughputResult]) -> str:
    return f"{statistics.median([r.client_cpu_s / r.messages * 1e6 for r in runs]):.0f}"


def lag(args: argparse.Namespace, setups: list[Setup]) -> None:
    def one(setup: Setup, i: int) -> tuple[float, float]:
        return cross_latency(setup.dc1, setup.dc2, f"lag{i}", args.latency_count, args.size, args.rate)

    results = alternate(args, setups, one)
    print(f"mirror lag DC1 -> DC2 consumer at {args.rate:.0f} msgs/s ({args.latency_count} msgs/run)")
    for system, lags in results.items():
        print(
            f" {system}  p50 ms {median_range([x[0] for x in lags])}"
            f"   p99 ms {median_range([x[1] for x in lags])}   (floor p99 < 50 ms)"
        )
    ratio_line("p50", {k: [x[0] for x in v] for k, v in results.items()})
    ratio_line("p99", {k: [x[1] for x in v] for k, v in results.items()})


def catch_ups(args: argparse.Namespace, setups: list[Setup]) -> None:
    def one(setup: Setup, i: int) -> tuple[float, float, float, float]:
        return catch_up(setup.dc1, setup.dc2, f"outage{i}", args.outage, args.size)

    results = alternate(args, setups, one)
    print(f"catch-up after an outage of {args.outage} durable sends")
    for system, runs in results.items():
        print(
            f" {system}  drain rate / produce rate {median_range([r[0] for r in runs], 2)} x   (floor 2x)"
            f"   drained events/s {median_range([r[3] for r in runs], 0)}"
        )
        print(
            f"  CPU us per drained event: DC1 (source) {median_range([r[1] for r in runs])}"
            f"   DC2 (target) {median_range([r[2] for r in runs])}"
        )
    ratio_line("drained events/s", {k: [r[3] for r in v] for k, v in results.items()})


def loaded(args: argparse.Namespace, setups: list[Setup]) -> None:
    def one(setup: Setup, i: int) -> tuple[float, float]:
        return catch_up_under_load(setup.dc1, f"loaded{i}", args.outage, args.size, args.rate)

    results = alternate(args, setups, one)
    print(f"catch-up after {args.outage} durable sends, traffic going on at {args.rate:.0f} msgs/s")
    for system, runs in results.items():
        print(
            f" {system}  drain rate / produce rate {median_range([x[0] for x in runs])} x"
            f"   backlog cleared in s {median_range([x[1] for x in runs])}"
        )


def cross_latency(
    dc1: Broker, dc2: Broker, address: str, count: int, size: int, rate: float
) -> tuple[float, float]:
    rhea = Rhea()
    with tempfile.TemporaryDirectory() as ready:
        receiver = rhea.start_receive(dc2.url, address, count, ready_file=Path(ready) / "r", timeout=600)
        receiver.wait_ready()
        wait_until(lambda: _has_queue(dc1, address), 10, "the queue to be mirrored to DC1")
        sent = rhea.start_send(dc1.url, address, count, size=size, durable=True, rate=rate).result(
            timeout=600
        )
        assert sent["accepted"] == count, sent
        result = receiver.result(timeout=600)
    lat = result["latency_ms"]
    return float(lat["p50"]), float(lat["p99"])


def _has_queue(b: Broker, name: str) -> bool:
    names = manage(b, "getQueueNames", [])
    return isinstance(names, list) and name in names


def catch_up(
    dc1: Broker, dc2: Broker, address: str, count: int, size: int
) -> tuple[float, float, float, float]:
    """(drain rate ÷ produce rate, DC1's and DC2's CPU microseconds per drained event, events/s)."""
    manage(dc1, "stopBrokerConnection", ["DC2"])
    result = Rhea().send(dc1.url, address, count, size=size, durable=True)
    assert result["accepted"] == count, result
    produce_s = float(result["elapsed_s"])  # the sender's own clock: its start-up is not producing
    backlog = pending(dc1)
    cpu = [_cpu(b) for b in (dc1, dc2)]
    t1 = time.time()  # the broker's clock: the end is when it accepted the last event, not when a poll saw it
    manage(dc1, "startBrokerConnection", ["DC2"])
    wait_until(lambda: pending(dc1) == 0, 600, "the backlog to drain")
    drain_s = drained_at(dc1) - t1
    source_us, target_us = ((_cpu(b) - c) / backlog * 1e6 for b, c in zip((dc1, dc2), cpu, strict=True))
    return (backlog / drain_s) / (count / produce_s), source_us, target_us, backlog / drain_s


def _cpu(b: Broker) -> float:
    return tree_cpu_seconds(pid_of(b))


def catch_up_under_load(dc1: Broker, address: str, count: int, size: int, rate: float) -> tuple[float, float]:
    """(events drained per second ÷ ``rate``, seconds until the backlog cleared) after an outage of
    ``count`` sends, with a sender producing at ``rate`` from the moment the link is started again."""
    manage(dc1, "stopBrokerConnection", ["DC2"])
    result = Rhea().send(dc1.url, address, count, size=size, durable=True)
    assert result["accepted"] == count, result
    backlog = pending(dc1)
    # enough traffic to outlast any drain here; stopped once the backlog is gone
    traffic = Rhea().start_send(dc1.url, address, int(rate * 120), size=size, durable=True, rate=rate)
    wait_until(lambda: pending(dc1) > backlog, 30, "the sender to start")
    before, t1 = accepted(dc1), time.monotonic()
    manage(dc1, "startBrokerConnection", ["DC2"])
    # cleared: no more than about a tenth of a second's traffic waiting
    wait_until(lambda: pending(dc1) <= max(10, rate / 10), 600, "the backlog to clear")
    drained, drain_s = accepted(dc1) - before, time.monotonic() - t1
    traffic.process.kill()
    traffic.process.wait()
    wait_until(lambda: pending(dc1) == 0, 120, "the last events to drain")
    return drained / drain_s / rate, drain_s


if __name__ == "__main__":
    main()
