"""The data-diff step: checksums per identity range on each side; only the ranges that differ are joined.

A *range* is (identity broker, queue, identity id // ``ids_per_range``), named by a 64-bit hash
(``rid``). Every row names its message's identity (``rows.journal_rows`` resolves it for acks), so
every record adds a token hash to its range's checksum on its side by itself, with no join: a send
hashes key, address and digest (``digest64``); an ack hashes key and a mark, "A1" when this side's consumption
matches the other side's non-consumption (the consumed flag is inverted on the second side), so
"consumed on DC1, mirrored ack on DC2" gives equal sums and "consumed on both" does not; an orphan ack
(no identity) is put in the range of its local name with a token naming its side, which never matches.
A range whose send count and checksum agree on both sides is all ``in_sync`` and is only counted. Every
other range is classified exactly by ``transforms.classify`` from a second, filtered read
(``pass2_rows``): the records whose computed range is a differing one (a hash set of range ids), with
the local message id intervals they occupy (recorded by pass 1) pushed down to the reader. Whatever a
token cannot vouch for (killed or expired on both sides, settled on one side only, ...) lands in a
differing range.

Pass 1 (``range_sums``) is one read of each side and one aggregation whose map side collapses
everything to a few rows per range and local id bucket: no record crosses a shuffle. The checksum is
the sum of the token hashes in two 32-bit halves (no overflow, order-free); a collision hiding a real
difference has a probability of about 2^-64 per range. The same pass yields the dedup marks, each
side's record count and last record time, and, per store-and-forward (queue, local id bucket),
whether everything there was acknowledged (the recovery-point gap's input).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .history import HISTORY
from .transforms import DEDUP, Pick, internal, named_store_and_forward, snf_copy

DEFAULT_IDS_PER_RANGE = 4096
_MASK = 0xFFFFFFFF
CLIENT, SNF, MARK, OTHER = 0, 1, 2, 3  # kinds of pass-1 rows


def range_id(broker: str, queue: str, ident: str, ids_per_range: int) -> Column:
    """The range id of the named columns (broker, queue, identity id)."""
    return F.expr(_range_id_sql(broker, queue, ident, ids_per_range))


def _range_id_sql(broker: str, queue: str, ident: str, ids_per_range: int) -> str:
    bucket = f"floor({ident} / {ids_per_range})" if ids_per_range > 1 else ident
    return f"xxhash64(coalesce({broker}, ''), coalesce({queue}, ''), {bucket})"


def _one_of(sql: str, values: Iterable[int]) -> Column:
    """``sql IN (values)``, written as SQL text: one call to the JVM, where ``Column.isin`` makes a few
    per value (thousands of round trips for a pass 2 plan)."""
    listed = ", ".join(str(int(v)) for v in values)
    return F.expr(f"{sql} IN ({listed})") if listed else F.lit(False)


def _local_bucket_sql(ids_per_range: int) -> str:
    """The local message id bucket of a row (pass 1 records which buckets hold a differing range)."""
    return f"floor(message_id / {ids_per_range})"


def _halves(h: Column) -> tuple[Column, Column]:
    return F.shiftrightunsigned(h, 32), h.bitwiseAND(F.lit(_MASK))


def _cells(records: DataFrame, ids: int) -> DataFrame:
    """One row per record and queue it names (sends: every queue; acks: theirs; dedup marks: their
    origin), each with its contribution to its group's sums; a record naming nothing reconciled is one
    row of kind OTHER, so that every record is counted (``first``) and timed (the side's extent).
    ``records`` carries ``side`` (0 or 1) and ``node`` (that side's node id).

    Built in stages, each a projection of named columns: Spark does not share a subexpression between
    the branches of a ``when``, so the flags and the key hash, written inline, were computed again in
    every branch that used them (about a fifth of pass 1)."""
    event = F.col("event")
    # the record's flags, once per record (an expression is evaluated again by every operator using it)
    records = records.select(
        "*",
        (event == "send").alias("is_send"),
        ((event == "ack") & F.col("queue").isNotNull()).alias("is_ack"),
        # dedup marks and the reader's history rows: kept per key, the highest value
        (((event == "meta") & F.col("meta_key").startswith(DEDUP)) | (event == HISTORY)).alias("is_mark"),
    )
    is_send, is_ack, is_mark = F.col("is_send"), F.col("is_ack"), F.col("is_mark")
    names = F.when(is_send, F.col("queues")).otherwise(
        F.array(
            # a mark names its origin in its key (``DEDUP`` + origin), stripped on the driver: one side
            # may hold a mark per mirrored message
            F.when(is_ack, F.col("queue")).when(is_mark, F.col("meta_key"))
        )
    )
    # explode_outer: a send with no queue is still one row, to be counted
    cells = records.select("*", F.posexplode_outer(names).alias("pos", "key"))
    q, a, m = F.col("key"), F.col("address"), F.col("message_id")
    # a client queue's reference to a message on a mirror-internal address is not a message (as in
    # transforms.message_refs)
    valid = q.isNotNull() & (is_mark | ~is_send | internal(q) | ~internal(a))
    first = F.coalesce(F.col("pos") == 0, F.lit(True))  # one row per record counts it
    cells = cells.select("*", valid.alias("valid"), first.alias("first"), internal(q).alias("internal_q"))
    # no filter on ``valid | first``: a cell neither valid nor first (a send's client queue on an internal
    # address, after its first queue) adds nothing (an OTHER row of zeros at its record's time), and
    # Spark pushed such a filter below the projection, evaluating ``valid`` twice per cell
    valid = F.col("valid")
    known = F.col("identity_broker").isNotNull() & F.col("identity_id").isNotNull()
    consumed = F.coalesce(
        (F.col("ack_reason") == 0) & ~F.coalesce(F.col("via_mirror"), F.lit(False)), F.lit(False)
    )
    flags = cells.select(
        "side",
        "valid",
        F.col("first").cast("int").alias("first"),
        "timestamp_ms",
        "is_send",
        "is_ack",
        (valid & is_mark).alias("is_mark"),
        (valid & ~is_mark & F.col("internal_q")).alias("snf"),
        known.alias("known"),
        q.alias("q"),
        a.alias("a"),
        m.alias("m"),
        "digest64",
        "meta_value",
        # an orphan ack's best name is its local one (as in transforms.side_state)
        F.when(known, F.col("identity_broker")).otherwise(F.col("node")).alias("b"),
        F.when(known, F.col("identity_id")).otherwise(m).alias("i"),
        # the consumed flag is inverted on the second side
        (consumed != (F.col("side") == 1)).alias("matches_other"),
        F.col("ack_reason").isNotNull().alias("has_reason"),
        F.coalesce(F.col("repaired"), F.lit(False)).alias("repaired"),
    )
    valid, send, ack, mark, snf, known = (
        F.col(c) for c in ("valid", "is_send", "is_ack", "is_mark", "snf", "known")
    )
    i, q, a, m = (F.col(c) for c in ("i", "q", "a", "m"))
    client = valid & ~mark & ~snf
    # the range names broker and queue: the key hash needs only the range and the id on top
    ranged = flags.select("*", F.when(client, range_id("b", "q", "i", ids)).alias("rid"))
    keyed = ranged.select("*", F.when(client, F.xxhash64(F.col("rid"), i)).alias("kh"))
    kh = F.col("kh")
    vouched_ack = ack & known & F.col("has_reason")
    token = (
        F.when(send & known, F.xxhash64(kh, a, F.col("digest64"), F.lit("S")))
        .when(vouched_ack & F.col("matches_other"), F.xxhash64(kh, F.lit("A1")))
        .when(vouched_ack, F.xxhash64(kh, F.lit("A0")))
        .otherwise(F.xxhash64(kh, F.col("side"), F.lit("X")))  # no identity, orphan ack: never equal
    )
    # store-and-forward: a send adds its id hash, its ack subtracts it (halves negated, so they cancel);
    # the group is the queue's, so the id alone is hashed
    hashed = keyed.select("*", F.when(snf, F.xxhash64(m)).when(client, token).otherwise(0).alias("h"))
    h_hi, h_lo = _halves(F.col("h"))
    sign = F.when(snf & ~send, -1).otherwise(1)
    return hashed.select(
        "side",
        F.when(~valid, OTHER).when(mark, MARK).when(snf, SNF).otherwise(CLIENT).alias("kind"),
        "rid",
        F.when(valid & ~client, q).alias("r_queue"),  # a client range's id names its queue
        F.when(client & send, a).alias("r_address"),  # counts in sync per message address
        F.when(valid & ~mark, F.floor(m / F.lit(ids))).alias("local_bucket"),
        F.when(client & send, 1).when(snf, sign).otherwise(0).alias("refs"),
        (sign * h_hi).alias("hi"),
        (sign * h_lo).alias("lo"),
        F.when(mark, F.col("meta_value").try_cast("bigint")).alias("mark"),
        F.when(client & send & ~known, 1).otherwise(0).alias("no_identity"),
        F.when(client & send & F.col("repaired"), 1).otherwise(0).alias("repaired"),
        "first",
        "timestamp_ms",
    )


def range_sums(sides: list[tuple[DataFrame, str]], ids_per_range: int) -> DataFrame:
    """Pass 1 of both sides (each given with its node id): one read of each, one aggregation
    (collapsed on the map side), rows tagged with their ``side`` (0 or 1).

    Rows: ``kind`` CLIENT per (range ``rid``, message address, local id bucket) with ``refs``
    (client send references), the checksum halves ``hi``/``lo`` and ``repaired`` (the references
    that are a repair's copies); SNF per (store-and-forward queue,
    local id bucket) with ``refs`` (sends minus acks) and ``hi``/``lo`` (the sends' id checksum minus
    the acks'): zero everywhere means every reference there is acknowledged; MARK per dedup meta key
    (``transforms.DEDUP`` + origin) and per history key (``history``) with the highest ``mark``. Every
    row also carries its records' count and last time (the extent)."""
    tagged = [
        r.select(*_PASS1_COLUMNS, F.lit(n).alias("side"), F.lit(node).alias("node"))
        for n, (r, node) in enumerate(sides)
    ]
    both = reduce(DataFrame.unionByName, tagged)
    return (
        _cells(both, ids_per_range)
        .groupBy("side", "kind", "rid", "r_queue", "r_address", "local_bucket")
        .agg(
            F.sum("refs").alias("refs"),
            F.sum("hi").alias("hi"),
            F.sum("lo").alias("lo"),
            F.max("mark").alias("mark"),
            F.max("no_identity").alias("no_identity"),
            F.sum("repaired").alias("repaired"),
            F.sum("first").alias("records"),
            F.max("timestamp_ms").alias("last_ms"),
        )
    )


# the columns both passes read: a reference's identity, place, outcome and content
_REFERENCE_COLUMNS = [
    "event",
    "message_id",
    "identity_broker",
    "identity_id",
    "address",
    "queue",
    "queues",
    "ack_reason",
    "via_mirror",
    "timestamp_ms",
    "digest64",
]
# and the dedup marks, and whether a send is a repair's copy (counted per side and address)
_PASS1_COLUMNS = [*_REFERENCE_COLUMNS, "meta_key", "meta_value", "repaired"]
# and what a repair and the report need of a reference
PASS2_COLUMNS = ["node_id", *_REFERENCE_COLUMNS, "size", "segment", "offset", "repaired"]


# Message id intervals pushed down to the reader, per scan: Spark evaluates the pushed condition
# again on every row it reads, in the stage's generated method, and a method grown past the JIT's
# huge-method limit (8000 bytes of bytecode) is interpreted: an OR of 64 intervals made the narrowed
# read 8x slower at 10 M. So the intervals go down in chunks, one scan each, the scans unioned.
PUSHED_INTERVALS = 32
MAX_SCANS = 8  # past PUSHED_INTERVALS * MAX_SCANS intervals, the closest ones are merged


def narrowed(
    records: DataFrame, local_buckets: set[int], ids_per_range: int, pushdown: bool = True
) -> DataFrame:
    """``records`` restricted to the local message id buckets given: exactly, by bucket (a hash set
    lookup per row), and by the message id intervals covering them, pushed down to the reader (a
    Parquet export skips the row groups outside them by their statistics; ``load_side`` turns
    Parquet's dictionary filter off, which expanded every row group's message id dictionary into a set
    of boxed longs for every interval). The exact test comes first, so the intervals are evaluated
    again only on the rows it keeps; they go down in chunks (``PUSHED_INTERVALS``), one scan each.
    Without ``pushdown`` (the journal data source, which reads a whole journal whatever the filter)
    there is one scan, with the exact test only."""
    intervals = coarse_intervals(id_intervals(local_buckets, ids_per_range), PUSHED_INTERVALS * MAX_SCANS)
    if not intervals:
        return records.filter(F.lit(False))
    if not pushdown:
        return records.filter(_one_of(_local_bucket_sql(ids_per_range), sorted(local_buckets)))
    parts = []
    for k in range(0, len(intervals), PUSHED_INTERVALS):
        chunk = intervals[k : k + PUSHED_INTERVALS]
        buckets = sorted(b for b in local_buckets if any(lo <= b * ids_per_range < hi for lo, hi in chunk))
        pushed = " OR ".join(f"(message_id >= {lo} AND message_id < {hi})" for lo, hi in chunk)
        parts.append(records.filter(_one_of(_local_bucket_sql(ids_per_range), buckets) & F.expr(pushed)))
    return reduce(DataFrame.unionByName, parts)


def coarse_intervals(intervals: list[tuple[int, int]], most: int) -> list[tuple[int, int]]:
    """``intervals`` (sorted, disjoint) merged across their smallest gaps until at most ``most`` remain."""
    out = list(intervals)
    while len(out) > most:
        k = min(range(len(out) - 1), key=lambda n: out[n + 1][0] - out[n][1])
        out[k : k + 2] = [(out[k][0], out[k + 1][1])]
    return out


MAX_LISTED_RANGES = 20_000


def pass2_rows(
    records: DataFrame,
    local_buckets: set[int],
    rids: list[int],
    snf: list[tuple[str, int]],
    ids_per_range: int,
    pushdown: bool = True,
) -> DataFrame:
    """What pass 2 reads of one side: the records of the given local id buckets (``narrowed``), each
    send split into one row per queue (``queues`` then names that queue only), and of those only the
    rows a pick may keep: references in a differing range (``rids``) or in a store-and-forward bucket
    with unacknowledged references (``snf``), and acks with no identity (an orphan is keyed by its local
    name), and a message's store-and-forward reference paged on its own (``transforms.snf_copy``);
    ``queued`` says whether a send named a store-and-forward queue before it was split. The picks
    still select exactly; this only keeps pass 2's cached input small (the buckets hold every range of
    their ids, and every send's store-and-forward reference)."""
    rows = narrowed(records, local_buckets, ids_per_range, pushdown)
    ranges = _range_test(rids, ids_per_range, "key")
    if ranges is None:
        return rows
    send = F.col("event") == "send"
    split = rows.select(
        "*",
        F.explode(F.when(send, F.col("queues")).otherwise(F.array("queue"))).alias("key"),
        named_store_and_forward().alias("queued"),  # before ``queues`` is cut to the one queue
        snf_copy().alias("snf_copy"),
    )
    orphan = (F.col("event") == "ack") & (F.col("identity_broker").isNull() | F.col("identity_id").isNull())
    kept = split.filter(ranges | _bucket_test(snf, ids_per_range, "key") | orphan | F.col("snf_copy"))
    queues = F.when(send, F.array("key")).otherwise(F.col("queues"))
    return kept.withColumn("queues", queues).drop("key", "snf_copy")


def _range_test(rids: list[int], ids_per_range: int, queue: str = "queue") -> Column | None:
    """The range of (identity_broker, ``queue``, identity_id) is one of ``rids`` (None: too many to list)."""
    if len(rids) > MAX_LISTED_RANGES:
        return None
    return _one_of(_range_id_sql("identity_broker", queue, "identity_id", ids_per_range), rids)


def _bucket_test(buckets: list[tuple[str, int]], ids_per_range: int, queue: str = "queue") -> Column:
    """(``queue``, local message id bucket) is one of ``buckets`` (store-and-forward queues are few)."""
    by_queue: dict[str, set[int]] = {}
    for name, bucket in buckets:
        by_queue.setdefault(name, set()).add(bucket)
    local = _local_bucket_sql(ids_per_range)
    wanted = [(F.col(queue) == name) & _one_of(local, sorted(b)) for name, b in sorted(by_queue.items())]
    return reduce(operator.or_, wanted, F.lit(False))


def in_ranges(rids: list[int], ids_per_range: int) -> Pick:
    """A ``transforms`` pick: the references whose range is one of ``rids`` (a set lookup per row, or a
    broadcast semi-join when there are very many)."""

    def pick(refs: DataFrame) -> DataFrame:
        test = _range_test(rids, ids_per_range)
        if test is not None:  # a hash set in the filter: no broadcast job
            return refs.filter(test)
        rid = F.expr(_range_id_sql("identity_broker", "queue", "identity_id", ids_per_range))
        wanted = F.broadcast(refs.sparkSession.createDataFrame([(r,) for r in rids], "rid bigint"))
        return refs.withColumn("rid", rid).join(wanted, "rid", "left_semi").drop("rid")

    return pick


def in_buckets(buckets: list[tuple[str, int]], ids_per_range: int) -> Pick:
    """A ``transforms`` pick: the references of the given (queue, local message id bucket) pairs."""
    return lambda refs: refs.filter(_bucket_test(buckets, ids_per_range))


def id_intervals(buckets: set[int], ids_per_range: int) -> list[tuple[int, int]]:
    """Half-open message id intervals covering the buckets, adjacent buckets merged."""
    out: list[tuple[int, int]] = []
    for b in sorted(buckets):
        if out and out[-1][1] == b * ids_per_range:
            out[-1] = (out[-1][0], (b + 1) * ids_per_range)
        else:
            out.append((b * ids_per_range, (b + 1) * ids_per_range))
    return out
