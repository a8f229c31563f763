"""Reconciliation time on local[2] (or a standalone cluster) as a ratio of a plain scan of the same input,
and vs datacompy.

``python -m bench.dr_bench DIR [--repeat N] [--datacompy]`` (DIR from ``bench.dr_generate``): exports
both journals to Parquet (timed, in two processes; skipped with ``--skip-export``), then in one Spark
session times, on the same Parquet input, ``--repeat`` rounds of:
  scan_all     every column of both sides read (``write.format("noop")``);
  scan_needed  only the columns reconciliation reads (``NEEDED``, the union of what its jobs read);
  scan_needed_before  the same with the hex digest instead of digest64 (what it read before);
  reconcile    the whole ``spark_dr.reconcile.reconcile`` (everything the report, plan and metrics
               are made from: counts per address, window, timeline, recovery-point gap, every diverged
               reference collected to the driver), minus writing the report files; ``pass1_s`` is its
               part up to the end of pass 1 (from its progress reports);
  join_classify  (``--join-baseline``) the previous job: full outer joins of every reference, counts only;
and once, after the rounds (``--datacompy``), datacompy's ``SparkSQLCompare`` of the two sides' client
records (``datacompy_frames``: sends per queue and acks, keyed by identity, queue and event; compared
columns address, digest, ack_reason, via_mirror) followed by its text ``report()``: the comparison an
operator would run on the two exports, with datacompy's defaults (intermediates cached).
Warm-up, untimed in the ratios: one scan of every column, then ``--warmup`` runs (default 1) of each
timed job (reconcile, join_classify, datacompy) in the same JVM before its timed runs, as the scan
has (a job's first run in a JVM also compiles its generated code and its hot paths; at 1 M that
doubled reconcile's time); their times are reported as ``*_warmup_s``.
Peak memory: the JVM's peak RSS (VmHWM, reset before each reconcile where the kernel allows it) and
the Python driver's. Prints one JSON line; checks every count against DIR/truth.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from spark_dr import transforms as T
from spark_dr.export import export_journal
from spark_dr.reconcile import Options, reconcile
from spark_dr.session import spark_session
from tests.support.spark_cluster import StandaloneCluster, loopback_env

NEEDED = ["node_id", "event", "message_id", "identity_broker", "identity_id", "address", "queue", "queues",
          "ack_reason", "via_mirror", "timestamp_ms", "digest64", "size", "segment", "offset", "repaired",
          "meta_key", "meta_value"]  # fmt: skip
# what reconciliation read before it compared digest64 instead of the hex digest (the earlier baseline)
NEEDED_BEFORE = [c if c != "digest64" else "digest" for c in NEEDED]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.monotonic()
    out = fn()
    return time.monotonic() - started, out


def export_one(directory: Path, out: Path) -> dict[str, Any]:
    """One journal to Parquet in a fresh process; with the process's peak RSS (the live-message table)."""
    stats = export_journal(directory, out)
    stats["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return stats


def export_pair(root: Path) -> dict[str, Any]:
    with ProcessPoolExecutor(2, max_tasks_per_child=1) as pool:
        jobs = {s: pool.submit(export_one, root / s, root / f"{s}.parquet") for s in ("dc1", "dc2")}
        return {s: j.result() for s, j in jobs.items()}


def datacompy_frames(spark: Any, root: Path) -> list[Any]:
    """Per side, the records reconciliation compares, as datacompy needs them: one row per client send
    reference (per queue) and per client ack, keyed by (identity broker, identity id, queue, event);
    an orphan ack is keyed by its local name, as in ``transforms.side_state`` (so no key repeats).
    Narrow projections of the Parquet input, no shuffle."""
    frames = []
    for side in ("dc1", "dc2"):
        records = spark.read.parquet(str(root / f"{side}.parquet"))
        sends = T.message_refs(records).select(
            "identity_broker",
            "identity_id",
            "queue",
            F.lit("send").alias("event"),
            "address",
            "digest",
            F.lit(None).cast("int").alias("ack_reason"),
            F.col("send_via_mirror").alias("via_mirror"),
        )
        acks = T.identified_acks(records).select(
            "identity_broker",
            "identity_id",
            "queue",
            F.lit("ack").alias("event"),
            F.col("ack_address").alias("address"),
            F.lit(None).cast("string").alias("digest"),
            "ack_reason",
            F.col("ack_via_mirror").alias("via_mirror"),
        )
        frames.append(sends.unionByName(acks))
    return frames


def datacompy_compare(spark: Any, root: Path) -> dict[str, Any]:
    """datacompy's Spark comparison, as its documentation shows it: construct ``SparkSQLCompare`` (which
    joins the two frames and counts and compares every column), then build its text ``report()``."""
    import datacompy
    from datacompy.spark import SparkSQLCompare

    frames = datacompy_frames(spark, root)
    keys = ["identity_broker", "identity_id", "queue", "event"]
    cmp = SparkSQLCompare(spark, frames[0], frames[1], join_columns=keys, df1_name="dc1", df2_name="dc2")
    report = cmp.report()
    # datacompy leaves its cached join in the session: a later run of the same comparison would read
    # it from memory instead of comparing again
    cmp.intersect_rows.unpersist()
    return {"version": datacompy.__version__, "report_chars": len(report), "any_dupes": cmp._any_dupes}


def join_classify(spark: Any, root: Path) -> dict[str, int]:
    """The straightforward job this one replaced: both sides' states fully joined and classified."""
    r1, r2 = spark.read.parquet(str(root / "dc1.parquet")), spark.read.parquet(str(root / "dc2.parquet"))
    nodes = [r.select("node_id").limit(1).collect()[0][0] for r in (r1, r2)]
    marks = [{m["origin"]: int(m["mark"]) for m in T.dedup_marks(r).collect()} for r in (r1, r2)]
    c = T.classify(T.side_state(r1), T.side_state(r2), node1=nodes[0], node2=nodes[1],
                   marks1=marks[0], marks2=marks[1])  # fmt: skip
    counts: dict[str, int] = {}
    for row in T.summarize(c).collect():
        counts[row["class"]] = counts.get(row["class"], 0) + row["count"]
    return counts


def jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def peak_rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return -1


def reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def wait_for_quiet(load: float, most_s: float = 900.0) -> float:
    """Seconds waited until the 1-minute load average was below ``load`` (0: no wait)."""
    started = time.monotonic()
    while load and os.getloadavg()[0] >= load and time.monotonic() - started < most_s:
        time.sleep(5)
    return time.monotonic() - started


def one_round(spark: Any, root: Path, pid: int, ids_per_range: int, baseline: bool) -> dict[str, Any]:
    both = spark.read.parquet(str(root / "dc1.parquet"), str(root / "dc2.parquet"))
    noop = lambda df: df.write.format("noop").mode("overwrite").save()  # noqa: E731
    out: dict[str, Any] = {"load_1min": os.getloadavg()[0]}  # the machine is shared: say how busy
    out["scan_all_s"], _ = timed(lambda: noop(both))
    out["scan_needed_s"], _ = timed(lambda: noop(both.select(*NEEDED)))
    out["scan_needed_before_s"], _ = timed(lambda: noop(both.select(*NEEDED_BEFORE)))
    out["peak_reset"] = reset_peak(pid)
    said: list[float] = []  # when reconcile reports progress: pass 1 ends at its 2nd report
    opts = Options(ids_per_range=ids_per_range, progress=lambda _msg: said.append(time.monotonic()))
    started = time.monotonic()
    out["reconcile_s"], out["result"] = timed(
        lambda: reconcile(spark, root / "dc1.parquet", root / "dc2.parquet", opts)
    )
    out["pass1_s"] = said[1] - started
    out["jvm_peak_rss_mb"] = peak_rss_mb(pid)
    if baseline:
        out["join_classify_s"], out["join_counts"] = timed(lambda: join_classify(spark, root))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("--skip-export", action="store_true")
    p.add_argument("--datacompy", action="store_true")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--shuffle-partitions", type=int, default=4)
    p.add_argument("--join-baseline", action="store_true", help="also time the plain join-and-classify")
    p.add_argument("--ids-per-range", type=int, default=Options().ids_per_range)
    p.add_argument("--warmup", type=int, default=1, help="untimed runs of each timed job first")
    p.add_argument(
        "--quiet-load",
        type=float,
        default=0.0,
        metavar="LOAD",
        help="before each round, wait (up to 15 minutes) until the 1-minute load average is below this "
        "(0: do not wait); the machine is shared",
    )
    p.add_argument(
        "--cluster",
        type=int,
        default=0,
        metavar="WORKERS",
        help="run on a Spark standalone cluster of this many one-core workers started here on loopback "
        "(tests/support/spark_cluster.py) instead of local[2]",
    )
    args = p.parse_args(argv)
    out: dict[str, Any] = {"cpus": os.cpu_count(), "shuffle_partitions": args.shuffle_partitions}
    if args.cluster:
        with tempfile.TemporaryDirectory(prefix="dr-bench-cluster-") as tmp:
            cluster = StandaloneCluster(Path(tmp), workers=args.cluster, memory="3g").start()
            try:
                os.environ.update(loopback_env())
                out["master"] = f"standalone, {args.cluster} workers of 1 core"
                return _run(args, out, cluster.url, CLUSTER_CONF)
            finally:
                cluster.stop()
    out["master"] = "local[2]"
    return _run(args, out, "local[2]", {})


# the driver and the executors on loopback; an executor of a one-core worker
CLUSTER_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "2g",
}


def _run(args: argparse.Namespace, out: dict[str, Any], master: str, conf: dict[str, str]) -> int:
    if not args.skip_export:
        out["export_s"], exports = timed(lambda: export_pair(args.root))
        out["records"] = {s: e["records"] for s, e in exports.items()}
        out["export_max_rss_mb"] = {s: e["max_rss_mb"] for s, e in exports.items()}
    spark = spark_session(master, shuffle_partitions=args.shuffle_partitions, conf=conf)
    pid = jvm_pid(spark)
    both = spark.read.parquet(str(args.root / "dc1.parquet"), str(args.root / "dc2.parquet"))
    both.write.format("noop").mode("overwrite").save()  # warm-up: JVM, file listing, page cache
    opts = Options(ids_per_range=args.ids_per_range)
    warmups: dict[str, Callable[[], Any]] = {
        "reconcile": lambda: reconcile(spark, args.root / "dc1.parquet", args.root / "dc2.parquet", opts)
    }
    if args.join_baseline:
        warmups["join_classify"] = lambda: join_classify(spark, args.root)
    if args.datacompy:
        warmups["datacompy"] = lambda: datacompy_compare(spark, args.root)
    for name, job in warmups.items():
        out[f"{name}_warmup_s"] = [round(timed(job)[0], 2) for _ in range(args.warmup)]
    rounds = []
    for _ in range(args.repeat):
        waited = wait_for_quiet(args.quiet_load)
        rounds.append(one_round(spark, args.root, pid, args.ids_per_range, args.join_baseline))
        rounds[-1]["waited_s"] = round(waited)
    for key in ("scan_all_s", "scan_needed_s", "scan_needed_before_s", "reconcile_s", "pass1_s"):
        out[key] = spread([r[key] for r in rounds])
    # ratios per round (scan and reconcile of the same round share the machine's load at that time)
    out["ratio_vs_scan_all"] = spread([r["reconcile_s"] / r["scan_all_s"] for r in rounds])
    out["ratio_vs_scan_needed"] = spread([r["reconcile_s"] / r["scan_needed_s"] for r in rounds])
    out["ratio_vs_scan_needed_before"] = spread(
        [r["reconcile_s"] / r["scan_needed_before_s"] for r in rounds]
    )
    if args.join_baseline:
        out["join_classify_s"] = spread([r["join_classify_s"] for r in rounds])
        out["join_classify_over_reconcile"] = spread(
            [r["join_classify_s"] / r["reconcile_s"] for r in rounds]
        )
        out["join_counts_equal"] = all(r["join_counts"] == rounds[-1]["result"]["counts"] for r in rounds)
    out["load_1min_at_rounds"] = [round(r["load_1min"], 2) for r in rounds]
    out["waited_for_quiet_s"] = [r["waited_s"] for r in rounds]
    out["jvm_peak_rss_mb_reconcile"] = max(r["jvm_peak_rss_mb"] for r in rounds)
    out["jvm_peak_reset"] = all(r["peak_reset"] for r in rounds)
    result = rounds[-1]["result"]
    truth = json.loads((args.root / "truth.json").read_text())
    out["counts"] = result["counts"]
    out["matches_truth"] = all(result["counts"].get(k, 0) == v for k, v in truth.items() if k != "total")
    out["diverged_collected"] = len(result["diverged"])
    if args.datacompy:
        out["load_1min_at_datacompy"] = round(os.getloadavg()[0], 2)
        out["datacompy_s"], out["datacompy"] = timed(lambda: datacompy_compare(spark, args.root))
        out["datacompy_over_reconcile"] = spread([out["datacompy_s"] / r["reconcile_s"] for r in rounds])
    out["jvm_peak_rss_mb_session"] = peak_rss_mb(pid)
    out["python_max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps(_rounded(out)))
    spark.stop()
    return 0


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


if __name__ == "__main__":
    raise SystemExit(main())
