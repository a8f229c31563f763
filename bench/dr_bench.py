"""Reconciliation time on local[2] as a ratio of a plain full scan of the same input, and vs datacompy.

``python -m bench.dr_bench DIR`` (DIR from ``bench.dr_generate``): exports both journals to Parquet
(timed, in two processes), then in one Spark session times, on the same Parquet input:
  scan_all     every column of both sides read (``write.format("noop")``);
  scan_needed  only the columns reconciliation reads;
  reconcile    side states, classification, per-address summary collected;
  datacompy    datacompy's SparkSQLCompare of the two sides' message tables on the identity (optional).
Prints one JSON line; checks the classification against DIR/truth.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from spark_dr import transforms as T
from spark_dr.export import export_journal
from spark_dr.session import spark_session

NEEDED = ["node_id", "event", "message_id", "identity_broker", "identity_id", "address", "queue", "queues",
          "ack_reason", "via_mirror", "timestamp_ms", "digest", "size", "segment", "offset", "repaired",
          "meta_key", "meta_value"]  # fmt: skip


def timed(fn: Any) -> tuple[float, Any]:
    started = time.monotonic()
    out = fn()
    return time.monotonic() - started, out


def export_pair(root: Path) -> dict[str, Any]:
    with ProcessPoolExecutor(2) as pool:
        jobs = {s: pool.submit(export_journal, root / s, root / f"{s}.parquet") for s in ("dc1", "dc2")}
        return {s: j.result() for s, j in jobs.items()}


def reconcile_counts(spark: Any, root: Path) -> dict[str, int]:
    r1, r2 = spark.read.parquet(str(root / "dc1.parquet")), spark.read.parquet(str(root / "dc2.parquet"))
    nodes = [r.select("node_id").limit(1).collect()[0][0] for r in (r1, r2)]
    marks = [{m["origin"]: int(m["mark"]) for m in T.dedup_marks(r).collect()} for r in (r1, r2)]
    c = T.classify(T.side_state(r1), T.side_state(r2), node1=nodes[0], node2=nodes[1],
                   marks1=marks[0], marks2=marks[1])  # fmt: skip
    counts: dict[str, int] = {}
    for row in T.summarize(c).collect():
        counts[row["class"]] = counts.get(row["class"], 0) + row["count"]
    return counts


def datacompy_compare(spark: Any, root: Path) -> str:
    from datacompy.spark import SparkSQLCompare

    frames = [T.message_refs(spark.read.parquet(str(root / f"{s}.parquet"))).select(
        "identity_broker", "identity_id", "queue", "digest") for s in ("dc1", "dc2")]  # fmt: skip
    cmp = SparkSQLCompare(
        spark, frames[0], frames[1], join_columns=["identity_broker", "identity_id", "queue"]
    )
    return str(cmp.report())[:200]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("--skip-export", action="store_true")
    p.add_argument("--datacompy", action="store_true")
    args = p.parse_args(argv)
    out: dict[str, Any] = {}
    if not args.skip_export:
        out["export_s"], exports = timed(lambda: export_pair(args.root))
        out["records"] = {s: e["records"] for s, e in exports.items()}
    spark = spark_session("local[2]", shuffle_partitions=8)
    both = spark.read.parquet(str(args.root / "dc1.parquet"), str(args.root / "dc2.parquet"))
    both.write.format("noop").mode("overwrite").save()  # warm-up: JVM, file listing, page cache
    out["scan_all_s"], _ = timed(lambda: both.write.format("noop").mode("overwrite").save())
    out["scan_needed_s"], _ = timed(
        lambda: both.select(*NEEDED).write.format("noop").mode("overwrite").save()
    )
    out["reconcile_s"], counts = timed(lambda: reconcile_counts(spark, args.root))
    truth = json.loads((args.root / "truth.json").read_text())
    out["matches_truth"] = all(counts.get(k, 0) == v for k, v in truth.items() if k != "total")
    out["ratio_vs_scan_all"] = round(out["reconcile_s"] / out["scan_all_s"], 2)
    out["ratio_vs_scan_needed"] = round(out["reconcile_s"] / out["scan_needed_s"], 2)
    if args.datacompy:
        out["datacompy_s"], _ = timed(lambda: datacompy_compare(spark, args.root))
        out["datacompy_over_reconcile"] = round(out["datacompy_s"] / out["reconcile_s"], 2)
    out["driver_max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    out["counts"] = counts
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
