"""DR across the two brokers: a real Apache ActiveMQ Artemis and ours in a dual mirror, cut apart, one
lost; Artemis's journal exported by its own `artemis data exp`, reconciled against our journal with the
installed `amqp-mirror reconcile`, repaired with `amqp-mirror repair`, reconciled again. Once with
Artemis lost (the repair on ours), once with ours lost (the repair on Artemis).

What the lost side did alone while the other was down is the divergence: new messages (to re-send on
the survivor) and consumed messages (to remove there). The export holds no acknowledgement: that Artemis
consumed a message is read from its absence, as reconciliation reads a compacted journal.

Both mirrors filter out the address ``local`` (``address-filter="!local"``), and each side holds
messages of its own there, sent before the ones the mirror carries (so the other side's dedup mark
passes their ids): the survivor keeps its own. Ours the mirror never carried are not re-sent (``not
mirrored``, read from our journal); Artemis's, which its export cannot tell from ones already mirrored,
are re-sent when Artemis is the lost side (the doubt on the safe side).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from spark_dr.cli import reconcile_main
from tests.artemis.support import (
    ORDERS,
    Broker,
    artemis,
    bodies,
    call,
    config,
    depth,
    mirror_connection,
    ours,
    send_to_queue,
)
from tests.conftest import require
from tests.peers import artemis as artemis_peer
from tests.peers.artemis import ArtemisProcess
from tests.peers.ports import free_port, wait_until
from tests.spark_dr.conftest import need_spark
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.installed import repository_env

pytestmark = pytest.mark.timeout(420)


def drained(broker: Any) -> bool:
    return all(s["pendingEvents"] == 0 for s in call(broker, "getMirrorStatus")["sources"])


def dual_mirror(tmp_path: Path, artemis_is: str) -> tuple[ArtemisProcess, BrokerProcess]:
    """Artemis and ours mirroring each other, Artemis named ``artemis_is`` (DC1 or DC2), ours the other."""
    ours_is = "DC2" if artemis_is == "DC1" else "DC1"
    a_port, o_port = free_port(), free_port()
    a_home, o_home = tmp_path / artemis_is.lower(), tmp_path / ours_is.lower()
    to_ours = mirror_connection(ours_is.lower(), o_port, FILTER)
    a = artemis(a_home, a_port, config(a_port, to_ours, addresses=ADDRESSES)).start()
    o = ours(
        o_home,
        o_port,
        config(o_port, mirror_connection(artemis_is.lower(), a_port, FILTER), addresses=ADDRESSES),
    )
    o.start()
    wait_until(lambda: "AMQ111003" in o.log(), 30, "our mirror to connect to Artemis")
    return a, o


FILTER = 'address-filter="!local"'
ADDRESSES = ORDERS + '<address name="local"><anycast><queue name="local"/></anycast></address>'
LOCAL = {"lost": [f"lost-local-{i}" for i in range(3)], "survivor": [f"survivor-local-{i}" for i in range(2)]}


def traffic_then_cut(lost: Broker, survivor: Broker, ours_side: BrokerProcess) -> None:
    """Mirrored both ways: 20 sent on the side to be lost, 10 on the survivor, the 5 oldest consumed on
    the side to be lost. Then the cut (the survivor stopped): that side alone takes 7 new messages and
    consumes 3 more (of its own), and ends: ours is killed, Artemis stopped (killed, it can leave a
    journal its own `data exp` cannot read through, a NullPointerException half way: see
    docs/dr-reconciliation.md, "An export cut short")."""
    send_to_queue(lost, "local", LOCAL["lost"])  # never mirrored, before the messages that are
    send_to_queue(survivor, "local", LOCAL["survivor"])
    send_to_queue(lost, "orders", [f"dc1-{i}" for i in range(20)])
    send_to_queue(survivor, "orders", [f"dc2-{i}" for i in range(10)])
    wait_until(
        lambda: depth(lost, "orders") == 30 and depth(survivor, "orders") == 30, 60, "30 on both sides"
    )
    assert len(receive(lost.url, "orders", 5)) == 5
    wait_until(lambda: depth(survivor, "orders") == 25 and drained(ours_side), 60, "the acks mirrored")
    survivor.stop()
    send_to_queue(lost, "orders", [f"alone-{i}" for i in range(7)])
    assert sorted(m.body for m in receive(lost.url, "orders", 3)) == ["dc1-5", "dc1-6", "dc1-7"]
    # the client settles first: the broker applies those acks after the receive returns (a kill right
    # then can beat them, and then the lost side consumed only 2 of the 3)
    wait_until(lambda: depth(lost, "orders") == 29, 30, "the lost side to apply the 3 acks")
    if isinstance(lost, ArtemisProcess):
        lost.stop()
    else:
        lost.kill()


# what the survivor holds once repaired: the lost side's last state
REPAIRED = sorted([f"dc1-{i}" for i in range(8, 20)] + [f"dc2-{i}" for i in range(10)]
                  + [f"alone-{i}" for i in range(7)])  # fmt: skip


def test_an_artemis_export_is_reconciled_and_repaired_from(tmp_path: Path, spark: Any) -> None:
    need_spark()
    require("Apache ActiveMQ Artemis", *artemis_peer.availability())
    dc1, dc2 = dual_mirror(tmp_path, artemis_is="DC1")
    node1 = dc1.node_id()
    traffic_then_cut(lost=dc1, survivor=dc2, ours_side=dc2)
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
    assert len(resend) == 7 + len(LOCAL["lost"]) and all(i.startswith(node1 + ":") for i in resend)
    assert {e["queue"] for e in plan["resend"] + plan["remove"]} == {"orders", "local"}
    assert {e["queue"] for e in plan["remove"]} == {"orders"}
    assert len(plan["remove"]) == 3 and plan["needs_decision"] == [] and plan["not_mirrored"] == []

    # the repair, on the restarted survivor: re-sent from the export, removed by content
    dc2.start()
    repaired = repository_env().run(
        "repair", "--plan", str(out / "repair-plan.json"), "--broker", dc2.url, "--timeout", "5",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    summary = json.loads(repaired.stdout.strip().splitlines()[-1])
    assert (summary["resend"], summary["remove"], summary["problems"]) == (7 + len(LOCAL["lost"]), 3, 0), (
        summary
    )
    wait_until(lambda: depth(dc2, "orders") == len(REPAIRED), 30, "the repaired depth")
    assert bodies(dc2, "orders") == REPAIRED
    assert bodies(dc2, "local") == sorted(
        LOCAL["survivor"] + LOCAL["lost"]
    )  # its own kept; Artemis's re-sent
    assert depth(dc2, "DLA") == 3  # the removed messages, kept for the operator
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
    dc2, dc1 = dual_mirror(tmp_path, artemis_is="DC2")
    node2 = dc2.node_id()
    traffic_then_cut(lost=dc1, survivor=dc2, ours_side=dc1)  # Artemis stopped: exported as the survivor
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
    assert len(plan["not_mirrored"]) == len(LOCAL["lost"])  # ours the mirror never carried: not re-sent
    assert all(isinstance(e["survivor_id"], int) for e in plan["remove"])

    dc2.start()
    args = ("repair", "--plan", str(out / "repair-plan.json"), "--broker", dc2.url, "--timeout", "5")
    repaired = repository_env().run(*args, cwd=tmp_path, timeout=120)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    summary = json.loads(repaired.stdout.strip().splitlines()[-1])
    assert (summary["resend"], summary["remove"], summary["problems"]) == (7, 3, 0), summary
    again = json.loads(repository_env().run(*args, cwd=tmp_path, timeout=120).stdout.strip().splitlines()[-1])
    assert (again["resend"], again["already_present"], again["already_removed"]) == (0, 7, 3), again
    assert depth(dc2, "orders") == len(REPAIRED) and bodies(dc2, "orders") == REPAIRED
    assert bodies(dc2, "local") == sorted(LOCAL["survivor"])  # its own kept
    assert depth(dc2, "DLA") == 3  # the removed messages, kept for the operator
    dc2.stop()

    args2 = argparse.Namespace(
        dc1=str(dc1.home / "data"), dc2=str(dc2.export(tmp_path / "dc2-after.xml")), names="DC1,DC2",
        survivor="DC2", out=str(tmp_path / "again"), plan=None, broker=None, master=None,
        shuffle_partitions=2, plan_limit=1000, metrics_file=None, pushgateway=None, no_export=False,
        quiet=True, node_id=[f"DC2={node2}"],
    )  # fmt: skip
    assert reconcile_main(args2, spark=spark) == 0
