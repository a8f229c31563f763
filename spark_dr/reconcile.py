"""The reconciliation job: two journals (directories or Parquet exports) -> a result dict.

The result is plain data (JSON-able): the report, the Pushgateway text and the repair plan are all
made from it, so they agree with each other and can be tested without Spark.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import ranges as R
from . import transforms as T
from .datasource import FORMAT
from .rows import journal_dir, read_node_id

Progress = Callable[[str], None]
ACTIONABLE = ("one_side_only", "acked_one_side")


@dataclass
class Side:
    name: str
    path: Path
    node_id: str = ""
    records: DataFrame | None = None


@dataclass
class Options:
    names: tuple[str, str] = ("DC1", "DC2")
    survivor: str = "DC2"  # the side a repair writes to
    buckets: int = 60  # time buckets of the divergence plot
    plan_limit: int = 1_000_000  # most actions a plan may hold
    ids_per_range: int = R.DEFAULT_IDS_PER_RANGE  # identity ids per checksummed range
    progress: Progress = field(default=lambda _msg: None)


def load_side(spark: SparkSession, name: str, path: Path) -> Side:
    """A journal directory (read with our data source) or a Parquet export of one."""
    path = Path(path)
    if path.is_dir() and not any(path.glob("*.parquet")) and not (path / "_SUCCESS").exists():
        directory = journal_dir(path)
        records = spark.read.format(FORMAT).load(str(directory))
        return Side(name, directory, read_node_id(directory), records)
    records = spark.read.parquet(str(path))
    node = records.select("node_id").filter(F.col("node_id").isNotNull()).limit(1).collect()
    if not node:
        raise ValueError(f"{path}: no records")
    return Side(name, path, str(node[0][0]), records)


def reconcile(spark: SparkSession, path1: Path, path2: Path, opts: Options | None = None) -> dict[str, Any]:
    """Data-diff reconciliation (``ranges``): one pass per side for range checksums, dedup marks and
    store-and-forward checksums, then an exact classification of what differs (a filtered second read)."""
    opts = opts or Options()
    started = time.monotonic()
    say = opts.progress
    sides = [load_side(spark, opts.names[0], path1), load_side(spark, opts.names[1], path2)]
    records = [s.records for s in sides if s.records is not None]
    say("reading journals: checksums per identity range")
    diff = _range_diff(records, opts.ids_per_range)
    marks = diff.marks
    say(f"dedup marks: {opts.names[0]} {marks[0]}, {opts.names[1]} {marks[1]}")
    say(f"{diff.differing} of {diff.ranges} identity ranges differ: classifying them")
    ids = opts.ids_per_range
    if diff.everything:
        pick, narrow = None, list(records)
    else:  # one filtered read per side, cached: the states and the recovery-point gap come from it
        pick = R.in_ranges(diff.rids, ids)
        wanted = [diff.local[i] | {b for _, b in diff.snf[i]} for i in range(2)]
        narrow = [
            R.narrowed(r.select(*R.PASS2_COLUMNS), wanted[i], ids).cache() for i, r in enumerate(records)
        ]
    detail = [T.side_state(r, pick) for r in narrow]
    rows = [T.reference_rows(r, R.in_buckets(diff.snf[i], ids)) for i, r in enumerate(narrow)]
    classified = T.classify(
        detail[0],
        detail[1],
        node1=sides[0].node_id,
        node2=sides[1].node_id,
        marks1=marks[0],
        marks2=marks[1],
        names=opts.names,
    ).cache()
    summary = _merge_in_sync([r.asDict() for r in T.summarize(classified).collect()], diff.in_sync)
    window = T.divergence_window(classified).collect()[0].asDict()
    say("timeline, recovery-point gap, repair plan")
    bucket = _bucket_ms(window, opts.buckets)
    timeline = (
        [r.asDict() for r in T.timeline(classified, bucket).orderBy("bucket_ms").collect()] if bucket else []
    )
    extents = _extents(records)
    side_info = {s.name: _side_info(s, e, _gap(r)) for s, e, r in zip(sides, extents, rows, strict=True)}
    actions = _actionable(classified, opts)
    for frame in (*narrow, classified):
        frame.unpersist()
    result = _result(sides, summary, window, timeline, side_info, actions, opts)
    result["seconds"] = round(time.monotonic() - started, 3)
    say(f"done in {result['seconds']} s")
    return result


def _extents(records: list[DataFrame]) -> list[dict[str, Any]]:
    """Last record time and record count of both sides in one job (from Parquet footers when the
    session pushes aggregates down)."""
    out: list[dict[str, Any]] = [{"last_ms": None, "records": 0} for _ in records]
    extents = [T.last_record_ms(r).withColumn("side", F.lit(i)) for i, r in enumerate(records)]
    for row in extents[0].unionByName(extents[1]).collect():
        out[row["side"]].update(last_ms=row["last_ms"], records=row["records"])
    return out


def _gap(rows: DataFrame) -> dict[str, Any]:
    return {r["kind"]: {"count": r["count"], "oldest_ms": r["oldest_ms"]} for r in T.gap_of(rows).collect()}


@dataclass
class RangeDiff:
    ranges: int = 0
    differing: int = 0
    everything: bool = False  # an input the tokens cannot vouch for: classify every reference
    rids: list[int] = field(default_factory=list)  # the differing ranges
    # per side: the local id buckets holding the differing ranges' records (narrows pass 2's read)
    local: list[set[int]] = field(default_factory=lambda: [set(), set()])
    # per side: the store-and-forward (queue, local id bucket) pairs with unacknowledged references
    snf: list[list[tuple[str, int]]] = field(default_factory=lambda: [[], []])
    in_sync: list[dict[str, Any]] = field(default_factory=list)  # (address, count) of equal ranges
    marks: list[dict[str, int]] = field(default_factory=lambda: [{}, {}])  # per side: origin -> mark


def _range_diff(records: list[DataFrame], ids_per_range: int) -> RangeDiff:
    """Pass 1 on both sides in one job; the comparison itself is small and done here."""
    sums = [R.range_sums(r, i + 1, ids_per_range).withColumn("side", F.lit(i)) for i, r in enumerate(records)]
    diff = RangeDiff()
    # rid -> per side [refs, hi, lo, {address: refs}, {local buckets}]
    by_rid: dict[int, list[list[Any] | None]] = {}
    for row in sums[0].unionByName(sums[1]).toArrow().to_pylist():
        side = row["side"]
        if row["kind"] == R.MARK:
            if row["mark"] is not None:
                diff.marks[side][row["r_queue"]] = int(row["mark"])
        elif row["kind"] == R.SNF:
            if row["refs"] or row["hi"] or row["lo"]:  # some reference there is not acknowledged
                diff.snf[side].append((row["r_queue"], row["local_bucket"]))
        else:
            pair = by_rid.setdefault(row["rid"], [None, None])
            total = pair[side]
            if total is None:
                total = pair[side] = [0, 0, 0, {}, set()]
            total[0] += row["refs"]
            total[1] += row["hi"]
            total[2] += row["lo"]
            if row["r_address"] is not None or row["refs"]:
                total[3][row["r_address"]] = total[3].get(row["r_address"], 0) + row["refs"]
            total[4].add(row["local_bucket"])
            diff.everything = diff.everything or bool(row["no_identity"])
    in_sync: dict[str | None, int] = {}
    for rid, (a, b) in by_rid.items():
        if not diff.everything and a and b and a[:3] == b[:3]:
            for address, n in a[3].items():
                in_sync[address] = in_sync.get(address, 0) + n
            continue
        diff.rids.append(rid)
        for side, total in enumerate((a, b)):
            if total is not None:
                diff.local[side] |= total[4]
    diff.ranges, diff.differing = len(by_rid), len(diff.rids)
    diff.in_sync = [{"address": a, "count": n} for a, n in in_sync.items() if n]
    return diff


def _merge_in_sync(summary: list[dict[str, Any]], in_sync: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adds the references of equal ranges (all in sync) to the summary of the differing ones."""
    rows = {(r["address"], r["class"], r["side"]): dict(r) for r in summary}
    for r in in_sync:
        key = (r["address"], "in_sync", None)
        row = rows.setdefault(key, {"address": r["address"], "class": "in_sync", "side": None, "count": 0})
        row["count"] += int(r["count"])
    return list(rows.values())


def _bucket_ms(window: dict[str, Any], buckets: int) -> int:
    first, last = window.get("first_ms"), window.get("last_ms")
    if first is None or last is None:
        return 0
    span = int(last) - int(first) + 1
    return max(1, -(-span // max(1, buckets)))


def _side_info(side: Side, extent: dict[str, Any], gap: dict[str, Any]) -> dict[str, Any]:
    oldest = min((g["oldest_ms"] for g in gap.values() if g["oldest_ms"] is not None), default=None)
    last_ms = extent["last_ms"]
    return {
        "node_id": side.node_id,
        "path": str(side.path),
        "records": extent["records"],
        "last_ms": last_ms,
        "unmirrored_messages": gap.get("message", {}).get("count", 0),
        "unmirrored_events": gap.get("event", {}).get("count", 0),
        "oldest_unmirrored_ms": oldest,
        "recovery_point_gap_ms": (last_ms - oldest) if oldest is not None and last_ms is not None else 0,
    }


def _actionable(classified: DataFrame, opts: Options) -> list[dict[str, Any]]:
    """The references a plan acts on or must mention (everything not in sync), collected to the driver."""
    diverged = classified.filter(F.col("class") != "in_sync").limit(opts.plan_limit + 1)
    rows: list[dict[str, Any]] = diverged.toArrow().to_pylist()  # Arrow: far cheaper than Row objects
    if len(rows) > opts.plan_limit:
        raise RuntimeError(f"more than {opts.plan_limit} diverged references: raise --plan-limit")
    return rows


def _result(
    sides: list[Side],
    summary: list[dict[str, Any]],
    window: dict[str, Any],
    timeline: list[dict[str, Any]],
    side_info: dict[str, Any],
    diverged: list[dict[str, Any]],
    opts: Options,
) -> dict[str, Any]:
    counts = {c: 0 for c in T.CLASSES}
    for row in summary:
        counts[row["class"]] += row["count"]
    failed = opts.names[0] if opts.survivor == opts.names[1] else opts.names[1]
    blocking = [
        d
        for d in diverged
        if d["class"] in ("payload_differs", "orphan_ack")
        or (d["class"] in ACTIONABLE and d["side"] == failed)
    ]
    return {
        "generated_at_ms": int(time.time() * 1000),
        "names": list(opts.names),
        "survivor": opts.survivor,
        "failed": failed,
        "sides": side_info,
        "counts": counts,
        "total": sum(counts.values()),
        "by_address": sorted(summary, key=lambda r: (r["address"] or "", r["class"], r["side"] or "")),
        "window": window,
        "timeline": timeline,
        "survivor_in_sync": not blocking,
        "diverged": diverged,
    }
