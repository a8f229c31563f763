"""Where our broker's CPU goes per message, under a rhea throughput load (durable or not).

Two profilers, because each sees what the other cannot:
- ``py-spy`` (default) samples every thread of the running broker from outside, with little overhead,
  so the shares are close to the unprofiled broker's; samples where the broker is idle are dropped,
  so the shares are of CPU time. Time spent in C under a Python frame (``transport.write``, the
  journal's ``write``/``fdatasync``) is charged to that frame; time in uvloop's own C loop (polling,
  reading sockets, dispatching callbacks) shows as the loop's entry frame.
- ``cprofile`` runs the broker under cProfile in-process and writes the stats when it exits on SIGTERM:
  exact call counts (socket reads and writes per message, engine calls per message), main thread only,
  and with an overhead that inflates small Python functions.

    .venv/bin/python bench/profile_broker.py --durable --count 60000 --py-spy PATH/TO/py-spy
    .venv/bin/python bench/profile_broker.py --profiler cprofile --count 30000 --out /tmp/nd.prof
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load import rhea_throughput
from bench.ours_broker import XML
from bench.targets import open_target

# Innermost frames where py-spy sees a thread as busy although it waits: fdatasync (disk I/O, D state)
# and the journal thread's condition wait. They are counted apart and left out of the CPU shares.
WAITING = "waiting (fdatasync, condition wait): not CPU"
WAIT_LEAVES = ("SegmentWriter._sync_active", "Condition.wait")

# (category, substring of a frame's "function (file:line)" text); the first match on the innermost
# frame of a sample names its category, so the order puts the specific before the general.
CATEGORIES = (
    ("journal: encode, write, state, thread", "broker_core/journal/"),
    ("engine: codec (decode/encode)", "broker_core/amqp/codec.py"),
    ("engine: performatives/framing", "broker_core/amqp/performatives.py"),
    ("engine: performatives/framing", "broker_core/amqp/framing.py"),
    ("engine: connection state machine", "broker_core/amqp/connection.py"),
    ("engine: connection state machine", "broker_core/amqp/sessions.py"),
    ("engine: connection state machine", "broker_core/amqp/endpoints.py"),
    ("engine: connection state machine", "broker_core/amqp/transfers.py"),
    ("broker: endpoint (per link/delivery)", "broker_core/endpoint.py"),
    ("broker: endpoint (per link/delivery)", "broker_core/inbound_links.py"),
    ("broker: routing, queues, message view", "broker_core/routing.py"),
    ("broker: routing, queues, message view", "broker_core/outcomes.py"),
    ("broker: routing, queues, message view", "broker_core/persistence.py"),
    ("broker: routing, queues, message view", "broker_core/server.py"),
    ("broker: routing, queues, message view", "broker_core/queues.py"),
    ("broker: routing, queues, message view", "broker_core/message.py"),
    ("socket glue + transport.write", "broker_core/acceptor.py"),
    ("socket glue + transport.write", "broker_core/turn.py"),
    ("event loop (uvloop C: poll, recv, dispatch)", "amqp_mirror/runtime.py"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--durable", action="store_true")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--count", type=int, default=60000)
    parser.add_argument("--profiler", choices=("py-spy", "cprofile"), default="py-spy")
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy executable")
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--out", type=Path, help="keep the raw profile here")
    return parser.parse_args(argv)


def serve_under_cprofile(workdir: Path, port: str, out: Path) -> int:
    """The broker itself (``serve`` mode): run the CLI under cProfile, dump the stats when it returns."""
    from broker_core import cli

    etc = workdir / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "broker.xml").write_text(XML.replace("{port}", port))
    profiler = cProfile.Profile()
    try:
        return profiler.runcall(
            cli.main, ["run", "--config", str(etc / "broker.xml"), "--log-level", "WARNING"]
        )
    finally:
        profiler.dump_stats(str(out))


def user_system_seconds(pid: int) -> tuple[float, float]:
    """utime and stime of one process (all its threads), from /proc/PID/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def _drive(args: argparse.Namespace, broker_cmd: str, use_py_spy: bool) -> tuple[float, int]:
    """Start the broker, warm it up, run the load (sampled by py-spy if asked); CPU s, messages."""
    with open_target("url:amqp://127.0.0.1:{port}", broker_cmd) as endpoint:
        assert endpoint.pid is not None
        rhea_throughput(endpoint, 3000, args.size, args.durable)
        sampler = _start_py_spy(args, endpoint.pid) if use_py_spy else None
        user0, sys0 = user_system_seconds(endpoint.pid)
        result = rhea_throughput(endpoint, args.count, args.size, args.durable)
        user1, sys1 = user_system_seconds(endpoint.pid)
        if sampler is not None:
            sampler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            sampler.wait(timeout=60)
    n = result.messages
    user_us, sys_us = (user1 - user0) / n * 1e6, (sys1 - sys0) / n * 1e6
    print(f"{n} msgs at {result.msgs_per_s:.0f}/s; broker user {user_us:.1f} + system {sys_us:.1f} µs/msg")
    return (user1 - user0) + (sys1 - sys0), n


def _start_py_spy(args: argparse.Namespace, pid: int) -> subprocess.Popen[bytes]:
    assert args.out is not None
    argv = [args.py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", str(args.rate)]
    argv += ["--threads", "--nonblocking", "--output", str(args.out)]
    sampler = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches asynchronously; a second of idle broker costs no samples
    return sampler


def folded_breakdown(path: Path) -> dict[str, int]:
    """Samples per category, from py-spy's folded stacks (``frame;frame;... count``)."""
    totals: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        totals[_category(frames)] += int(count)
    return dict(totals)


def _category(frames: list[str]) -> str:
    if frames[-1].startswith(WAIT_LEAVES):
        return WAITING
    for frame in reversed(frames):
        for name, needle in CATEGORIES:
            if needle in frame:
                return name
        if "broker_core" in frame or "bench/" in frame:
            return "other broker code"
    return "other (interpreter, threads, libraries)"


def print_breakdown(totals: dict[str, int], us_per_msg: float) -> None:
    """Shares of the CPU samples, and the measured CPU per message split by those shares."""
    waiting = totals.pop(WAITING, 0)
    samples = sum(totals.values())
    print(f"{samples} CPU samples (+{waiting} waiting); broker CPU {us_per_msg:.1f} µs/msg, py-spy attached")
    print("| where | share | µs/msg |\n|---|---|---|")
    for name, n in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"| {name} | {n / samples:.0%} | {n / samples * us_per_msg:.1f} |")


def print_cprofile(path: Path, messages: int, top: int = 25) -> None:
    """Call counts per message and the functions with the most own time."""
    stats = pstats.Stats(str(path))
    rows = []
    for (file, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tottime, cumtime, ncalls, f"{name} ({Path(file).name}:{line})"))
    total = sum(r[0] for r in rows)
    print(f"cProfile total own time {total:.2f} s over {messages} messages (inflated by the profiler)")
    print("| function | calls/msg | own % | cumulative µs/msg |\n|---|---|---|---|")
    for tottime, cumtime, ncalls, label in sorted(rows, reverse=True)[:top]:
        print(
            f"| {label} | {ncalls / messages:.3f} | {tottime / total:.1%} | {cumtime / messages * 1e6:.1f} |"
        )


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "serve":
        return serve_under_cprofile(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="profile-broker-") as tmp:
        here = Path(__file__).resolve()
        python = shlex.quote(sys.executable)
        if args.profiler == "cprofile":
            args.out = args.out or Path(tmp) / "broker.prof"
            command = (
                f"{python} {shlex.quote(str(here))} serve {{workdir}} {{port}} {shlex.quote(str(args.out))}"
            )
            _, messages = _drive(args, command, False)
            print_cprofile(args.out, messages + 3000)
        else:
            args.out = args.out or Path(tmp) / "broker.folded"
            launcher = shlex.quote(str(here.parent / "ours_broker.py"))
            cpu_s, messages = _drive(args, f"{python} {launcher} {{workdir}} {{port}}", True)
            print_breakdown(folded_breakdown(args.out), cpu_s / messages * 1e6)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
