"""DR reconciliation of transactional traffic, on real journals of a mirrored pair (brokers in memory).

A transaction's commit is one journal batch of ordinary records, so reconciliation reads a committed
transaction as the sends and acknowledgements it made, and one that never committed as nothing:
- DC2 crashes with a transaction open (a send and an acknowledgement in it, never discharged);
- while DC2 is down, DC1 commits a transaction (two sends, one acknowledgement), rolls another back,
  and crashes before its mirror passed the commit on: a transaction committed on one side only.
The survivor DC2 needs the committed transaction's two messages re-sent and its acknowledged message
removed; nothing of the open or the rolled-back transaction appears anywhere.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from broker_core.amqp.performatives import Accepted
from spark_dr.cli import reconcile_main
from spark_dr.rows import COLUMN_NAMES, journal_rows
from tests.spark_dr.conftest import need_spark
from tests.support.pair import Network

ADDRESSES = (
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="work"><anycast><queue name="work"/></anycast></address>'
)


def event_counts(journal: Path) -> Counter[tuple[str, str]]:
    """(address, event) counts of a journal's send and ack rows, as reconciliation reads them."""
    at = {c: COLUMN_NAMES.index(c) for c in ("event", "address", "queue")}
    out: Counter[tuple[str, str]] = Counter()
    for r in journal_rows(journal):
        if r[at["event"]] in ("send", "ack"):
            out[r[at["address"]] or r[at["queue"]], r[at["event"]]] += 1
    return out


def test_a_transaction_committed_on_one_side_only_and_one_open_at_the_crash(
    tmp_path: Path, spark: Any
) -> None:
    need_spark()
    net = Network(tmp_path / "net")
    for name, other in (("dc1", "dc2"), ("dc2", "dc1")):
        net.broker(name, persistence=True, mirror_to=other, addresses=ADDRESSES)
    net.start_all()
    producer = net.client("dc1")
    producer.send("orders", "base")
    for body in ("w1", "w2", "w3"):
        producer.send("work", body)
    net.pump()
    assert [net.depth(n, q) for n in ("dc1", "dc2") for q in ("orders", "work")] == [1, 3, 1, 3]

    # DC2: a transaction open at the crash
    open_tx = net.client("dc2")
    txn = open_tx.declare()
    open_tx.send("orders", "never-committed", txn=txn)
    [(taken, _)] = open_tx.take("work", 1)
    open_tx.settle(taken, txn=txn)
    net.crash("dc2")
    net.stop("dc2")

    # DC1: one transaction committed while DC2 is away, one rolled back; then DC1 dies
    worker = net.client("dc1")
    txn = worker.declare()
    [(taken, _)] = worker.take("work", 1)
    worker.settle(taken, txn=txn)
    worker.send("orders", "t1", txn=txn)
    worker.send("orders", "t2", txn=txn)
    assert isinstance(worker.discharge(txn), Accepted)
    txn = worker.declare()
    worker.send("orders", "rolled-back", txn=txn)
    assert isinstance(worker.discharge(txn, fail=True), Accepted)
    assert (net.depth("dc1", "orders"), net.depth("dc1", "work")) == (3, 2)
    net.crash("dc1")
    net.stop("dc1")

    dc1, dc2 = tmp_path / "net" / "dc1" / "journal", tmp_path / "net" / "dc2" / "journal"
    # what reconciliation reads: DC2 holds nothing of its open transaction, DC1 the whole committed one
    assert event_counts(dc2)["orders", "send"] == 1 and event_counts(dc2)["work", "ack"] == 0
    assert event_counts(dc1)["orders", "send"] == 3 and event_counts(dc1)["work", "ack"] == 1

    out = tmp_path / "report"
    args = argparse.Namespace(
        dc1=str(dc1), dc2=str(dc2), names="DC1,DC2", survivor="DC2", out=str(out),
        plan=str(out / "plan.json"), master=None, shuffle_partitions=2, plan_limit=1000, metrics_file=None,
        pushgateway=None, no_export=False, quiet=True,
    )  # fmt: skip
    assert reconcile_main(args, spark=spark) == 3  # the survivor needs repair
    result = json.loads((out / "reconciliation.json").read_text())
    classes: Counter[tuple[str, str | None]] = Counter()
    for row in result["by_address"]:
        classes[row["class"], row["side"]] += row["count"]
    assert classes["one_side_only", "DC1"] == 2  # t1 and t2
    assert classes["acked_one_side", "DC1"] == 1  # the message the committed transaction consumed
    assert classes["one_side_only", "DC2"] == classes["acked_one_side", "DC2"] == 0  # nothing of the open one
    assert classes["in_sync", None] == 3  # base and the two work messages nobody consumed
    plan = json.loads((out / "plan.json").read_text())
    assert [e["queue"] for e in plan["resend"]] == ["orders", "orders"]
    assert [e["queue"] for e in plan["remove"]] == ["work"]
