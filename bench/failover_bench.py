"""Failover time of a shared-store pair: from kill -9 of the active primary to the first durable message
Accepted by the backup, median of `--rounds` fresh pairs (separate processes on loopback).

    .venv/bin/python bench/failover_bench.py --rounds 10

The client tries a connect and a durable send every `--poll` ms (10 by default) after the kill: the
figure includes up to that much of the client's own waiting, and a connection's set-up (a few ms). The
backup polls the primary lock every 100 ms (amqp_mirror/ha.py, POLL), then recovers the journal.
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

from broker_core import compiled  # noqa: E402
from tests.support.client import send  # noqa: E402
from tests.support.ha import shared_pair  # noqa: E402


def one_round(home: Path, backlog: int, poll: float) -> float:
    primary, backup = shared_pair(home)
    primary.start()
    backup.start()
    try:
        if backlog:
            send(primary.url, "orders", [f"m{i}" for i in range(backlog)])
        t0 = time.monotonic()
        primary.kill()
        while True:
            try:
                send(backup.url, "orders", ["after"])
                return time.monotonic() - t0
            except Exception:
                time.sleep(poll)
    finally:
        primary.kill()
        backup.kill()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--backlog", type=int, default=1000, help="durable messages the backup must recover")
    parser.add_argument("--poll", type=float, default=0.01, help="the client's retry interval, seconds")
    args = parser.parse_args()
    print(compiled.status(), flush=True)
    times = []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="failover-bench-") as tmp:
            seconds = one_round(Path(tmp), args.backlog, args.poll)
        times.append(seconds * 1000)
        print(f"round {i + 1}: {seconds * 1000:.0f} ms", flush=True)
    print(
        f"shared store, kill -9 to the first Accepted on the backup ({args.backlog} messages to recover): "
        f"median {statistics.median(times):.0f} ms ({min(times):.0f}-{max(times):.0f})"
    )


if __name__ == "__main__":
    main()
