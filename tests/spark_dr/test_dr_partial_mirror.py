"""DR when the mirror carries only part of the traffic, end to end on real journals of two of our
brokers in a dual mirror that filters out the address ``local`` (``address-filter="!local"``), with TTL
traffic (each side expires its own copy of a message), dead letters and messages whose bare content
repeats from one batch to the next (as a client that numbers its bodies per batch sends them).

The ground truth is the clients' own record (``Truth``): every message carries a number of its own in a
message annotation (outside the bare message, so the repeated bodies stay identical for the repair),
and the test records where each was sent, consumed, expired or dead-lettered. From that alone it says
what the survivor must hold once repaired, queue by queue, and the test drains every queue to compare.

1. A healthy pair, both running: reconciles in sync. The filtered address's messages and its expiry
   copies are on one side only and the mirror is not meant to carry them (``not_mirrored``); the
   expiry copies of mirrored messages pair up (each side's copy has its original's identity), and one
   consumed from DC1's expiry queue is gone from DC2's too.
2. The link cut, both sides go on alone, DC1 is killed (SIGKILL): reconcile, repair DC2 three times
   (the second and third do nothing), then DC2's every queue holds exactly what the truth says:
   DC2's own filtered messages kept, DC1's not re-sent; a message DC1 dead-lettered in its dead-letter
   queue once; one DC1 expired expired on DC2 too, its copy in the expiry queue once; the messages that
   expired on both sides there once each; the messages DC1 consumed moved to DC2's dead-letter queue.
   Reconciled again: in sync.

And a broker that served alone, then gained a mirror that carries neither acknowledgements nor queue
creations: what the mirror never carried is not mirrored, whatever the other side's dedup mark says,
and a repair after a cut and a SIGKILL leaves the survivor's queues exact. And a dual mirror that does
not carry queue removals: the queue one side removed and the other kept reads as not mirrored, and a
repair touches neither it nor what the failed side removed with a queue.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from proton import Message, symbol

from connections.cli import request
from spark_dr.cli import reconcile_main, repair_main
from spark_dr.rows import COLUMN_NAMES, journal_rows
from tests.mirror.test_dual_mirror import depth, mirror_xml, status
from tests.peers.ports import WaitTimeout, free_port, wait_until
from tests.spark_dr.conftest import need_spark
from tests.support.broker import BrokerProcess
from tests.support.client import Capabilities, connect

pytestmark = pytest.mark.timeout(600)

ADDRESSES = (
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="local"><anycast><queue name="local"/></anycast></address>'
    '<address name="news"><multicast><queue name="news.eu"/><queue name="news.us"/></multicast></address>'
    '<address name="short"><anycast><queue name="short"/></anycast></address>'
)
QUEUES = {"orders": ["orders"], "local": ["local"], "news": ["news.eu", "news.us"], "short": ["short"]}
ADDRESS_OF = {"orders": "orders", "local": "local", "news.eu": "news", "news.us": "news", "short": "short",
              "ExpiryQueue": "ExpiryQueue", "DLA": "DLA"}  # fmt: skip
TAG = "x-opt-test-tag"  # the message's own number: a message annotation, not part of the bare message
TTL = 1.5  # seconds


@dataclass
class Truth:
    """What the clients did: per tag, where it was sent and what became of it on each queue."""

    sent: dict[int, tuple[str, str, str]] = field(default_factory=dict)  # tag -> address, side, phase
    settled: dict[tuple[int, str], tuple[str, str]] = field(default_factory=dict)  # (tag, queue) -> how, side
    expired_copies: dict[int, set[str]] = field(default_factory=dict)  # tag -> sides holding a copy
    copy_consumed: set[int] = field(default_factory=set)
    next_tag: int = 0
    cut: bool = False  # before the cut, what one side did the mirror did on the other

    def send(
        self, b: BrokerProcess, side: str, address: str, n: int, phase: str, ttl: float | None = None
    ) -> list[int]:
        tags = list(range(self.next_tag, self.next_tag + n))
        self.next_tag += n
        with connect(b.url) as conn:
            sender = conn.create_sender(address)
            for tag in tags:  # bodies repeat from one batch to the next: only the annotation differs
                msg = Message(body=f"msg {tag % 3}", properties={"i": tag % 3}, durable=True)
                msg.annotations = {symbol(TAG): tag}
                if ttl is not None:
                    msg.ttl = ttl
                sender.send(msg)
                self.sent[tag] = (address, side, phase)
        return tags

    def consume(self, b: BrokerProcess, side: str, queue: str, n: int, reject: bool = False) -> list[int]:
        got = take(b, queue, n, reject)
        for tag in got:
            if queue == "ExpiryQueue":
                self.copy_consumed.add(tag)
            else:
                self.settled[tag, queue] = (
                    "dead-lettered" if reject else "consumed",
                    side if self.cut else "both",
                )
        return got

    def expired(self, tags: list[int], sides: set[str]) -> None:
        for tag in tags:
            for queue in QUEUES[self.sent[tag][0]]:
                self.settled[tag, queue] = ("expired", "both" if len(sides) > 1 else next(iter(sides)))
            self.expired_copies.setdefault(tag, set()).update(sides)

    def survivor_after_repair(self) -> dict[str, Counter[int]]:
        """What DC2 holds once repaired, per queue: every message live somewhere (DC1's too, but those of
        the filtered address, which the mirror does not carry); an expiry copy of every message that
        expired where DC2 had it (the repair expires it on DC2 when DC1 did); in the dead-letter queue,
        DC1's dead letters (their copies re-sent) and every message DC1 consumed while DC2 still held it
        (the repair keeps it there for the operator)."""
        out: dict[str, Counter[int]] = {q: Counter() for q in ADDRESS_OF}
        for tag, (address, side, phase) in self.sent.items():
            had = side == "DC2" or (address != "local" and phase == "before")  # DC2 had it at the cut
            for queue in QUEUES[address]:
                how = self.settled.get((tag, queue))
                if how is None:
                    out[queue][tag] += side == "DC2" or address != "local"
                elif how[0] == "dead-lettered" or (how == ("consumed", "DC1") and had):
                    out["DLA"][tag] += 1
                elif how[1] == "DC1" and had and how[0] == "expired":
                    out["ExpiryQueue"][tag] += 1
            if "DC2" in self.expired_copies.get(tag, set()) and tag not in self.copy_consumed:
                out["ExpiryQueue"][tag] += 1
        return {q: +c for q, c in out.items()}

    def taken(self, side: str, queue: str, tags: list[int]) -> None:
        """``tags`` consumed on ``side`` after the cut: on both sides when the other consumed them too (a
        dead letter of the other side's stays one: its copy is re-sent whatever happened here)."""
        for tag in tags:
            before = self.settled.get((tag, queue))
            if before is None:
                self.settled[tag, queue] = ("consumed", side)
            elif before[0] == "consumed":
                self.settled[tag, queue] = ("consumed", "both")


def take(b: BrokerProcess, queue: str, n: int, reject: bool = False) -> list[int]:
    """Receive ``n`` messages of ``queue`` (its address::queue name), accepted or rejected; their tags."""
    tags = []
    with connect(b.url) as conn:
        receiver = conn.create_receiver(f"{ADDRESS_OF[queue]}::{queue}", credit=n)
        for _ in range(n):
            msg = receiver.receive(timeout=10)
            tags.append(int(msg.annotations[symbol(TAG)]))
            if reject:
                receiver.reject()
            else:
                receiver.accept()
    return tags


def drain(b: BrokerProcess, queue: str) -> Counter[int]:
    """Every message of the queue, consumed, by tag."""
    got: Counter[int] = Counter()
    left = depth(b, queue)
    if left > 0:
        got.update(take(b, queue, left))
    assert depth(b, queue) == 0
    return got


def drained(*brokers: BrokerProcess) -> bool:
    return all(status(b)["sources"][0]["pendingEvents"] == 0 for b in brokers)


def local_id(b: BrokerProcess, address: str) -> int:
    """The broker's own id of the one message it holds on ``address`` (read from its journal)."""
    event, addr, mid = (COLUMN_NAMES.index(c) for c in ("event", "address", "message_id"))
    (found,) = [
        r[mid] for r in journal_rows(b.home / "data" / "journal") if r[event] == "send" and r[addr] == address
    ]
    return int(found)


def xml(peer: str, port: int) -> dict[str, str]:
    scan = "<message-expiry-scan-period>200</message-expiry-scan-period>"
    return {"addresses": ADDRESSES, "extra": scan + mirror_xml(peer, port, 'address-filter="!local"')}


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    need_spark()
    p1, p2 = free_port(), free_port()
    dc1 = BrokerProcess(tmp_path / "dc1", name="dc1", port=p1, xml_kwargs=xml("DC2", p2))
    dc2 = BrokerProcess(tmp_path / "dc2", name="dc2", port=p2, xml_kwargs=xml("DC1", p1))
    dc1.start()
    dc2.start()
    wait_until(lambda: "AMQ111003" in dc1.log() and "AMQ111003" in dc2.log(), 20, "both mirrors to connect")
    yield dc1, dc2
    dc1.kill()
    dc2.stop()


def reconcile(
    tmp: Path, dc1: BrokerProcess, dc2: BrokerProcess, tag: str, spark: Any
) -> tuple[int, dict[str, Any]]:
    args = argparse.Namespace(
        dc1=str(dc1.home / "data"), dc2=str(dc2.home / "data"), names="DC1,DC2", survivor="DC2",
        out=str(tmp / f"report-{tag}"), plan=None, broker=dc2.url, master=None, shuffle_partitions=2,
        plan_limit=1000, metrics_file=None, pushgateway=None, no_export=False, quiet=True,
    )  # fmt: skip
    code = reconcile_main(args, spark=spark)
    return code, json.loads((tmp / f"report-{tag}" / "reconciliation.json").read_text())


def counts(result: dict[str, Any]) -> Counter[tuple[str, str | None]]:
    out: Counter[tuple[str, str | None]] = Counter()
    for row in result["by_address"]:
        out[row["class"], row["side"]] += row["count"]
    return out


def repair(plan: Path, dc2: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    args = argparse.Namespace(plan=str(plan), broker=dc2.url, dry_run=False, journal=None, user=None,
                              password=None, timeout=5.0, quiet=True, not_mirrored=False)  # fmt: skip
    code = repair_main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return summary


def test_a_partly_mirrored_pair_reconciles_and_repairs_exactly(
    pair: tuple[BrokerProcess, BrokerProcess], spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dc1, dc2 = pair
    t = Truth()
    # 1. the healthy pair
    t.send(dc1, "DC1", "orders", 8, "before")
    t.send(dc2, "DC2", "orders", 4, "before")
    t.send(dc1, "DC1", "local", 5, "before")  # the mirror filters it out: DC1's only
    t.send(dc2, "DC2", "local", 3, "before")
    t.send(dc1, "DC1", "news", 3, "before")
    mirrored = t.send(dc1, "DC1", "orders", 3, "before", ttl=TTL)  # expire on both sides
    unmirrored = t.send(dc1, "DC1", "local", 2, "before", ttl=TTL)  # expires on DC1 only
    wait_until(lambda: depth(dc1, "ExpiryQueue") == 5 and depth(dc2, "ExpiryQueue") == 3, 30, "the expiries")
    t.expired(mirrored, {"DC1", "DC2"})
    t.expired(unmirrored, {"DC1"})
    t.consume(dc1, "DC1", "orders", 3)
    t.consume(dc2, "DC2", "news.us", 1)
    t.consume(dc1, "DC1", "local", 2)
    (copy,) = t.consume(dc1, "DC1", "ExpiryQueue", 1)  # a mirrored message's copy: DC2's goes too
    assert copy in mirrored
    short = t.send(dc1, "DC1", "short", 1, "before")
    wait_until(lambda: drained(dc1, dc2) and depth(dc2, "ExpiryQueue") == 2 and same(dc1, dc2), 30, "in step")

    code, healthy = reconcile(tmp_path, dc1, dc2, "healthy", spark)
    c = counts(healthy)
    assert code == 0 and healthy["survivor_in_sync"], c
    assert c["not_mirrored", "DC1"] == 3 + 2  # its live filtered messages, and their expiry copies
    assert c["not_mirrored", "DC2"] == 3
    assert sum(n for (cls, _), n in c.items() if cls not in ("in_sync", "not_mirrored")) == 0, c
    expiry = [r for r in healthy["by_address"] if r["address"] == "ExpiryQueue" and r["class"] == "in_sync"]
    assert sum(r["count"] for r in expiry) == 3  # the copies pair up, the one consumed on DC1 included

    # 2. mirrored, then the cut, each side alone, and DC1 killed
    expiring = t.send(dc1, "DC1", "orders", 2, "before", ttl=5.0)  # expire after the cut, on both sides
    wait_until(lambda: drained(dc1, dc2) and same(dc1, dc2), 20, "mirrored")
    request(dc1.url, "stopBrokerConnection", ["DC2"])
    request(dc2.url, "stopBrokerConnection", ["DC1"])
    t.cut = True
    t.send(dc1, "DC1", "orders", 4, "after")
    t.send(dc1, "DC1", "news", 2, "after")
    t.send(dc1, "DC1", "local", 2, "after")
    alone = t.send(dc1, "DC1", "orders", 1, "after", ttl=1.0)  # expires on DC1, which DC2 never had
    t.consume(dc1, "DC1", "orders", 2)  # consumed on DC1 only (or on both, below)
    t.consume(dc1, "DC1", "orders", 1, reject=True)  # dead-lettered on DC1
    assert request(dc1.url, "expireMessage", [local_id(dc1, "short")], resource="queue.short") is True
    t.expired(short, {"DC1"})
    t.send(dc2, "DC2", "orders", 2, "after")
    t.send(dc2, "DC2", "local", 1, "after")
    t.taken("DC2", "orders", take(dc2, "orders", 1))
    wait_until(lambda: depth(dc1, "ExpiryQueue") == 8 and depth(dc2, "ExpiryQueue") == 4, 30, "the expiries")
    t.expired(expiring, {"DC1", "DC2"})
    t.expired(alone, {"DC1"})
    dc1.kill()

    code, _ = reconcile(tmp_path, dc1, dc2, "first", spark)
    assert code == 3
    plan_file = tmp_path / "report-first" / "repair-plan.json"
    plan = json.loads(plan_file.read_text())
    hows = Counter(e["how"] for e in plan["remove"])
    assert hows["dead-lettered"] == hows["expired"] == 1 and hows["consumed"] >= 1 and len(hows) == 3
    assert {e["queue"] for e in plan["not_mirrored"]} == {"local", "ExpiryQueue"}  # not re-sent
    want = t.survivor_after_repair()
    depths = {q: sum(want.get(q, Counter()).values()) for q in ADDRESS_OF}
    resend, remove = len(plan["resend"]), len(plan["remove"])
    for run in range(3):  # the second and third runs find everything done, and change nothing
        done = repair(plan_file, dc2, capsys)
        if run == 0:
            assert (done["resend"], done["remove"], done["problems"]) == (resend, remove, 0), done
        else:
            assert (done["resend"], done["already_present"], done["remove"], done["already_removed"]) == (
                0, resend, 0, remove), done  # fmt: skip
        with suppress(WaitTimeout):  # the last removals' records may still be on their way
            wait_until(lambda: depths_of(dc2) == depths, 10, f"the depths after run {run + 1}")
        assert depths_of(dc2) == depths, f"run {run + 1}"

    code, after = reconcile(tmp_path, dc1, dc2, "after", spark)
    assert code == 0 and after["survivor_in_sync"], counts(after)
    assert {q: drain(dc2, q) for q in ADDRESS_OF} == {q: want.get(q, Counter()) for q in ADDRESS_OF}


def depths_of(b: BrokerProcess) -> dict[str, int]:
    return {q: depth(b, q) for q in ADDRESS_OF}


def same(a: BrokerProcess, b: BrokerProcess) -> bool:
    return all(depth(a, q) == depth(b, q) for q in ("orders", "news.eu", "news.us", "short"))


def test_a_mirror_added_later_with_acks_and_queue_creation_not_mirrored(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DC1 serves alone, then gains a mirror to DC2 with ``message-acknowledgements="false"`` and
    ``queue-creation="false"``: its messages from before the mirror, and those on a queue it created
    since (never created on DC2), are DC1's only though DC2's dedup mark is past their ids (ids of one
    origin rise across everything it did): not mirrored, not settled on DC2. A consumption on DC1 stays
    there (its ack is not mirrored): settled on DC1 only, the message still live on DC2. DC2's mirror
    target holds the messages for the queue it does not have, then puts them on its dead-letter address
    (``mirrorHoldTimeout``): there they are DC2's only. Then the mirror is cut, DC1 takes a message on
    each queue and consumes one, and is killed: the repair re-sends DC1's one live mirrored message,
    moves the two DC1 consumed to DC2's dead-letter queue, re-sends nothing the mirror never carried,
    and DC2's every queue then holds exactly that."""
    need_spark()
    p1, p2 = free_port(), free_port()
    held = {"addresses": ADDRESSES, "acceptor_params": "mirrorHoldTimeout=1000"}
    dc2 = BrokerProcess(tmp_path / "dc2", name="dc2", port=p2, xml_kwargs=held).start()
    dc1 = BrokerProcess(tmp_path / "dc1", name="dc1", port=p1, xml_kwargs={"addresses": ADDRESSES}).start()
    try:
        t = Truth()
        early = t.send(dc1, "DC1", "short", 3, "before")  # before the mirror
        assert dc1.stop() == 0
        attrs = 'message-acknowledgements="false" queue-creation="false"'
        dc1.xml_kwargs = {"addresses": ADDRESSES, "extra": mirror_xml("DC2", p2, attrs)}
        dc1.write_config()
        dc1.start()
        wait_until(lambda: "AMQ111003" in dc1.log(), 20, "the mirror to connect")
        t.send(dc1, "DC1", "orders", 4, "after")
        with connect(dc1.url) as conn:  # an anycast queue created on DC1 only
            conn.create_sender("auto", options=Capabilities("queue")).close()
        auto = t.send(dc1, "DC1", "auto", 2, "after")
        (consumed,) = take(dc1, "orders", 1)
        wait_until(lambda: drained(dc1) and depth(dc2, "orders") == 4, 30, "the mirror to catch up")
        assert depth(dc2, "DLA") == len(auto)  # held, then kept on DC2's dead-letter address
        assert depth(dc2, "short") == 0 and depth(dc2, "auto") == -1  # nothing of them reached DC2

        code, result = reconcile(tmp_path, dc1, dc2, "later", spark)
        assert code == 3, counts(result)  # DC2 still holds what DC1 consumed
        assert counts(result) == {
            ("not_mirrored", "DC1"): 3 + 2,
            ("acked_one_side", "DC1"): 1,
            ("in_sync", None): 3,
            ("one_side_only", "DC2"): 2,  # on DC2's dead-letter address only
        }
        plan = json.loads((tmp_path / "report-later" / "repair-plan.json").read_text())
        tag_of = {e["identity"]: e["queue"] for e in plan["not_mirrored"]}
        assert sorted(tag_of.values()) == ["auto"] * len(auto) + ["short"] * len(early)
        assert [(e["queue"], e["how"]) for e in plan["remove"]] == [("orders", "consumed")] and not plan[
            "resend"
        ]
        assert consumed not in early

        # the cut, DC1 alone a while, then killed
        request(dc1.url, "stopBrokerConnection", ["DC2"])
        resent = t.send(dc1, "DC1", "orders", 1, "after")
        t.send(dc1, "DC1", "auto", 1, "after")
        (consumed_alone,) = take(dc1, "orders", 1)
        dc1.kill()
        code, result = reconcile(tmp_path, dc1, dc2, "killed", spark)
        assert code == 3, counts(result)
        plan_file = tmp_path / "report-killed" / "repair-plan.json"
        plan = json.loads(plan_file.read_text())
        assert [e["queue"] for e in plan["resend"]] == ["orders"]
        assert sorted(e["queue"] for e in plan["not_mirrored"]) == ["auto"] * 3 + ["short"] * 3
        done = repair(plan_file, dc2, capsys)
        assert (done["resend"], done["remove"], done["problems"]) == (1, 2, 0), done
        wait_until(lambda: depth(dc2, "DLA") == len(auto) + 2, 10, "the removals")
        # DC2 keeps what it held but what DC1 consumed (kept on its dead-letter address), gains DC1's
        # live mirrored messages, and none of those the mirror never carried
        want = {q: Counter[int]() for q in ADDRESS_OF}
        want["orders"].update(tag for tag, (address, _, _) in t.sent.items() if address == "orders")
        want["orders"] -= Counter([consumed, consumed_alone])
        want["DLA"].update([*auto, consumed, consumed_alone])
        assert resent[0] in want["orders"] and consumed_alone not in resent
        assert {q: drain(dc2, q) for q in ADDRESS_OF} == {q: +want[q] for q in ADDRESS_OF}
    finally:
        dc1.kill()
        dc2.stop()


def test_a_queue_removal_not_mirrored_reconciles_and_repairs_exactly(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dual mirror with ``queue-removal="false"``: DC1 removes the subscription queue ``news.us``,
    which DC2 keeps, with what it holds, and goes on filling from both sides' sends to ``news``. A
    healthy pair reconciles to what is true: what DC2's ``news.us`` holds is DC2's only and not
    mirrored (DC1 has no such queue), one consumed there after the removal is settled on both (DC1
    removed it, DC2 consumed it), nothing diverged. Then the cut; DC1 takes new messages, consumes one,
    and removes the queue ``short`` with two messages it had sent there since the cut; DC1 is killed.
    The repair re-sends DC1's live messages, moves the one DC1 consumed to DC2's dead-letter queue,
    touches neither queue DC1 removed (DC2 keeps both, as the mirror does), and re-sends nothing DC1
    removed with its queue: DC2's every queue then holds exactly that."""
    need_spark()
    p1, p2 = free_port(), free_port()
    dc1 = BrokerProcess(tmp_path / "dc1", name="dc1", port=p1, xml_kwargs=removal_kept("DC2", p2))
    dc2 = BrokerProcess(tmp_path / "dc2", name="dc2", port=p2, xml_kwargs=removal_kept("DC1", p1))
    dc1.start()
    dc2.start()
    try:
        wait_until(
            lambda: "AMQ111003" in dc1.log() and "AMQ111003" in dc2.log(), 20, "both mirrors to connect"
        )
        t = Truth()
        want: dict[str, Counter[int]] = {q: Counter() for q in ADDRESS_OF}  # DC2's queues once repaired
        orders = t.send(dc1, "DC1", "orders", 3, "before")
        news = t.send(dc1, "DC1", "news", 4, "before")
        (short,) = t.send(dc1, "DC1", "short", 1, "before")
        wait_until(lambda: drained(dc1, dc2) and same(dc1, dc2), 20, "mirrored")
        assert take(dc2, "news.us", 1) == news[:1]  # consumed on both (its ack mirrored)
        wait_until(lambda: drained(dc2) and depth(dc1, "news.us") == 3, 20, "the ack to cross")
        request(dc1.url, "destroyQueue", ["news.us"])
        wait_until(lambda: depth(dc1, "news.us") == -1, 10, "DC1 to remove news.us")
        assert take(dc2, "news.us", 1) == news[1:2]  # DC1 no longer has it: settled on both
        later = t.send(dc1, "DC1", "news", 2, "before") + t.send(dc2, "DC2", "news", 2, "before")
        wait_until(lambda: drained(dc1, dc2) and depth(dc2, "news.us") == 2 + 4, 20, "the news to cross")
        assert depth(dc1, "news.us") == -1 and depth(dc1, "news.eu") == depth(dc2, "news.eu") == 8

        code, healthy = reconcile(tmp_path, dc1, dc2, "healthy", spark)
        c = counts(healthy)
        assert code == 0 and healthy["survivor_in_sync"], c
        assert c == {("in_sync", None): 3 + 8 + 1 + 2, ("not_mirrored", "DC2"): 2 + 4}, c
        (kept_there,) = [r for r in healthy["by_address"] if r["class"] == "not_mirrored"]
        assert kept_there["address"] == "news"

        request(dc1.url, "stopBrokerConnection", ["DC2"])
        request(dc2.url, "stopBrokerConnection", ["DC1"])
        resent = t.send(dc1, "DC1", "orders", 2, "after") + t.send(dc1, "DC1", "news", 1, "after")
        (consumed,) = take(dc1, "orders", 1)  # the oldest: DC2 still holds it
        removed = t.send(dc1, "DC1", "short", 2, "after")
        request(dc1.url, "destroyQueue", ["short"])  # with DC1's copy of the one from before
        assert take(dc2, "news.us", 1) == news[2:3]
        wait_until(lambda: depth(dc1, "short") == -1, 10, "DC1 to remove short")
        dc1.kill()

        want["orders"].update([*orders[1:], *resent[:2]])
        want["DLA"][consumed] += 1
        want["news.eu"].update([*news, *later, resent[2]])
        want["news.us"].update([news[3], *later])  # DC2's own, none of DC1's removed or re-sent
        want["short"][short] += 1  # DC1's removal is not mirrored; what DC1 removed with it is not re-sent
        assert consumed == orders[0] and not set(removed) & set(want["short"])

        code, result = reconcile(tmp_path, dc1, dc2, "first", spark)
        assert code == 3, counts(result)
        plan_file = tmp_path / "report-first" / "repair-plan.json"
        plan = json.loads(plan_file.read_text())
        assert sorted(e["queue"] for e in plan["resend"]) == ["news.eu", "orders", "orders"]
        assert [(e["queue"], e["how"]) for e in plan["remove"]] == [("orders", "consumed")]
        done = repair(plan_file, dc2, capsys)
        assert (done["resend"], done["remove"], done["problems"]) == (3, 1, 0), done
        wait_until(lambda: depth(dc2, "DLA") == 1, 10, "the removal")
        assert {q: drain(dc2, q) for q in ADDRESS_OF} == {q: +want[q] for q in ADDRESS_OF}
    finally:
        dc1.kill()
        dc2.stop()


def removal_kept(peer: str, port: int) -> dict[str, str]:
    return {"addresses": ADDRESSES, "extra": mirror_xml(peer, port, 'queue-removal="false"')}
