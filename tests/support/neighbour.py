"""A disk- and CPU-heavy neighbour: processes that spin the CPUs and write-and-fsync a file in a loop.

What a CI machine shared with other jobs looks like to the brokers under test: their threads wait for
a core, and their fsyncs queue behind someone else's. Started by a test (``with busy_neighbour(dir):``)
and stopped by it, all in one process group of its own, so nothing outlives the test.

    python -m tests.support.neighbour DIR [--cpu N] [--disk N]   # runs until killed
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.peers.procs import start_session, stop_session

CHUNK = b"\xa5" * (256 * 1024)


def spin() -> None:
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def write_and_sync(path: Path) -> None:
    """Append 256 KiB and fsync, forever; start over past 64 MiB (the disk's queue, not its space)."""
    while True:
        with open(path, "wb") as f:
            for _ in range(256):
                f.write(CHUNK)
                f.flush()
                os.fsync(f.fileno())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dir", type=Path)
    parser.add_argument("--cpu", type=int, default=2)
    parser.add_argument("--disk", type=int, default=1)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    procs = [multiprocessing.Process(target=spin) for _ in range(args.cpu)]
    procs += [
        multiprocessing.Process(target=write_and_sync, args=(args.dir / f"fsync-{i}.bin",))
        for i in range(args.disk)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return 0


@contextlib.contextmanager
def busy_neighbour(workdir: Path, cpu: int = 2, disk: int = 1) -> Iterator[None]:
    """Run the neighbour for the duration of the block (killed with its whole process group)."""
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "tests.support.neighbour", str(workdir), f"--cpu={cpu}", f"--disk={disk}"]
    root = Path(__file__).resolve().parents[2]
    proc = start_session(argv, workdir / "neighbour.log", cwd=root)
    try:
        yield
    finally:
        stop_session(proc, grace=0)
        for f in workdir.glob("fsync-*.bin"):
            f.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
