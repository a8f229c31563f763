"""The data-diff step: checksums per identity range on each side; only the ranges that differ are joined.

A *range* is (identity broker, queue, identity id // ``ids_per_range``), named by a 64-bit hash
(``rid``). Every row names its message's identity (``rows.journal_rows`` resolves it for acks), so
every record adds a token hash to its range's checksum on its side by itself, with no join: a send
hashes key, address and digest; an ack hashes key and a mark, "A1" when this side's consumption
matches the other side's non-consumption (the consumed flag is inverted on the second side), so
"consumed on DC1, mirrored ack on DC2" gives equal sums and "consumed on both" does not; an orphan ack
(no identity) is put in the range of its local name with a token naming its side, which never matches.
A range whose send count and checksum agree on both sides is all ``in_sync`` and is only counted. Every
other range is classified exactly by ``transforms.classify`` from a second, filtered read: the records
whose computed range is a differing one (a broadcast semi-join), with the local message id intervals
they occupy (recorded by pass 1) pushed down to the reader. Whatever a token cannot vouch for (killed
or expired on both sides, settled on one side only, ...) lands in a differing range.

Pass 1 (``range_sums``) is one read per side and one aggregation whose map side collapses everything to
a few rows per range and local id bucket: no record crosses a shuffle. The checksum is the sum of the
token hashes in two 32-bit halves (no overflow, order-free); a collision hiding a real difference has
a probability of about 2^-64 per range. The same pass yields the dedup marks and, per store-and-forward
(queue, local id bucket), whether everything there was acknowledged (the recovery-point gap's input).
"""

from __future__ import annotations

import operator
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .transforms import DEDUP, Pick, internal

DEFAULT_IDS_PER_RANGE = 4096
_MASK = 0xFFFFFFFF
CLIENT, SNF, MARK = 0, 1, 2  # kinds of pass-1 rows


def range_id(broker: Column, queue: Column, ident: Column, ids_per_range: int) -> Column:
    bucket = F.floor(ident / F.lit(ids_per_range)) if ids_per_range > 1 else ident
    return F.xxhash64(F.coalesce(broker, F.lit("")), F.coalesce(queue, F.lit("")), bucket)


def _halves(h: Column) -> tuple[Column, Column]:
    return F.shiftrightunsigned(h, 32), h.bitwiseAND(F.lit(_MASK))


def _cells(records: DataFrame, side: int, ids: int) -> DataFrame:
    """One row per record and queue it names (sends: every queue; acks: theirs; dedup marks: their
    origin), each with its contribution to its group's sums.

    Built in stages, each a projection of named columns: Spark does not share a subexpression between
    the branches of a ``when``, so the flags and the key hash, written inline, were computed again in
    every branch that used them (about a fifth of pass 1)."""
    event = F.col("event")
    is_send, is_ack = event == "send", (event == "ack") & F.col("queue").isNotNull()
    is_mark = (event == "meta") & F.col("meta_key").startswith(DEDUP)
    names = F.when(is_send, F.col("queues")).otherwise(
        F.array(
            F.when(is_ack, F.col("queue")).otherwise(F.substring(F.col("meta_key"), len(DEDUP) + 1, 1000))
        )
    )
    cells = records.filter(is_send | is_ack | is_mark).select("*", F.explode(names).alias("key"))
    q, a, m = F.col("key"), F.col("address"), F.col("message_id")
    # a client queue's reference to a message on a mirror-internal address is not a message (as in
    # transforms.message_refs)
    cells = cells.filter(q.isNotNull() & (is_mark | ~is_send | internal(q) | ~internal(a)))
    known = F.col("identity_broker").isNotNull() & F.col("identity_id").isNotNull()
    consumed = F.coalesce(
        (F.col("ack_reason") == 0) & ~F.coalesce(F.col("via_mirror"), F.lit(False)), F.lit(False)
    )
    flags = cells.select(
        is_send.alias("is_send"),
        is_ack.alias("is_ack"),
        is_mark.alias("is_mark"),
        internal(q).alias("snf"),
        known.alias("known"),
        q.alias("q"),
        a.alias("a"),
        m.alias("m"),
        "digest",
        "meta_value",
        # an orphan ack's best name is its local one (as in transforms.side_state)
        F.when(known, F.col("identity_broker")).otherwise(F.col("node_id")).alias("b"),
        F.when(known, F.col("identity_id")).otherwise(m).alias("i"),
        (consumed if side == 1 else ~consumed).alias("matches_other"),
        F.col("ack_reason").isNotNull().alias("has_reason"),
    )
    send, ack, mark, snf, known = (F.col(c) for c in ("is_send", "is_ack", "is_mark", "snf", "known"))
    b, i, q, a, m = (F.col(c) for c in ("b", "i", "q", "a", "m"))
    keyed = flags.select("*", F.xxhash64(b, i, q).alias("kh"))
    kh = F.col("kh")
    vouched_ack = ack & known & F.col("has_reason")
    token = (
        F.when(send & known, F.xxhash64(kh, a, F.col("digest"), F.lit("S")))
        .when(vouched_ack & F.col("matches_other"), F.xxhash64(kh, F.lit("A1")))
        .when(vouched_ack, F.xxhash64(kh, F.lit("A0")))
        .otherwise(F.xxhash64(kh, F.lit(f"X{side}")))  # no identity, orphan ack: never equal
    )
    # store-and-forward: a send adds its id hash, its ack subtracts it (halves negated, so they cancel)
    hashed = keyed.select("*", F.when(snf, F.xxhash64(m, q)).otherwise(token).alias("h"))
    h_hi, h_lo = _halves(F.col("h"))
    sign = F.when(snf & ~send, -1).otherwise(1)
    client = ~mark & ~snf
    return hashed.select(
        F.when(mark, MARK).when(snf, SNF).otherwise(CLIENT).alias("kind"),
        F.when(client, range_id(b, q, i, ids)).alias("rid"),
        q.alias("r_queue"),
        F.when(client & send, a).alias("r_address"),  # counts in sync per message address
        F.when(~mark, F.floor(m / F.lit(ids))).alias("local_bucket"),
        F.when(mark, 0).when(send, 1).when(snf, -1).otherwise(0).alias("refs"),
        F.when(mark, 0).otherwise(sign * h_hi).alias("hi"),
        F.when(mark, 0).otherwise(sign * h_lo).alias("lo"),
        F.when(mark, F.col("meta_value").try_cast("bigint")).alias("mark"),
        F.when(client & send & ~known, 1).otherwise(0).alias("no_identity"),
    )


def range_sums(records: DataFrame, side: int, ids_per_range: int) -> DataFrame:
    """Pass 1 of one side: one read, one aggregation (collapsed on the map side).

    Rows: ``kind`` CLIENT per (range ``rid``, queue, message address, local id bucket) with ``refs``
    (client send references) and the checksum halves ``hi``/``lo``; SNF per (store-and-forward queue,
    local id bucket) with ``refs`` (sends minus acks) and ``hi``/``lo`` (the sends' id checksum minus
    the acks'): zero everywhere means every reference there is acknowledged; MARK per origin with the
    highest dedup ``mark``."""
    return (
        _cells(records, side, ids_per_range)
        .groupBy("kind", "rid", "r_queue", "r_address", "local_bucket")
        .agg(
            F.sum("refs").alias("refs"),
            F.sum("hi").alias("hi"),
            F.sum("lo").alias("lo"),
            F.max("mark").alias("mark"),
            F.max("no_identity").alias("no_identity"),
        )
    )


PUSHED_INTERVALS = 8  # Parquet evaluates a long OR of intervals slowly: push a few coarse ones down
PASS2_COLUMNS = [
    "node_id",
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
    "digest",
    "size",
    "segment",
    "offset",
    "repaired",
]


def narrowed(records: DataFrame, local_buckets: set[int], ids_per_range: int) -> DataFrame:
    """``records`` restricted to the local message id buckets given: exactly, by bucket (a hash set
    lookup per row), and coarsely, by at most ``PUSHED_INTERVALS`` message id intervals covering them,
    pushed down to the reader (a Parquet export skips the row groups outside them by their statistics)."""
    if not local_buckets:
        return records.filter(F.lit(False))
    mid = F.col("message_id")
    coarse = coarse_intervals(id_intervals(local_buckets, ids_per_range), PUSHED_INTERVALS)
    pushed = reduce(operator.or_, [(mid >= a) & (mid < b) for a, b in coarse])
    exact = F.floor(mid / F.lit(ids_per_range)).isin(sorted(local_buckets))
    return records.filter(pushed & exact)


def coarse_intervals(intervals: list[tuple[int, int]], most: int) -> list[tuple[int, int]]:
    """``intervals`` (sorted, disjoint) merged across their smallest gaps until at most ``most`` remain."""
    out = list(intervals)
    while len(out) > most:
        k = min(range(len(out) - 1), key=lambda n: out[n + 1][0] - out[n][1])
        out[k : k + 2] = [(out[k][0], out[k + 1][1])]
    return out


MAX_LISTED_RANGES = 20_000


def in_ranges(rids: list[int], ids_per_range: int) -> Pick:
    """A ``transforms`` pick: the references whose range is one of ``rids`` (a set lookup per row, or a
    broadcast semi-join when there are very many)."""

    def pick(refs: DataFrame) -> DataFrame:
        rid = range_id(F.col("identity_broker"), F.col("queue"), F.col("identity_id"), ids_per_range)
        if len(rids) <= MAX_LISTED_RANGES:  # a hash set in the filter: no broadcast job
            return refs.filter(rid.isin(rids))
        wanted = F.broadcast(refs.sparkSession.createDataFrame([(r,) for r in rids], "rid bigint"))
        return refs.withColumn("rid", rid).join(wanted, "rid", "left_semi").drop("rid")

    return pick


def in_buckets(buckets: list[tuple[str, int]], ids_per_range: int) -> Pick:
    """A ``transforms`` pick: the references of the given (queue, local message id bucket) pairs."""

    def pick(refs: DataFrame) -> DataFrame:
        spark = refs.sparkSession
        wanted = F.broadcast(spark.createDataFrame(sorted(set(buckets)), "queue string, local_bucket bigint"))
        bucket = F.floor(F.col("message_id") / F.lit(ids_per_range)).alias("local_bucket")
        return refs.select("*", bucket).join(wanted, ["queue", "local_bucket"], "left_semi")

    return pick


def id_intervals(buckets: set[int], ids_per_range: int) -> list[tuple[int, int]]:
    """Half-open message id intervals covering the buckets, adjacent buckets merged."""
    out: list[tuple[int, int]] = []
    for b in sorted(buckets):
        if out and out[-1][1] == b * ids_per_range:
            out[-1] = (out[-1][0], (b + 1) * ids_per_range)
        else:
            out.append((b * ids_per_range, (b + 1) * ids_per_range))
    return out
