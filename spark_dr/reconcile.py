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
    opts = opts or Options()
    started = time.monotonic()
    say = opts.progress
    sides = [load_side(spark, opts.names[0], path1), load_side(spark, opts.names[1], path2)]
    for s in sides:
        assert s.records is not None
        s.records = s.records.cache()
    say("reading journals and resolving acknowledgements")
    states = [T.side_state(s.records) for s in sides if s.records is not None]
    marks = [_marks(s.records) for s in sides if s.records is not None]
    say(f"dedup marks: {opts.names[0]} {marks[0]}, {opts.names[1]} {marks[1]}")
    classified = T.classify(
        states[0],
        states[1],
        node1=sides[0].node_id,
        node2=sides[1].node_id,
        marks1=marks[0],
        marks2=marks[1],
        names=opts.names,
    ).cache()
    say("classifying references")
    summary = [r.asDict() for r in T.summarize(classified).collect()]
    window = T.divergence_window(classified).collect()[0].asDict()
    say("timeline, recovery-point gap, repair plan")
    bucket = _bucket_ms(window, opts.buckets)
    timeline = (
        [r.asDict() for r in T.timeline(classified, bucket).orderBy("bucket_ms").collect()] if bucket else []
    )
    side_info = {s.name: _side_info(s) for s in sides}
    actions = _actionable(classified, opts)
    for s in sides:
        if s.records is not None:
            s.records.unpersist()
    classified.unpersist()
    result = _result(sides, summary, window, timeline, side_info, actions, opts)
    result["seconds"] = round(time.monotonic() - started, 3)
    say(f"done in {result['seconds']} s")
    return result


def _marks(records: DataFrame | None) -> dict[str, int]:
    assert records is not None
    return {r["origin"]: int(r["mark"]) for r in T.dedup_marks(records).collect() if r["mark"] is not None}


def _bucket_ms(window: dict[str, Any], buckets: int) -> int:
    first, last = window.get("first_ms"), window.get("last_ms")
    if first is None or last is None:
        return 0
    span = int(last) - int(first) + 1
    return max(1, -(-span // max(1, buckets)))


def _side_info(side: Side) -> dict[str, Any]:
    assert side.records is not None
    last = T.last_record_ms(side.records).collect()[0]
    gap = {
        r["kind"]: {"count": r["count"], "oldest_ms": r["oldest_ms"]}
        for r in T.unmirrored(side.records).collect()
    }
    oldest = min((g["oldest_ms"] for g in gap.values() if g["oldest_ms"] is not None), default=None)
    last_ms = last["last_ms"]
    return {
        "node_id": side.node_id,
        "path": str(side.path),
        "records": last["records"],
        "last_ms": last_ms,
        "unmirrored_messages": gap.get("message", {}).get("count", 0),
        "unmirrored_events": gap.get("event", {}).get("count", 0),
        "oldest_unmirrored_ms": oldest,
        "recovery_point_gap_ms": (last_ms - oldest) if oldest is not None and last_ms is not None else 0,
    }


def _actionable(classified: DataFrame, opts: Options) -> list[dict[str, Any]]:
    """The references a plan acts on or must mention (everything not in sync), collected to the driver."""
    rows = classified.filter(F.col("class") != "in_sync").limit(opts.plan_limit + 1).collect()
    if len(rows) > opts.plan_limit:
        raise RuntimeError(f"more than {opts.plan_limit} diverged references: raise --plan-limit")
    return [r.asDict() for r in rows]


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
