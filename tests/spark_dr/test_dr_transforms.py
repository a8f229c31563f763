"""The reconciliation transforms on small inline journals, checked with pyspark.testing on real output."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from spark_dr import transforms as T
from spark_dr.rows import COLUMN_NAMES, SCHEMA_DDL

N1, N2 = "node-one", "node-two"
SNF = "$ACTIVEMQ_ARTEMIS_MIRROR_DC2"


def rec(node: str, event: str, **kw: Any) -> tuple[Any, ...]:
    if kw.get("digest") is not None:  # what the reader writes beside a digest
        kw.setdefault(
            "digest64", int.from_bytes(hashlib.sha256(kw["digest"].encode()).digest()[:8], "big", signed=True)
        )
    row = dict.fromkeys(COLUMN_NAMES)
    row.update(node_id=node, event=event, segment=1, offset=kw.pop("offset", 0), **kw)
    return tuple(row[c] for c in COLUMN_NAMES)


def send(node: str, mid: int, queue: str = "q", origin: tuple[str, int] | None = None, digest: str = "d",
         ts: int = 1000, queues: list[str] | None = None) -> tuple[Any, ...]:  # fmt: skip
    ident = origin or (node, mid)
    return rec(node, "send", message_id=mid, identity_broker=ident[0], identity_id=ident[1], address=queue,
               queues=queues or [queue], digest=digest, size=10, timestamp_ms=ts,
               via_mirror=origin is not None, repaired=False)  # fmt: skip


def ack(
    node: str, mid: int, queue: str = "q", reason: int = 0, via_mirror: bool = False, ts: int = 2000
) -> Any:
    return rec(node, "ack", message_id=mid, queue=queue, address=queue, ack_reason=reason,
               via_mirror=via_mirror, timestamp_ms=ts)  # fmt: skip


def resolved(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Acks carry their message's identity, as ``rows.journal_rows`` resolves it from the sends before
    them; an ack with no send before it keeps none (an orphan)."""
    at = {
        c: COLUMN_NAMES.index(c) for c in ("event", "node_id", "message_id", "identity_broker", "identity_id")
    }
    sent: dict[tuple[str, int], tuple[str, int]] = {}
    out = []
    for row in rows:
        r = list(row)
        local = (r[at["node_id"]], r[at["message_id"]])
        if r[at["event"]] == "send":
            sent[local] = (r[at["identity_broker"]], r[at["identity_id"]])
        elif r[at["event"]] == "ack" and r[at["identity_broker"]] is None and local in sent:
            r[at["identity_broker"]], r[at["identity_id"]] = sent[local]
        out.append(tuple(r))
    return out


def frame(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(resolved(rows), SCHEMA_DDL)


def classes(spark: Any, dc1: list[tuple[Any, ...]], dc2: list[tuple[Any, ...]], **kw: Any) -> Any:
    c = T.classify(T.side_state(frame(spark, dc1)), T.side_state(frame(spark, dc2)), node1=N1, node2=N2, **kw)
    return c.select("identity_broker", "identity_id", "queue", "class", "side", "dc1_status", "dc2_status")


def test_every_class_from_one_pair_of_journals(spark: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    dc1 = [
        send(N1, 1), ack(N1, 1),  # consumed on DC1, ack mirrored
        send(N1, 2), ack(N1, 2),  # consumed on DC1 ...
        send(N1, 3),  # not mirrored before the failover
        send(N1, 4), ack(N1, 4),  # delivered on both sides
        send(N1, 5, digest="x"),  # differs
        ack(N1, 99),  # an ack for a message this journal does not hold
        send(N1, 6), ack(N1, 6),  # consumed before it was mirrored
        send(N1, 7, queues=["q", SNF]),  # SNF refs are not messages
    ]  # fmt: skip
    dc2 = [
        send(N2, 11, origin=(N1, 1)), ack(N2, 11, via_mirror=True),
        send(N2, 12, origin=(N1, 2)),  # ... but the ack never arrived
        send(N2, 14, origin=(N1, 4)), ack(N2, 14),
        send(N2, 15, origin=(N1, 5)),
        send(N2, 16),  # DC2's own, unmirrored
        send(N2, 17, origin=(N1, 7)),
    ]  # fmt: skip
    expected = spark.createDataFrame(
        [
            (N1, 1, "q", "in_sync", None, "acked", "acked"),
            (N1, 2, "q", "acked_one_side", "DC1", "acked", "live"),
            (N1, 3, "q", "one_side_only", "DC1", "live", "absent"),
            (N1, 4, "q", "consumed_both", None, "acked", "acked"),
            (N1, 5, "q", "payload_differs", None, "live", "live"),
            (N1, 99, "q", "orphan_ack", "DC1", "orphan_ack", "absent"),
            (N1, 6, "q", "in_sync", None, "acked", "absent"),
            (N1, 7, "q", "in_sync", None, "live", "live"),
            (N2, 16, "q", "one_side_only", "DC2", "absent", "live"),
        ],
        "identity_broker string, identity_id bigint, queue string, class string, side string,"
        " dc1_status string, dc2_status string",
    )
    assertDataFrameEqual(classes(spark, dc1, dc2), expected)


def test_compacted_messages_count_as_settled_not_missing(spark: Any) -> None:
    """Compaction drops settled messages: the origin's own ids and ids under the dedup mark were there."""
    from pyspark.testing import assertDataFrameEqual

    dc1 = [send(N1, 8)]  # DC1 still holds 8; DC2 received it (mark 9) and compacted it away
    dc2 = [send(N2, 20, origin=(N1, 10)), send(N2, 21)]  # DC1 produced 10 but has no record: settled
    got = classes(spark, dc1, dc2, marks2={N1: 9})
    expected = spark.createDataFrame(
        [
            (N1, 8, "q", "acked_one_side", "DC2", "live", "gone"),
            (N1, 10, "q", "acked_one_side", "DC1", "gone", "live"),
            (N2, 21, "q", "one_side_only", "DC2", "absent", "live"),
        ],
        got.schema,
    )
    assertDataFrameEqual(got, expected)


def test_multicast_references_are_classified_per_queue(spark: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    dc1 = [send(N1, 1, queues=["a", "b"]), ack(N1, 1, "a")]
    dc2 = [send(N2, 5, origin=(N1, 1), queues=["a", "b"]), ack(N2, 5, "a", via_mirror=True), ack(N2, 5, "b")]
    got = classes(spark, dc1, dc2).select("queue", "class", "side")
    assertDataFrameEqual(got, spark.createDataFrame([("a", "in_sync", None), ("b", "acked_one_side", "DC2")],
                                                    got.schema))  # fmt: skip


def test_recovery_point_gap_and_dedup_marks(spark: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    rows = [
        send(N1, 1, queues=["q", SNF], ts=100), ack(N1, 1, SNF),  # mirrored
        send(N1, 2, queues=["q", SNF], ts=200),  # not yet
        rec(N1, "send", message_id=3, address=SNF, queues=[SNF], timestamp_ms=300),  # a pending event
        rec(N1, "meta", meta_key="mirror.dedup.node-two", meta_value="41", offset=1),
        rec(N1, "meta", meta_key="mirror.dedup.node-two", meta_value="42", offset=2),
    ]  # fmt: skip
    records = frame(spark, rows)
    gap = T.unmirrored(records)
    assertDataFrameEqual(gap, spark.createDataFrame([("message", 1, 200), ("event", 1, 300)], gap.schema))
    marks = T.dedup_marks(records)
    assertDataFrameEqual(marks, spark.createDataFrame([("node-two", 42)], marks.schema))


@pytest.mark.parametrize("bucket", [1000, 500])
def test_summary_window_and_timeline(spark: Any, bucket: int) -> None:
    """The summary is a transform; the window and the timeline are folded on the driver from the
    collected diverged references (reconcile collects them all anyway), and agree with the summary.
    Both go by each reference's divergent event: DC1's 3, sent long before (at 100, mirrored at 150),
    diverged when DC1 consumed it at 2500, not when it was sent."""
    from pyspark.testing import assertDataFrameEqual

    from spark_dr.reconcile import count_classes, divergence_ms, divergence_window, timeline

    dc1 = [send(N1, 1, ts=1000), send(N1, 2, ts=1600), send(N1, 3, ts=100), ack(N1, 3, ts=2500)]
    # DC2's 10 (DC1's 7, consumed on DC1, compacted there) is in sync: not in the window
    dc2 = [send(N2, 9, origin=(N1, 3), ts=150), send(N2, 10, origin=(N1, 7), ts=900)]
    dc2.append(ack(N2, 10, ts=950, via_mirror=True))
    c = T.classify(T.side_state(frame(spark, dc1)), T.side_state(frame(spark, dc2)), node1=N1, node2=N2)
    summary = T.summarize(c)
    counts = [("q", "one_side_only", "DC1", 2), ("q", "acked_one_side", "DC1", 1), ("q", "in_sync", None, 1)]
    assertDataFrameEqual(summary, spark.createDataFrame(counts, summary.schema))
    diverged = [r.asDict() for r in c.filter("class != 'in_sync'").collect()]
    for d in diverged:
        d["diverged_ms"] = divergence_ms(d, ("DC1", "DC2"))
    assert sorted((d["identity_id"], d["first_ms"], d["diverged_ms"]) for d in diverged) == [
        (1, 1000, 1000), (2, 1600, 1600), (3, 100, 2500)]  # fmt: skip
    assert sorted(count_classes(diverged), key=str) == sorted(
        [r.asDict() for r in summary.collect() if r["class"] != "in_sync"], key=str
    )
    assert divergence_window(diverged) == {"first_ms": 1000, "last_ms": 2500}
    assert divergence_window([]) == {"first_ms": None, "last_ms": None}
    want = {
        1000: [(1000, "one_side_only", 2), (2000, "acked_one_side", 1)],
        500: [(1000, "one_side_only", 1), (1500, "one_side_only", 1), (2500, "acked_one_side", 1)],
    }
    assert timeline(diverged, bucket) == [
        {"bucket_ms": b, "class": k, "count": n} for b, k, n in want[bucket]
    ]


@pytest.mark.parametrize(("ids_per_range", "pushed"), [(1, 1), (4, 32), (4096, 32)])
def test_range_checksums_classify_like_the_full_join(
    spark: Any, tmp_path: Any, ids_per_range: int, pushed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data-diff path (equal ranges counted, differing ranges joined) gives the full join's answer;
    pass 1 also counts every record and finds the last one's time. One interval per pushed-down scan
    makes pass 2 read a union of scans."""
    from spark_dr import ranges
    from spark_dr.reconcile import Options, reconcile

    monkeypatch.setattr(ranges, "PUSHED_INTERVALS", pushed)

    dc1 = [
        send(N1, 1),
        ack(N1, 1),
        send(N1, 2),
        ack(N1, 2),
        send(N1, 3),
        send(N1, 4),
        ack(N1, 4),
        send(N1, 5, digest="x"),
        ack(N1, 99),
        send(N1, 6),
        ack(N1, 6),
        send(N1, 7, queues=["q", SNF]),
        rec(N1, "queue_create", address="q", queue="q", timestamp_ms=3000),  # not reconciled, counted
    ]
    dc2 = [send(N2, 11, origin=(N1, 1)), ack(N2, 11, via_mirror=True), send(N2, 12, origin=(N1, 2)),
           send(N2, 14, origin=(N1, 4)), ack(N2, 14), send(N2, 15, origin=(N1, 5)), send(N2, 16),
           send(N2, 17, origin=(N1, 7))]  # fmt: skip
    # DC2's dedup marks for DC1: it received DC1's 3 (and no longer holds it)
    dc2 += [rec(N2, "meta", meta_key=f"mirror.dedup.{N1}", meta_value=v) for v in ("7", "9")]
    for i in range(20, 60):  # in sync: live on both, consumed on one side with the ack mirrored
        dc1.append(send(N1, i, queue="r"))
        dc2.append(send(N2, 100 + i, origin=(N1, i), queue="r"))
        if i % 2:
            dc1.append(ack(N1, i, queue="r"))
            dc2.append(ack(N2, 100 + i, queue="r", via_mirror=True))
    paths = []
    for name, rows in (("dc1", dc1), ("dc2", dc2)):
        frame(spark, rows).write.parquet(str(tmp_path / name))
        paths.append(tmp_path / name)
    states = [T.side_state(frame(spark, rows)) for rows in (dc1, dc2)]
    full = T.classify(*states, node1=N1, node2=N2, marks2={N1: 9})
    want = {(r["address"], r["class"], r["side"]): r["count"] for r in T.summarize(full).collect()}
    assert want["q", "acked_one_side", "DC2"] == 1  # DC1 holds 3, DC2 had it (under its mark)
    result = reconcile(spark, paths[0], paths[1], Options(ids_per_range=ids_per_range))
    assert {(r["address"], r["class"], r["side"]): r["count"] for r in result["by_address"]} == want
    assert want["r", "in_sync", None] == 40
    assert sorted(d["identity_id"] for d in result["diverged"]) == [2, 3, 4, 5, 16, 99]
    assert result["sides"]["DC1"]["unmirrored_messages"] == 1  # message 7 still on the SNF queue
    extents = [(result["sides"][n]["records"], result["sides"][n]["last_ms"]) for n in ("DC1", "DC2")]
    assert extents == [(len(dc1), 3000), (len(dc2), 2000)]


def test_store_and_forward_sums_cancel_when_everything_is_acknowledged(spark: Any) -> None:
    """Pass 1's store-and-forward cells: a bucket whose references are all acknowledged sums to zero, so
    pass 2 reads only the buckets still holding unmirrored references."""
    from spark_dr.ranges import SNF as SNF_KIND
    from spark_dr.ranges import range_sums

    rows = [send(N1, i, queues=["q", SNF]) for i in range(1, 9)] + [ack(N1, i, SNF) for i in range(1, 9)]
    rows += [send(N1, 9, queues=["q", SNF])]  # bucket 1 (ids 8-15 with 8 ids per range): 9 is not acked
    sums = (
        range_sums([(frame(spark, rows), N1)], 8)
        .filter(f"kind = {SNF_KIND}")
        .orderBy("local_bucket")
        .collect()
    )
    assert [(r["local_bucket"], r["refs"], r["hi"] == 0 and r["lo"] == 0) for r in sums] == [
        (0, 0, True),
        (1, 1, False),
    ]


def test_narrowed_read_is_one_scan_without_pushdown(
    spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parquet: one scan per chunk of pushed-down intervals (row groups skipped). The journal data
    source reads a whole journal whatever the filter, so there it must be one scan, not one per chunk."""
    from spark_dr import ranges

    monkeypatch.setattr(ranges, "PUSHED_INTERVALS", 1)
    frame(spark, [send(N1, i) for i in range(40)]).write.parquet(str(tmp_path / "side"))
    records = spark.read.parquet(str(tmp_path / "side"))
    buckets = {1, 5, 7}  # of 4 ids each: three intervals, [4, 8), [20, 24), [28, 32)
    pushed = ranges.narrowed(records, buckets, 4)
    single = ranges.narrowed(records, buckets, 4, pushdown=False)
    want = [*range(4, 8), *range(20, 24), *range(28, 32)]
    assert sorted(r.message_id for r in pushed.collect()) == want
    assert sorted(r.message_id for r in single.collect()) == want

    def scans(df: Any) -> int:
        return str(df._jdf.queryExecution().optimizedPlan().toString()).count("Relation")

    assert (scans(pushed), scans(single)) == (3, 1)
