"""The reconciliation job: two journals (directories or Parquet exports) -> a result dict.

The result is plain data (JSON-able): the report, the Pushgateway text and the repair plan are all
made from it, so they agree with each other and can be tested without Spark.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import artemis_export
from . import pass2_local as L
from . import ranges as R
from . import transforms as T
from .datasource import FORMAT
from .export import start_exports
from .history import SideHistory
from .identity import hex64
from .progress import Progress as ProgressLines
from .rows import COLUMN_NAMES, SCHEMA_DDL, journal_dir, read_node_id

Progress = Callable[[str], None]
ACTIONABLE = ("one_side_only", "acked_one_side")


class PlanLimitExceeded(RuntimeError):
    """More diverged references than a plan may hold."""


@dataclass
class Side:
    name: str
    path: Path
    node_id: str = ""
    records: DataFrame | None = None
    # the Parquet export the records are read from (filters skip its row groups; the driver may read
    # pass 2's few row groups itself); None: read through the journal data source
    parquet: Path | None = None


@dataclass
class Options:
    names: tuple[str, str] = ("DC1", "DC2")
    survivor: str = "DC2"  # the side a repair writes to
    buckets: int = 60  # time buckets of the divergence plot
    plan_limit: int = 1_000_000  # most actions a plan may hold
    ids_per_range: int = R.DEFAULT_IDS_PER_RANGE  # identity ids per checksummed range
    progress: Progress = field(default=lambda _msg: None)
    # Journal directories are first exported here as Parquet (each journal read once, in parallel
    # processes; pass 2 then skips row groups); None reads them through the Spark data source, twice
    # (pass 1 and pass 2), in the executors. Needs to be storage the executors see.
    export_dir: Path | None = None
    # pass 2 classified on the driver when its input is small enough (``pass2_local``), else on Spark
    local_pass2: bool = True
    # where an Artemis export is converted to Parquet when ``export_dir`` is None (it is always read
    # through its conversion); Artemis's node id per side name, when given (else inferred)
    work_dir: Path | None = None
    node_ids: dict[str, str] = field(default_factory=dict)


def is_journal(path: Path) -> bool:
    """A journal (or broker data) directory, as opposed to a Parquet export of one."""
    path = Path(path)
    return path.is_dir() and not any(path.glob("*.parquet")) and not (path / "_SUCCESS").exists()


def load_side(spark: SparkSession, name: str, path: Path, parquet: Path | None = None) -> Side:
    """A journal directory (read with our data source, or from its export ``parquet``) or a Parquet
    export of one. A side read from a journal keeps the journal as its path: a repair reads payloads
    there."""
    path = Path(path)
    if artemis_export.is_export(path):
        if parquet is None:
            raise ValueError(f"{path}: an Artemis export is read from its Parquet conversion; none made")
        return Side(name, path, L.footer_node_id(parquet) or "", _read_parquet(spark, parquet), parquet)
    if is_journal(path):
        directory = journal_dir(path)
        if parquet is None:
            records = spark.read.format(FORMAT).load(str(directory))
        else:
            records = _read_parquet(spark, parquet)
        return Side(name, directory, read_node_id(directory), records, parquet)
    records = _read_parquet(spark, path)
    node = L.footer_node_id(path)  # no Spark job: the footers' statistics
    if node is None:
        found = records.select("node_id").filter(F.col("node_id").isNotNull()).limit(1).collect()
        if not found:
            raise ValueError(f"{path}: no records")
        node = str(found[0][0])
    return Side(name, path, node, records, path)


def _read_parquet(spark: SparkSession, path: Path) -> DataFrame:
    # statistics (min/max) skip row groups well; the dictionary filter costs more than it saves here
    reader = spark.read.option("parquet.filter.dictionary.enabled", "false")
    columns = set(L.parquet_columns(path))
    if set(COLUMN_NAMES) <= columns:
        return reader.schema(SCHEMA_DDL).parquet(str(path))  # ours: no schema inferred from the footers
    records = reader.parquet(str(path))
    if "digest64" not in records.columns and "digest" in records.columns:  # an export of an earlier version
        records = records.withColumn("digest64", F.expr(_DIGEST64_OF_HEX))
    return records


# the first 16 hex digits of the digest as a signed 64-bit integer (``identity.payload_digests``)
_DIGEST64_OF_HEX = "cast(conv(substring(digest, 1, 16), 16, -10) as bigint)"


def export_sides(paths: list[Path], opts: Options) -> list[Path | None]:
    """The Parquet export of each side given as a journal directory (None for the others), made now
    into ``opts.export_dir`` (nothing when it is None), and the conversion of each side given as an
    Artemis export (into ``opts.export_dir`` or ``opts.work_dir``)."""
    return start_export_sides(paths, opts)()[0]


def start_export_sides(paths: list[Path], opts: Options) -> Callable[[], tuple[list[Path | None], float]]:
    """``export_sides`` started: the export processes are running when this returns, and the function
    it returns waits for them (and says how long the slowest took). Needs no Spark: a caller may start
    its session meanwhile and hand the exports to ``reconcile``."""
    jobs: dict[int, tuple[Path, Path, str | None]] = {}
    for i, (name, p) in enumerate(zip(opts.names, paths, strict=True)):
        if is_journal(p) and opts.export_dir is not None:
            jobs[i] = (journal_dir(p), Path(opts.export_dir) / f"{name}.parquet", None)
        elif artemis_export.is_export(Path(p)):
            into = opts.export_dir or opts.work_dir
            if into is None:
                raise ValueError(f"{p}: an Artemis export needs a directory to be converted into")
            node = artemis_node_id(name, paths[1 - i], opts)
            jobs[i] = (Path(p), Path(into) / f"{name}.parquet", node)
    if not jobs:
        return lambda: ([None] * len(paths), 0.0)
    say = opts.progress
    say(f"exporting {', '.join(f'{src} to {out}' for src, out, _ in jobs.values())}")
    progress = say.throttled(5.0) if isinstance(say, ProgressLines) else None
    running = start_exports(list(jobs.values()), progress)

    def finish() -> tuple[list[Path | None], float]:
        stats = running()
        say("exported " + ", ".join(f"{s['records']} records in {s['seconds']:.1f} s" for s in stats))
        exports = [jobs[i][1] if i in jobs else None for i in range(len(paths))]
        return exports, max(float(s["seconds"]) for s in stats)

    return finish


class NodeIdUnknown(ValueError):
    """The node id of an Artemis export could not be inferred; the message says how to give it."""


def artemis_node_id(name: str, other: Path, opts: Options) -> str:
    """The node id of the Artemis whose export is side ``name``: given, or the one origin the other
    side's mirror target keeps a mark for."""
    if name in opts.node_ids:
        return opts.node_ids[name]
    opts.progress(f"{name} is an Artemis export: its node id, from the origins {other}'s mirror received")
    node = artemis_export.infer_node_id(Path(other))
    if node is None:
        raise NodeIdUnknown(
            f"{name} is an Artemis export and its node id is not the one origin of the other side's "
            f"mirror: give it with --node-id {name}=ID (Artemis logs it at start: AMQ221001 ... nodeID=ID)"
        )
    opts.progress(f"{name}'s node id: {node}")
    return node


def reconcile(
    spark: SparkSession,
    path1: Path,
    path2: Path,
    opts: Options | None = None,
    exports: list[Path | None] | None = None,
) -> dict[str, Any]:
    """Data-diff reconciliation (``ranges``): one pass per side for range checksums, dedup marks,
    store-and-forward checksums and the side's extent, then an exact classification of what differs
    (a filtered second read), on the driver when it is small (``pass2_local``), else collected in one
    Spark job; the summary, window and timeline are folded on the driver from what that returns.
    ``exports``: what ``export_sides`` returned, when the caller exported the journals itself (by
    default they are exported here)."""
    opts = opts or Options()
    started = time.monotonic()
    say = opts.progress
    if exports is None:
        exports = export_sides([Path(path1), Path(path2)], opts)
    with ThreadPoolExecutor(2) as pool:  # each side's schema and node id: small jobs, run together
        sides = list(pool.map(load_side, [spark, spark], opts.names, [path1, path2], exports))
    records = [s.records for s in sides if s.records is not None]
    say("reading journals: checksums per identity range")
    diff = _range_diff([(r, s.node_id) for r, s in zip(records, sides, strict=True)], opts.ids_per_range)
    marks = diff.marks
    say("mirror dedup marks (highest id received per origin): " + "; ".join(
        f"{name} " + (", ".join(f"from {o[:8]} {m}" for o, m in sorted(mark.items())) or "none")
        for name, mark in zip(opts.names, marks, strict=True)))  # fmt: skip
    say(f"{diff.differing} of {diff.ranges} identity ranges differ: classifying them")
    local = None if diff.everything else _local_candidates(sides, diff, opts)
    if diff.everything:  # every reference classified: the session's own settings
        diverged, in_sync, gap = _collect(_pass2_job(sides, records, diff, None, opts), opts.plan_limit)
    elif local is not None:
        say(f"pass 2 on the driver: {sum(c.rows for c in local)} records in the candidate row groups")
        rids = set(diff.rids)
        with ThreadPoolExecutor(2) as pool:  # Arrow reads and filters without the GIL: both sides at once
            reads = list(pool.map(lambda c, snf: c.read(rids, set(snf)), local, diff.snf))
        diverged, in_sync, gap = L.pass2(
            reads,
            nodes=[s.node_id for s in sides],
            marks=diff.marks,
            names=opts.names,
            plan_limit=opts.plan_limit,
            history=diff.history,
        )
        _check_plan(diverged, opts.plan_limit)
    else:
        with _session_conf(spark, _PASS2_CONF):
            narrow = _narrow(sides, records, diff, opts)
            try:
                # read and cache both sides, in parallel (one job each: the union of two one-partition
                # frames is one partition, read by one task), while the classification is planned
                with ThreadPoolExecutor(len(narrow)) as pool:
                    counts = pool.map(DataFrame.count, narrow)
                    job = _pass2_job(sides, narrow, diff, R.in_ranges(diff.rids, opts.ids_per_range), opts)
                    rows = sum(counts)
                with _session_conf(spark, {_PARTITIONS: str(_partitions(spark, rows))}):
                    diverged, in_sync, gap = _collect(job, opts.plan_limit)
            finally:
                for frame in narrow:
                    frame.unpersist()
    say("summary, timeline, recovery-point gap, repair plan")
    for d in diverged:
        d["diverged_ms"] = divergence_ms(d, opts.names)
        for p in ("dc1_digest", "dc2_digest"):  # compared as digest64; named as its 16 hex digits
            d[p] = hex64(d[p]) if d[p] is not None else None
    summary = _merge_in_sync(count_classes(diverged), diff.in_sync + in_sync)
    window = divergence_window(diverged)
    bucket = _bucket_ms(window, opts.buckets)
    side_info = {s.name: _side_info(s, e, g) for s, e, g in zip(sides, diff.extents, gap, strict=True)}
    result = _result(sides, summary, window, timeline(diverged, bucket), side_info, diverged, opts)
    result["repaired"] = {
        name: sum(r["count"] for r in diff.repaired[n]) for n, name in enumerate(opts.names)
    }
    result["repaired_by_address"] = [
        {**r, "side": opts.names[n]}
        for n in (0, 1)
        for r in sorted(diff.repaired[n], key=lambda r: r["address"])
    ]
    result["seconds"] = round(time.monotonic() - started, 3)
    say(f"done in {result['seconds']} s")
    return result


# Pass 2 reads a small part of each side (cached, one partition per side) and runs a few small
# stages on it: planned once rather than re-planned between stages (adaptive execution), in as few
# shuffle partitions as its size needs, each file read as one split (the narrowed read skips most row
# groups; splitting a file only repeats the footer parse in every task).
_PASS2_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.files.maxPartitionBytes": str(1 << 40),
}
_PARTITIONS = "spark.sql.shuffle.partitions"
_ROWS_PER_PARTITION = 500_000  # of pass 2's cached input


@contextmanager
def _session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """``conf`` set on the session for the duration, then restored."""
    saved: dict[str, str | None] = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


def _partitions(spark: SparkSession, rows: int) -> int:
    return max(1, min(int(spark.conf.get(_PARTITIONS) or 1), rows // _ROWS_PER_PARTITION))


def _local_candidates(sides: list[Side], diff: RangeDiff, opts: Options) -> list[L.Candidates] | None:
    """Pass 2's row groups of each side, when the driver is to read and classify them itself: both
    sides Parquet files of this version on the driver's file system (not, say, a cluster's storage),
    the ``xxhash`` package present, at most ``pass2_local.MAX_ROWS`` rows in all."""
    if not opts.local_pass2 or not L.available():
        return None
    candidates = []
    for i, side in enumerate(sides):
        if side.parquet is None or "digest64" not in L.parquet_columns(
            side.parquet
        ):  # none, or an older export
            return None
        candidates.append(L.Candidates(side.parquet, _pass2_buckets(diff, i), opts.ids_per_range))
    return candidates if sum(c.rows for c in candidates) <= L.MAX_ROWS else None


def _pass2_buckets(diff: RangeDiff, side: int) -> set[int]:
    """The id buckets pass 2 reads on one side: the differing ranges' and the store-and-forward gap's."""
    return diff.local[side] | {b for _, b in diff.snf[side]}


def _check_plan(diverged: list[Any], plan_limit: int) -> None:
    if len(diverged) > plan_limit:
        raise PlanLimitExceeded(f"more than {plan_limit} diverged references: raise --plan-limit")


def _narrow(sides: list[Side], records: list[DataFrame], diff: RangeDiff, opts: Options) -> list[DataFrame]:
    """Pass 2's input: per side, the records the differing ranges and the store-and-forward gap need,
    cached as one partition."""
    narrow = []
    for i, (side, r) in enumerate(zip(sides, records, strict=True)):
        rows = R.pass2_rows(
            r.select(*R.PASS2_COLUMNS),
            _pass2_buckets(diff, i),
            diff.rids,
            diff.snf[i],
            opts.ids_per_range,
            side.parquet is not None,
        )
        narrow.append(rows.coalesce(1).cache())
    return narrow


def _pass2_job(
    sides: list[Side], inputs: list[DataFrame], diff: RangeDiff, pick: T.Pick | None, opts: Options
) -> tuple[DataFrame, list[str]]:
    """Everything pass 2 yields, as one frame to collect in one job (one plan, one round of scheduling)
    instead of a dozen small ones: the references ``pick`` selects (all by default) classified exactly,
    of which the diverged ones (all of them, for the plan) and the count of in-sync ones per address,
    and each side's recovery-point gap; ``part`` says which row is which. The classification runs in
    both of its branches. Also the columns of a classified reference."""
    detail = [T.side_state(r, pick) for r in inputs]
    classified = T.classify(
        detail[0],
        detail[1],
        node1=sides[0].node_id,
        node2=sides[1].node_id,
        marks1=diff.marks[0],
        marks2=diff.marks[1],
        names=opts.names,
        history=(diff.history[0], diff.history[1]),
    )
    is_sync = F.col("class") == "in_sync"
    parts = [
        classified.filter(~is_sync).limit(opts.plan_limit + 1).withColumn("part", F.lit(_DIVERGED)),
        classified.filter(is_sync).groupBy("address").count().withColumn("part", F.lit(_IN_SYNC)),
    ]
    for i, r in enumerate(inputs):
        gap = T.unmirrored(r, R.in_buckets(diff.snf[i], opts.ids_per_range))
        parts.append(gap.withColumn("part", F.lit(_GAP + i)))
    return reduce(lambda x, y: x.unionByName(y, allowMissingColumns=True), parts), classified.columns


_DIVERGED, _IN_SYNC, _GAP = 0, 1, 2  # parts of pass 2's one collected table
_GAP_COLUMNS = ["kind", "count", "oldest_ms"]


def _collect(
    job: tuple[DataFrame, list[str]], plan_limit: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Pass 2's frame collected: the diverged references, the in-sync counts, the gap of each side."""
    frame, classified_columns = job
    table = frame.toArrow()

    def part(n: int, columns: list[str]) -> list[dict[str, Any]]:
        # Arrow to Python: far cheaper than Row objects
        out: list[dict[str, Any]] = table.filter(pc.equal(table["part"], n)).select(columns).to_pylist()
        return out

    diverged = part(_DIVERGED, classified_columns)
    _check_plan(diverged, plan_limit)
    gap = [
        {r["kind"]: {"count": r["count"], "oldest_ms": r["oldest_ms"]} for r in part(_GAP + i, _GAP_COLUMNS)}
        for i in range(2)
    ]
    return diverged, part(_IN_SYNC, ["address", "count"]), gap


def count_classes(diverged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Counts per address, class and side (as ``transforms.summarize``) of collected references."""
    counts = Counter((d["address"], d["class"], d["side"]) for d in diverged)
    return [{"address": a, "class": c, "side": s, "count": n} for (a, c, s), n in counts.items()]


def divergence_ms(d: dict[str, Any], names: tuple[str, str]) -> int | None:
    """When a reference not in sync started to diverge: the event one side has and the other lacks (a
    send one side never got, a consumption whose ack never crossed, the later of two consumptions'
    first, the send of the copy that differs, an orphan ack), not the first event the reference had
    (a message sent long before the failover and consumed on one side just before it diverged at
    the consumption). None for a reference in sync, or one the mirror does not carry (not a
    divergence); the reference's latest event when the divergent one was compacted away (a settlement
    whose time the journal no longer holds)."""
    cls = d["class"]
    if cls in ("in_sync", "not_mirrored"):
        return None
    here = "dc1" if d["side"] == names[0] else "dc2"  # the side named by the class
    found: int | None
    if cls == "one_side_only":
        found = d[f"{here}_sent_ms"]
    elif cls in ("acked_one_side", "orphan_ack"):
        found = d[f"{here}_acked_ms"]
    elif cls == "consumed_both":
        found = _least(d["dc1_acked_ms"], d["dc2_acked_ms"])
    else:  # payload_differs: the later copy is the one that differs
        found = _greatest(d["dc1_sent_ms"], d["dc2_sent_ms"])
    latest: int | None = d["last_ms"]
    return found if found is not None else latest


def _least(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _greatest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def divergence_window(diverged: list[dict[str, Any]]) -> dict[str, Any]:
    """The first and the last divergent event of the references not in sync (``divergence_ms``; None
    when there are none)."""
    times = [d["diverged_ms"] for d in diverged if d["class"] != "in_sync" and d["diverged_ms"] is not None]
    return {"first_ms": min(times, default=None), "last_ms": max(times, default=None)}


def timeline(diverged: list[dict[str, Any]], bucket_ms: int) -> list[dict[str, Any]]:
    """References not in sync per time bucket (of their divergent event) and class, in time order."""
    if not bucket_ms:
        return []
    counts = Counter(
        (d["diverged_ms"] // bucket_ms * bucket_ms, d["class"])
        for d in diverged
        if d["class"] != "in_sync" and d["diverged_ms"] is not None
    )
    order = sorted(counts, key=lambda k: (k[0], T.CLASSES.index(k[1])))
    return [{"bucket_ms": b, "class": c, "count": counts[b, c]} for b, c in order]


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
    # per side: (address, count) of the send references that are a repair's copies
    repaired: list[list[dict[str, Any]]] = field(default_factory=lambda: [[], []])
    marks: list[dict[str, int]] = field(default_factory=lambda: [{}, {}])  # per side: origin -> mark
    # per side: what its journal may have dropped (compaction, deleted pages)
    history: list[SideHistory] = field(default_factory=lambda: [SideHistory(), SideHistory()])
    # per side: record count and last record time
    extents: list[dict[str, Any]] = field(
        default_factory=lambda: [{"records": 0, "last_ms": None}, {"records": 0, "last_ms": None}]
    )


def _range_diff(sides: list[tuple[DataFrame, str]], ids_per_range: int) -> RangeDiff:
    """Pass 1 on both sides in one job; the comparison itself (a row per range, queue, address and
    local id bucket: about 100 000 rows at 10 M) is done here, in Arrow."""
    diff = RangeDiff()
    table = R.range_sums(sides, ids_per_range).toArrow()
    kind = table["kind"]
    for row in table.group_by("side").aggregate([("records", "sum"), ("last_ms", "max")]).to_pylist():
        diff.extents[row["side"]] = {"records": row["records_sum"], "last_ms": row["last_ms_max"]}
    marks = table.filter(pc.and_(pc.equal(kind, R.MARK), pc.is_valid(table["mark"])))
    facts: list[dict[str, int]] = [{}, {}]
    for row in marks.select(["side", "r_queue", "mark", "records"]).to_pylist():
        key, side = row["r_queue"], row["side"]
        if key.startswith(T.DEDUP):
            diff.marks[side][key.removeprefix(T.DEDUP)] = int(row["mark"])
        else:  # a history row: the reader's, not a journal record
            facts[side][key] = int(row["mark"])
            diff.extents[side]["records"] -= row["records"]
    diff.history = [SideHistory.parse(f) for f in facts]
    # a store-and-forward bucket whose sums are not all zero holds an unacknowledged reference
    pending = pc.or_(
        pc.or_(pc.not_equal(table["refs"], 0), pc.not_equal(table["hi"], 0)), pc.not_equal(table["lo"], 0)
    )
    snf = table.filter(pc.and_(pc.equal(kind, R.SNF), pending))
    for row in snf.select(["side", "r_queue", "local_bucket"]).to_pylist():
        diff.snf[row["side"]].append((row["r_queue"], row["local_bucket"]))
    client = table.filter(pc.equal(kind, R.CLIENT))
    diff.everything = bool(pc.any(pc.greater(client["no_identity"], 0)).as_py())
    # per range and side: send count and checksum; a range is equal when both sides have the same
    sums = client.group_by(["rid", "side"]).aggregate([("refs", "sum"), ("hi", "sum"), ("lo", "sum")])
    per_side = [sums.filter(pc.equal(sums["side"], n)).drop_columns(["side"]) for n in (0, 1)]
    both = per_side[0].join(per_side[1], "rid", join_type="full outer", left_suffix="_0", right_suffix="_1")
    same = [pc.equal(both[f"{c}_sum_0"], both[f"{c}_sum_1"]) for c in ("refs", "hi", "lo")]
    equal = pc.fill_null(pc.and_(pc.and_(same[0], same[1]), same[2]), False)
    if diff.everything:  # nothing is vouched for: every range differs
        equal = pa.array([False] * both.num_rows)
    diff.rids = both.filter(pc.invert(equal))["rid"].to_pylist()
    diff.ranges, diff.differing = both.num_rows, len(diff.rids)
    differing = pc.is_in(client["rid"], value_set=pa.array(diff.rids, pa.int64()))
    for row in client.filter(differing).group_by(["side", "local_bucket"]).aggregate([]).to_pylist():
        diff.local[row["side"]].add(row["local_bucket"])
    # equal ranges are all in sync: their send references counted per message address (side 0's)
    synced = pc.and_(pc.invert(differing), pc.equal(client["side"], 0))
    counts = client.filter(synced).group_by("r_address").aggregate([("refs", "sum")])
    diff.in_sync = [
        {"address": r["r_address"], "count": r["refs_sum"]} for r in counts.to_pylist() if r["refs_sum"]
    ]
    copies = client.filter(pc.greater(client["repaired"], 0))
    for row in copies.group_by(["side", "r_address"]).aggregate([("repaired", "sum")]).to_pylist():
        diff.repaired[row["side"]].append({"address": row["r_address"], "count": row["repaired_sum"]})
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


def _kind(path: Path) -> str:
    """What a side was read from: ``journal``, ``parquet`` or ``artemis-export``."""
    if artemis_export.is_export(path):
        return artemis_export.KIND
    return "journal" if is_journal(path) else "parquet"


def _side_info(side: Side, extent: dict[str, Any], gap: dict[str, Any]) -> dict[str, Any]:
    oldest = min((g["oldest_ms"] for g in gap.values() if g["oldest_ms"] is not None), default=None)
    last_ms = extent["last_ms"]
    return {
        "node_id": side.node_id,
        "path": str(Path(side.path).absolute()),  # the plan's: a repair may run from anywhere
        "kind": _kind(side.path),
        "records": extent["records"],
        "last_ms": last_ms,
        "unmirrored_messages": gap.get("message", {}).get("count", 0),
        "unmirrored_events": gap.get("event", {}).get("count", 0),
        "oldest_unmirrored_ms": oldest,
        "recovery_point_gap_ms": (last_ms - oldest) if oldest is not None and last_ms is not None else 0,
    }


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
