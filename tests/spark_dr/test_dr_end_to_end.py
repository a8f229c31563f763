"""End to end on real journals: two of our brokers dual-mirroring, traffic, a cut, divergent traffic and
consumption on both sides, DC1 killed; reconcile, repair DC2, reconcile again.

The ground truth comes from the test's own clients: what was sent where and when (before or after the
cut), and which bodies each side's consumers received. The cut is taken once both mirrors have drained,
so every pre-cut event is on both sides and no post-cut event is on the other side: the expected class
of every message follows from those facts alone.

Removing a message on the survivor rejects it, so the broker dead-letters it (to the DLA, kept for the
operator): later reconciliations count those copies as DC2-only messages on the DLA.

"In sync" after the repair (``survivor_in_sync``): no reference is live on the failed side only, none is
consumed on the failed side but still live on the survivor, no payload differs, no orphan ack. What
remains diverged is what a repair of the survivor cannot and need not change: messages consumed on both
sides (already delivered twice) and the survivor's own post-cut state that the dead side never saw.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connections.cli import request
from spark_dr.cli import reconcile_main, repair_main
from tests.mirror.test_dual_mirror import depth, mirror_xml, status
from tests.peers.ports import free_port, wait_until
from tests.spark_dr.conftest import need_spark
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send

QUEUES = "".join(
    f'<address name="{q}"><anycast><queue name="{q}"/></anycast></address>' for q in ("orders", "payments")
)


class Truth:
    """What the clients did: body -> (queue, sent on, phase); consumption per side and phase."""

    def __init__(self) -> None:
        self.sent: dict[str, tuple[str, str, str]] = {}
        self.consumed: dict[str, dict[str, str]] = {}  # body -> side -> phase

    def send(self, b: BrokerProcess, side: str, queue: str, bodies: list[str], phase: str) -> None:
        assert send(b.url, queue, bodies) == len(bodies)
        for body in bodies:
            self.sent[body] = (queue, side, phase)

    def consume(self, b: BrokerProcess, side: str, queue: str, n: int, phase: str) -> None:
        got = receive(b.url, queue, n, timeout=5)
        assert len(got) == n
        for m in got:
            self.consumed.setdefault(str(m.body), {})[side] = phase

    def expected(self) -> Counter[tuple[str, str | None]]:
        out: Counter[tuple[str, str | None]] = Counter()
        for body, (_queue, side, phase) in self.sent.items():
            took = self.consumed.get(body, {})
            if phase == "before":
                if "before" in took.values() or not took:
                    out["in_sync", None] += 1
                elif len(took) == 2:
                    out["consumed_both", None] += 1
                else:
                    out["acked_one_side", next(iter(took))] += 1
            elif side in took:
                out["in_sync", None] += 1  # consumed where it was sent, never seen by the other side
            else:
                out["one_side_only", side] += 1
        return out

    def live_after_repair(self) -> Counter[str]:
        """Messages per queue the survivor must hold after the repair: every one consumed nowhere (the
        survivor had it, or the repair re-sent it)."""
        out: Counter[str] = Counter()
        for body, (queue, _side, _phase) in self.sent.items():
            if not self.consumed.get(body):
                out[queue] += 1
        return out


def drained(*brokers: BrokerProcess) -> bool:
    return all(status(b)["sources"][0]["pendingEvents"] == 0 for b in brokers)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    need_spark()
    p1, p2 = free_port(), free_port()
    dc1 = BrokerProcess(tmp_path / "dc1", name="dc1", port=p1,
                        xml_kwargs={"addresses": QUEUES, "extra": mirror_xml("DC2", p2)})  # fmt: skip
    dc2 = BrokerProcess(tmp_path / "dc2", name="dc2", port=p2,
                        xml_kwargs={"addresses": QUEUES, "extra": mirror_xml("DC1", p1)})  # fmt: skip
    dc1.start()
    dc2.start()
    wait_until(lambda: "AMQ111003" in dc1.log() and "AMQ111003" in dc2.log(), 20, "both mirrors to connect")
    yield dc1, dc2
    dc1.kill()
    dc2.stop()


def run_traffic(dc1: BrokerProcess, dc2: BrokerProcess) -> Truth:
    t = Truth()
    t.send(dc1, "DC1", "orders", [f"a{i}" for i in range(30)], "before")
    t.send(dc2, "DC2", "orders", [f"b{i}" for i in range(10)], "before")
    t.send(dc1, "DC1", "payments", [f"p{i}" for i in range(10)], "before")
    wait_until(lambda: drained(dc1, dc2) and depth(dc2, "orders") == 40, 20, "the mirrors to drain")
    t.consume(dc1, "DC1", "orders", 5, "before")
    t.consume(dc2, "DC2", "payments", 2, "before")
    wait_until(lambda: drained(dc1, dc2) and depth(dc2, "orders") == depth(dc1, "orders") == 35, 20, "acks")
    request(dc1.url, "stopBrokerConnection", ["DC2"])
    request(dc2.url, "stopBrokerConnection", ["DC1"])
    t.send(dc1, "DC1", "orders", [f"c{i}" for i in range(8)], "after")
    t.send(dc2, "DC2", "orders", [f"d{i}" for i in range(6)], "after")
    t.consume(dc1, "DC1", "orders", 12, "after")
    t.consume(dc2, "DC2", "orders", 8, "after")
    t.consume(dc2, "DC2", "payments", 3, "after")
    t.send(dc2, "DC2", "payments", [f"q{i}" for i in range(4)], "after")
    t.consume(dc2, "DC2", "payments", 1, "after")
    return t


def reconcile_args(
    tmp: Path, dc1: BrokerProcess, dc2: BrokerProcess, tag: str, no_export: bool = False
) -> argparse.Namespace:
    return argparse.Namespace(
        dc1=str(dc1.home / "data" / "journal"), dc2=str(dc2.home / "data" / "journal"), names="DC1,DC2",
        survivor="DC2", out=str(tmp / f"report-{tag}"), plan=str(tmp / f"plan-{tag}.json"), master=None,
        shuffle_partitions=2, plan_limit=1000, metrics_file=str(tmp / f"metrics-{tag}.prom"),
        pushgateway=None, no_export=no_export,
        quiet=False,  # progress on stderr: which path pass 2 took
    )  # fmt: skip


def counts_by_class_side(result: dict[str, Any]) -> Counter[tuple[str, str | None]]:
    out: Counter[tuple[str, str | None]] = Counter()
    for row in result["by_address"]:
        out[row["class"], row["side"]] += row["count"]
    return out


def test_reconcile_repair_reconcile_on_real_journals(
    pair: tuple[BrokerProcess, BrokerProcess], spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dc1, dc2 = pair
    truth = run_traffic(dc1, dc2)
    dc1.kill()

    # the journals exported to Parquet first (the default), each read once
    assert reconcile_main(reconcile_args(tmp_path, dc1, dc2, "1"), spark=spark) == 3  # needs repair
    exported = sorted(p.name for p in (tmp_path / "report-1" / "parquet").iterdir())
    assert exported == ["DC1.parquet", "DC2.parquet"]
    first = json.loads((tmp_path / "report-1" / "reconciliation.json").read_text())
    assert first["sides"]["DC1"]["path"] == str(dc1.home / "data" / "journal"), "repairs read payloads there"
    expected = truth.expected()
    assert counts_by_class_side(first) == expected
    assert expected["one_side_only", "DC1"] == 8 and expected["consumed_both", None] > 0
    assert first["sides"]["DC1"]["unmirrored_messages"] == 8  # c0..c7 never left DC1
    assert first["sides"]["DC1"]["recovery_point_gap_ms"] > 0
    said = capsys.readouterr()
    assert "survivor DC2: NEEDS REPAIR" in said.out
    assert "pass 2 on the driver" in said.err  # the exports are small: the driver classifies
    plan = json.loads((tmp_path / "plan-1.json").read_text())
    assert len(plan["resend"]) == 8 and len(plan["remove"]) == expected["acked_one_side", "DC1"]
    assert len(plan["duplicates_expected"]) == expected["consumed_both", None]

    repair = argparse.Namespace(plan=str(tmp_path / "plan-1.json"), broker=dc2.url, dry_run=True,
                                journal=None, user=None, password=None, timeout=5.0, quiet=True)  # fmt: skip
    before = depth(dc2, "orders")
    assert repair_main(repair) == 0
    assert depth(dc2, "orders") == before, "a dry run changed the broker"
    repair.dry_run = False
    assert repair_main(repair) == 0
    applied = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert applied["resend"] == 8 and applied["remove"] == len(plan["remove"]) and applied["problems"] == 0
    assert repair_main(repair) == 0  # again: nothing left to do
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["resend"] == 0 and again["already_present"] == 8 and again["remove"] == 0

    live = truth.live_after_repair()
    for queue, n in live.items():
        wait_until(lambda q=queue, n=n: depth(dc2, q) == n, 10, f"{queue} on DC2 to hold {n}")

    # the journals read through the Spark data source this time
    assert reconcile_main(reconcile_args(tmp_path, dc1, dc2, "2", no_export=True), spark=spark) == 0
    assert not (tmp_path / "report-2" / "parquet").exists()
    assert "on the driver" not in capsys.readouterr().err  # the data source: pass 2 on Spark
    second = json.loads((tmp_path / "report-2" / "reconciliation.json").read_text())
    assert second["survivor_in_sync"]
    after = counts_by_class_side(second)
    repaired = expected["one_side_only", "DC1"] + expected["acked_one_side", "DC1"]
    assert after["in_sync", None] == expected["in_sync", None] + repaired
    assert after["one_side_only", "DC1"] == after["acked_one_side", "DC1"] == 0
    unchanged = [("consumed_both", None), ("acked_one_side", "DC2")]
    assert [after[k] for k in unchanged] == [expected[k] for k in unchanged]
    # the removed messages were dead-lettered (kept for the operator): DC2-only copies on the DLA
    dla = sum(r["count"] for r in second["by_address"] if r["address"] == "DLA")
    assert dla == len(plan["remove"])
    assert after["one_side_only", "DC2"] == expected["one_side_only", "DC2"] + dla
    metrics = (tmp_path / "metrics-2.prom").read_text()
    assert "amqp_mirror_dr_survivor_in_sync 1" in metrics
