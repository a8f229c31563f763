"""Micro-benchmark of the journal: 1 KiB MessageAdded records from several producer threads.

Prints records/s and fsyncs/s (group commit: one fsync covers many records), then optionally the time
one compaction takes with N live messages. The directory should be on the disk the broker will use;
a tmpfs makes fsync free and the numbers meaningless for durability.

    python bench/journal_bench.py --dir /path/on/disk --records 50000 --threads 4 --compact 100000
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from broker_core.journal import Journal
from broker_core.journal.records import MessageAcked, MessageAdded, QueueAdded

BODY = b"b" * 1024


def throughput(directory: Path, records: int, threads: int, fsync: bool, window: int = 0) -> None:
    """``threads`` producers; with ``window`` > 0 each has at most that many records not yet durable
    (like clients doing synchronous sends), else they append as fast as they can."""
    per_thread = records // threads
    durable = threading.Semaphore(0)
    with Journal(directory / f"throughput-{threads}-{window}-{fsync}", fsync=fsync) as journal:
        journal.open()
        journal.append(QueueAdded(1, "q", "a", "ANYCAST"))
        journal.flush()

        def produce(first: int) -> None:
            credit = threading.Semaphore(window or per_thread)

            def done() -> None:
                credit.release()
                durable.release()

            for mid in range(first, first + per_thread):
                credit.acquire()
                journal.append(MessageAdded(mid, "a", (1,), BODY), done)

        started = time.perf_counter()
        workers = [threading.Thread(target=produce, args=(1 + t * per_thread,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        for _ in range(per_thread * threads):  # every on_durable has fired
            durable.acquire()
        elapsed = time.perf_counter() - started
        stats = journal.stats()
    total = per_thread * threads
    print(
        f"fsync={fsync} threads={threads} window={window or 'open'}: {total / elapsed:,.0f} records/s, "
        f"{stats['fsyncs'] / elapsed:,.0f} fsyncs/s, {total / max(stats['fsyncs'], 1):.1f} records/fsync, "
        f"{total * len(BODY) / elapsed / 1e6:.1f} MB/s of bodies"
    )


def compaction(directory: Path, live: int) -> None:
    with Journal(directory / "compaction", compact_min_segments=10**9) as journal:
        journal.open()
        journal.append(QueueAdded(1, "q", "a", "ANYCAST"))
        for mid in range(1, 2 * live + 1):
            journal.append(MessageAdded(mid, "a", (1,), BODY))
            if mid % 2 == 0:  # half of them consumed: the live ones are spread over every segment
                journal.append(MessageAcked(1, mid))
        journal.flush()
        started = time.perf_counter()
        figures = journal.compact()
        elapsed = time.perf_counter() - started
    print(
        f"compaction of {live:,} live 1 KiB messages: {elapsed:.2f} s "
        f"({figures['bytes_before'] / 1e6:.0f} MB -> {figures['bytes_after'] / 1e6:.0f} MB); "
        "appends queue meanwhile"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, help="where to write (default: a temporary directory)")
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--compact", type=int, default=0, help="live messages for the compaction timing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for threads in sorted({1, args.threads}):
            throughput(Path(tmp), args.records, threads, fsync=True)
        for window in (1, 16):  # synchronous senders: what group commit buys under latency
            throughput(Path(tmp), args.records // 4, 16, fsync=True, window=window)
        throughput(Path(tmp), args.records, args.threads, fsync=False)
        if args.compact:
            compaction(Path(tmp), args.compact)


if __name__ == "__main__":
    main()
