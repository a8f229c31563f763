"""Where consumers belong: how many messages a dual mirror lets consumers on both sides take twice.

    .venv/bin/python bench/dual_consumers.py --count 2000 --rate 200 --repeat 3
    .venv/bin/python bench/dual_consumers.py --sync --count 2000 --rate 200 --repeat 3
    .venv/bin/python bench/dual_consumers.py --backlog --count 2000 --rate 1000 --repeat 3

DC1 and DC2 (two broker processes on loopback) mirror each other (`<mirror/>` each way, `sync="true"`
with `--sync`). One producer sends `--count` durable messages to DC1's `orders` at `--rate` msgs/s (one
send at a time, each waiting for its outcome); one consumer on each side takes everything it gets from
its own broker's `orders` and accepts it. When both queues and both mirrors are empty, the message ids
each side consumed are compared: consumed on both sides, on DC1 only, on DC2 only, by nobody (lost).
With `--backlog` the consumers start only once everything was sent and mirrored (a backlog on both sides,
as after an outage of the consumers).

A message consumed on DC1 leaves DC2 only when DC1's postAck arrives there, one mirror hop after DC1's
consumer acknowledged it; by then DC2's consumer has usually taken it too (it arrived on DC2 one hop
after it was sent). Acknowledgements are not coordinated across data centres (Artemis's mirror is the
same): a mirror is for disaster recovery, not for sharing a queue's consumers between two sides.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from proton import Message, Timeout  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

from broker_core import compiled  # noqa: E402
from connections.cli import Management  # noqa: E402
from tests.peers.ports import free_port, wait_until  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

QUEUE = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


def mirror_xml(name: str, port: int, sync: bool) -> str:
    attrs = f'uri="tcp://127.0.0.1:{port}" name="{name}" retry-interval="100"'
    mirror = f'<mirror sync="{str(sync).lower()}"/>'
    return f"<broker-connections><amqp-connection {attrs}>{mirror}</amqp-connection></broker-connections>"


def start(home: Path, name: str, port: int, peer: tuple[str, int], sync: bool) -> BrokerProcess:
    extra = mirror_xml(peer[0], peer[1], sync)
    b = BrokerProcess(home / name, name=name, port=port, xml_kwargs={"addresses": QUEUE, "extra": extra})
    return b.start()


@dataclass
class Consumer:
    """Takes everything its broker's `orders` offers and accepts it, until told to stop."""

    url: str
    credit: int
    ids: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn = BlockingConnection(self.url, timeout=30, allowed_mechs="ANONYMOUS")
            try:
                receiver = conn.create_receiver("orders", credit=self.credit)
                while not self.stop.is_set():
                    try:
                        message = receiver.receive(timeout=0.2)
                    except Timeout:
                        continue
                    self.ids.append(int(message.body))
                    receiver.accept()
            finally:
                conn.close()
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def join(self) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout=30)
        if self.error is not None:
            raise RuntimeError(f"consumer on {self.url} failed: {self.error}") from self.error


def produce(url: str, first: int, count: int, rate: float) -> None:
    conn = BlockingConnection(url, timeout=60, allowed_mechs="ANONYMOUS")
    try:
        sender = conn.create_sender("orders")
        started = time.monotonic()
        for n in range(count):
            due = started + n / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing the load, not synchronising a test
            sender.send(Message(body=first + n, durable=True))
    finally:
        conn.close()


_MANAGEMENT: dict[str, Management] = {}  # one kept connection per broker: polling costs little


def call(b: BrokerProcess, operation: str, resource: str = "broker") -> dict[str, object]:
    client = _MANAGEMENT.get(b.url)
    if client is None:
        client = _MANAGEMENT[b.url] = Management(b.url)
    result = client.call(operation, [], resource=resource)
    assert isinstance(result, dict)
    return result


def depth(b: BrokerProcess) -> int:
    """Messages on `orders`, waiting or out to the consumer."""
    return int(str(call(b, "getStatistics", "queue.orders")["message-count"]))


def pending(b: BrokerProcess) -> int:
    """Events the broker's mirror has not had accepted yet."""
    sources = call(b, "getMirrorStatus")["sources"]
    assert isinstance(sources, list)
    return sum(int(s["pendingEvents"]) for s in sources)


@dataclass
class Outcome:
    both: int
    dc1_only: int
    dc2_only: int
    lost: int
    seconds: float


def one_run(dc1: BrokerProcess, dc2: BrokerProcess, first: int, args: argparse.Namespace) -> Outcome:
    consumers = [Consumer(dc1.url, args.credit), Consumer(dc2.url, args.credit)]
    began = time.monotonic()
    if args.backlog:  # everything is sent and mirrored first; then both consumers start on the backlog
        produce(dc1.url, first, args.count, args.rate)
        wait_until(lambda: pending(dc1) == 0 and depth(dc2) == args.count, 120, "the backlog on DC2")
        for c in consumers:
            c.start()
    else:
        for c in consumers:
            c.start()
        produce(dc1.url, first, args.count, args.rate)
    sent = set(range(first, first + args.count))

    def settled() -> bool:
        return depth(dc1) == 0 and depth(dc2) == 0 and pending(dc1) == 0 and pending(dc2) == 0

    try:
        wait_until(settled, 120, "both queues empty and both mirrors drained")
    finally:
        for c in consumers:
            c.join()
    seconds = time.monotonic() - began
    for c, name in zip(consumers, ("DC1", "DC2"), strict=True):
        if len(c.ids) != len(set(c.ids)):  # a redelivery after a lost outcome: not what is measured
            print(f"  note: {len(c.ids) - len(set(c.ids))} messages consumed twice on {name}")
    on1, on2 = set(consumers[0].ids) & sent, set(consumers[1].ids) & sent
    return Outcome(len(on1 & on2), len(on1 - on2), len(on2 - on1), len(sent - on1 - on2), seconds)


def percent(values: list[float]) -> str:
    return f"{statistics.median(values):5.1f} % ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=2000, help="messages per run (default 2000)")
    parser.add_argument("--rate", type=float, default=200, help="sends per second (default 200)")
    parser.add_argument("--credit", type=int, default=10, help="each consumer's credit (default 10)")
    parser.add_argument("--repeat", type=int, default=3, help="runs (default 3)")
    parser.add_argument("--sync", action="store_true", help='mirror with sync="true" both ways')
    parser.add_argument(
        "--backlog", action="store_true", help="send everything first, then start both consumers on it"
    )
    args = parser.parse_args()
    print(compiled.status(), flush=True)
    with tempfile.TemporaryDirectory(prefix="dual-consumers-") as tmp:
        home = Path(tmp)
        p1, p2 = free_port(), free_port()
        dc2 = start(home, "dc2", p2, ("DC1", p1), args.sync)
        dc1 = start(home, "dc1", p1, ("DC2", p2), args.sync)
        try:
            wait_until(lambda: "AMQ111003" in dc1.log() and "AMQ111003" in dc2.log(), 30, "mirrors up")
            runs = [one_run(dc1, dc2, 1 + i * args.count, args) for i in range(args.repeat)]
        finally:
            for client in _MANAGEMENT.values():
                client.close()
            dc1.stop()
            dc2.stop()
    mode = 'sync="true"' if args.sync else "async"
    when = "started on the mirrored backlog" if args.backlog else "running while they are sent"
    print(
        f"dual mirror ({mode}), {args.count} durable msgs to DC1 at {args.rate:.0f}/s,"
        f" one consumer on each side (credit {args.credit}) {when}, {args.repeat} runs: median (range)"
    )
    n = args.count
    print(f"  consumed on both sides  {percent([r.both / n * 100 for r in runs])}")
    print(f"  on DC1 only             {percent([r.dc1_only / n * 100 for r in runs])}")
    print(f"  on DC2 only             {percent([r.dc2_only / n * 100 for r in runs])}")
    print(f"  by nobody (lost)        {sum(r.lost for r in runs)} of {n * args.repeat}")
    print(f"  seconds per run         {statistics.median([r.seconds for r in runs]):.1f}")


if __name__ == "__main__":
    main()
