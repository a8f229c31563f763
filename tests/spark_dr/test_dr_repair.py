"""Repair on real journals after a real failover (``failover.py``): every queue reached exactly, the
re-sent messages byte for byte the stored ones, plans that survive compaction, what cannot be done
said in one line each, and a run killed halfway resumed without doing anything twice.

The expected effect of a repair is the plan's, queue by queue: each re-send adds one message to its
queue and each removal takes one away, on a survivor nobody else uses meanwhile. The plan itself is
what the first reconciliation found (``test_dr_end_to_end.py`` checks that against the clients' own
record of what they did).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message

from broker_core.journal import Journal
from broker_core.message import MESSAGE_ANNOTATIONS, sections
from connections.cli import request
from spark_dr.cli import reconcile_main, repair_main
from spark_dr.identity import REPAIR_ANNOTATION, payload_digest, repair_origin
from tests.peers.rhea import Rhea
from tests.spark_dr import failover as F
from tests.spark_dr.conftest import need_spark
from tests.support.broker import REPO, BrokerProcess

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def scenario(
    tmp_path_factory: pytest.TempPathFactory, rhea: Rhea, spark: Any
) -> tuple[F.Failover, dict[str, Any], Path]:
    """The failover, reconciled once: (failover, its plan, the plan's file)."""
    need_spark()
    root = tmp_path_factory.mktemp("failover")
    failover = F.run_failover(root, rhea)
    assert reconcile(root, failover.dc1_journal, failover.dc2.home / "data", "first", spark) == 3
    plan_file = root / "report-first" / "repair-plan.json"
    plan = json.loads(plan_file.read_text())
    queues = {e["queue"] for e in plan["resend"]}
    assert queues >= {"billing.q", "news.eu", "news.us", "orders"}, "the scenario re-sends into every queue"
    assert {e["queue"] for e in plan["remove"]} >= {"billing.q", "news.eu", "orders"}
    assert len(plan["resend"]) >= failover.dc1_pending + 20
    return failover, plan, plan_file


def reconcile(root: Path, dc1: Path, dc2: Path, tag: str, spark: Any) -> int:
    args = argparse.Namespace(
        dc1=str(dc1), dc2=str(dc2), names="DC1,DC2", survivor="DC2", out=str(root / f"report-{tag}"),
        plan=str(root / f"report-{tag}" / "repair-plan.json"), broker=None, master=None, shuffle_partitions=2,
        plan_limit=100_000, metrics_file=None,
        pushgateway=None, no_export=False, quiet=True,
    )  # fmt: skip
    return reconcile_main(args, spark=spark)


def repair_args(plan_file: Path, survivor: BrokerProcess, **changes: Any) -> argparse.Namespace:
    args = argparse.Namespace(plan=str(plan_file), broker=survivor.url, dry_run=False, journal=None,
                              user=None, password=None, timeout=5.0, quiet=True)  # fmt: skip
    for key, value in changes.items():
        setattr(args, key, value)
    return args


def last_json(out: str) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return summary


@pytest.fixture
def survivor(scenario: tuple[F.Failover, dict[str, Any], Path], tmp_path: Path) -> Iterator[BrokerProcess]:
    b = F.survivor_from(scenario[0], tmp_path / "survivor")
    yield b
    b.stop()


def own_plan(plan_file: Path, tmp_path: Path) -> Path:
    """The plan copied where this test keeps its progress file."""
    copy = tmp_path / "plan.json"
    copy.write_text(plan_file.read_text())
    return copy


def test_repair_reaches_each_queue_and_the_survivor_then_reconciles_in_sync(
    scenario: tuple[F.Failover, dict[str, Any], Path],
    survivor: BrokerProcess,
    tmp_path: Path,
    spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    failover, plan, plan_file = scenario
    plan_file = own_plan(plan_file, tmp_path)
    before = F.depths(survivor)
    assert repair_main(repair_args(plan_file, survivor, dry_run=True)) == 0
    assert F.depths(survivor) == before, "a dry run changed the survivor"
    assert last_json(capsys.readouterr().out)["would_resend"] == len(plan["resend"])

    assert repair_main(repair_args(plan_file, survivor)) == 0
    done = last_json(capsys.readouterr().out)
    assert (done["resend"], done["remove"], done["problems"]) == (len(plan["resend"]), len(plan["remove"]), 0)
    # each queue got its own re-sends and lost its own removals: none vanished into another address
    assert F.depths(survivor) == F.expected_depths(before, plan)
    assert repair_main(repair_args(plan_file, survivor)) == 0  # again: nothing left to do
    again = last_json(capsys.readouterr().out)
    assert (again["resend"], again["already_present"]) == (0, len(plan["resend"]))
    assert (again["remove"], again["already_removed"]) == (0, len(plan["remove"]))
    assert F.depths(survivor) == F.expected_depths(before, plan)
    survivor.stop()

    # the re-sent copies are the stored messages, byte for byte, but for the repair's one annotation
    originals = F.stored_messages(failover.dc1_journal)
    copies = repaired_copies(survivor.home / "data" / "journal")
    assert sorted(copies) == sorted({e["identity"] for e in plan["resend"]})
    for identity, copy in copies.items():
        assert_only_annotated(originals[identity], copy, identity)
    wide = [i for i in copies if originals[i][3:4] == b"\xd0"]  # a list32 header: rhea's encoding
    assert len(wide) >= 50, "the re-sends include rhea's wide encodings"

    assert reconcile(tmp_path, failover.dc1_journal, survivor.home / "data", "after", spark) == 0
    result = json.loads((tmp_path / "report-after" / "reconciliation.json").read_text())
    assert result["survivor_in_sync"] and result["counts"]["payload_differs"] == 0
    assert result["repaired"]["DC2"] == len(plan["resend"]), "the report counts the repaired copies"


def repaired_copies(journal: Path) -> dict[str, bytes]:
    return {i: body for i, body in F.stored_messages(journal).items() if repair_origin(body) is not None}


def assert_only_annotated(original: bytes, copy: bytes, identity: str) -> None:
    """Every section of ``copy`` is the original's, byte for byte, but the message annotations, which
    hold the original's entries as they were encoded, then the repair's."""

    def others(payload: bytes) -> list[tuple[int, bytes]]:
        return [(c, payload[s:e]) for c, s, e in sections(payload) if c != MESSAGE_ANNOTATIONS]

    assert others(copy) == others(original)
    assert map_elements(copy).startswith(map_elements(original))
    old, new = Message(), Message()
    old.decode(original)
    new.decode(copy)
    assert dict(new.annotations or {}) == {**dict(old.annotations or {}), REPAIR_ANNOTATION: identity}
    assert payload_digest(copy) == payload_digest(original)


def map_elements(payload: bytes) -> bytes:
    """The encoded entries of the message annotations map (after its descriptor and map header)."""
    for code, start, end in sections(payload):
        if code == MESSAGE_ANNOTATIONS:
            assert payload[start : start + 3] == b"\x00\x53\x72"
            kind = payload[start + 3]
            return payload[start + (6 if kind == 0xC1 else 12) : end]
    return b""


def test_a_plan_stays_valid_when_both_journals_compact(
    scenario: tuple[F.Failover, dict[str, Any], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DC1's journal is compacted after the plan (every re-send's position is gone) and the survivor's
    compacts while the repair runs (its own re-sends roll the files), and the repair still does it all.
    This survivor runs without its mirror connection (the operator took the dead side out of its
    configuration): with it, every message and acknowledgement would stay referenced by the
    store-and-forward queue, and nothing would be dead to compact."""
    failover, plan, plan_file = scenario
    plan_file = own_plan(plan_file, tmp_path)
    dc1 = tmp_path / "dc1-journal"
    subprocess_free_copy(failover.dc1_journal, dc1)
    with Journal(dc1, fsync=False) as journal:
        journal.open()
        journal.compact()
    hints = {tuple(e["hint"]) for e in plan["resend"]}
    assert not any(list(dc1.glob(f"*{seg:012d}.jnl")) for seg, _ in hints), "the hints still hold"
    # the survivor's closed files are mostly dead when the repair starts: its re-sends roll the files
    # and the first roll compacts
    survivor = F.survivor_from(failover, tmp_path / "survivor", mirror=False)
    F.leave_mostly_dead(survivor)
    before, compacted = F.depths(survivor), F.compactions(survivor)

    assert repair_main(repair_args(plan_file, survivor, journal=[f"DC1={dc1}"])) == 0
    done = last_json(capsys.readouterr().out)
    assert (done["resend"], done["remove"], done["problems"]) == (len(plan["resend"]), len(plan["remove"]), 0)
    assert F.compactions(survivor) > compacted, "the survivor compacted during the repair"
    assert F.depths(survivor) == F.expected_depths(before, plan)
    survivor.stop()


def subprocess_free_copy(source: Path, target: Path) -> None:
    import shutil

    shutil.copytree(source, target, ignore=shutil.ignore_patterns("serverlock*"))


def run_repair(
    plan_file: Path, survivor: BrokerProcess, *extra: str, cwd: Path | None = None
) -> subprocess.Popen[str]:
    """``amqp-mirror repair`` as the operator runs it: its own process."""
    argv = [sys.executable, "-m", "amqp_mirror", "repair", "--plan", str(plan_file), "--broker", survivor.url,
            "--timeout", "3", *extra]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def test_what_a_stale_plan_cannot_do_is_said_in_one_line_each(
    scenario: tuple[F.Failover, dict[str, Any], Path], survivor: BrokerProcess, tmp_path: Path
) -> None:
    """Since the plan: the survivor's orders were all consumed (every removal there finds nothing),
    its news.us subscription was deleted, and DC1's journal is not where the plan says (one line for
    all its re-sends); one line each, exit 1, no traceback, and what could be done is done."""
    _, plan, plan_file = scenario
    plan_file = own_plan(plan_file, tmp_path)
    F.receive(survivor.url, "orders", 1000, timeout=1)
    request(survivor.url, "destroyQueue", ["news.us"])
    with run_repair(plan_file, survivor, "--journal", f"DC1={tmp_path / 'nowhere'}") as proc:
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    problems = [line for line in err.splitlines() if not line.startswith("[")]
    assert all(line.startswith("amqp-mirror repair: ") for line in problems), problems
    resends = Counter(e["queue"] for e in plan["resend"])
    removals = Counter(e["queue"] for e in plan["remove"])
    journal_lines = [p for p in problems if "journal" in p and "is not here" in p]
    assert journal_lines == [f"amqp-mirror repair: {len(plan['resend'])} re-sends not done: DC1's journal "
                             f"{tmp_path / 'nowhere'} is not here (give --journal DC1=DIR)"]  # fmt: skip
    assert sum("not found on the survivor" in p for p in problems) == removals["orders"]
    assert sum("news.us" in p and "not done there" in p for p in problems) == 1
    assert len(problems) == 1 + removals["orders"] + 1
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["remove"] == len(plan["remove"]) - removals["orders"] - removals["news.us"]
    assert summary["resend"] == 0 and resends["news.us"] > 0


def test_a_removal_waits_for_a_dead_letter_queue_to_keep_it(
    scenario: tuple[F.Failover, dict[str, Any], Path], survivor: BrokerProcess, tmp_path: Path
) -> None:
    """A message DC1 consumed (or settled, how its compacted journal no longer says) is removed from the
    survivor to its dead-letter address, kept there for the operator: with no queue there, it would be
    dropped, so the repair says so for each queue and removes none of them; the re-sends are done."""
    _, plan, plan_file = scenario
    plan_file = own_plan(plan_file, tmp_path)
    assert {e["how"] for e in plan["remove"]} <= {"consumed", "settled"}
    request(survivor.url, "destroyQueue", ["DLA"])
    before = F.depths(survivor)
    with run_repair(plan_file, survivor) as proc:
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    problems = [line for line in err.splitlines() if not line.startswith("[")]
    removals = Counter(e["queue"] for e in plan["remove"])
    assert sorted(problems) == sorted(
        f"amqp-mirror repair: queue {q} has a dead-letter address, DLA, with no queue: {n} removals of "
        "messages the failed side consumed are not done (a removed message is kept there for you, and "
        "would be dropped): give that address a queue and run repair again"
        for q, n in removals.items()
    )
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["resend"], summary["remove"]) == (len(plan["resend"]), 0)
    assert F.depths(survivor) == F.expected_depths(before, {**plan, "remove": []})


def test_a_plan_moved_with_its_journal_is_read_from_anywhere(
    scenario: tuple[F.Failover, dict[str, Any], Path], survivor: BrokerProcess, tmp_path: Path
) -> None:
    """A plan's journal path, relative, is taken from the plan's directory (the plan and the journals
    moved together), whatever directory the repair runs from."""
    failover, plan, _ = scenario
    moved = tmp_path / "dr"
    subprocess_free_copy(failover.dc1_journal, moved / "dc1" / "journal")
    plan_file = moved / "report" / "plan.json"
    plan_file.parent.mkdir(parents=True)
    plan_file.write_text(json.dumps({**plan, "journals": {**plan["journals"], "DC1": "../dc1/journal"}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with run_repair(plan_file, survivor, "--dry-run", cwd=elsewhere) as proc:
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["would_resend"] == len(plan["resend"])


def kill_when(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout: float = 30.0) -> None:
    """SIGKILL ``proc`` as soon as ``ready()``: polled every millisecond (``wait_until`` backs off to
    200 ms, time enough for the repair to finish)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, "the repair ended before it could be killed"
        assert time.monotonic() < deadline, "the repair recorded nothing in time"
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)


def test_a_repair_killed_halfway_resumes_without_doing_anything_twice(
    scenario: tuple[F.Failover, dict[str, Any], Path], survivor: BrokerProcess, tmp_path: Path
) -> None:
    _, plan, plan_file = scenario
    plan_file = own_plan(plan_file, tmp_path)
    before = F.depths(survivor)
    progress = Path(str(plan_file) + ".progress")
    with run_repair(plan_file, survivor) as first:  # its pipes closed however this ends
        kill_when(first, lambda: '"did": "sent"' in (progress.read_text() if progress.exists() else ""))
        first.communicate(timeout=10)
    assert first.returncode == -signal.SIGKILL
    recorded = progress.read_text().count('"did": "sent"')
    assert 0 < recorded < len(plan["resend"]), "killed halfway"

    with run_repair(plan_file, survivor) as second:
        out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["resend"] + summary["already_present"] == len(plan["resend"])
    assert summary["already_present"] >= recorded
    assert F.depths(survivor) == F.expected_depths(before, plan), "something was done twice, or not at all"
