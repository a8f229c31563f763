"""Child process for the SIGKILL test: appends and acks forever, printing ids once they are durable.

Usage: python crash_child.py DIRECTORY. Prints "A <id>" after a MessageAdded is durable and "K <id>"
after its MessageAcked is durable. Small segments make rolls and compactions frequent.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from broker_core.journal import Journal
from broker_core.journal.records import MessageAcked, MessageAdded, QueueAdded


def report(tag: str, mid: int) -> Callable[[], None]:
    def printed() -> None:
        sys.stdout.write(f"{tag} {mid}\n")
        sys.stdout.flush()

    return printed


def main(directory: Path) -> None:
    journal = Journal(directory, segment_size=16 * 1024, compact_min_segments=3)
    state = journal.open()
    start = state.max_message_id + 1
    if not state.queues:
        journal.append(QueueAdded(1, "q", "a", "ANYCAST"))
    mid = start
    while True:
        journal.append(MessageAdded(mid, "a", (1,), b"m" * 200), report("A", mid))
        if mid - 30 >= start:
            journal.append(MessageAcked(1, mid - 30), report("K", mid - 30))
        mid += 1
        if mid % 64 == 0:
            journal.flush()  # keep the queue short so the parent sees steady progress


if __name__ == "__main__":
    main(Path(sys.argv[1]))
