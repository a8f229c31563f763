"""Reconciliation as plain ``DataFrame -> DataFrame`` functions over journal rows (``rows.COLUMNS``).

Granularity: one message reference, i.e. (identity broker, identity id, queue). A multicast message
routed to three queues is three references, each consumed independently on each side.

Status of a reference on one side (the last three when the side has no record of it:
``history.missing_status``):
  live        the side holds it and it is not acknowledged;
  acked       the side holds it and acknowledged it (``consumed``: by a local client, reason normal);
  orphan_ack  the side has an acknowledgement for a message it has no live record of at that point of
              its journal (the row carries no identity, see ``rows.journal_rows``);
  gone        no record, but the side had it and may have dropped the record (compaction drops settled
              messages, a consumed page is deleted): it produced the message, or its mirror dedup mark
              for the origin covers the id. "Gone" means "settled, then dropped";
  removed     the side held it until its queue was removed (a removal the mirror does not carry with
              ``queue-removal="false"``): read as ``unmirrored``;
  unmirrored  no record, and the mirror would never have brought it: the other side's record is one the
              mirror never carried (a filtered address, an expiry copy, ...), or this side does not
              hold the queue (never had it, or removed it);
  absent      no record and no evidence the side ever received it.

Classes (first match wins): orphan_ack; payload_differs (both hold it, digests differ); consumed_both
(acked by local clients on both sides: delivered twice); acked_one_side (live on one side, acked or
gone on the other); one_side_only (live on one side, absent on the other); not_mirrored (live on one
side, unmirrored or removed on the other: outside what the mirror carries, not a divergence);
in_sync (everything else: live on both with equal digests, settled on both with at most one
consumption, or settled on one side and never received by the other).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from broker_core.vocabulary import AckReason
from mirror.wire import MIRROR_ADDRESS_PREFIX

from .history import UNHELD, SideHistory
from .rows import REMOVED_WITH_QUEUE

Pick = Callable[[DataFrame], DataFrame]

KEY = ["identity_broker", "identity_id", "queue"]
CLASSES = ["in_sync", "one_side_only", "acked_one_side", "consumed_both", "payload_differs", "orphan_ack",
           "not_mirrored"]  # fmt: skip


def internal(col: Column) -> Column:
    return col.startswith(MIRROR_ADDRESS_PREFIX)


_SEND_COLUMNS = [
    "identity_broker",
    "identity_id",
    "address",
    "digest64",  # compared as the digest's first 8 bytes, named "digest"
    "size",
    "segment",
    "offset",
    "repaired",
]


def message_refs(records: DataFrame) -> DataFrame:
    """One row per (message, queue) reference of client messages; mirror internals excluded."""
    return all_send_refs(records).filter(~internal(F.col("address")) & ~internal(F.col("queue")))


def all_send_refs(records: DataFrame) -> DataFrame:
    """Every (send, queue) reference, store-and-forward queues included; ``queued``: the send named a
    store-and-forward queue (as a column of ``records`` when their ``queues`` were cut to one queue per
    row: ``ranges.pass2_rows``)."""
    sends = records.filter(F.col("event") == "send")
    queued = F.col("queued") if "queued" in records.columns else named_store_and_forward()
    return sends.select(
        "node_id",
        "message_id",
        *_SEND_COLUMNS[:3],
        F.explode("queues").alias("queue"),
        F.col("digest64").alias("digest"),
        *_SEND_COLUMNS[4:],
        F.col("timestamp_ms").alias("sent_ms"),
        F.col("via_mirror").alias("send_via_mirror"),
        F.lit(True).alias("sent"),
        queued.alias("queued"),
    ).filter(F.col("queue").isNotNull())


def named_store_and_forward() -> Column:
    """Whether a send's ``queues`` name a store-and-forward queue: it was queued for the mirror."""
    return F.coalesce(F.exists("queues", lambda q: internal(q)), F.lit(False))


def snf_copy() -> Column:
    """A send naming only a store-and-forward queue, on a client's address: a message's reference
    for the mirror, paged on its own (beside the message's own record, with the same local id)."""
    return (
        (F.col("event") == "send")
        & (F.size("queues") == 1)
        & F.coalesce(internal(F.col("queues")[0]), F.lit(False))
        & ~F.coalesce(internal(F.col("address")), F.lit(False))
    )


def snf_copies(records: DataFrame) -> DataFrame:
    """(message_id, snf_copy): the local ids of the messages with a ``snf_copy`` record."""
    return records.filter(snf_copy()).select("message_id", F.lit(True).alias("snf_copy")).distinct()


def _ack_columns() -> list[str | Column]:
    """What an ack row contributes to a reference besides its message id (and identity)."""
    return [
        "queue",
        F.col("address").alias("ack_address"),
        "ack_reason",
        F.col("via_mirror").alias("ack_via_mirror"),
        F.col("timestamp_ms").alias("acked_ms"),
        F.lit(True).alias("acked"),
    ]


def all_acks(records: DataFrame) -> DataFrame:
    acks = records.filter((F.col("event") == "ack") & F.col("queue").isNotNull())
    return acks.select(F.col("node_id").alias("ack_node_id"), "message_id", *_ack_columns())


def identified_acks(records: DataFrame) -> DataFrame:
    """Client acks keyed by the identity their row carries; an orphan (none) by its local name."""
    acks = records.filter((F.col("event") == "ack") & F.col("queue").isNotNull() & ~internal(F.col("queue")))
    known = F.col("identity_broker").isNotNull() & F.col("identity_id").isNotNull()
    return acks.select(
        F.when(known, F.col("identity_broker")).otherwise(F.col("node_id")).alias("identity_broker"),
        F.when(known, F.col("identity_id")).otherwise(F.col("message_id")).alias("identity_id"),
        F.col("node_id").alias("ack_node_id"),
        F.col("message_id").alias("ack_message_id"),
        *_ack_columns(),
    )


def side_state(records: DataFrame, pick: Pick | None = None) -> DataFrame:
    """Per reference on one side: status (live / acked / orphan_ack), consumption, digest, position.

    Sends and acks are joined on the identity the rows carry (``rows.journal_rows`` resolves an ack's
    from the live message it settles): an ack with no identity is an orphan. ``pick``, applied to both
    before the join, selects references (by identity and queue)."""
    refs, acks = message_refs(records), identified_acks(records)
    if pick is not None:
        refs, acks = pick(refs), pick(acks)
    refs = refs.join(snf_copies(records), "message_id", "left")
    joined = refs.join(acks, KEY, "full_outer")
    has_add = F.col("sent").isNotNull()
    reason = F.col("ack_reason")
    status = (
        F.when(~has_add, "orphan_ack")
        .when(reason.isNull(), "live")
        .when(reason == REMOVED_WITH_QUEUE, "removed")
        .otherwise("acked")
    )
    consumed = (F.col("ack_reason") == AckReason.NORMAL) & ~F.coalesce(F.col("ack_via_mirror"), F.lit(False))
    return joined.select(
        *KEY,
        F.coalesce("address", "ack_address").alias("address"),
        status.alias("status"),
        F.coalesce(consumed, F.lit(False)).alias("consumed"),
        "ack_reason",
        "ack_via_mirror",
        "digest",
        "size",
        "sent_ms",
        "acked_ms",
        "segment",
        "offset",
        F.coalesce("message_id", "ack_message_id").alias("message_id"),
        "repaired",
        "send_via_mirror",
        F.when(has_add, F.col("queued") | F.coalesce(F.col("snf_copy"), F.lit(False))).alias("queued"),
    )


DEDUP = "mirror.dedup."


def dedup_marks(records: DataFrame) -> DataFrame:
    """(origin, mark): the highest message id this side's mirror target accepted from each origin."""
    marks = records.filter((F.col("event") == "meta") & F.col("meta_key").startswith(DEDUP))
    return marks.groupBy(_dedup_origin().alias("origin")).agg(
        F.max(F.col("meta_value").try_cast("bigint")).alias("mark")
    )


def _dedup_origin() -> Column:
    return F.substring(F.col("meta_key"), len(DEDUP) + 1, 1000)


def _marks_map(marks: dict[str, int]) -> Column:
    if not marks:
        return F.create_map().cast("map<string,bigint>")
    return F.create_map(*[x for k, v in marks.items() for x in (F.lit(k), F.lit(v))])


def _side_status(
    prefix: str,
    node_id: str,
    marks: dict[str, int],
    history: SideHistory,
    other: str,
    other_history: SideHistory,
) -> Column:
    """The side's status: as it holds the reference, else ``history.missing_status`` (SQL's nulls
    read as ``pass2_local`` reads Python's Nones)."""
    held = F.col(f"{prefix}status")
    b, i, q = F.col("identity_broker"), F.col("identity_id"), F.col("queue")
    mark = F.try_element_at(_marks_map(marks), b)
    had_it = F.coalesce(b == node_id, F.lit(False)) | F.coalesce(i <= mark, F.lit(False))
    never_had_queue = F.lit(False)
    lost = F.lit(True)
    if history.known:
        never_had_queue = q.isNotNull() & (
            ~q.isin(*sorted(history.queues)) if history.queues else F.lit(True)
        )
        lost = F.lit(False)
        horizons = _marks_map({f"{o}|{qu}": h for (o, qu), h in history.lost.items()})
        broker = F.coalesce(b, F.lit(""))
        for key in (F.concat(broker, F.lit("|")), F.concat(broker, F.lit("|"), F.coalesce(q, F.lit(""))),
                    F.lit("|")):  # fmt: skip
            lost = lost | F.coalesce(i <= F.try_element_at(horizons, key), F.lit(False))
    carried = (
        ~_trimmed(F.col(f"{other}segment"), other_history)
        & F.coalesce(F.col(f"{other}send_via_mirror") == F.lit(False), F.lit(False))
        & F.coalesce(F.col(f"{other}queued") == F.lit(False), F.lit(False))
    )
    missing = (
        F.when(carried | never_had_queue, "unmirrored")
        .when(~lost, "absent")
        .when(had_it, "gone")
        .otherwise("absent")
    )
    return F.coalesce(held, missing)


def _trimmed(segment: Column, history: SideHistory) -> Column:
    """``SideHistory.trimmed`` of a record's segment."""
    if not history.known:
        return F.lit(True)
    if history.compacted is None:
        return segment.isNull()
    first, last = history.compacted
    return segment.isNull() | segment.between(first, last)


def classify(
    dc1: DataFrame,
    dc2: DataFrame,
    *,
    node1: str,
    node2: str,
    marks1: dict[str, int] | None = None,
    marks2: dict[str, int] | None = None,
    names: tuple[str, str] = ("DC1", "DC2"),
    history: tuple[SideHistory, SideHistory] = (SideHistory(), SideHistory()),
) -> DataFrame:
    """Full outer join of two ``side_state`` frames on the identity; one row per reference with its class."""
    a = dc1.select(*KEY, *[F.col(c).alias(f"a_{c}") for c in dc1.columns if c not in KEY])
    b = dc2.select(*KEY, *[F.col(c).alias(f"b_{c}") for c in dc2.columns if c not in KEY])
    j = a.join(b, KEY, "full_outer")
    s1, s2 = F.col("s1"), F.col("s2")
    h1, h2 = history
    j = j.withColumn("s1", _side_status("a_", node1, marks1 or {}, h1, "b_", h2)).withColumn(
        "s2", _side_status("b_", node2, marks2 or {}, h2, "a_", h1)
    )
    holds1, holds2 = s1.isin("live", "acked"), s2.isin("live", "acked")
    settled1, settled2 = s1.isin("acked", "gone"), s2.isin("acked", "gone")
    n1, n2 = F.lit(names[0]), F.lit(names[1])
    cls = (
        F.when((s1 == "orphan_ack") | (s2 == "orphan_ack"), "orphan_ack")
        .when(holds1 & holds2 & (F.col("a_digest") != F.col("b_digest")), "payload_differs")
        .when((s1 == "acked") & (s2 == "acked") & F.col("a_consumed") & F.col("b_consumed"), "consumed_both")
        .when(((s1 == "live") & settled2) | ((s2 == "live") & settled1), "acked_one_side")
        .when(((s1 == "live") & (s2 == "absent")) | ((s2 == "live") & (s1 == "absent")), "one_side_only")
        .when(((s1 == "live") & s2.isin(*UNHELD)) | ((s2 == "live") & s1.isin(*UNHELD)), "not_mirrored")
        .otherwise("in_sync")
    )
    side = (
        F.when(cls.isin("one_side_only", "not_mirrored"), F.when(s1 == "live", n1).otherwise(n2))
        .when(cls == "acked_one_side", F.when(s1 == "live", n2).otherwise(n1))
        .when(cls == "orphan_ack", F.when(F.col("s1") == "orphan_ack", n1).otherwise(n2))
    )
    times = [F.col(c) for c in ("a_sent_ms", "a_acked_ms", "b_sent_ms", "b_acked_ms")]
    return j.select(
        *KEY,
        F.coalesce("a_address", "b_address").alias("address"),
        cls.alias("class"),
        side.alias("side"),
        s1.alias("dc1_status"),
        s2.alias("dc2_status"),
        F.least(*times).alias("first_ms"),
        F.greatest(*times).alias("last_ms"),
        *[F.col(f"{p}_{c}").alias(f"{d}_{c}") for p, d in (("a", "dc1"), ("b", "dc2")) for c in _CARRIED],
    )


_CARRIED = ["consumed", "ack_reason", "digest", "size", "segment", "offset", "message_id", "repaired",
            "sent_ms", "acked_ms"]  # fmt: skip


def summarize(classified: DataFrame) -> DataFrame:
    """Counts per address, class and side."""
    return classified.groupBy("address", "class", "side").count()


def unmirrored(records: DataFrame, pick: Pick | None = None) -> DataFrame:
    """Recovery-point gap of one side: records still referenced by a store-and-forward queue (a
    reference with no ack naming its local message id and queue), counted with the oldest one's time.

    ``kind`` is ``message`` for a client message not yet mirrored, ``event`` for a control event (an
    acknowledgement, a queue or address change) not yet mirrored. ``pick``, applied to the sends and
    the acks alike, selects the references to look at."""
    snf = internal(F.col("queue"))
    refs, acks = all_send_refs(records).filter(snf), all_acks(records).filter(snf)
    if pick is not None:
        refs, acks = pick(refs), pick(acks)
    live = refs.join(acks.select("message_id", "queue"), ["message_id", "queue"], "left_anti")
    kind = F.when(internal(F.col("address")), "event").otherwise("message")
    return live.groupBy(kind.alias("kind")).agg(
        F.count(F.lit(1)).alias("count"), F.min("sent_ms").alias("oldest_ms")
    )
