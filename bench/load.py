"""Load phases against one endpoint: a saturating throughput run and a fixed-rate latency run.

Throughput is end to end: from just before the first sender starts until the last message reaches a
receiver. Broker CPU is the broker process tree's own utime+stime over the same interval, divided by
the number of messages; it includes the broker's idle background work, which is small at these rates.
Client CPU (all generator processes together) is reported too, to show when the generator, not the
broker, is the bottleneck.
"""

from __future__ import annotations

import resource
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.targets import Endpoint
from tests.peers.procs import tree_cpu_seconds
from tests.peers.protonc import build_examples
from tests.peers.rhea import Rhea, RheaRun


@dataclass
class ThroughputResult:
    messages: int
    seconds: float
    broker_cpu_s: float | None
    client_cpu_s: float

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def broker_us_per_msg(self) -> float | None:
        return None if self.broker_cpu_s is None else self.broker_cpu_s / self.messages * 1e6


@dataclass
class LatencyResult:
    rate: float
    messages: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _broker_cpu(endpoint: Endpoint) -> float | None:
    return None if endpoint.pid is None else tree_cpu_seconds(endpoint.pid)


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _check(run: RheaRun, expected_key: str, expected: int) -> dict[str, object]:
    result = run.result(timeout=600)
    if result.get(expected_key) != expected or result["exit_code"] != 0:
        raise RuntimeError(f"load client failed: {run.argv}: {result}")
    return result


def rhea_throughput(
    endpoint: Endpoint,
    count: int,
    size: int,
    durable: bool,
    senders: int = 1,
    receivers: int = 1,
    priorities: bool = False,
) -> ThroughputResult:
    rhea = Rhea()
    address = endpoint.make_address(durable)
    with tempfile.TemporaryDirectory(prefix="bench-ready-") as ready_dir:
        recv_runs = [
            rhea.start_receive(endpoint.url, address, n, ready_file=Path(ready_dir) / f"r{i}", timeout=600)
            for i, n in enumerate(_split(count, receivers))
        ]
        for run in recv_runs:
            run.wait_ready()
        cpu0, client0, start = _broker_cpu(endpoint), _children_cpu(), time.time()
        send_runs = [
            rhea.start_send(
                endpoint.url, address, n, size=size, durable=durable, timeout=600, priorities=priorities
            )
            for n in _split(count, senders)
        ]
        for run, n in zip(send_runs, _split(count, senders), strict=True):
            _check(run, "accepted", n)
        results = [
            _check(run, "received", n) for run, n in zip(recv_runs, _split(count, receivers), strict=True)
        ]
        cpu1 = _broker_cpu(endpoint)
    end = max(float(str(r["last_at_ms"])) for r in results) / 1000
    broker_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    return ThroughputResult(count, end - start, broker_cpu, _children_cpu() - client0)


def rhea_latency(
    endpoint: Endpoint, count: int, size: int, durable: bool, rate: float, priorities: bool = False
) -> LatencyResult:
    rhea = Rhea()
    address = endpoint.make_address(durable)
    with tempfile.TemporaryDirectory(prefix="bench-ready-") as ready_dir:
        receiver = rhea.start_receive(
            endpoint.url, address, count, ready_file=Path(ready_dir) / "r", timeout=600
        )
        receiver.wait_ready()
        _check(
            rhea.start_send(
                endpoint.url, address, count, size=size, durable=durable, rate=rate, priorities=priorities
            ),
            "accepted",
            count,
        )
        latency = _check(receiver, "received", count)["latency_ms"]
    assert isinstance(latency, dict)
    return LatencyResult(rate, count, latency["p50"], latency["p99"], latency["max"])


def protonc_throughput(endpoint: Endpoint, count: int) -> ThroughputResult:
    """Drive the endpoint with the Proton C ``send``/``receive`` examples (tiny, non-durable messages)."""
    examples = build_examples()
    host, port = endpoint.url.removeprefix("amqp://").rsplit(":", 1)
    address = endpoint.make_address(False)
    # The C receive example gives no attach signal; the C broker queues messages sent before it attaches.
    cpu0, client0, start = _broker_cpu(endpoint), _children_cpu(), time.time()
    receiver = subprocess.Popen(
        [examples.receive, host, port, address, str(count)], stdout=subprocess.DEVNULL
    )
    sender = subprocess.run([examples.send, host, port, address, str(count)], capture_output=True, text=True)
    if sender.returncode != 0 or receiver.wait(timeout=600) != 0:
        raise RuntimeError(f"C examples failed: send rc={sender.returncode} {sender.stderr}")
    seconds = time.time() - start
    cpu1 = _broker_cpu(endpoint)
    broker_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    return ThroughputResult(count, seconds, broker_cpu, _children_cpu() - client0)
