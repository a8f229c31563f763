"""A process killed with SIGKILL loses nothing whose on_durable had fired."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.journal.helpers import reopen

CHILD = Path(__file__).with_name("crash_child.py")
REPO = Path(__file__).resolve().parents[2]


def run_and_kill(directory: Path, lines_before_kill: int) -> tuple[set[int], set[int]]:
    """Run the child until it has reported ``lines_before_kill`` durable ids, SIGKILL it, return
    the ids it reported as durably added and durably acked."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory)], stdout=subprocess.PIPE, env=env, text=True
    )
    assert child.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while len(lines) < lines_before_kill:
        line = child.stdout.readline()
        assert line and time.monotonic() < deadline, "child stopped reporting"
        lines.append(line)
    child.send_signal(signal.SIGKILL)
    rest = child.stdout.read()  # reported before it died: still in the pipe
    child.stdout.close()
    child.wait()
    lines += rest.splitlines(keepends=True)
    complete = [line.split() for line in lines if line.endswith("\n")]
    added = {int(mid) for tag, mid in complete if tag == "A"}
    acked = {int(mid) for tag, mid in complete if tag == "K"}
    return added, acked


def test_sigkill_loses_nothing_durable(tmp_path: Path) -> None:
    all_added: set[int] = set()
    all_acked: set[int] = set()
    for lines in (700, 1500, 400):  # three crashes in a row on the same directory
        added, acked = run_and_kill(tmp_path, lines)
        all_added |= added
        all_acked |= acked
        state = reopen(tmp_path, segment_size=16 * 1024)
        recovered = set(state.messages)
        # an id may also be gone because its ack became durable just before the kill, before the
        # child could report it; the child acks id X only after appending id X + 30,
        # and the journal is a durable prefix, so then X + 30 must have been recovered as well
        missing = all_added - all_acked - recovered
        unexplained = {x for x in missing if x + 30 > state.max_message_id}
        assert not unexplained, f"durable messages lost: {sorted(unexplained)[:10]}"
        resurrected = recovered & all_acked
        assert not resurrected, f"durably acked messages came back: {sorted(resurrected)[:10]}"
        assert state.max_message_id >= max(all_added)
    assert any(p.name.endswith(".done") for p in tmp_path.iterdir()), "no compaction happened"
