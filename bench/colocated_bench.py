"""Colocated backups: failover time from a lost node to its primary's backup hosted by the other node,
against the real parts (two broker processes on loopback, each a primary hosting the other's backup).

    .venv/bin/python bench/colocated_bench.py --kind replication --how kill --rounds 5
    .venv/bin/python bench/colocated_bench.py --kind replication --how stop --rounds 5
    .venv/bin/python bench/colocated_bench.py --kind shared-store --how kill --rounds 5
    .venv/bin/python bench/colocated_bench.py --kind all --how all --rounds 5      # the four, interleaved

Each round: two fresh nodes as tests/ha/test_colocated.py makes them (tests/support/colocated.py),
node-b's backup running in node-a's process as colocated_backup_01 (replication: synchronized, the lock
manager the file-based one on a directory both share; shared store: waiting on node-b's own lock files,
failover-on-shutdown on), `--backlog` durable messages sent to node-b. Then node-b is lost (`--how`: kill
-9, or stop: SIGTERM, a clean stop: a replicated primary hands over to its synchronized backup), and a
client tries a connect and a durable send every `--poll` ms (10) on the backup's own acceptor in node-a's
process (node-b's port + the backup port offset; redirected while passive); the figure runs from the
loss to the first send Accepted there, the client's own waiting and set-up included. Median and range of
`--rounds`, as bench/ha_bench.py reports the failover of a plain pair.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from broker_core import compiled  # noqa: E402
from connections.cli import Management  # noqa: E402
from tests.peers.ports import LOOPBACK, wait_until  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402
from tests.support.client import send  # noqa: E402
from tests.support.colocated import OFFSET, nodes  # noqa: E402

KINDS = ("replication", "shared-store")
HOWS = ("kill", "stop")


def ha_status(broker: BrokerProcess) -> dict:  # type: ignore[type-arg]
    with Management(broker.url) as management:
        return dict(management.call("getHAStatus", []))


def ready(kind: str, b: BrokerProcess) -> bool:
    """Whether node-b's backup in node-a's process can take over now."""
    status = ha_status(b)
    key = "synchronized" if kind == "replication" else "backupPresent"
    return status.get(key) is True


def failover_round(kind: str, how: str, home: Path, backlog: int, poll: float) -> float:
    """Seconds from node-b's loss to the first durable send Accepted by its colocated backup."""
    (a, b), ports = nodes(home, {"a": ["b"], "b": ["a"]}, kind=kind)
    try:
        a.start()
        b.start()
        wait_until(lambda: ready(kind, b), 60, "node-b's colocated backup to be ready")
        if backlog:
            send(b.url, "orders", [f"m{i}" for i in range(backlog)])
        backup = f"amqp://{LOOPBACK}:{ports['a'] + OFFSET}"
        assert b.proc is not None
        t0 = time.monotonic()
        if how == "kill":
            b.kill()
        else:
            os.kill(b.proc.pid, signal.SIGTERM)
        while time.monotonic() - t0 < 120:
            with contextlib.suppress(Exception):
                send(backup, "orders", ["after"])
                return time.monotonic() - t0
            time.sleep(poll)
        raise TimeoutError(f"{kind}, {how}: no failover to the colocated backup within 120 s")
    finally:
        b.kill()
        a.kill()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kind", choices=[*KINDS, "all"], default="replication")
    parser.add_argument("--how", choices=[*HOWS, "all"], default="kill")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backlog", type=int, default=1000, help="durable messages the backup must have")
    parser.add_argument("--poll", type=float, default=0.01, help="the client's retry interval, seconds")
    args = parser.parse_args()
    print(compiled.status(), flush=True)
    kinds = KINDS if args.kind == "all" else (args.kind,)
    hows = HOWS if args.how == "all" else (args.how,)
    times: dict[tuple[str, str], list[float]] = {(k, h): [] for k in kinds for h in hows}
    with tempfile.TemporaryDirectory(prefix="colocated-bench-") as tmp:
        for i in range(args.rounds):  # the cases interleaved: each round sees the same machine load
            for kind, how in times:
                home = Path(tmp) / f"{kind}-{how}-{i}"
                home.mkdir()
                ms = failover_round(kind, how, home, args.backlog, args.poll) * 1000
                times[(kind, how)].append(ms)
                load = os.getloadavg()[0]
                print(f"round {i + 1}: {kind}, {how}: {ms:.0f} ms (load {load:.1f})", flush=True)
    for (kind, how), values in times.items():
        print(
            f"{kind:12} {how:4} to the first Accepted on the colocated backup ({args.backlog} messages): "
            f"median {statistics.median(values):.0f} ms ({min(values):.0f}-{max(values):.0f})"
        )


if __name__ == "__main__":
    main()
