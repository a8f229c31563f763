"""DR across the two brokers: a real Apache ActiveMQ Artemis and ours in a dual mirror, cut apart, one
lost; Artemis's journal exported by its own `artemis data exp`, reconciled against our journal with the
installed `amqp-mirror reconcile`, repaired with `amqp-mirror repair`, reconciled again. Once with
Artemis lost (the repair on ours), once with ours lost (the repair on Artemis).

What the lost side did alone while the other was down is the divergence: new messages (to re-send on
the survivor) and consumed messages (to remove there). The export holds no acknowledgement: that Artemis
consumed a message is read from its absence, as reconciliation reads a compacted journal.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from spark_dr.cli import reconcile_main
from tests.artemis.support import artemis, bodies, call, config, depth, mirror_connection, ours, send_to_queue
from tests.conftest import require
from tests.peers import artemis as artemis_peer
from tests.peers.ports import free_port, wait_until
from tests.spark_dr.conftest import need_spark
from tests.support.client import receive
from tests.support.installed import repository_env

pytestmark = pytest.mark.timeout(420)


def drained(broker: Any) -> bool:
    return all(s["pendingEvents"] == 0 for s in call(broker, "getMirrorStatus")["sources"])


def test_an_artemis_export_is_reconciled_and_repaired_from(tmp_path: Path, spark: Any) -> None:
    need_spark()
    require("Apache ActiveMQ Artemis", *artemis_peer.availability())
    a_port, o_port = free_port(), free_port()
    dc1 = artemis(tmp_path / "dc1", a_port, config(a_port, mirror_connection("dc2", o_port))).start()
    dc2 = ours(tmp_path / "dc2", o_port, config(o_port, mirror_connection("dc1", a_port)))
    dc2.start()
    wait_until(lambda: "AMQ111003" in dc2.log(), 30, "our mirror to connect to Artemis")
    node1 = dc1.node_id()

    # mirrored both ways: 20 sent on DC1, 10 on DC2, the 5 oldest consumed on DC1
    send_to_queue(dc1, "orders", [f"dc1-{i}" for i in range(20)])
    send_to_queue(dc2, "orders", [f"dc2-{i}" for i in range(10)])
    wait_until(lambda: depth(dc1, "orders") == 30 and depth(dc2, "orders") == 30, 60, "30 on both sides")
    assert len(receive(dc1.url, "orders", 5)) == 5
    wait_until(lambda: depth(dc2, "orders") == 25 and drained(dc2), 60, "DC1's acks mirrored to DC2")

    # the cut: DC2 down; DC1 alone takes 7 new messages and consumes 3 more; then DC1 is lost
    dc2.stop()
    send_to_queue(dc1, "orders", [f"alone-{i}" for i in range(7)])
    consumed = sorted(m.body for m in receive(dc1.url, "orders", 3))
    assert consumed == ["dc1-5", "dc1-6", "dc1-7"]
    dc1.kill()
    export = dc1.export(tmp_path / "dc1-export.xml")

    # the installed command: DC1 as Artemis's export, DC2 as our data directory; its node id inferred
    out = tmp_path / "report"
    run = repository_env().run(
        "reconcile", str(export), str(dc2.home / "data"), "--out", str(out), "--master", "local[1]",
        "--broker", dc2.url, "--heartbeat", "30", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 3, run.stdout + run.stderr
    assert f"DC1's node id: {node1}" in run.stderr + run.stdout
    plan = json.loads((out / "repair-plan.json").read_text())
    assert plan["nodes"]["DC1"] == node1 and plan["journals"]["DC1"] == str(export)
    resend = {e["identity"] for e in plan["resend"]}
    assert len(resend) == 7 and all(i.startswith(node1 + ":") for i in resend)
    assert {e["queue"] for e in plan["resend"] + plan["remove"]} == {"orders"}
    assert len(plan["remove"]) == 3 and plan["needs_decision"] == []

    # the repair, on the restarted survivor: re-sent from the export, removed by content
    dc2.start()
    repaired = repository_env().run(
        "repair", "--plan", str(out / "repair-plan.json"), "--broker", dc2.url, "--timeout", "5",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    summary = json.loads(repaired.stdout.strip().splitlines()[-1])
    assert (summary["resend"], summary["remove"], summary["problems"]) == (7, 3, 0), summary
    expected = sorted([f"dc1-{i}" for i in range(8, 20)] + [f"dc2-{i}" for i in range(10)]
                      + [f"alone-{i}" for i in range(7)])  # fmt: skip
    wait_until(lambda: depth(dc2, "orders") == len(expected), 30, "the repaired depth")
    assert bodies(dc2, "orders") == expected
    dc2.stop()

    # the survivor now agrees with the lost data centre's last state
    args = argparse.Namespace(
        dc1=str(export), dc2=str(dc2.home / "data"), names="DC1,DC2", survivor="DC2",
        out=str(tmp_path / "again"), plan=None, broker=None, master=None, shuffle_partitions=2,
        plan_limit=1000, metrics_file=None, pushgateway=None, no_export=True, quiet=True,
        node_id=[f"DC1={node1}"],
    )  # fmt: skip
    assert reconcile_main(args, spark=spark) == 0


def test_an_artemis_survivor_is_reconciled_from_its_export_and_repaired(tmp_path: Path, spark: Any) -> None:
    """The other way round: ours (DC1) is lost, Artemis (DC2) survives. Its export is what the survivor
    holds; the repair re-sends to Artemis from our journal and removes from Artemis by its own message
    ids (an export has no digests to match by), through Artemis's management."""
    need_spark()
    require("Apache ActiveMQ Artemis", *artemis_peer.availability())
    o_port, a_port = free_port(), free_port()
    dc2 = artemis(tmp_path / "dc2", a_port, config(a_port, mirror_connection("dc1", o_port))).start()
    dc1 = ours(tmp_path / "dc1", o_port, config(o_port, mirror_connection("dc2", a_port)))
    dc1.start()
    wait_until(lambda: "AMQ111003" in dc1.log(), 30, "our mirror to connect to Artemis")
    node2 = dc2.node_id()

    send_to_queue(dc1, "orders", [f"dc1-{i}" for i in range(20)])
    send_to_queue(dc2, "orders", [f"dc2-{i}" for i in range(10)])
    wait_until(lambda: depth(dc1, "orders") == 30 and depth(dc2, "orders") == 30, 60, "30 on both sides")
    assert len(receive(dc1.url, "orders", 5)) == 5
    wait_until(lambda: depth(dc2, "orders") == 25 and drained(dc1), 60, "our acks mirrored to Artemis")

    # the cut: Artemis stopped (and exported meanwhile, as the survivor's state); ours alone, then lost
    dc2.stop()
    send_to_queue(dc1, "orders", [f"alone-{i}" for i in range(7)])
    assert sorted(m.body for m in receive(dc1.url, "orders", 3)) == ["dc1-5", "dc1-6", "dc1-7"]
    dc1.kill()
    export = dc2.export(tmp_path / "dc2-export.xml")

    out = tmp_path / "report"
    run = repository_env().run(
        "reconcile", str(dc1.home / "data"), str(export), "--out", str(out), "--master", "local[1]",
        "--broker", dc2.url, "--heartbeat", "30", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 3, run.stdout + run.stderr
    print(run.stdout)
    plan = json.loads((out / "repair-plan.json").read_text())
    assert plan["nodes"]["DC2"] == node2 and plan["kinds"] == {"DC1": "journal", "DC2": "artemis-export"}
    assert len(plan["resend"]) == 7 and len(plan["remove"]) == 3
    assert all(isinstance(e["survivor_id"], int) for e in plan["remove"])

    dc2.start()
    args = ("repair", "--plan", str(out / "repair-plan.json"), "--broker", dc2.url, "--timeout", "5")
    repaired = repository_env().run(*args, cwd=tmp_path, timeout=120)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    summary = json.loads(repaired.stdout.strip().splitlines()[-1])
    assert (summary["resend"], summary["remove"], summary["problems"]) == (7, 3, 0), summary
    again = json.loads(repository_env().run(*args, cwd=tmp_path, timeout=120).stdout.strip().splitlines()[-1])
    assert (again["resend"], again["already_present"], again["already_removed"]) == (0, 7, 3), again
    expected = sorted([f"dc1-{i}" for i in range(8, 20)] + [f"dc2-{i}" for i in range(10)]
                      + [f"alone-{i}" for i in range(7)])  # fmt: skip
    assert depth(dc2, "orders") == len(expected) and bodies(dc2, "orders") == expected
    dc2.stop()

    args2 = argparse.Namespace(
        dc1=str(dc1.home / "data"), dc2=str(dc2.export(tmp_path / "dc2-after.xml")), names="DC1,DC2",
        survivor="DC2", out=str(tmp_path / "again"), plan=None, broker=None, master=None,
        shuffle_partitions=2, plan_limit=1000, metrics_file=None, pushgateway=None, no_export=False,
        quiet=True, node_id=[f"DC2={node2}"],
    )  # fmt: skip
    assert reconcile_main(args2, spark=spark) == 0
