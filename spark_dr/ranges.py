"""The data-diff step: checksums per identity range on each side; only the ranges that differ are joined.

A range is (identity broker, queue, address, identity id // ``ids_per_range``). Each reference's *token*
hashes its key, address, digest and status so that equal tokens on the two sides mean ``in_sync``:
live on both with one digest, or acked on both with one digest and exactly one side consuming (the
consumed flag enters the token inverted on the second side, so "consumed on DC1, mirrored ack on DC2"
matches but "consumed on both" does not); an orphan ack's token names its side and never matches.
A range whose count and token checksum agree on both sides is therefore all ``in_sync`` and is only
counted; every other range goes through the exact ``transforms.classify`` join. Anything the token
cannot vouch for (killed or expired on both, settled on one side only, ...) simply lands in a differing
range and is classified exactly. The checksum is the sum of the 64-bit token hashes in two 32-bit halves
(no overflow, order-free); a collision hiding a real difference has a probability of about 2^-64 per range.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .transforms import KEY

RANGE = ["r_broker", "r_queue", "r_address", "r_no_address", "r_bucket"]
DEFAULT_IDS_PER_RANGE = 4096


def _token(side: int) -> Column:
    status = F.col("status")
    matches_other = F.col("consumed") if side == 1 else ~F.col("consumed")
    mark = (
        F.when(status == "live", F.lit("L"))
        .when(status == "acked", F.when(matches_other, "A1").otherwise("A0"))
        .otherwise(F.lit(f"O{side}"))
    )
    return F.xxhash64(*KEY, "address", mark, "digest")


def with_range(state: DataFrame, ids_per_range: int) -> DataFrame:
    """Adds the range columns (null-free, so they can be joined on by name)."""
    return state.select(
        "*",
        F.coalesce(F.col("identity_broker"), F.lit("")).alias("r_broker"),
        F.coalesce(F.col("queue"), F.lit("")).alias("r_queue"),
        F.coalesce(F.col("address"), F.lit("")).alias("r_address"),
        F.col("address").isNull().alias("r_no_address"),
        F.expr(f"identity_id div {int(ids_per_range)}").alias("r_bucket"),
    )


def range_verdicts(state1: DataFrame, state2: DataFrame, ids_per_range: int) -> DataFrame:
    """One row per range of either side: ``equal`` and the number of references (``refs``) on side 1."""
    halves = []
    for side, state in ((1, state1), (2, state2)):
        h = _token(side)
        halves.append(
            with_range(state, ids_per_range).select(
                *RANGE,
                F.lit(side).alias("side"),
                F.shiftrightunsigned(h, 32).alias("hi"),
                h.bitwiseAND(F.lit(0xFFFFFFFF)).alias("lo"),
            )
        )
    tagged = halves[0].unionByName(halves[1])
    one, two = F.col("side") == 1, F.col("side") == 2
    sums = tagged.groupBy(*RANGE).agg(
        F.count_if(one).alias("refs"),
        F.count_if(two).alias("refs2"),
        F.sum(F.when(one, F.col("hi"))).alias("hi1"),
        F.sum(F.when(two, F.col("hi"))).alias("hi2"),
        F.sum(F.when(one, F.col("lo"))).alias("lo1"),
        F.sum(F.when(two, F.col("lo"))).alias("lo2"),
    )
    equal = (
        (F.col("refs") == F.col("refs2"))
        & F.col("hi1").eqNullSafe(F.col("hi2"))
        & F.col("lo1").eqNullSafe(F.col("lo2"))
    )
    return sums.select(*RANGE, "refs", equal.alias("equal"))


def in_sync_by_address(verdicts: DataFrame) -> DataFrame:
    """(address, count) of the references in equal ranges: all of them ``in_sync``."""
    address = F.when(~F.col("r_no_address"), F.col("r_address"))
    equal = verdicts.filter(F.col("equal"))
    return equal.groupBy(address.alias("address")).agg(F.sum("refs").alias("count"))


def in_ranges(state: DataFrame, verdicts: DataFrame, ids_per_range: int) -> DataFrame:
    """The references of ``state`` that lie in a differing range (``state``'s own columns only)."""
    differing = verdicts.filter(~F.col("equal")).select(*RANGE)
    picked = with_range(state, ids_per_range).join(F.broadcast(differing), RANGE, "left_semi")
    return picked.select(*state.columns)
