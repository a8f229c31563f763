"""HA: failover time, and what a synchronized replica costs, against the real parts (separate processes
on loopback; replication with a real three-node ZooKeeper ensemble).

    .venv/bin/python bench/ha_bench.py --failover shared-store --rounds 10
    .venv/bin/python bench/ha_bench.py --failover replication --rounds 10      # session-ms 2000
    .venv/bin/python bench/ha_bench.py --failover replication --how stop --rounds 10
    .venv/bin/python bench/ha_bench.py --failover replication --how stop-lagging --rounds 10
    .venv/bin/python bench/ha_bench.py --throughput 30000 --repeat 3           # replicated ÷ lone primary
    .venv/bin/python bench/ha_bench.py --modes all --how kill --rounds 5       # every mode, own hosts
    .venv/bin/python bench/ha_bench.py --modes all --how partition --rounds 5

Failover: from the failure of the active primary to the first durable message Accepted by the backup,
median of `--rounds` fresh pairs. The client tries a connect and a send every `--poll` ms (10) after the
failure, so the figure includes up to that much of its own waiting and a connection's set-up. `--how`:
- kill (kill -9). Shared store: the backup polls the primary lock every 100 ms, then recovers the
  journal. Replication: the backup takes the lock once the primary's ZooKeeper session has expired
  (session-ms 2000 here; 18000 by default);
- stop (SIGTERM, a clean stop): a replicated primary hands over to its synchronized backup (shared
  store: with failover-on-shutdown);
- stop-lagging: the same, while the backup lags: it is paused (SIGSTOP) while `--burst` messages are
  sent without waiting (journalled and streamed, their confirmations held for the backup), the primary
  is stopped, and the backup resumes `--lag` ms later; the hand-over waits for it to have every batch,
  so the figure includes the lag and the catch-up.

Every mode side by side (`--modes`: shared-store, zookeeper, quorum, postgresql, or all; needs root): each
round builds the mode as the fault soak does (tests/support/ha_modes.py: each server and coordinator on a
host of its own, a network namespace; session-ms 2000, connection-ttl 1000 ms, quorum-vote-wait 2 s,
vote-retry-wait 500 ms), and `--how kill` (kill -9 of node 1's primary) or `--how partition` (its host
cut from every other host: partner, coordinator, other members, clients) to the first durable message
Accepted by its backup. A shared-store pair does not fail over on a partition (the primary keeps its
lock on the storage): n/a.

Throughput: rhea sends `--throughput` durable 1 KiB messages to a lone primary (no HA) and to a
replicated primary with its backup synchronized (each confirmation waits for the backup too), in
alternation, `--repeat` rounds; the ratio is computed round by round.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from broker_core import compiled  # noqa: E402
from connections.cli import Management  # noqa: E402
from tests.peers.ports import wait_until  # noqa: E402
from tests.peers.rhea import Rhea  # noqa: E402
from tests.peers.zookeeper import running_ensemble  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402
from tests.support.client import send  # noqa: E402
from tests.support.ha import ORDERS, replicated_pair, shared_pair  # noqa: E402
from tests.support.ha_modes import MAKERS, SESSION_MS, TTL_MS  # noqa: E402


def synchronized(primary: BrokerProcess) -> bool:
    with Management(primary.url) as management:
        return bool(management.call("getHAStatus", [])["synchronized"])


def pair(policy: str, home: Path, zk: str, n: int) -> tuple[BrokerProcess, BrokerProcess]:
    if policy == "shared-store":
        return shared_pair(home, "<failover-on-shutdown>true</failover-on-shutdown>")
    return replicated_pair(home, zk, f"bench{n}")


def resume(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # killed at the end of a round meanwhile
        os.kill(pid, signal.SIGCONT)


def failover_round(
    policy: str, home: Path, zk: str, n: int, backlog: int, poll: float, how: str, burst: int, lag: float
) -> float:
    primary, backup = pair(policy, home, zk, n)
    primary.start()
    backup.start()
    try:
        if policy == "replication":
            wait_until(lambda: synchronized(primary), 60, "the backup to synchronize")
        if backlog:
            send(primary.url, "orders", [f"m{i}" for i in range(backlog)])
        assert primary.proc is not None and backup.proc is not None
        if how == "stop-lagging":
            os.kill(backup.proc.pid, signal.SIGSTOP)
            Rhea().start_send(primary.url, "orders", burst, size=1024, durable=True, timeout=30)
            time.sleep(0.5)  # the burst journalled and streamed, its confirmations held for the backup
            threading.Timer(lag, resume, (backup.proc.pid,)).start()
        t0 = time.monotonic()
        if how == "kill":
            primary.kill()
        else:
            primary.proc.send_signal(signal.SIGTERM)
        while True:
            try:
                send(backup.url, "orders", ["after"])
                return time.monotonic() - t0
            except Exception:
                time.sleep(poll)
    finally:
        primary.kill()
        backup.kill()


def mode_round(mode: str, home: Path, how: str, poll: float, backlog: int) -> float:
    """One fresh `mode`, node 1's primary failed `how`: seconds to the first Accepted on its backup."""
    with ExitStack() as stack:
        setup = MAKERS[mode](stack, home)
        primary, backup = setup.nodes["node1"]
        stack.callback(lambda: [s.kill() for servers in setup.nodes.values() for s in servers])
        if backlog:
            send(primary.url, "orders", [f"m{i}" for i in range(backlog)])
        if mode != "shared-store":
            wait_until(lambda: synchronized(primary), 60, "the backup to synchronize")
        t0 = time.monotonic()
        if how == "kill":
            primary.kill()
        else:
            topology = setup.topology
            assert topology is not None
            for host in topology.addresses:
                if host != primary.name:
                    topology.cut(primary.name, host)
        while time.monotonic() - t0 < 120:
            try:
                send(backup.url, "orders", ["after"])
                return time.monotonic() - t0
            except Exception:
                time.sleep(poll)
        raise TimeoutError(f"{mode}: no failover within 120 s")


def modes(names: list[str], how: str, rounds: int, poll: float, backlog: int) -> None:
    print(
        f"session-ms {SESSION_MS}, connection-ttl {TTL_MS} ms, quorum-vote-wait 2 s, vote-retry-wait 500 ms"
    )
    for mode in names:
        if how == "partition" and mode == "shared-store":
            print(f"{mode:13} {how}: n/a (the primary keeps its lock on the shared storage)")
            continue
        times = []
        for i in range(rounds):
            with tempfile.TemporaryDirectory(prefix=f"ha-bench-{mode}-") as tmp:
                times.append(mode_round(mode, Path(tmp), how, poll, backlog) * 1000)
            print(f"{mode} round {i + 1}: {times[-1]:.0f} ms", flush=True)
        print(
            f"{mode:13} {how}: median {statistics.median(times):.0f} ms ({min(times):.0f}-{max(times):.0f})",
            flush=True,
        )


def throughput(home: Path, zk: str, count: int, repeat: int) -> None:
    lone = BrokerProcess(home / "lone", name="lone", xml_kwargs={"addresses": ORDERS}).start()
    primary, backup = replicated_pair(home / "pair", zk, "throughput")
    primary.start()
    backup.start()
    wait_until(lambda: synchronized(primary), 60, "the backup to synchronize")
    ratios, rates = [], {"lone": [], "replicated": []}
    try:
        for _ in range(repeat):
            for name, broker in (("lone", lone), ("replicated", primary)):
                result = Rhea().send(broker.url, "orders", count, size=1024, durable=True)
                assert result["accepted"] == count, result
                rates[name].append(count / float(result["elapsed_s"]))
            ratios.append(rates["replicated"][-1] / rates["lone"][-1])
        assert synchronized(primary), "the backup fell out of sync during the run"
    finally:
        for b in (lone, primary, backup):
            b.stop()
    for name, values in rates.items():
        print(f"{name:10} {statistics.median(values):9,.0f} msgs/s ({min(values):,.0f}-{max(values):,.0f})")
    print(f"replicated ÷ lone: {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--failover", choices=["shared-store", "replication"])
    parser.add_argument("--how", choices=["kill", "stop", "stop-lagging", "partition"], default="kill")
    parser.add_argument(
        "--modes", help="comma-separated: shared-store, zookeeper, quorum, postgresql; or all"
    )
    parser.add_argument("--burst", type=int, default=2000, help="stop-lagging: messages the backup lags by")
    parser.add_argument("--lag", type=float, default=0.5, help="stop-lagging: seconds the backup is paused")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--backlog", type=int, default=1000, help="durable messages the backup must have")
    parser.add_argument("--poll", type=float, default=0.01, help="the client's retry interval, seconds")
    parser.add_argument("--throughput", type=int, default=0, help="messages per round of the throughput run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(compiled.status(), flush=True)
    if args.modes:
        names = list(MAKERS) if args.modes == "all" else args.modes.split(",")
        modes(names, args.how, args.rounds, args.poll, min(args.backlog, 100))
        return
    with tempfile.TemporaryDirectory(prefix="ha-bench-") as tmp, ExitStack() as stack:
        zk = ""
        if args.failover == "replication" or args.throughput:
            zk = stack.enter_context(running_ensemble(Path(tmp) / "zk")).connect_string
        if args.throughput:
            throughput(Path(tmp), zk, args.throughput, args.repeat)
        if args.failover:
            times = []
            for i in range(args.rounds):
                home = Path(tmp) / f"round{i}"
                seconds = failover_round(
                    args.failover, home, zk, i, args.backlog, args.poll, args.how, args.burst, args.lag
                )
                ms = seconds * 1000
                times.append(ms)
                print(f"round {i + 1}: {ms:.0f} ms", flush=True)
            print(
                f"{args.failover}, {args.how} to the first Accepted on the backup ({args.backlog} messages): "
                f"median {statistics.median(times):.0f} ms ({min(times):.0f}-{max(times):.0f})"
            )


if __name__ == "__main__":
    main()
