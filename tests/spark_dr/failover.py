"""A failover on real journals, for the repair tests: two of our brokers mirroring each other with small
journal files (so both compact as they go), queues named apart from their addresses (``billing.q`` on
``billing``), a multicast address with two subscription queues (``news.eu``, ``news.us``), a tenth or
so of the messages sent by rhea (which encodes lists and maps in their 32-bit forms), traffic and
consumption on both sides after the link is cut, and DC1 SIGKILLed while rhea is still sending to it.
DC2, the survivor, is then stopped; each test starts a survivor of its own from a copy of its data.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_core.journal import iter_records
from broker_core.journal.records import MessageAdded
from connections.cli import request
from spark_dr.identity import repair_origin
from spark_dr.rows import read_node_id
from tests.mirror.test_dual_mirror import depth, mirror_xml, status
from tests.peers.ports import free_port, wait_until
from tests.peers.rhea import Rhea
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send

ADDRESSES = (
    '<address name="billing"><anycast><queue name="billing.q"/></anycast></address>'
    '<address name="news"><multicast><queue name="news.eu"/><queue name="news.us"/></multicast></address>'
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="scratch"><anycast><queue name="scratch"/></anycast></address>'  # a test's own traffic
)
QUEUES = {"billing.q": "billing", "news.eu": "news", "news.us": "news", "orders": "orders"}
SEGMENT = 4096  # journal-file-size: the journals roll and compact many times in a run


def xml_kwargs(peer: str, port: int) -> dict[str, str]:
    journal = f"<journal-file-size>{SEGMENT}</journal-file-size>"
    return {"addresses": ADDRESSES, "extra": journal + mirror_xml(peer, port)}


@dataclass
class Failover:
    dc1: BrokerProcess  # killed
    dc2: BrokerProcess  # stopped: the survivor's data, copied by each test
    dc1_pending: int  # messages rhea had Accepted on DC1 when it was killed mid-send (at least)

    @property
    def dc1_journal(self) -> Path:
        return self.dc1.home / "data" / "journal"


def fqqn(queue: str) -> str:
    return f"{QUEUES[queue]}::{queue}"


def drained(*brokers: BrokerProcess) -> bool:
    return all(status(b)["sources"][0]["pendingEvents"] == 0 for b in brokers)


def same_depths(a: BrokerProcess, b: BrokerProcess) -> bool:
    return all(depth(a, q) == depth(b, q) for q in QUEUES)


def run_failover(root: Path, rhea: Rhea) -> Failover:
    p1, p2 = free_port(), free_port()
    dc1 = BrokerProcess(root / "dc1", name="dc1", port=p1, xml_kwargs=xml_kwargs("DC2", p2))
    dc2 = BrokerProcess(root / "dc2", name="dc2", port=p2, xml_kwargs=xml_kwargs("DC1", p1))
    dc1.start()
    dc2.start()
    try:
        connected = lambda: "AMQ111003" in dc1.log() and "AMQ111003" in dc2.log()  # noqa: E731
        wait_until(connected, 20, "both mirrors to connect")
        _before_the_cut(dc1, dc2, rhea)
        request(dc1.url, "stopBrokerConnection", ["DC2"])
        request(dc2.url, "stopBrokerConnection", ["DC1"])
        _after_the_cut(dc1, dc2, rhea)
        pending = _kill_mid_send(dc1, rhea)
    finally:
        dc1.kill()
        dc2.stop()
    return Failover(dc1, dc2, pending)


def _before_the_cut(dc1: BrokerProcess, dc2: BrokerProcess, rhea: Rhea) -> None:
    assert send(dc1.url, "orders", [f"o{i}" for i in range(20)]) == 20
    assert send(dc1.url, "billing", [f"b{i}" for i in range(20)], properties={"region": "eu"}) == 20
    assert send(dc2.url, "news", [f"n{i}" for i in range(10)]) == 10
    assert rhea.send(dc1.url, "billing", 6, size=40, durable=True)["accepted"] == 6
    assert rhea.send(dc1.url, "news", 4, size=40, durable=True)["accepted"] == 4
    wait_until(lambda: drained(dc1, dc2) and depth(dc2, "billing.q") == 26 and depth(dc1, "news.us") == 14,
               20, "the mirrors to drain")  # fmt: skip
    assert len(receive(dc1.url, "orders", 3)) == 3
    assert len(receive(dc1.url, fqqn("billing.q"), 4)) == 4
    assert len(receive(dc1.url, fqqn("news.eu"), 2)) == 2
    assert len(receive(dc2.url, fqqn("news.us"), 1)) == 1
    wait_until(lambda: drained(dc1, dc2) and same_depths(dc1, dc2), 20, "the acks to cross")


def _after_the_cut(dc1: BrokerProcess, dc2: BrokerProcess, rhea: Rhea) -> None:
    assert send(dc1.url, "orders", [f"c{i}" for i in range(5)]) == 5
    assert send(dc1.url, "billing", [f"d{i}" for i in range(5)]) == 5
    assert send(dc1.url, "news", [f"e{i}" for i in range(4)]) == 4
    assert rhea.send(dc1.url, "billing", 3, size=40, durable=True)["accepted"] == 3
    assert rhea.send(dc1.url, "news", 2, size=40, durable=True)["accepted"] == 2
    assert rhea.send(dc1.url, "orders", 3, size=40, durable=True)["accepted"] == 3
    assert len(receive(dc1.url, "orders", 4)) == 4  # o3..o6: still live on DC2
    assert len(receive(dc1.url, fqqn("billing.q"), 3)) == 3
    assert len(receive(dc1.url, fqqn("news.eu"), 3)) == 3  # the news.us copies stay
    assert send(dc2.url, "orders", [f"f{i}" for i in range(3)]) == 3
    assert len(receive(dc2.url, "orders", 2)) == 2  # o3, o4: consumed on both sides
    assert len(receive(dc2.url, fqqn("news.us"), 1)) == 1


def _kill_mid_send(dc1: BrokerProcess, rhea: Rhea) -> int:
    """SIGKILL DC1 while rhea sends to it: what it holds by then is never mirrored."""
    start = depth(dc1, "billing.q")
    run = rhea.start_send(dc1.url, "billing", 2000, size=60, durable=True, rate=400)
    try:
        wait_until(lambda: depth(dc1, "billing.q") >= start + 80, 20, "rhea to be sending to DC1")
        pending = depth(dc1, "billing.q") - start
        dc1.kill()
    finally:
        run.process.kill()
        run.process.communicate(timeout=10)
    return pending


# ------------------------------------------------------------------------------------- per test


def survivor_from(failover: Failover, home: Path, mirror: bool = True) -> BrokerProcess:
    """A survivor of its own: DC2's data copied, its broker.xml written anew (a new port). With
    ``mirror``, its mirror still points at DC1, which is down; without, the operator has taken the dead
    side's broker connection out of its configuration."""
    shutil.copytree(failover.dc2.home / "data", home / "data")
    kwargs = xml_kwargs("DC1", free_port())
    if not mirror:
        kwargs["extra"] = f"<journal-file-size>{SEGMENT}</journal-file-size>"
    b = BrokerProcess(home, name="dc2", xml_kwargs=kwargs)
    return b.start()


def compactions(b: BrokerProcess) -> int:
    return b.log().count(": compaction {'generation'")


def leave_mostly_dead(b: BrokerProcess) -> None:
    """Messages sent and consumed on ``b`` until its closed journal files are mostly dead records with
    no compaction since: its next roll compacts. (A roll while they are consumed may compact them
    away; then again.)"""
    for _ in range(5):
        assert send(b.url, "scratch", ["x" * 2000] * 40) == 40
        compacted = compactions(b)
        assert len(receive(b.url, "scratch", 40)) == 40
        if compactions(b) == compacted:
            return
    raise AssertionError("every round of consumption rolled and compacted the journal")


def depths(b: BrokerProcess) -> dict[str, int]:
    return {q: depth(b, q) for q in QUEUES}


def stored_messages(journal: Path) -> dict[str, bytes]:
    """identity -> the last stored body of every message a journal holds (live or not); the identity
    as docs/dr-reconciliation.md defines it: the repair's annotation on a client's send, else the
    origin the mirror journalled, else this node's id and the message id."""
    node = read_node_id(journal)
    out: dict[str, bytes] = {}
    for _, rec in iter_records(journal):
        if isinstance(rec, MessageAdded):
            stamped = None if rec.via_mirror else repair_origin(rec.body)
            if stamped is not None:
                broker, number = stamped
            elif rec.origin_broker_id is not None:
                broker, number = rec.origin_broker_id, rec.origin_message_id
            else:
                broker, number = node, rec.message_id
            out[f"{broker}:{number}"] = rec.body
    return out


def expected_depths(before: dict[str, int], plan: dict[str, Any]) -> dict[str, int]:
    after = dict(before)
    for e in plan["resend"]:
        after[e["queue"]] += 1
    for e in plan["remove"]:
        after[e["queue"]] -= 1
    return after
