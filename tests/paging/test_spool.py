"""Deliveries still arriving (broker_core/spool.py): in memory while small, counted against the global
budget; past the threshold (or while the broker is over global-max-size) in a spool file; refused as
soon as their owner says so; nothing left behind. And on whole brokers joined in memory: a producer's
large delivery is judged as it grows.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from broker_core.errors import BrokerError, ResourceLimitExceeded
from broker_core.spool import Spool, SpooledDelivery
from broker_core.usage import Budget, Usage
from tests.support.pair import Network

LOG = logging.getLogger("test.spool")


class Owner:
    """What the broker's endpoint gives a delivery: a judge and a way to answer it."""

    def __init__(self, refuse_at: int | None = None) -> None:
        self.refuse_at = refuse_at
        self.answers: list[str] = []

    def judge(self, size: int, on_disk: bool) -> BrokerError | None:
        if self.refuse_at is not None and size > self.refuse_at:
            return ResourceLimitExceeded("address orders is full")
        return None

    def refuse(self, delivery: SpooledDelivery, error: BrokerError) -> None:
        self.answers.append(error.condition)


def spool_in(tmp_path: Path, budget: Budget | None = None) -> tuple[Spool, list[int]]:
    wrote: list[int] = []
    return Spool(tmp_path / "large", budget or Budget(), wrote.append, LOG), wrote


def delivery(spool: Spool, owner: Owner, first: bytes, threshold: int = 100) -> SpooledDelivery:
    return SpooledDelivery(spool, threshold, owner.judge, owner.refuse, 7, b"t", False, first, 0)


def files(spool: Spool) -> list[Path]:
    return sorted(spool.directory.glob("*")) if spool.directory.exists() else []


def test_a_small_delivery_stays_in_memory_and_counts_against_the_global_budget(tmp_path: Path) -> None:
    spool, wrote = spool_in(tmp_path)
    d = delivery(spool, Owner(), b"a" * 40)
    d.add(b"b" * 40, False)
    assert spool.budget.bytes == 80 and not files(spool)
    assert d.payload() == b"a" * 40 + b"b" * 40
    d.discard()
    assert spool.budget.bytes == 0 and wrote == []


def test_past_the_threshold_it_goes_to_a_file_and_comes_back_whole(tmp_path: Path) -> None:
    spool, wrote = spool_in(tmp_path)
    d = delivery(spool, Owner(), b"a" * 60)
    d.add(b"b" * 60, True)  # 120 > 100: what was in memory goes to the file first
    assert spool.budget.bytes == 0  # nothing held in memory any more
    [path] = files(spool)
    assert path.read_bytes() == b"a" * 60 + b"b" * 60 and spool.bytes == 120 and spool.files == 1
    d.add(b"c" * 1000, False)
    assert d.payload() == b"a" * 60 + b"b" * 60 + b"c" * 1000 and d.settled
    d.discard()
    d.discard()  # once is enough
    assert not files(spool) and spool.bytes == 0 and spool.files == 0
    assert sum(wrote) == 0 and max(wrote) == 1000  # written, then counted back when removed


def test_over_global_max_size_even_a_small_delivery_goes_to_its_file(tmp_path: Path) -> None:
    budget = Budget(max_bytes=1000)
    budget.bytes = 1001
    spool, _ = spool_in(tmp_path, budget)
    d = delivery(spool, Owner(), b"a" * 10)
    assert len(files(spool)) == 1 and budget.bytes == 1001
    d.discard()
    never = delivery(spool, Owner(), b"a" * 10_000, threshold=-1)  # amqpMinLargeMessageSize -1: never
    assert not files(spool) and budget.bytes == 11_001
    never.discard()


def test_a_refused_delivery_is_answered_once_lets_go_and_drops_its_later_frames(tmp_path: Path) -> None:
    spool, _ = spool_in(tmp_path)
    owner = Owner(refuse_at=500)
    d = delivery(spool, owner, b"a" * 300)
    assert len(files(spool)) == 1
    d.add(b"b" * 300, False)
    assert d.refused and owner.answers == ["amqp:resource-limit-exceeded"]
    assert not files(spool) and spool.budget.bytes == 0
    d.add(b"c" * 300, False)
    d.discard()
    assert owner.answers == ["amqp:resource-limit-exceeded"] and not files(spool)


def test_a_spool_that_cannot_be_written_refuses_the_delivery(tmp_path: Path) -> None:
    class FullDisk(Spool):
        def create(self) -> tuple[int, Path]:
            raise OSError(errno.ENOSPC, "No space left on device")

    owner = Owner()
    d = SpooledDelivery(
        FullDisk(tmp_path, Budget(), lambda n: None, LOG),
        100,
        None,
        owner.refuse,
        1,
        b"",
        False,
        b"x" * 200,
        0,
    )
    assert d.refused and owner.answers == ["amqp:resource-limit-exceeded"]


def test_at_start_only_spool_files_are_removed(tmp_path: Path) -> None:
    spool, _ = spool_in(tmp_path)
    spool.directory.mkdir()
    (spool.directory / "delivery-000000000003.partial").write_bytes(b"cut short")
    (spool.directory / "someone-else.msg").write_bytes(b"not ours")
    spool.clear_leftovers()
    assert [p.name for p in files(spool)] == ["someone-else.msg"]


def test_an_address_refuses_what_routing_would_refuse() -> None:
    budget = Budget()
    fail = Usage("f", budget, max_bytes=1000, policy="FAIL")
    assert not fail.refuses(1000) and fail.refuses(1001)
    block = Usage("b", budget, max_bytes=1000, policy="BLOCK", reject_threshold=5000)
    assert not block.refuses(4000) and block.refuses(5001)  # over its limit: taken up to the threshold
    assert not Usage("p", budget, max_bytes=1000, policy="PAGE").refuses(10**9)
    assert not Usage("d", budget, max_bytes=1000, policy="DROP").refuses(10**9)


def test_a_producers_large_delivery_is_refused_while_the_disk_is_past_its_limits(tmp_path: Path) -> None:
    """Its frames would have to be written to a disk past max-disk-usage: refused as it reaches its
    file. A small one in flight is still taken, as BLOCK takes what was granted."""
    net = Network(tmp_path)
    net.broker("dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    client.send("orders", "warm-up")  # the link is attached and has its credit
    net.pump()
    server = net.server("dc1")
    server.budget.disk_full = True
    large = client.send("orders", "x" * 300_000)  # three frames of the broker's 128 KiB
    small = client.send("orders", "y")
    net.pump()
    assert client.rejected(large) == "amqp:resource-limit-exceeded" and client.accepted(small)
    assert not list((tmp_path / "dc1" / "large-messages").glob("*"))
    server.budget.disk_full = False
    again = client.send("orders", "x" * 300_000)
    net.pump()
    assert client.accepted(again)
    assert net.depth("dc1", "orders") == 3
