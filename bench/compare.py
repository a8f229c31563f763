"""Our broker vs Apache ActiveMQ Artemis, RabbitMQ and the Proton C broker, back to back with the same load
generator (Artemis runs the very broker.xml ours runs: bench/ours_broker.py).

Each round starts every system afresh (in a rotating order, so slow drifts of a shared machine's load
do not always hit the same system), warms it up, runs one saturating throughput phase and, with rhea,
one fixed-rate latency phase, then stops it. The table gives each system's median (range) over the
rounds and the ratios ours/peer, computed round by round (paired) and summarised the same way.

    .venv/bin/python bench/compare.py --size 1024 --count 30000 --rounds 5
    .venv/bin/python bench/compare.py --durable --size 1024 --count 30000 --rounds 5
    .venv/bin/python bench/compare.py --generator protonc --count 100000 --rounds 5
    .venv/bin/python bench/compare.py --durable --systems ours,artemis --rounds 3
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

# Run as a script: make the repo root importable for the shared peer launchers in tests/peers.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load import ThroughputResult, protonc_throughput, rhea_latency, rhea_throughput
from bench.targets import Endpoint, open_target
from broker_core import compiled
from tests.peers.ports import free_port

SYSTEMS = ("ours", "artemis", "rabbitmq", "protonc")
PEERS = ("artemis", "rabbitmq", "protonc")
METERED = "ours-metrics"  # ours with its Prometheus endpoint on, scraped every second (not a default)
PRIORITISED = "ours-priorities"  # ours, the messages' header priorities cycling 0-9 (not a default)
VARIANTS = (METERED, PRIORITISED)  # of ours: the table gives each one's ratio to ours
SCRAPE_EVERY = 1.0


@dataclass
class Sample:
    """One system's figures in one round."""

    system: str
    round: int
    msgs_per_s: float
    broker_us_per_msg: float | None
    generator_us_per_msg: float
    p50_ms: float | None = None
    p99_ms: float | None = None


@dataclass
class Metric:
    label: str
    get: Callable[[Sample], float | None]
    fmt: str


METRICS = (
    Metric("throughput (msgs/s)", lambda s: s.msgs_per_s, ".0f"),
    Metric("broker CPU (µs/msg)", lambda s: s.broker_us_per_msg, ".1f"),
    Metric("generator CPU (µs/msg)", lambda s: s.generator_us_per_msg, ".1f"),
    Metric("latency p50 (ms)", lambda s: s.p50_ms, ".2f"),
    Metric("latency p99 (ms)", lambda s: s.p99_ms, ".2f"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--durable", action="store_true", help="durable queues and durable messages")
    parser.add_argument("--size", type=int, default=1024, help="message body bytes (rhea only)")
    parser.add_argument("--count", type=int, default=30000, help="messages per throughput phase")
    parser.add_argument("--warmup", type=int, default=3000, help="unmeasured messages after each start")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; every system runs once per round")
    parser.add_argument("--generator", choices=("rhea", "protonc"), default="rhea")
    parser.add_argument("--rate", type=float, default=1000, help="msgs/s for the latency phase (0: skip)")
    parser.add_argument("--latency-count", type=int, default=5000)
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated subset of {SYSTEMS}, or {METERED}: ours with metrics on, scraped every "
        f"second, or {PRIORITISED}: ours with header priorities cycling 0-9 (rhea only)",
    )
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    parser.add_argument(
        "--installed",
        action="append",
        default=[],
        metavar="NAME=VENV",
        help="also measure the broker pip-installed in VENV as system NAME (repeatable; e.g. a compiled and "
        "a plain install of one wheel): run by VENV's python, without this checkout on its path",
    )
    return parser.parse_args(argv)


def ours_command(metrics_port: int | None = None, venv: Path | None = None) -> str:
    """Our broker as the harness starts it: fresh bench-* addresses become durable anycast queues. With
    `venv`: the broker installed there, its python started without PYTHONPATH (so not from this checkout)."""
    launcher = Path(__file__).resolve().parent / "ours_broker.py"
    extra = f" {metrics_port}" if metrics_port else ""
    python = (
        shlex.quote(sys.executable)
        if venv is None
        else f"env -u PYTHONPATH {shlex.quote(str(venv / 'bin' / 'python'))}"
    )
    return f"{python} {shlex.quote(str(launcher))} {{workdir}} {{port}}{extra}"


@contextmanager
def scraping(port: int | None) -> Iterator[None]:
    """GET /metrics every SCRAPE_EVERY seconds while the block runs (Prometheus's default is 15 s or 60 s:
    this is the harsh end), failing loudly if a scrape fails."""
    if port is None:
        yield
        return
    stop, failures = threading.Event(), []

    def scrape() -> None:
        while not stop.wait(SCRAPE_EVERY):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    r.read()
            except OSError as exc:
                failures.append(exc)

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    if failures:
        raise SystemExit(f"a scrape failed: {failures[0]}")


def _throughput(endpoint: Endpoint, args: argparse.Namespace, count: int) -> ThroughputResult:
    if args.generator == "protonc":
        return protonc_throughput(endpoint, count)
    return rhea_throughput(endpoint, count, args.size, args.durable, priorities=args.priorities)


def measure(system: str, round_no: int, args: argparse.Namespace) -> Sample:
    """Start ``system``, warm it up, measure one throughput (and latency) phase, stop it."""
    metrics_port = free_port() if system == METERED else None
    installed = dict(i.split("=", 1) for i in args.installed)
    ours = system in ("ours", *VARIANTS) or system in installed
    args = argparse.Namespace(**{**vars(args), "priorities": system == PRIORITISED})
    venv = Path(installed[system]) if system in installed else None
    target, command = (
        ("url:amqp://127.0.0.1:{port}", ours_command(metrics_port, venv)) if ours else (system, None)
    )
    with open_target(target, command) as endpoint, scraping(metrics_port):
        if args.warmup:
            _throughput(endpoint, args, args.warmup)
        result = _throughput(endpoint, args, args.count)
        sample = Sample(
            system,
            round_no,
            result.msgs_per_s,
            result.broker_us_per_msg,
            result.client_cpu_s / result.messages * 1e6,
        )
        if args.rate and args.generator == "rhea":
            latency = rhea_latency(
                endpoint, args.latency_count, args.size, args.durable, args.rate, args.priorities
            )
            sample.p50_ms, sample.p99_ms = latency.p50_ms, latency.p99_ms
    return sample


def run_rounds(args: argparse.Namespace, systems: list[str]) -> list[Sample]:
    samples = []
    for round_no in range(args.rounds):
        shift = round_no % len(systems)
        for system in systems[shift:] + systems[:shift]:
            sample = measure(system, round_no, args)
            print(f"round {round_no}: {_one_line(sample)}", file=sys.stderr, flush=True)
            samples.append(sample)
    return samples


def _one_line(sample: Sample) -> str:
    figures = (f"{m.label} {_fmt(m.get(sample), m.fmt)}" for m in METRICS)
    return f"{sample.system}: " + ", ".join(figures)


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def spread(values: list[float], fmt: str) -> str:
    """Median (min-max) of ``values``."""
    if not values:
        return "-"
    if len(values) == 1:
        return format(values[0], fmt)
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{format(mid, fmt)} ({format(low, fmt)}-{format(high, fmt)})"


def paired_ratios(samples: list[Sample], metric: Metric, peer: str, base: str = "ours") -> list[float]:
    """base/peer (ours/peer) for each round in which both have the metric."""
    by_round: dict[int, dict[str, float | None]] = {}
    for s in samples:
        by_round.setdefault(s.round, {})[s.system] = metric.get(s)
    ratios = []
    for values in by_round.values():
        ours, theirs = values.get(base), values.get(peer)
        if ours is not None and theirs:
            ratios.append(ours / theirs)
    return ratios


def table(samples: list[Sample], systems: list[str]) -> str:
    """A Markdown table: per-system median (range), then the paired ratios ours/peer."""
    peers = [p for p in PEERS if p in systems and "ours" in systems]
    variants = [v for v in VARIANTS if v in systems and "ours" in systems]
    header = ["metric", *systems, *(f"ours/{p}" for p in peers), *(f"{v}/ours" for v in variants)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in METRICS:
        cells = [metric.label]
        for system in systems:
            values = [v for s in samples if s.system == system and (v := metric.get(s)) is not None]
            cells.append(spread(values, metric.fmt))
        cells += [spread(paired_ratios(samples, metric, p), ".2f") for p in peers]
        cells += [spread(paired_ratios(samples, metric, "ours", base=v), ".3f") for v in variants]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    if any("=" not in i for i in args.installed):
        raise SystemExit("--installed needs NAME=VENV")
    systems += [i.split("=", 1)[0] for i in args.installed]
    unknown = set(systems) - {*SYSTEMS, *VARIANTS, *(i.split("=", 1)[0] for i in args.installed)}
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; choose from {(*SYSTEMS, *VARIANTS)}")
    print(f"ours: {compiled.status()}", flush=True)  # a stale build means plain Python is measured
    samples = run_rounds(args, systems)
    mode = "durable" if args.durable else "non-durable"
    body = "small map body" if args.generator == "protonc" else f"{args.size} B"
    print(f"\n{args.count} x {body} {mode}, 1 sender / 1 receiver via {args.generator}, {args.rounds} rounds")
    print("median (min-max); ratios are ours/peer per round: >1 is better for throughput, <1 for the rest\n")
    print(table(samples, systems))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"args": {k: str(v) for k, v in vars(args).items()}, "samples": [asdict(s) for s in samples]}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
