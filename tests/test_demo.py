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

    produced = numbers("orders produced")  # DC1 n + 200 (the outage), DC2 n // 2
    assert produced == [1, n + 200, 2, n // 2], out.stdout
    [consumed] = numbers("orders consumed (on DC2)")
    assert consumed == (n + n // 2) // 2
    left = numbers("orders left")
    assert left == [1, n + 200 + n // 2 - consumed, 2, n + 200 + n // 2 - consumed], out.stdout
    assert "identical: True" in out.stdout
    _, sent1, accepted1, _, sent2, accepted2 = numbers("mirror events sent/accepted")
    assert sent1 == accepted1 and sent2 == accepted2 and sent1 > n + 200, out.stdout
    assert numbers("duplicates dropped") == [1, 0, 2, 0]
    assert "events caught up in" in out.stdout
