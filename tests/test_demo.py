"""The README's main job, `amqp-mirror demo`, run as a user runs it: a process, its summary read back."""

from __future__ import annotations

import re
import subprocess
import sys


def test_demo_mirrors_both_ways_and_its_summary_adds_up() -> None:
    n = 200
    out = subprocess.run(
        [sys.executable, "-m", "amqp_mirror", "demo", "--messages", str(n)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr

    def numbers(label: str) -> list[int]:
        line = next((x.strip() for x in out.stdout.splitlines() if x.strip().startswith(label)), None)
        assert line is not None, f"no {label!r} line in:\n{out.stdout}"
        return [int(v) for v in re.findall(r"\d+", line[len(label) :])]

    total = n + 200 + n // 2
    consumed = (n + n // 2) // 2
    assert numbers("orders produced") == [n + 200, n // 2], out.stdout  # DC1 with the outage's 200
    assert numbers("orders consumed") == [0, consumed]
    left = total - consumed
    assert numbers("orders left") == [left, left] and "identical, byte for byte" in out.stdout
    queued = numbers("mirror events queued")
    sends, acks, topology = numbers("messages (sends)"), numbers("acknowledgements"), numbers("address and")
    # each side mirrors its own sends and its consumers' acks, plus the address and queue it announced
    assert sends == [n + 200, n // 2] and acks == [0, consumed] and topology == [2, 2], out.stdout
    assert queued == [s + a + t for s, a, t in zip(sends, acks, topology, strict=True)], out.stdout
    assert numbers("mirror events accepted remotely") == queued, out.stdout
    assert numbers("duplicates dropped on arrival") == [0, 0]
    assert "DC1: connected, nothing pending; DC2: connected, nothing pending" in out.stdout
    caught_up = re.search(r"200 events caught up in (\d+) ms", out.stdout)
    assert caught_up is not None and int(caught_up.group(1)) > 0, out.stdout
