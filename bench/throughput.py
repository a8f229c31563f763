"""Throughput, broker CPU per message and latency of an AMQP 1.0 broker, driven by rhea (or Proton C).

Examples (from the repo root, after scripts/install-deps):
    .venv/bin/python bench/throughput.py --target rabbitmq --durable --size 1024 --count 20000
    .venv/bin/python bench/throughput.py --target protonc --size 1024 --count 20000   # generator ceiling
    .venv/bin/python bench/throughput.py --target url:amqp://127.0.0.1:5672 \\
        --broker-cmd "amqp-mirror run --config broker.xml"     # {port} and {workdir} are substituted
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

# Run as a script: make the repo root importable for the shared peer launchers in tests/peers.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load import (
    LatencyResult,
    ThroughputResult,
    protonc_throughput,
    rhea_latency,
    rhea_throughput,
)
from bench.targets import Endpoint, open_target


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", required=True, help="rabbitmq | protonc | url:amqp://HOST:PORT")
    parser.add_argument("--broker-cmd", help="start this broker command and measure its process tree")
    parser.add_argument("--durable", action="store_true", help="durable queue and durable messages")
    parser.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    parser.add_argument("--count", type=int, default=20000, help="messages per throughput run")
    parser.add_argument("--senders", type=int, default=1)
    parser.add_argument("--receivers", type=int, default=1)
    parser.add_argument(
        "--generator",
        choices=("rhea", "protonc"),
        default="rhea",
        help="protonc: Proton C send/receive examples (small non-durable messages, 1S/1R, no latency run)",
    )
    parser.add_argument("--rate", type=float, default=1000, help="msgs/s for the latency run (0: skip it)")
    parser.add_argument("--latency-count", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each phase, to show the spread")
    parser.add_argument("--json", type=Path, help="also write all results to this file")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, object]:
    report: dict[str, object] = {"args": {k: str(v) for k, v in vars(args).items()}}
    with open_target(args.target, args.broker_cmd) as endpoint:
        report["url"] = endpoint.url
        throughput = [_throughput_once(endpoint, args) for _ in range(args.repeat)]
        report["throughput"] = [asdict(t) | {"msgs_per_s": t.msgs_per_s} for t in throughput]
        _print_throughput(endpoint.name, args, throughput)
        if args.rate and args.generator == "rhea":
            latency = [
                rhea_latency(endpoint, args.latency_count, args.size, args.durable, args.rate)
                for _ in range(args.repeat)
            ]
            report["latency"] = [asdict(lat) for lat in latency]
            _print_latency(latency)
    return report


def _throughput_once(endpoint: Endpoint, args: argparse.Namespace) -> ThroughputResult:
    if args.generator == "protonc":
        return protonc_throughput(endpoint, args.count)
    return rhea_throughput(endpoint, args.count, args.size, args.durable, args.senders, args.receivers)


def _spread(values: list[float], fmt: str) -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{format(mid, fmt)} (range {format(low, fmt)}-{format(high, fmt)})"


def _print_throughput(name: str, args: argparse.Namespace, runs: list[ThroughputResult]) -> None:
    mode = "durable" if args.durable else "non-durable"
    body = "small map-body" if args.generator == "protonc" else f"{args.size} B"
    print(f"{name}: {args.count} x {body} {mode}, {args.senders}S/{args.receivers}R via {args.generator}")
    print(f"  throughput      {_spread([r.msgs_per_s for r in runs], '.0f')} msgs/s")
    broker = [r.broker_us_per_msg for r in runs if r.broker_us_per_msg is not None]
    if broker:
        print(f"  broker CPU      {_spread(broker, '.1f')} us/msg")
    print(f"  generator CPU   {_spread([r.client_cpu_s / r.messages * 1e6 for r in runs], '.1f')} us/msg")


def _print_latency(runs: list[LatencyResult]) -> None:
    print(f"  latency @{runs[0].rate:.0f}/s p50 {_spread([r.p50_ms for r in runs], '.2f')} ms")
    print(f"  latency @{runs[0].rate:.0f}/s p99 {_spread([r.p99_ms for r in runs], '.2f')} ms")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
