"""A commit is all or nothing after a crash at any point of it (kill -9 of a broker, replayed in memory).

The transaction: acknowledge two messages of `work`, send two messages to `orders` and one to
`invoices` (each with a duplicate id), on a broker whose mirror keeps events in its store-and-forward
queue. Its commit is one journal batch; the points of the commit:
- the discharge arrived, the batch was never handed to the journal (the loop died first);
- the batch is being written: cut at every frame boundary of it, one byte either side, inside each
  frame's header and inside its payload (every byte with TX_CRASH_EVERY_BYTE=1);
- the batch is on disk, nothing confirmed yet (no Accepted went out).
After recovery the broker holds everything the commit did (queues, acknowledgements, duplicate ids, the
mirror's events) or nothing of it, never a part."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from broker_core.amqp.performatives import Accepted, Discharge
from broker_core.journal.codec import FRAME_SIZE, TYPE_BATCH
from broker_core.message import build_message
from spark_dr.rows import COLUMN_NAMES, journal_rows
from tests.support.pair import MemoryClient, Network

ADDRESSES = (
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="invoices"><anycast><queue name="invoices"/></anycast></address>'
    '<address name="work"><anycast><queue name="work"/></anycast></address>'
)
SNF = "$ACTIVEMQ_ARTEMIS_MIRROR_dc2"
DUP = "_AMQ_DUPL_ID"
EVERY_BYTE = os.environ.get("TX_CRASH_EVERY_BYTE") == "1"
_FRAME = struct.Struct("<IBI")


def broker(net: Network) -> None:
    # dc2 never runs: the mirror's events wait in the store-and-forward queue, journalled
    net.broker("dc1", persistence=True, mirror_to="dc2", addresses=ADDRESSES)


def state(net: Network) -> dict[str, object]:
    srv = net.server("dc1")
    return {
        "work": net.depth("dc1", "work"),
        "orders": net.depth("dc1", "orders"),
        "invoices": net.depth("dc1", "invoices"),
        "events": net.depth("dc1", SNF),
        "ids": sorted(d.decode() for ids in srv.duplicates.by_address.values() for d in ids),
    }


def prepared(home: Path) -> tuple[Network, MemoryClient, bytes]:
    """A broker with two work messages, and a transaction that acquired them and sent three messages,
    not yet discharged."""
    net = Network(home)
    broker(net)
    net.start_all()
    producer = net.client("dc1")
    producer.send("work", "w1")
    producer.send("work", "w2")
    net.pump()
    client = net.client("dc1")
    txn = client.declare()
    for delivery_id, _ in client.take("work", 2):
        client.settle(delivery_id, txn=txn)
    client.send("orders", "o1", properties={DUP: "o1"}, txn=txn)
    client.send("orders", "o2", properties={DUP: "o2"}, txn=txn)
    client.send("invoices", "i1", properties={DUP: "i1"}, txn=txn)
    net.pump()
    return net, client, txn


def recovered(home: Path) -> dict[str, object]:
    net = Network(home)
    broker(net)
    net.start("dc1")
    try:
        return state(net)
    finally:
        net.stop("dc1")


def active_segment(journal_dir: Path) -> Path:
    return max(journal_dir.glob("segment-*.jnl"))


def cut_points(data: bytes, start: int) -> list[int]:
    """Offsets to cut the commit's batch at (`start`: where it begins in `data`, a batch frame)."""
    length, kind, _ = _FRAME.unpack_from(data, start)
    assert kind == TYPE_BATCH, "the commit is not one batch"
    batch_len = struct.unpack_from("<I", data, start + FRAME_SIZE)[0]
    end = start + FRAME_SIZE + length + batch_len
    if EVERY_BYTE:
        return list(range(start, end + 1))
    points = {start, start + 1, start + 5, start + FRAME_SIZE + length, end - 1, end}
    pos = start + FRAME_SIZE + length
    while pos < end:  # every frame of the batch: its boundary, either side, its header, its payload
        size = FRAME_SIZE + _FRAME.unpack_from(data, pos)[0]
        points |= {pos - 1, pos, pos + 1, pos + 4, pos + FRAME_SIZE + (size - FRAME_SIZE) // 2}
        pos += size
    assert pos == end
    return sorted(p for p in points if start <= p <= end)


def committed(home: Path) -> tuple[Path, bytes, int, list[int]]:
    """The prepared transaction committed and the broker stopped: (its active segment, the segment's
    bytes, where the commit's batch starts in them, the points to cut that batch at)."""
    net, client, txn = prepared(home)
    segment = active_segment(home / "dc1" / "journal")
    start = segment.stat().st_size  # everything before the discharge is on disk (the pump waited)
    assert isinstance(client.discharge(txn), Accepted)
    net.stop("dc1")
    data = segment.read_bytes()
    points = cut_points(data, start)
    assert len(points) > 30
    return segment, data, start, points


def test_a_commit_is_all_or_nothing_at_every_point_of_its_journal_write(tmp_path: Path) -> None:
    segment, data, start, points = committed(tmp_path / "live")

    def cut_at(point: int) -> dict[str, object]:
        home = tmp_path / f"cut-{point}"
        shutil.copytree(tmp_path / "live" / "dc1", home / "dc1")
        with open(home / "dc1" / "journal" / segment.name, "r+b") as f:
            f.truncate(point)
        try:
            return recovered(home)
        finally:
            shutil.rmtree(home)

    # a restart with a mirror makes its topology events again: compare recovered states only
    before, after = cut_at(start), cut_at(len(data))
    assert before["work"] == 2 and after["work"] == 0
    assert (before["orders"], before["invoices"], before["ids"]) == (0, 0, [])
    assert (after["orders"], after["invoices"], after["ids"]) == (2, 1, ["i1", "o1", "o2"])
    assert after["events"] == before["events"] + 3 + 2  # the commit's sends and acknowledgements
    seen = {"before": 0, "after": 0}
    for point in points:
        got = cut_at(point)
        assert got in (before, after), f"a cut at byte {point - start} of the commit left a part: {got}"
        seen["before" if got == before else "after"] += 1
    assert seen["after"] == 1 and seen["before"] == len(points) - 1  # only the whole batch commits


def crashed_untouched(home: Path) -> dict[str, object]:
    """What a crash leaves of the prepared broker when the transaction is never discharged (a restart
    with a mirror makes its topology events again, so states after a crash compare with this)."""
    net, _, _ = prepared(home)
    net.crash("dc1")
    return state(net)


def test_a_crash_before_the_commit_reaches_the_journal_leaves_nothing_of_it(tmp_path: Path) -> None:
    nothing = crashed_untouched(tmp_path / "baseline")
    assert (nothing["work"], nothing["orders"], nothing["ids"]) == (2, 0, [])
    net, client, txn = prepared(tmp_path / "live")
    link = client._controller()
    client.tag += 1
    client.conn.send_delivery(link, b"c", build_message(Discharge(txn, False)), False)
    client._write()
    assert client.transport is not None and client.transport.peer is not None
    client.transport.peer.deliver()  # the broker reads the discharge; its loop dies before the flush
    assert net.server("dc1").persistence.pending_records() > 0
    net.crash("dc1")
    assert state(net) == nothing


def test_a_crash_after_the_commit_is_on_disk_keeps_all_of_it_unconfirmed(tmp_path: Path) -> None:
    nothing = crashed_untouched(tmp_path / "baseline")
    net, client, txn = prepared(tmp_path / "live")
    net.hold_disk()  # the write completes; what waits for it (the Accepted) does not run
    assert client.discharge(txn) is None
    answers = dict(client.outcomes)
    net.crash("dc1")
    net.release_disk()
    assert client.outcomes == answers  # the client never heard it was done
    assert state(net) == {
        "work": 0,
        "orders": 2,
        "invoices": 1,
        "events": nothing["events"] + 3 + 2,  # and the commit's sends and acknowledgements to mirror
        "ids": ["i1", "o1", "o2"],
    }


@pytest.mark.parametrize("discharge", ["rollback", "none"])
def test_an_uncommitted_transaction_vanishes_on_restart(tmp_path: Path, discharge: str) -> None:
    nothing = crashed_untouched(tmp_path / "baseline")
    net, client, txn = prepared(tmp_path / "live")
    if discharge == "rollback":
        assert isinstance(client.discharge(txn, fail=True), Accepted)
    net.crash("dc1")
    assert state(net) == nothing


def test_the_dr_reader_sees_a_commit_cut_at_any_point_as_all_or_nothing(tmp_path: Path) -> None:
    """What DR reconciliation reads of a journal (`journal_rows`, as `journal export` writes it): a
    commit's records appear whole, as ordinary sends and acknowledgements, or not at all, wherever the
    crash cut the commit's batch."""
    segment, data, start, points = committed(tmp_path / "live")
    at = {c: COLUMN_NAMES.index(c) for c in ("event", "address", "queue")}

    def commit_rows(point: int) -> tuple[int, int]:
        home = tmp_path / "cut"
        shutil.copytree(tmp_path / "live" / "dc1" / "journal", home)
        try:
            with open(home / segment.name, "r+b") as f:
                f.truncate(point)
            rows = list(journal_rows(home))
        finally:
            shutil.rmtree(home)
        sends = sum(r[at["event"]] == "send" and r[at["address"]] in ("orders", "invoices") for r in rows)
        acks = sum(r[at["event"]] == "ack" and r[at["queue"]] == "work" for r in rows)
        return sends, acks

    assert commit_rows(start) == (0, 0) and commit_rows(len(data)) == (3, 2)
    for point in points:
        got = commit_rows(point)
        assert got in ((0, 0), (3, 2)), f"a cut at byte {point - start} shows part of the commit: {got}"
