"""Paging: memory against backlog, and what paging costs in throughput and catch-up, in one run.

    .venv/bin/python bench/paging_bench.py --count 200000 --chunks 4      # paging against in-memory
    .venv/bin/python bench/paging_bench.py --soak 5000000 --kill           # the long soak
    .venv/bin/python bench/paging_bench.py --overhead                       # usage.py's MESSAGE_OVERHEAD

Comparison: DC1 mirrors to DC2 (both brokers separate processes on loopback); DC1's link is stopped
(DC2 "down") while a rhea sender puts `--count` durable 1 KiB messages on DC1's `orders` (no consumer:
DC1 holds the queue and the store-and-forward queue, DC2 will hold the queue), then the link is started
and DC1 drains its backlog to DC2. Run once with no memory limits (everything in memory) and once with
`max-size-bytes` 32 MiB on every address (paging), on the same minutes. Reported: DC1's RSS after each
chunk of sends (pending = the backlog so far), the produce rate, the catch-up rate (events drained per
second), and for paging the ratio to the in-memory figures.

Soak: the paging configuration only, `--soak` messages, DC1's and DC2's RSS sampled every second (the
maximum is reported), with `--kill` a SIGKILL of DC1 halfway through the sends and again halfway through
the drain; at the end DC2 must hold what DC1 holds, and DC1 at least what its sender was told was
Accepted.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.mirror_bench import _CLIENTS, last_accepted, manage, mirror_xml, pending  # noqa: E402
from broker_core import compiled  # noqa: E402
from tests.peers.ports import free_port, wait_until  # noqa: E402
from tests.peers.rhea import Rhea  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
LIMIT = 32 * 1024 * 1024


def settings(limit: int) -> str:
    return f"""<address-setting match="#">
  <max-size-bytes>{limit}</max-size-bytes>
  <address-full-policy>PAGE</address-full-policy>
</address-setting>"""


def pair(home: Path, limit: int) -> tuple[BrokerProcess, BrokerProcess]:
    p1, p2 = free_port(), free_port()
    global_max = "" if limit >= 0 else "<global-max-size>64G</global-max-size>"
    common = {"addresses": ORDERS, "address_settings": settings(limit)}
    dc2 = BrokerProcess(home / "dc2", name="dc2", port=p2, xml_kwargs={**common, "extra": global_max})
    dc1 = BrokerProcess(
        home / "dc1", name="dc1", port=p1, xml_kwargs={**common, "extra": global_max + mirror_xml("DC2", p2)}
    )
    dc2.start()
    dc1.start()
    wait_until(lambda: "AMQ111003" in dc1.log(), 30, "DC1's mirror to connect")
    return dc1, dc2


def rss_mib(broker: BrokerProcess) -> float:
    assert broker.proc is not None
    for line in Path(f"/proc/{broker.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def depth(broker: BrokerProcess, queue: str = "orders") -> int:
    manage(broker, "getNodeID", [])  # the broker's kept management client, made if need be
    stats = _CLIENTS[broker.url].call("getStatistics", [], resource=f"queue.{queue}")
    return int(stats["message-count"])


def outage(dc1: BrokerProcess, dc2: BrokerProcess, count: int, chunks: int) -> dict[str, object]:
    """Sends with the link stopped (RSS per chunk), then the drain; returns the figures."""
    manage(dc1, "stopBrokerConnection", ["DC2"])
    rss: list[tuple[int, float]] = [(0, rss_mib(dc1))]
    sent, produce_s = 0, 0.0
    for i in range(chunks):
        n = count // chunks + (1 if i < count % chunks else 0)
        result = Rhea().start_send(dc1.url, "orders", n, size=1024, durable=True, timeout=3600).result(3600)
        assert result["accepted"] == n, result
        sent += n
        produce_s += float(result["elapsed_s"])
        rss.append((sent, rss_mib(dc1)))
    backlog = pending(dc1)
    t1 = time.time()
    manage(dc1, "startBrokerConnection", ["DC2"])
    wait_until(lambda: pending(dc1) == 0, 7200, "the backlog to drain")
    drain_s = last_accepted(dc1) - t1
    assert depth(dc2) == count, (depth(dc2), count)
    return {
        "rss": rss,
        "produce": count / produce_s,
        "drain": backlog / drain_s,
        "dc2_rss": rss_mib(dc2),
    }


def compare(args: argparse.Namespace) -> None:
    figures = {}
    for name, limit in (("in memory", -1), ("paging", LIMIT)):
        with tempfile.TemporaryDirectory(prefix="paging-bench-") as tmp:
            dc1, dc2 = pair(Path(tmp), limit)
            try:
                figures[name] = outage(dc1, dc2, args.count, args.chunks)
            finally:
                _close(dc1, dc2)
    memory, paged = figures["in memory"], figures["paging"]
    print("\nDC1 RSS (MiB) against pending messages (sent while DC2 was down)")
    print(f"{'pending':>10} {'in memory':>10} {'paging':>10}")
    for (n, a), (_, b) in zip(memory["rss"], paged["rss"], strict=True):  # type: ignore[call-overload]
        print(f"{n:>10,} {a:>10.1f} {b:>10.1f}")
    for what in ("produce", "drain"):
        m, p = float(memory[what]), float(paged[what])  # type: ignore[arg-type]
        label = "produce, msgs/s" if what == "produce" else "catch-up, events/s"
        print(f"{label:<20} in memory {m:>9,.0f}   paging {p:>9,.0f}   ratio {p / m:.2f}")
    print(
        f"DC2 RSS after the catch-up (MiB): in memory {memory['dc2_rss']:.1f}, paging {paged['dc2_rss']:.1f}"
    )


def _fresh(broker: BrokerProcess) -> BrokerProcess:
    """Drop a kept management connection that sat idle through a long phase (its idle timeout ran out)."""
    client = _CLIENTS.pop(broker.url, None)
    if client is not None:
        with contextlib.suppress(Exception):
            client.close()
    return broker


def soak(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="paging-soak-") as tmp:
        dc1, dc2 = pair(Path(tmp), LIMIT)
        peak = {"dc1": 0.0, "dc2": 0.0}
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(1.0):
                for b in (dc1, dc2):
                    with contextlib.suppress(OSError, AssertionError):  # between a kill and a restart
                        peak[b.name] = max(peak[b.name], rss_mib(b))

        threading.Thread(target=sample, daemon=True).start()
        try:
            manage(dc1, "stopBrokerConnection", ["DC2"])
            accepted = 0
            halves = [args.soak // 2, args.soak - args.soak // 2]
            t0 = time.time()
            for i, n in enumerate(halves):
                sender = Rhea().start_send(dc1.url, "orders", n, size=1024, durable=True, timeout=36000)
                result = sender.result(36000)
                accepted += int(result["accepted"])
                took = time.time() - t0
                print(f"sent {accepted:,} in {took:.0f} s; DC1 RSS peak {peak['dc1']:.1f} MiB", flush=True)
                if args.kill and i == 0:
                    _restart(dc1, "while paging")
                    manage(dc1, "stopBrokerConnection", ["DC2"])
                    _fresh(dc1)
            backlog = pending(_fresh(dc1))
            t1 = time.time()
            manage(dc1, "startBrokerConnection", ["DC2"])
            if args.kill:
                wait_until(lambda: pending(dc1) < backlog // 2, 36000, "half the backlog to drain")
                _restart(dc1, "while draining")
            wait_until(lambda: pending(dc1) == 0, 36000, "the backlog to drain")
            drain_s = time.time() - t1
            on_dc1, on_dc2 = depth(_fresh(dc1)), depth(_fresh(dc2))
            print(f"\nsoak: {accepted:,} accepted; DC1 holds {on_dc1:,}, DC2 {on_dc2:,}")
            print(f"drained {backlog:,} events in {drain_s:.0f} s ({backlog / drain_s:,.0f} events/s)")
            print(f"RSS peak: DC1 {peak['dc1']:.1f} MiB, DC2 {peak['dc2']:.1f} MiB")
            assert on_dc1 >= accepted and on_dc2 == on_dc1, "messages lost or not mirrored"
        finally:
            stop.set()
            _close(dc1, dc2)


def _restart(broker: BrokerProcess, when: str) -> None:
    _CLIENTS.pop(broker.url, None)
    broker.kill()
    t = time.time()
    broker.start(timeout=600)
    print(f"SIGKILL {when}: DC1 restarted in {time.time() - t:.1f} s", flush=True)


def _close(*brokers: BrokerProcess) -> None:
    for client in _CLIENTS.values():
        client.close()
    _CLIENTS.clear()
    for b in brokers:
        b.stop()


def overhead() -> None:
    """Bytes a broker holds per in-memory message besides its body (usage.py's MESSAGE_OVERHEAD)."""
    import logging
    import tracemalloc

    from tests.support.pair import Network

    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="paging-overhead-") as tmp:
        net = Network(Path(tmp))
        net.broker("b", persistence=True)
        net.start_all()
        client = net.client("b")
        n, body = 20_000, "x" * 1024
        for i in range(1000):  # warm up: caches, the first journal segment
            client.send("orders", body)
            if i % 200 == 0:
                net.pump()
        net.pump()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            client.send("orders", body)
            if i % 200 == 0:
                net.pump()
        net.pump()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        payload = len(net.server("b").queues["orders"].refs()[0].message.payload)
    per = (after - before) / n
    print(f"{per:.0f} bytes per durable message in memory, {payload} of them its encoded body:")
    print(f"overhead {per - payload:.0f} bytes (usage.py MESSAGE_OVERHEAD)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--soak", type=int, default=0, help="run the soak with this many messages instead")
    parser.add_argument(
        "--kill", action="store_true", help="soak: SIGKILL DC1 while paging and while draining"
    )
    parser.add_argument("--overhead", action="store_true", help="measure the memory per message and stop")
    args = parser.parse_args()
    print(compiled.status(), flush=True)
    if args.overhead:
        overhead()
    elif args.soak:
        soak(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
