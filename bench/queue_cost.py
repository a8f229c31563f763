"""A queue's own CPU per message, in one process: enqueue, dispatch to a consumer, give the reference back.

    .venv/bin/python bench/queue_cost.py [--count 200000] [--repeat 5]

Cases (each the median of `--repeat` runs, in ns per message):
- live: a consumer with credit is attached, so each message is delivered as it is enqueued (the queue
  stays empty: the common case of a busy broker);
- backlog: `--count` messages enqueued first, then drained by one consumer;
- backlog, priorities 0-9: the same with header priorities cycling 0-9 (what priority ordering costs);
- backlog, selector: a second consumer with a selector matching one message in ten drains alongside a
  plain one (skipped on a tree without selectors).

Only the queue's methods run (no journal, no frames), so the figure is steady enough to compare two trees:
run it from each with PYTHONPATH=<tree> (the compiled build of that tree is used when it is current).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_core import compiled
from broker_core.queues import MessageRef, Queue, StoredMessage


class Taker:
    """A consumer that always has credit and keeps nothing."""

    def __init__(self) -> None:
        self.got = 0

    def can_take(self) -> bool:
        return True

    def deliver(self, ref: MessageRef) -> None:
        self.got += 1
        ref.queue.take_in_flight(ref)

    def kick(self, condition: str, description: str) -> None:
        pass


def _refs(q: Queue, n: int, priorities: bool) -> list[MessageRef]:
    return [
        MessageRef(StoredMessage(i + 1, "q", b"", True, 0, 0, i % 10 if priorities else 4), q)
        for i in range(n)
    ]


def live(n: int) -> float:
    q = Queue(1, "q", "q", "ANYCAST")
    q.add_consumer(Taker())
    refs = _refs(q, n, False)
    start = time.process_time()
    for ref in refs:
        q.enqueue(ref)
    return time.process_time() - start


def backlog(n: int, priorities: bool = False, selector: bool = False) -> float:
    q = Queue(1, "q", "q", "ANYCAST")
    refs = _refs(q, n, priorities)
    start = time.process_time()
    q.enqueue_many(refs)
    taker = Taker()
    if selector:
        q.add_consumer(Taker(), match=lambda m: m.id % 10 == 0)  # type: ignore[call-arg]
    q.add_consumer(taker)
    q.dispatch()
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"queues: {compiled.status()}")
    cases: list[tuple[str, Any]] = [
        ("live", lambda: live(args.count)),
        ("backlog", lambda: backlog(args.count)),
        ("backlog, priorities 0-9", lambda: backlog(args.count, priorities=True)),
        ("backlog, selector", lambda: backlog(args.count, selector=True)),
    ]
    for name, run in cases:
        try:
            times = [run() for _ in range(args.repeat)]
        except TypeError:  # an older tree: add_consumer takes no selector
            print(f"{name:26} not in this tree")
            continue
        per = sorted(t / args.count * 1e9 for t in times)
        print(f"{name:26} {statistics.median(per):7.0f} ns/msg ({per[0]:.0f}-{per[-1]:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
