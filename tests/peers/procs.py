"""Child processes in their own session: start, stop cleanly, kill leftovers, measure CPU of a tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.peers.ports import WaitTimeout, wait_until

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def start_session(
    argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session, so stopping it can reach every descendant."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )


def stop_session(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM the process group, give it ``grace`` seconds, then SIGKILL whatever is left."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    # The leader may be gone while group members linger (e.g. a VM outliving its launcher script).
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_pid(pid: int, timeout: float = 5.0) -> None:
    """SIGKILL one process by id and wait until it has gone (or become a zombie of someone else)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(WaitTimeout):
        wait_until(lambda: not _alive(pid), timeout, f"pid {pid} to exit")


def _alive(pid: int) -> bool:
    stat = _read_stat(pid)
    return stat is not None and stat[0] != "Z"


def _read_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name, or None if the process has gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    return raw[raw.rindex(")") + 2 :].split()


def process_tree(root: int) -> list[int]:
    """``root`` and all its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _read_stat(int(entry.name))
            if stat is not None:
                children.setdefault(int(stat[1]), []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds consumed so far by ``root`` and its live descendants (own time only)."""
    ticks = 0
    for pid in process_tree(root):
        stat = _read_stat(pid)
        if stat is not None:
            # After the name: state(0) ppid(1) ... utime(11) stime(12), per proc(5).
            ticks += int(stat[11]) + int(stat[12])
    return ticks / _CLOCK_TICKS


def pids_with_env(name: str, value: str, command: str) -> list[int]:
    """Processes named ``command`` whose environment has ``name=value`` (to find daemonised leftovers)."""
    wanted = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != command:
                continue
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
