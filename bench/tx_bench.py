"""Transactions of 1, 10 and 100 messages per commit, through a real Qpid JMS client, ours against Artemis.

For each system and round: the broker is started (ours as `compare.py` starts it, `bench/ours_broker.py`;
Artemis 2.40 on the same broker.xml), then one JVM of the JMS harness (tests/jms, built by
`scripts/install-deps`) warms up and, for each transaction size, sends MESSAGES persistent messages of
BYTES bytes in transacted sessions committing every SIZE messages, then consumes them, committing every
SIZE. Reported per size: messages/s sent (committed), messages/s consumed, commits/s, and the broker's
CPU per message over both halves (its process tree). Systems alternate their order from round to round;
ratios are ours ÷ Artemis, round by round.

    .venv/bin/python bench/tx_bench.py --sizes 1,10,100 --messages 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.compare import ours_command
from bench.targets import open_target
from tests.peers.procs import tree_cpu_seconds
from tests.support import jms


@dataclass
class Sample:
    system: str
    round_no: int
    size: int
    sent_per_s: float
    consumed_per_s: float
    commits_per_s: float  # over both halves
    broker_us_per_msg: float | None  # over both halves, per message


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--systems", default="ours,artemis", help="ours, artemis (default: both)")
    parser.add_argument("--sizes", default="1,10,100", help="messages per commit (default: 1,10,100)")
    parser.add_argument("--messages", type=int, default=2000, help="messages per size (default: 2000)")
    parser.add_argument("--bytes", type=int, default=1024, help="body size (default: 1024)")
    parser.add_argument("--warmup", type=int, default=2000, help="messages to warm up with (default: 2000)")
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args(argv)


def measure(system: str, round_no: int, args: argparse.Namespace) -> list[Sample]:
    target, command = ("url:amqp://127.0.0.1:{port}", ours_command()) if system == "ours" else (system, None)
    samples = []
    with open_target(target, command) as endpoint:
        assert endpoint.pid is not None
        before = tree_cpu_seconds(endpoint.pid)
        lines = jms.run(
            endpoint.url,
            "bench",
            f"bench-{round_no}",
            args.sizes,
            str(args.messages),
            str(args.bytes),
            str(args.warmup),
            timeout=3600,
        )
        after = tree_cpu_seconds(endpoint.pid)
        # the CPU is per run: share it out in proportion to each size's wall time (the warm-up excluded)
        walls = [line["produce_seconds"] + line["consume_seconds"] for line in lines]
        warmup_share = args.warmup / (args.warmup + args.messages * len(lines))
        cpu = (after - before) * (1 - warmup_share)
        for line, wall in zip(lines, walls, strict=True):
            n, size = line["transactions"] * line["tx_size"], line["tx_size"]
            samples.append(
                Sample(
                    system,
                    round_no,
                    size,
                    n / line["produce_seconds"],
                    n / line["consume_seconds"],
                    2 * line["transactions"] / wall,
                    cpu * wall / sum(walls) / n * 1e6 / 2,
                )
            )
    return samples


def spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ok, why = jms.availability()
    if not ok:
        print(f"tx_bench: {why}", file=sys.stderr)
        return 2
    systems = args.systems.split(",")
    samples: list[Sample] = []
    for round_no in range(args.rounds):
        shift = round_no % len(systems)
        for system in systems[shift:] + systems[:shift]:
            for s in measure(system, round_no, args):
                print(
                    f"round {round_no}: {system} {s.size}/commit: sent {s.sent_per_s:,.0f} msgs/s, consumed "
                    f"{s.consumed_per_s:,.0f} msgs/s, {s.commits_per_s:,.0f} commits/s, broker "
                    f"{s.broker_us_per_msg or 0:,.0f} us/msg",
                    file=sys.stderr,
                    flush=True,
                )
                samples.append(s)
    print("| per commit | system | sent msgs/s | consumed msgs/s | commits/s | broker CPU µs/msg |")
    print("|---|---|---|---|---|---|")
    sizes = sorted({s.size for s in samples})
    for size in sizes:
        for system in systems:
            mine = [s for s in samples if s.size == size and s.system == system]
            print(
                f"| {size} | {system} | {spread([s.sent_per_s for s in mine], ',.0f')} | "
                f"{spread([s.consumed_per_s for s in mine], ',.0f')} | "
                f"{spread([s.commits_per_s for s in mine], ',.0f')} | "
                f"{spread([s.broker_us_per_msg or 0 for s in mine], ',.0f')} |"
            )
    if "ours" in systems and "artemis" in systems:
        print()
        print("| per commit | sent ÷ Artemis | consumed ÷ Artemis | CPU ÷ Artemis |")
        print("|---|---|---|---|")
        for size in sizes:
            pairs = [
                (o, a)
                for o in samples
                for a in samples
                if o.system == "ours" and a.system == "artemis" and o.size == a.size == size
                and o.round_no == a.round_no
            ]  # fmt: skip
            sent = [o.sent_per_s / a.sent_per_s for o, a in pairs]
            consumed = [o.consumed_per_s / a.consumed_per_s for o, a in pairs]
            cpu = [(o.broker_us_per_msg or 0) / (a.broker_us_per_msg or 1) for o, a in pairs]
            print(f"| {size} | {spread(sent, '.2f')} | {spread(consumed, '.2f')} | {spread(cpu, '.2f')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
