"""AMQP over WebSocket against plain TCP on one broker, in the same run: throughput and the broker's CPU
per message, each round both transports one after the other (the order alternating), so the ratio is
computed round by round on the same machine load.

    .venv/bin/python bench/ws_bench.py --count 20000 --rounds 5
    .venv/bin/python bench/ws_bench.py --count 20000 --rounds 5 --durable

One broker process, one acceptor (it takes AMQP straight and HTTP upgrades alike). A round per
transport: a rhea receiver (credit 500) attached, then a rhea sender of `--count` messages of `--size`
bytes, both on `amqp://` (plain TCP) or both on `ws://` (an HTTP upgrade to the AMQP WebSocket binding,
Node's ws). Throughput is the receiver's: messages over the time from its first to its last message.
CPU is the broker process's (user + system, /proc) over the round, divided by the count: what framing
every AMQP frame in WebSocket frames (and unmasking the client's) costs the broker.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from broker_core import compiled  # noqa: E402
from tests.peers.rhea import Rhea  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

QUEUE = '<address name="bench"><anycast><queue name="bench"/></anycast></address>'
TRANSPORTS = ("tcp", "ws")


def one_round(
    broker: BrokerProcess, transport: str, args: argparse.Namespace, ready: Path
) -> tuple[float, float]:
    """(messages per second, broker CPU µs per message) of one round on `transport`."""
    scheme = "amqp" if transport == "tcp" else "ws"
    url = f"{scheme}://{broker.host}:{broker.port}"
    rhea = Rhea()
    ready.unlink(missing_ok=True)
    cpu0 = broker.cpu_seconds()
    receiver = rhea.start_receive(url, "bench", args.count, ready_file=ready, timeout=300)
    receiver.wait_ready()
    sent = rhea.send(url, "bench", args.count, size=args.size, durable=args.durable, timeout=300)
    got = receiver.result(timeout=300)
    cpu = broker.cpu_seconds() - cpu0
    assert sent["accepted"] == args.count, sent
    assert got["received"] == args.count, got
    return args.count / float(got["elapsed_s"]), cpu / args.count * 1e6


def spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=20000, help="messages per round and transport")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--warmup", type=int, default=5000, help="messages over each transport first, not counted"
    )
    parser.add_argument("--durable", action="store_true")
    args = parser.parse_args()
    print(compiled.status(), flush=True)
    rates: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    cpus: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    rate_ratios: list[float] = []
    cpu_ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ws-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker", name="bench", xml_kwargs={"addresses": QUEUE}).start()
        try:
            ready = Path(tmp) / "ready"
            warm = argparse.Namespace(**{**vars(args), "count": args.warmup})
            for transport in TRANSPORTS:
                if args.warmup:
                    one_round(broker, transport, warm, ready)
            for i in range(args.rounds):
                order = TRANSPORTS if i % 2 == 0 else TRANSPORTS[::-1]
                for transport in order:
                    rate, cpu = one_round(broker, transport, args, ready)
                    rates[transport].append(rate)
                    cpus[transport].append(cpu)
                    print(
                        f"round {i + 1} {transport:3}: {rate:9,.0f} msgs/s, broker {cpu:5.1f} µs/msg",
                        flush=True,
                    )
                rate_ratios.append(rates["ws"][-1] / rates["tcp"][-1])
                cpu_ratios.append(cpus["ws"][-1] / cpus["tcp"][-1])
        finally:
            broker.stop()
    kind = "durable" if args.durable else "non-durable"
    print(f"{kind}, {args.size} B, {args.count} messages per round, {args.rounds} rounds; medians (range):")
    for transport in TRANSPORTS:
        rate, cpu = spread(rates[transport], ",.0f"), spread(cpus[transport], ".1f")
        print(f"  {transport:3} {rate} msgs/s, broker {cpu} µs/msg")
    rate, cpu = spread(rate_ratios, ".2f"), spread(cpu_ratios, ".2f")
    print(f"  ws ÷ tcp, round by round: throughput {rate}, CPU {cpu}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
