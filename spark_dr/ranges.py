"""The data-diff step: checksums per identity range on each side; only the ranges that differ are joined.

A *range* is (identity broker, queue, address, identity id // ``ids_per_range``), named by a 64-bit hash
(``rid``). Each reference contributes a token hash to its range's checksum on its side, built so that
equal tokens on the two sides mean ``in_sync``: the send part hashes key, address and digest; the ack
part hashes key and a mark, "A1" when this side's consumption matches the other side's non-consumption
(the consumed flag is inverted on the second side), so "consumed on DC1, mirrored ack on DC2" matches
and "consumed on both" does not; an orphan ack's token names its side and never matches. A range whose
count and checksum agree on both sides is all ``in_sync`` and is only counted. Every other range is
classified exactly by ``transforms.classify``: a second, filtered read fetches its references (by
``(queue, local message id // ids_per_range)``, which the first pass records per range, because an
ack names the local id, not the identity). Whatever a token cannot vouch for (killed or expired on both
sides, settled on one side only, ...) lands in a differing range and is classified exactly.

Pass 1 (``range_sums``) reads each side once: sends and acks, narrowed to longs and short strings before
their one shuffle, joined on (local message id, queue), summed per range. The checksum is the sum of
the token hashes in two 32-bit halves (no overflow, order-free); a collision hiding a real difference
has a probability of about 2^-64 per range. The same pass yields the recovery-point gap.
"""

from __future__ import annotations

import operator
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .transforms import DEDUP, internal, reference_rows

DEFAULT_IDS_PER_RANGE = 4096
_MASK = 0xFFFFFFFF


def range_id(broker: Column, queue: Column, address: Column, ident: Column, ids_per_range: int) -> Column:
    bucket = F.floor(ident / F.lit(ids_per_range)) if ids_per_range > 1 else ident
    parts = [F.coalesce(broker, F.lit("")), F.coalesce(queue, F.lit("")), F.coalesce(address, F.lit(""))]
    return F.xxhash64(*parts, address.isNull(), bucket)


def _key_hash(broker: Column, ident: Column, queue: Column) -> Column:
    return F.xxhash64(broker, ident, queue)


CLIENT, SNF, MARK = 0, 1, 2  # kinds of pass-1 cells


def _halves(h: Column) -> tuple[Column, Column]:
    return F.shiftrightunsigned(h, 32), h.bitwiseAND(F.lit(_MASK))


def _cells(records: DataFrame, side: int, ids: int) -> DataFrame:
    """Sends (one cell per queue), acks and dedup marks as cells of one schema, from one read of the
    journal, keyed so that a client reference's send and acks share a key (local id, queue, address)
    while store-and-forward cells share one per (queue, local id bucket) and marks one per origin: the
    map side of the aggregation collapses the latter two, so only client references cross the shuffle."""
    event = F.col("event")
    is_send, is_ack = event == "send", (event == "ack") & F.col("queue").isNotNull()
    is_mark = (event == "meta") & F.col("meta_key").startswith(DEDUP)
    names = F.when(is_send, F.col("queues")).otherwise(
        F.array(
            F.when(is_ack, F.col("queue")).otherwise(F.substring(F.col("meta_key"), len(DEDUP) + 1, 1000))
        )
    )
    wanted = is_send | is_ack | is_mark
    cells = records.filter(wanted).select("*", F.explode(names).alias("key")).filter(F.col("key").isNotNull())
    q, a, m = F.col("key"), F.col("address"), F.col("message_id")
    snf = internal(q)
    cells = cells.filter(is_mark | ~is_send | snf | ~internal(a))  # as reference_rows drops them
    b, i, n = F.col("identity_broker"), F.col("identity_id"), F.col("node_id")
    has_identity = b.isNotNull() & i.isNotNull()
    client_send, client_ack = is_send & ~snf, is_ack & ~snf
    kh = _key_hash(b, i, q)
    consumed = F.coalesce(
        (F.col("ack_reason") == 0) & ~F.coalesce(F.col("via_mirror"), F.lit(False)), F.lit(False)
    )
    matches_other = consumed if side == 1 else ~consumed
    reason = F.col("ack_reason").isNotNull()
    snf_h = F.xxhash64(m, q)
    snf_hi, snf_lo = _halves(F.when(is_send, snf_h).otherwise(-snf_h))  # acks cancel their sends
    zero = F.lit(0).cast("bigint")
    client = ~is_mark & ~snf
    return cells.select(
        F.when(is_mark, MARK).when(snf, SNF).otherwise(CLIENT).alias("kind"),
        F.when(client, m).alias("mid"),
        q.alias("key"),
        F.when(client, a).alias("address"),
        F.when(~is_mark & snf, F.floor(m / F.lit(ids))).alias("bucket"),
        F.when(is_send, 1).otherwise(0).alias("sends"),
        F.when(is_ack, 1).otherwise(0).alias("acks"),
        F.when(client_send, range_id(b, q, a, i, ids)).alias("rid"),
        F.when(client_send, kh).alias("kh"),
        F.when(client_send & has_identity, F.xxhash64(kh, a, F.col("digest"), F.lit("S"))).alias("hs"),
        F.when(client_ack, range_id(n, q, a, m, ids)).alias("orid"),  # its range and key if an orphan
        F.when(client_ack, _key_hash(n, m, q)).alias("okh"),
        F.when(client_ack & reason & matches_other, 1).otherwise(0).alias("a1"),
        F.when(client_ack & reason & ~matches_other, 1).otherwise(0).alias("a0"),
        F.when(~is_mark & snf, snf_hi).otherwise(zero).alias("hi"),
        F.when(~is_mark & snf, snf_lo).otherwise(zero).alias("lo"),
        F.when(is_send & snf, F.col("timestamp_ms")).alias("first_ms"),
        F.when(is_mark, F.col("meta_value").try_cast("bigint")).alias("mark"),
        F.when(client_send & ~has_identity, 1).otherwise(0).alias("no_identity"),
    )


def range_sums(records: DataFrame, side: int, ids_per_range: int) -> DataFrame:
    """Pass 1 of one side: one read, one aggregation per reference, one small aggregation per range.

    Rows: ``kind`` CLIENT per (range ``rid``, queue, address, local id bucket) with ``refs`` and the
    checksum halves ``hi``/``lo``; SNF per (store-and-forward queue, local id bucket) with ``refs``
    (sends minus acks) and ``hi``/``lo`` (the sends' id checksum minus the acks'): zero everywhere means
    every reference there is acknowledged; MARK per origin with the dedup ``mark``."""
    key = ["kind", "mid", "key", "address", "bucket"]
    per_ref = (
        _cells(records, side, ids_per_range)
        .groupBy(*key)
        .agg(
            F.sum("sends").alias("sends"),
            F.sum("acks").alias("acks"),
            F.max("rid").alias("rid"),
            F.max("kh").alias("kh"),
            F.max("hs").alias("hs"),
            F.max("orid").alias("orid"),
            F.max("okh").alias("okh"),
            F.sum("a1").alias("a1"),
            F.sum("a0").alias("a0"),
            F.sum("hi").alias("hi"),
            F.sum("lo").alias("lo"),
            F.min("first_ms").alias("first_ms"),
            F.max("mark").alias("mark"),
            F.max("no_identity").alias("no_identity"),
        )
    )
    sends, acks, kind = F.col("sends"), F.col("acks"), F.col("kind")
    kh = F.col("kh")
    plain = (sends == 1) & (acks <= 1)  # anything else (duplicates) is never vouched for
    h_send = F.when(plain, F.col("hs")).otherwise(F.xxhash64(kh, sends, acks, F.lit(f"D{side}")))
    s_hi, s_lo = _halves(F.coalesce(h_send, F.xxhash64(kh, F.lit(f"X{side}"))))  # no identity: never
    a1_hi, a1_lo = _halves(F.xxhash64(kh, F.lit("A1")))
    a0_hi, a0_lo = _halves(F.xxhash64(kh, F.lit("A0")))
    o_hi, o_lo = _halves(F.xxhash64(F.col("okh"), F.lit(f"O{side}")))
    a1, a0 = F.col("a1").cast("bigint"), F.col("a0").cast("bigint")
    client = kind == CLIENT
    has_send = sends > 0
    rows = per_ref.select(
        kind,
        F.when(has_send, F.col("rid")).otherwise(F.col("orid")).alias("rid"),
        F.col("key").alias("r_queue"),
        F.col("address").alias("r_address"),
        F.when(client, F.floor(F.col("mid") / F.lit(ids_per_range)))
        .otherwise(F.col("bucket"))
        .alias("local_bucket"),
        F.when(client & has_send, sends * F.greatest(acks, F.lit(1)))
        .when(client, acks)
        .otherwise(sends - acks)
        .alias("refs"),
        F.when(client & has_send, s_hi + a1 * a1_hi + a0 * a0_hi)
        .when(client, acks * o_hi)
        .otherwise(F.col("hi"))
        .alias("hi"),
        F.when(client & has_send, s_lo + a1 * a1_lo + a0 * a0_lo)
        .when(client, acks * o_lo)
        .otherwise(F.col("lo"))
        .alias("lo"),
        F.col("first_ms"),
        F.col("mark"),
        F.col("no_identity"),
    )
    return rows.groupBy("kind", "rid", "r_queue", "r_address", "local_bucket").agg(
        F.sum("refs").alias("refs"),
        F.sum("hi").alias("hi"),
        F.sum("lo").alias("lo"),
        F.min("first_ms").alias("first_ms"),
        F.max("mark").alias("mark"),
        F.max("no_identity").alias("no_identity"),
    )


MAX_PUSHED_INTERVALS = 256


def candidates(records: DataFrame, buckets: list[tuple[str, int]], ids_per_range: int) -> DataFrame:
    """Pass 2 of one side: ``reference_rows`` of the (queue, local id bucket) pairs in ``buckets``: every
    send and ack of each (message id, queue) there. The buckets' message id intervals are pushed down
    to the reader, so a Parquet export only decodes the row groups that hold them."""
    spark = records.sparkSession
    pick = F.broadcast(spark.createDataFrame(sorted(set(buckets)), "queue string, local_bucket bigint"))
    intervals = id_intervals({b for _, b in buckets}, ids_per_range)
    if len(intervals) <= MAX_PUSHED_INTERVALS:
        mid = F.col("message_id")
        records = records.filter(
            reduce(operator.or_, [(mid >= a) & (mid < b) for a, b in intervals], F.lit(False))
        )
    bucket = F.floor(F.col("message_id") / F.lit(ids_per_range)).alias("local_bucket")
    return reference_rows(
        records, lambda df: df.select("*", bucket).join(pick, ["queue", "local_bucket"], "left_semi")
    )


def id_intervals(buckets: set[int], ids_per_range: int) -> list[tuple[int, int]]:
    """Half-open message id intervals covering the buckets, adjacent buckets merged."""
    out: list[tuple[int, int]] = []
    for b in sorted(buckets):
        if out and out[-1][1] == b * ids_per_range:
            out[-1] = (out[-1][0], (b + 1) * ids_per_range)
        else:
            out.append((b * ids_per_range, (b + 1) * ids_per_range))
    return out


def rid_of_state(state: DataFrame, ids_per_range: int) -> Column:
    b, q, a, i = (state[c] for c in ("identity_broker", "queue", "address", "identity_id"))
    return range_id(b, q, a, i, ids_per_range)
