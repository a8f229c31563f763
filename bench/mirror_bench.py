"""Mirroring cost, lag and catch-up, measured against the same broker without mirroring, in one run.

    .venv/bin/python bench/mirror_bench.py --count 20000 --rate 1000 --repeat 3
    .venv/bin/python bench/mirror_bench.py --only catch-up --outage 30000 --repeat 5   # one measure

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
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.load import ThroughputResult, rhea_throughput  # noqa: E402
from bench.targets import Endpoint  # noqa: E402
from broker_core import compiled  # noqa: E402
from connections.cli import Management  # noqa: E402
from tests.peers.ports import free_port, wait_until  # noqa: E402
from tests.peers.procs import tree_cpu_seconds  # noqa: E402
from tests.peers.rhea import Rhea  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

SETTINGS = """<address-setting match="#">
  <default-address-routing-type>ANYCAST</default-address-routing-type>
  <default-queue-routing-type>ANYCAST</default-queue-routing-type>
</address-setting>"""


def mirror_xml(name: str, port: int) -> str:
    attrs = f'uri="tcp://127.0.0.1:{port}" name="{name}" retry-interval="100"'
    return f"<broker-connections><amqp-connection {attrs}><mirror/></amqp-connection></broker-connections>"


def start(home: Path, name: str, port: int, mirror_to: tuple[str, int] | None) -> BrokerProcess:
    kwargs = {"address_settings": SETTINGS, "extra": mirror_xml(*mirror_to) if mirror_to else ""}
    b = BrokerProcess(home / name, name=name, port=port, xml_kwargs=kwargs)
    b.start()
    return b


def endpoint(b: BrokerProcess, prefix: str) -> Endpoint:
    n = [0]

    def address(durable: bool) -> str:
        n[0] += 1
        return f"{prefix}-{n[0]}"

    assert b.proc is not None
    return Endpoint(b.name, b.url, b.proc.pid, address)


_CLIENTS: dict[str, Management] = {}


def manage(b: BrokerProcess, operation: str, params: list[object]) -> object:
    """A management request on one kept connection per broker: a new connection per poll would cost
    the machine about 90 ms of CPU, which the brokers being measured share."""
    client = _CLIENTS.get(b.url)
    if client is None:
        client = _CLIENTS[b.url] = Management(b.url)
    return client.call(operation, params)


def sources(b: BrokerProcess) -> list[dict[str, object]]:
    status = manage(b, "getMirrorStatus", [])
    assert isinstance(status, dict)
    return list(status["sources"])


def pending(b: BrokerProcess) -> int:
    return sum(int(str(s["pendingEvents"])) for s in sources(b))


def accepted(b: BrokerProcess) -> int:
    return sum(int(str(s["eventsAccepted"])) for s in sources(b))


def last_accepted(b: BrokerProcess) -> float:
    """When the broker's mirror sources last had an event accepted (epoch seconds)."""
    return max(int(str(s["lastAcceptedAt"])) for s in sources(b)) / 1000


def median_range(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):8.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


MEASURES = ("throughput", "lag", "catch-up", "loaded")


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
        "--only", choices=MEASURES, action="append", help="run only this measure (repeatable; default: all)"
    )
    args = parser.parse_args()
    chosen = args.only or list(MEASURES)
    print(compiled.status(), flush=True)  # a stale build means plain Python is measured

    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as tmp:
        home = Path(tmp)
        solo = start(home, "solo", free_port(), None) if "throughput" in chosen else None
        p1, p2 = free_port(), free_port()
        dc2 = start(home, "dc2", p2, ("DC1", p1))
        dc1 = start(home, "dc1", p1, ("DC2", p2))
        wait_until(lambda: "AMQ111003" in dc1.log() and "AMQ111003" in dc2.log(), 30, "mirrors up")
        try:
            if solo is not None:
                throughput(args, solo, dc1, dc2)
            if "lag" in chosen:
                lag(args, dc1, dc2)
            if "catch-up" in chosen:
                catch_ups(args, dc1, dc2)
            if "loaded" in chosen:
                loaded(args, dc1)
        finally:
            for client in _CLIENTS.values():
                client.close()
            _CLIENTS.clear()
            for b in (dc1, dc2, solo):
                if b is not None:
                    b.stop()


def throughput(args: argparse.Namespace, solo: BrokerProcess, dc1: BrokerProcess, dc2: BrokerProcess) -> None:
    plain: list[ThroughputResult] = []
    dual: list[ThroughputResult] = []
    dc2_us: list[float] = []  # DC2's CPU per message while DC1's clients ran
    for i in range(args.repeat):
        plain.append(rhea_throughput(endpoint(solo, f"solo{i}"), args.count, args.size, True))
        before = _cpu(dc2)
        dual.append(rhea_throughput(endpoint(dc1, f"dual{i}"), args.count, args.size, True))
        dc2_us.append((_cpu(dc2) - before) / args.count * 1e6)
        wait_until(lambda: pending(dc1) == 0 and pending(dc2) == 0, 120, "mirrors to drain")
    ratio = [m.msgs_per_s / p.msgs_per_s for m, p in zip(dual, plain, strict=True)]
    print(f"durable {args.size} B, {args.count} msgs, 1 sender + 1 receiver (rhea), {args.repeat} runs")
    for label, runs in (("no mirror  ", plain), ("dual mirror", dual)):
        print(
            f"  {label}  msgs/s {median_range([r.msgs_per_s for r in runs])}"
            f"   DC1 CPU us/msg {median_range([r.broker_us_per_msg or 0.0 for r in runs])}"
        )
    print(f"  ratio mirrored/plain      {median_range([x * 100 for x in ratio])} %   (floor 60 %)")
    # What the brokers share the machine's cores with: the load clients' CPU (node start-up included).
    print(
        f"  CPU us/msg in the run: no mirror: broker {_median_us(plain)} + rhea {_median_client_us(plain)};"
        f"  dual: DC1 {_median_us(dual)} + DC2 {statistics.median(dc2_us):.0f}"
        f" + rhea {_median_client_us(dual)}"
    )


def _median_us(runs: list[ThroughputResult]) -> str:
    return f"{statistics.median([r.broker_us_per_msg or 0.0 for r in runs]):.0f}"


def _median_client_us(runs: list[ThroughputResult]) -> str:
    return f"{statistics.median([r.client_cpu_s / r.messages * 1e6 for r in runs]):.0f}"


def lag(args: argparse.Namespace, dc1: BrokerProcess, dc2: BrokerProcess) -> None:
    lags = [cross_latency(dc1, dc2, f"lag{i}", args.latency_count, args.size, args.rate) for i in _runs(args)]
    print(f"mirror lag DC1 -> DC2 consumer at {args.rate:.0f} msgs/s ({args.latency_count} msgs/run)")
    print(
        f"  p50 ms {median_range([x[0] for x in lags])}   p99 ms {median_range([x[1] for x in lags])}"
        "   (floor p99 < 50 ms)"
    )


def catch_ups(args: argparse.Namespace, dc1: BrokerProcess, dc2: BrokerProcess) -> None:
    runs = [catch_up(dc1, dc2, f"outage{i}", args.outage, args.size) for i in _runs(args)]
    print(f"catch-up after an outage of {args.outage} durable sends")
    print(f"  drain rate / produce rate {median_range([r[0] for r in runs], 2)} x   (floor 2x)")
    print(
        f"  CPU us per drained event: DC1 (source) {median_range([r[1] for r in runs])}"
        f"   DC2 (target) {median_range([r[2] for r in runs])}"
    )


def loaded(args: argparse.Namespace, dc1: BrokerProcess) -> None:
    runs = [catch_up_under_load(dc1, f"loaded{i}", args.outage, args.size, args.rate) for i in _runs(args)]
    print(f"catch-up after {args.outage} durable sends, traffic going on at {args.rate:.0f} msgs/s")
    print(
        f"  drain rate / produce rate {median_range([x[0] for x in runs])} x"
        f"   backlog cleared in s {median_range([x[1] for x in runs])}"
    )


def _runs(args: argparse.Namespace) -> range:
    return range(args.repeat)


def cross_latency(
    dc1: BrokerProcess, dc2: BrokerProcess, address: str, count: int, size: int, rate: float
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


def _has_queue(b: BrokerProcess, name: str) -> bool:
    names = manage(b, "getQueueNames", [])
    return isinstance(names, list) and name in names


def catch_up(
    dc1: BrokerProcess, dc2: BrokerProcess, address: str, count: int, size: int
) -> tuple[float, float, float]:
    """(drain rate ÷ produce rate, DC1's and DC2's CPU microseconds per drained event)."""
    manage(dc1, "stopBrokerConnection", ["DC2"])
    result = Rhea().send(dc1.url, address, count, size=size, durable=True)
    assert result["accepted"] == count, result
    produce_s = float(result["elapsed_s"])  # the sender's own clock: its start-up is not producing
    backlog = pending(dc1)
    cpu = [_cpu(b) for b in (dc1, dc2)]
    t1 = time.time()  # the broker's clock: the end is when it accepted the last event, not when a poll saw it
    manage(dc1, "startBrokerConnection", ["DC2"])
    wait_until(lambda: pending(dc1) == 0, 600, "the backlog to drain")
    drain_s = last_accepted(dc1) - t1
    source_us, target_us = ((_cpu(b) - c) / backlog * 1e6 for b, c in zip((dc1, dc2), cpu, strict=True))
    return (backlog / drain_s) / (count / produce_s), source_us, target_us


def _cpu(b: BrokerProcess) -> float:
    assert b.proc is not None
    return tree_cpu_seconds(b.proc.pid)


def catch_up_under_load(
    dc1: BrokerProcess, address: str, count: int, size: int, rate: float
) -> tuple[float, float]:
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
