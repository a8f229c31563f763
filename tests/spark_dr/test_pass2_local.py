"""Pass 2 on the driver (``spark_dr.pass2_local``) gives exactly the Spark job's answer.

Both paths run on the same Parquet inputs: hand-made pairs and random ones (multicast references,
store-and-forward references and control events, acks of every reason, mirrored or local, orphans,
payload differences, dedup marks), with small identity ranges so that equal and differing ranges mix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from spark_dr.rows import COLUMN_NAMES, REMOVED_WITH_QUEUE
from tests.spark_dr.test_dr_transforms import N1, N2, SNF, ack, frame, rec, send

if importlib.util.find_spec("xxhash") is None:
    why = "the driver-side pass 2 needs the xxhash package (the test extra)"
    if os.environ.get("CI", "").lower() == "true":
        raise RuntimeError(f"CI=true: {why}")
    pytest.skip(why, allow_module_level=True)

EVENTS = "$ACTIVEMQ_ARTEMIS_MIRROR_DC2.events"  # an internal address: control events on the SNF queue


def test_range_id_is_sparks(spark: Any) -> None:

    from spark_dr import ranges
    from spark_dr.pass2_local import range_id

    rows = [
        ("node-one", "q", 12345),
        ("", "", 0),
        (None, None, 7),
        ("ünïcödé", "x" * 300, -5),
        ("b", SNF, 2**45 + 3),
        ("b", "q", None),
    ]
    df = spark.createDataFrame(rows, "b string, q string, i bigint")
    for ids in (1, 4, 4096):
        got = [r[0] for r in df.select(ranges.range_id("b", "q", "i", ids)).collect()]
        assert got == [range_id(b, q, i, ids) for b, q, i in rows]


def random_pair(seed: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """DC1 sends, DC2 mirrors most of it; consumption, orphans and differences on both sides."""
    rnd = random.Random(seed)
    dc1: list[tuple[Any, ...]] = []
    dc2: list[tuple[Any, ...]] = []
    ts = iter(range(1000, 10**9, 7))
    for i in range(1, 160):
        queues = rnd.choice([["q"], ["r"], ["t.a", "t.b"]])
        address = "t" if queues[0].startswith("t.") else queues[0]
        snf = rnd.random() < 0.8
        digest = f"d{i}"
        dc1.append(
            rec(N1, "send", message_id=i, identity_broker=N1, identity_id=i, address=address,
                queues=[*queues, SNF] if snf else queues, digest=digest, size=10,
                timestamp_ms=next(ts), via_mirror=False, repaired=False)
        )  # fmt: skip
        mirrored = snf and rnd.random() < 0.85
        if snf and (mirrored or rnd.random() < 0.3):
            dc1.append(ack(N1, i, SNF, ts=next(ts)))  # left the store-and-forward queue
        if mirrored:
            other = digest if rnd.random() < 0.97 else "changed"
            dc2.append(
                rec(N2, "send", message_id=1000 + i, identity_broker=N1, identity_id=i, address=address,
                    queues=queues, digest=other, size=10, timestamp_ms=next(ts), via_mirror=True,
                    repaired=False)
            )  # fmt: skip
        for q in queues:
            roll = rnd.random()
            if roll < 0.4:
                reason = rnd.choice([0, 0, 0, 1, 2, 3])
                dc1.append(ack(N1, i, q, reason=reason, ts=next(ts)))
                if mirrored and rnd.random() < 0.8:
                    dc2.append(ack(N2, 1000 + i, q, reason=reason, via_mirror=True, ts=next(ts)))
            elif roll < 0.55 and mirrored:
                dc2.append(ack(N2, 1000 + i, q, ts=next(ts)))  # consumed on DC2
                if rnd.random() < 0.3:
                    dc1.append(ack(N1, i, q, ts=next(ts)))  # ... and on DC1: delivered twice
    for i in range(1, 12):  # DC2's own messages, some still on its store-and-forward queue
        dc2.append(send(N2, 5000 + i, queue="q", ts=next(ts), queues=["q", SNF]))
    for i in range(1, 6):  # control events waiting on DC1's store-and-forward queue, or acked
        dc1.append(rec(N1, "send", message_id=3000 + i, address=EVENTS, queues=[SNF], size=5,
                       timestamp_ms=next(ts), via_mirror=False, repaired=False))  # fmt: skip
        if i % 2:
            dc1.append(ack(N1, 3000 + i, SNF, ts=next(ts)))
    # compaction took some settled messages out of DC1's journal: DC1 certainly had them (its own)
    compacted = {i for i in range(1, 160) if i % 17 == 0}
    dc1 = [r for r in dc1 if r[COLUMN_NAMES.index("message_id")] not in compacted]
    dc1.append(ack(N1, 9999, "q", ts=next(ts)))  # orphans
    dc2.append(ack(N2, 8888, "r", ts=next(ts)))
    dc2.append(rec(N2, "meta", meta_key=f"mirror.dedup.{N1}", meta_value=str(rnd.randrange(100, 160))))
    return dc1, dc2


def both_ways(spark: Any, root: Path, dc1: list[Any], dc2: list[Any], ids: int) -> list[dict[str, Any]]:
    from spark_dr.reconcile import Options, reconcile

    paths = []
    for name, rows in (("dc1", dc1), ("dc2", dc2)):
        frame(spark, rows).repartition(2).write.parquet(str(root / name))
        paths.append(root / name)
    out = []
    for local in (True, False):
        said: list[str] = []
        opts = Options(ids_per_range=ids, local_pass2=local, progress=said.append)
        result = reconcile(spark, paths[0], paths[1], opts)
        assert any("pass 2 on the driver" in s for s in said) == local, said
        out.append(normalized(result))
    return out


def normalized(result: dict[str, Any]) -> dict[str, Any]:
    """A result without its timings, its lists in a fixed order (Spark collects in any order)."""
    r = {k: v for k, v in result.items() if k not in ("generated_at_ms", "seconds")}
    for k in ("diverged", "by_address"):
        r[k] = sorted(json.dumps(d, sort_keys=True) for d in r[k])
    return r


@pytest.mark.parametrize("seed", range(4))
def test_random_pairs_classify_alike_on_the_driver_and_on_spark(
    spark: Any, tmp_path: Path, seed: int
) -> None:
    dc1, dc2 = random_pair(seed)
    local, distributed = both_ways(spark, tmp_path, dc1, dc2, ids=4)
    assert local == distributed
    classes = {k for k, n in local["counts"].items() if n}
    assert {"in_sync", "one_side_only", "acked_one_side", "orphan_ack"} <= classes  # a real mix
    assert any(d["dc1_status"] == "gone" for d in map(json.loads, local["diverged"]))
    assert local["sides"]["DC1"]["unmirrored_events"] > 0


def test_hand_made_pair_with_one_id_per_range(spark: Any, tmp_path: Path) -> None:
    dc1 = [send(N1, 1), ack(N1, 1), send(N1, 2), send(N1, 3, digest="x"), ack(N1, 99)]
    dc1 += [send(N1, 4, queues=["q", SNF]), ack(N1, 4, SNF), send(N1, 5, queues=["q", SNF])]
    dc2 = [send(N2, 11, origin=(N1, 1)), ack(N2, 11, via_mirror=True), send(N2, 13, origin=(N1, 3))]
    dc2 += [send(N2, 14, origin=(N1, 4)), ack(N2, 14), send(N2, 20)]
    local, distributed = both_ways(spark, tmp_path, dc1, dc2, ids=1)
    assert local == distributed
    assert local["counts"]["payload_differs"] == 1 and local["counts"]["orphan_ack"] == 1


@pytest.mark.parametrize("why", ["large", "remote"])
def test_pass_2_stays_on_spark_past_the_row_limit_or_off_the_drivers_disk(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    """Past ``MAX_ROWS`` candidate rows, or when the driver cannot list the Parquet files (a cluster's
    storage), pass 2 is a Spark job, with the same answer."""
    from spark_dr import pass2_local
    from spark_dr.reconcile import Options, reconcile

    dc1, dc2 = random_pair(7)
    for name, rows in (("dc1", dc1), ("dc2", dc2)):
        frame(spark, rows).write.parquet(str(tmp_path / name))
    paths = tmp_path / "dc1", tmp_path / "dc2"
    want = normalized(reconcile(spark, *paths, Options(ids_per_range=4)))
    if why == "large":
        monkeypatch.setattr(pass2_local, "MAX_ROWS", 3)
    else:
        monkeypatch.setattr(pass2_local, "parquet_files", lambda path: [])
    said: list[str] = []
    got = normalized(reconcile(spark, *paths, Options(ids_per_range=4, progress=said.append)))
    assert not any("on the driver" in s for s in said)
    assert got == want


def test_a_reference_with_no_id_is_picked_in_the_range_spark_gives_it() -> None:
    """A key with a null id is hashed as Spark's ``xxhash64`` does (the null skipped), not as id 0:
    the reference is picked by the range Spark gave it, and only by that one."""
    import pyarrow as pa

    from spark_dr.pass2_local import _picks, range_id

    refs = pa.table({
        "event": ["send", "send"], "node_id": [N1, N1], "message_id": [5, 6],
        "identity_broker": [N1, N1], "identity_id": pa.array([None, 0], pa.int64()),
        "address": ["q", "q"], "queue": ["q", "q"],
    })  # fmt: skip
    for ids in (1, 4):
        for rids, want in (
            ({range_id(N1, "q", None, ids)}, [True, False]),
            ({range_id(N1, "q", 0, ids)}, [False, True]),
        ):
            client, _ = _picks(refs, rids, set(), ids, {})
            assert client.to_pylist() == want, (ids, rids)


def test_node_id_from_the_footer(spark: Any, tmp_path: Path) -> None:
    from spark_dr.pass2_local import footer_node_id

    frame(spark, [send(N1, 1), send(N1, 2)]).write.parquet(str(tmp_path / "side"))
    assert footer_node_id(tmp_path / "side") == N1
    assert footer_node_id(tmp_path / "nothing") is None


# ------------------------------------------------------------------- what the mirror does not carry


def history(node: str, facts: dict[str, int]) -> list[tuple[Any, ...]]:
    """A reader's history rows (``spark_dr.history``)."""
    from spark_dr.history import HISTORY, VERSION

    return [rec(node, HISTORY, meta_key=k, meta_value=str(v)) for k, v in {VERSION: 1, **facts}.items()]


def at_segment(row: tuple[Any, ...], segment: int) -> tuple[Any, ...]:
    r = list(row)
    r[COLUMN_NAMES.index("segment")] = segment
    return tuple(r)


def expiry_copy(node: str, mid: int, of: tuple[str, int]) -> tuple[Any, ...]:
    """A side's own copy of an expired message: its original's identity, made here, never mirrored."""
    return rec(node, "send", message_id=mid, origin_broker_id=None if of[0] == node else of[0],
               origin_message_id=of[1], identity_broker=of[0], identity_id=of[1], address="Expired",
               queues=["Expired"], digest=f"d{of[1]}", size=10, timestamp_ms=1000, via_mirror=False,
               repaired=False)  # fmt: skip


def carried_pair() -> tuple[list[Any], list[Any]]:
    """Both sides with history: DC1's own message on a filtered address (no store-and-forward queue),
    expiry copies on both sides or one, a message whose store-and-forward reference was paged on its
    own, a compacted (trimmed) record, a subscription DC2 never had, references that died with a queue
    DC2 removed (one of DC1's, one of its own), and DC2's dedup mark past them all."""
    from spark_dr.history import COMPACTED_FIRST, COMPACTED_LAST, QUEUE, lost_key

    dc1 = [
        send(N1, 1, queues=["q", SNF]), ack(N1, 1, SNF),  # mirrored: DC2 consumed it and compacted it away
        send(N1, 2, queue="local"),  # a filtered address: never queued for the mirror
        send(N1, 3, queues=["q"]), rec(N1, "send", message_id=3, identity_broker=N1, identity_id=3,
                                       address="q", queues=[SNF], size=5, timestamp_ms=1, via_mirror=False,
                                       repaired=False),  # its store-and-forward reference paged alone
        send(N1, 4, queues=["q"]),  # compacted (below): its dead SNF reference trimmed away
        expiry_copy(N1, 5, (N1, 40)),  # DC1 expired 40; DC2 did not
        expiry_copy(N1, 6, (N1, 41)),  # both expired 41: a copy on each side
        send(N1, 7, queues=["news.x", SNF]),  # a subscription whose creation was never mirrored
        send(N1, 8, queues=["q", SNF]),  # mirrored, then consumed on DC2, whose pages were deleted
        send(N1, 9, queue="gone", queues=["gone", SNF]),  # mirrored, then removed with DC2's queue
        send(N1, 10, queue="gone", queues=["gone", SNF]),  # a removal both sides made (then the queue again)
        ack(N1, 10, "gone", REMOVED_WITH_QUEUE),
    ]  # fmt: skip
    mid = COLUMN_NAMES.index("message_id")
    dc1 = [at_segment(r, 1 if r[mid] == 4 else 2) for r in dc1]
    queues = ("q", "local", "Expired", "news.x", "gone")
    dc1 += history(N1, {COMPACTED_FIRST: 1, COMPACTED_LAST: 1, **{QUEUE + q: 1 for q in queues}})
    dc2 = [
        expiry_copy(N2, 30, (N1, 41)),
        expiry_copy(N2, 31, (N2, 90)),  # DC2's own expiry copy, never on DC1
        send(N2, 32, queues=["q", SNF]),  # DC2's own, pending for the mirror
        send(N2, 33, queue="gone", origin=(N1, 9)),
        ack(N2, 33, "gone", REMOVED_WITH_QUEUE),  # not mirrored
        send(N2, 34, queues=["q", SNF]),
        ack(N2, 34, "q", REMOVED_WITH_QUEUE),  # q removed, then made again
        send(N2, 35, queue="gone", origin=(N1, 10)),
        ack(N2, 35, "gone", REMOVED_WITH_QUEUE),
        rec(N2, "meta", meta_key=f"mirror.dedup.{N1}", meta_value="100"),
    ]
    dc2 += history(N2, {lost_key(N1, ""): 5, lost_key(N1, "q"): 8, **{QUEUE + q: 1 for q in queues[:3]}})
    return dc1, dc2


def test_what_the_mirror_never_carried_is_not_read_as_received(spark: Any, tmp_path: Path) -> None:
    dc1, dc2 = carried_pair()
    local, distributed = both_ways(spark, tmp_path, dc1, dc2, ids=1)
    assert local == distributed
    got = {(d["identity_broker"], d["identity_id"], d["queue"]): (d["class"], d["side"], d["dc1_status"],
           d["dc2_status"]) for d in map(json.loads, local["diverged"])}  # fmt: skip
    assert got == {
        (N1, 1, "q"): ("acked_one_side", "DC2", "live", "gone"),  # the mark, below DC2's horizon
        (N1, 2, "local"): ("not_mirrored", "DC1", "live", "unmirrored"),  # whatever the mark says
        (N1, 3, "q"): ("acked_one_side", "DC2", "live", "gone"),  # queued: its paged SNF reference
        (N1, 4, "q"): ("acked_one_side", "DC2", "live", "gone"),  # trimmed: its queues are not as routed
        (N1, 40, "Expired"): ("not_mirrored", "DC1", "live", "unmirrored"),
        (N2, 90, "Expired"): ("not_mirrored", "DC2", "unmirrored", "live"),
        (N1, 7, "news.x"): ("not_mirrored", "DC1", "live", "unmirrored"),  # DC2 never had the queue
        (N1, 8, "q"): ("acked_one_side", "DC2", "live", "gone"),  # below the deleted page's horizon
        (N2, 32, "q"): ("one_side_only", "DC2", "absent", "live"),  # DC1 lost nothing of DC2's
        (N1, 9, "gone"): ("not_mirrored", "DC1", "live", "removed"),  # a removal the mirror did not carry
    }
    assert local["counts"]["in_sync"] == 3  # 41's two copies; 34 and 10, which neither side holds
    assert local["survivor_in_sync"]  # for DC2: what the mirror does not carry is no divergence


def test_above_its_horizons_a_missing_record_is_never_received(spark: Any, tmp_path: Path) -> None:
    """The same DC1 message, above everything DC2 may have dropped: DC2 never had it, whatever its mark."""
    from spark_dr.history import QUEUE, lost_key

    dc1 = [at_segment(send(N1, 50, queues=["q", SNF]), 2), *history(N1, {QUEUE + "q": 1})]
    dc2 = [rec(N2, "meta", meta_key=f"mirror.dedup.{N1}", meta_value="100"),
           *history(N2, {lost_key(N1, ""): 49, QUEUE + "q": 1})]  # fmt: skip
    local, distributed = both_ways(spark, tmp_path, dc1, dc2, ids=1)
    assert local == distributed
    (d,) = map(json.loads, local["diverged"])
    assert (d["class"], d["side"], d["dc2_status"]) == ("one_side_only", "DC1", "absent")
