"""Pass 2 on the driver: the differing ranges classified in plain Python when their records are few.

After pass 1 the references left to classify usually sit in a few local id buckets of each side (a
few percent of the records, or less). Spark's cost for those is fixed, not per row: planning a dozen
joins, scheduling their stages, a cached read; on a 1 M-message pair that was more than the
classification of every reference. So when both sides are Parquet files the driver can read, and the
row groups whose message id statistics overlap those buckets hold at most ``MAX_ROWS`` rows, the
driver reads just those row groups with Arrow and classifies them here; otherwise (the journal data
source, or a large divergence) pass 2 stays a Spark job.

The rules are those of the Spark transforms, SQL's null semantics included: ``transforms.side_state``
with the ``ranges.in_ranges`` pick, ``transforms.classify``, ``transforms.unmirrored`` with the
``ranges.in_buckets`` pick, and ``reconcile._pass2_job``'s outputs. A range id is Spark's
``xxhash64`` (XXH64, seed 42, chained over the columns; a long hashed as its 8 little-endian bytes,
a null skipped), computed with the ``xxhash`` package. ``tests/spark_dr/test_pass2_local.py`` runs
both paths on the same inputs and requires the same answer.
"""

from __future__ import annotations

import math
import struct
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_core.vocabulary import AckReason
from mirror.wire import MIRROR_ADDRESS_PREFIX

from .history import UNHELD, SideHistory, missing_status, never_carried
from .ranges import PASS2_COLUMNS, id_intervals
from .rows import REMOVED_WITH_QUEUE

# Of both sides' candidate row groups; past it, pass 2 runs on Spark. Read a few row groups at a time,
# each batch cut and picked at once, the 10 M-per-side benchmark's 9.3 M candidate rows took 0.25 GB of
# Arrow memory at the peak; the references kept, as Python rows (450 000 there), about 0.6 GB.
MAX_ROWS = 12_000_000
READ_GROUPS = 16  # row groups read at once (32 768 rows each)
DICTIONARY_COLUMNS = ["node_id", "event", "identity_broker", "address", "queue"]
_SEED = 42
_LONG = struct.Struct("<q")

Row = dict[str, Any]


def available() -> bool:
    try:
        import xxhash  # noqa: F401
    except ImportError:
        return False
    return True


def parquet_files(path: Path) -> list[Path]:
    """The Parquet files of an export: the file itself, or a directory's part files."""
    path = Path(path)
    if path.is_file():
        return [path]
    return sorted(p for p in path.glob("*.parquet") if p.is_file())


def parquet_columns(path: Path) -> list[str]:
    """The column names of an export's first file (none when the driver sees no file)."""
    import pyarrow.parquet as pq

    files = parquet_files(path)
    return list(pq.read_schema(files[0]).names) if files else []


def footer_node_id(path: Path) -> str | None:
    """The node id of a side's Parquet export, from its footers' statistics (every row of a journal
    has the same node id); None when no row group has them."""
    import pyarrow.parquet as pq

    for f in parquet_files(path):
        meta = pq.ParquetFile(f).metadata
        column = meta.schema.names.index("node_id") if "node_id" in meta.schema.names else -1
        if column < 0:
            return None
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(column).statistics
            if stats is not None and stats.has_min_max:
                return str(stats.min)
    return None


class Candidates:
    """The row groups of one side whose message id statistics overlap the given local id buckets."""

    def __init__(self, path: Path, buckets: set[int], ids_per_range: int) -> None:
        import pyarrow.parquet as pq

        self.buckets, self.ids = buckets, ids_per_range
        intervals = id_intervals(buckets, ids_per_range)
        self.groups: list[tuple[Path, list[int]]] = []
        self.rows = 0
        for f in parquet_files(path):
            meta = pq.ParquetFile(f).metadata
            column = meta.schema.names.index("message_id")
            picked = []
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                stats = group.column(column).statistics
                if stats is not None and stats.has_min_max:
                    low, high = stats.min, stats.max
                    if not any(lo <= high and low < hi for lo, hi in intervals):
                        continue
                elif stats is not None and stats.null_count == group.num_rows:
                    continue  # no message id at all: in no bucket
                picked.append(g)
                self.rows += group.num_rows
            if picked:
                self.groups.append((f, picked))

    def read(self, rids: set[int], snf: set[tuple[str, int]]) -> tuple[list[Row], list[Row], set[int]]:
        """The references pass 2 looks at, as ``ranges.pass2_rows`` and the picks select them: client
        sends (one row per queue, ``queue`` naming it) and acks whose range is one of ``rids``, and the
        store-and-forward sends and acks of the ``snf`` (queue, local id bucket) pairs; and the local ids
        of the messages whose store-and-forward reference was paged on its own (``snf_copies``). Read a
        few row groups at a time, each batch cut to its wanted buckets and picked at once, in Arrow: the
        memory held is one batch and what is kept, and only what is kept becomes Python rows."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        ids = self.ids
        wanted = pa.array(sorted(self.buckets), pa.int64())
        known: dict[str, bool] = {}  # range key -> in ``rids``, across batches
        client: list[Row] = []
        store: list[Row] = []
        copies: set[int] = set()
        for f, groups in self.groups:
            # the repetitive strings (one node id, a few events, addresses, brokers) read as dictionaries
            # and decoded only for the rows kept
            parquet = pq.ParquetFile(f, read_dictionary=DICTIONARY_COLUMNS)
            for first in range(0, len(groups), READ_GROUPS):
                table = parquet.read_row_groups(groups[first : first + READ_GROUPS], columns=PASS2_COLUMNS)
                local = _bucket(table["message_id"], ids)
                kept = table.filter(pc.fill_null(pc.is_in(local, value_set=wanted), False))
                if kept.num_rows == 0:
                    continue
                plain = _plain(kept)
                copies.update(snf_copies(plain))
                refs = _references(plain)
                in_client, in_store = _picks(refs, rids, snf, ids, known)
                client += refs.filter(in_client).to_pylist()
                store += refs.filter(in_store).to_pylist()
        return client, store, copies


def snf_copies(table: Any) -> list[int]:
    """The local ids of the sends that name only a store-and-forward queue though their address is a
    client's: a message's store-and-forward reference paged on its own, beside the message's record
    (``transforms.snf_copies``)."""
    import pyarrow.compute as pc

    one = pc.and_(pc.equal(table["event"], "send"), pc.equal(pc.list_value_length(table["queues"]), 1))
    sends = table.filter(one)
    client_address = pc.invert(pc.fill_null(pc.starts_with(sends["address"], MIRROR_ADDRESS_PREFIX), False))
    only_snf = pc.fill_null(pc.starts_with(pc.list_flatten(sends["queues"]), MIRROR_ADDRESS_PREFIX), False)
    ids: list[int] = sends["message_id"].filter(pc.and_(client_address, only_snf)).to_pylist()
    return ids


def _references(table: Any) -> Any:
    """Each send split into one row per queue it names (``queue``), with ``queued``: whether it named a
    store-and-forward queue; and the acks (``queues`` dropped, ``queued`` null)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    sends = table.filter(pc.equal(table["event"], "send"))
    parents = pc.list_parent_indices(sends["queues"])
    queues = pc.list_flatten(sends["queues"])
    named = np.zeros(sends.num_rows, dtype=bool)  # per send: any of its queues a store-and-forward one
    internal = pc.fill_null(pc.starts_with(queues, MIRROR_ADDRESS_PREFIX), False)
    named[parents.filter(internal).to_numpy()] = True
    split = sends.take(parents).drop_columns(["queues", "queue"])
    split = split.append_column("queue", queues)
    split = split.append_column("queued", pa.array(named).take(parents))
    acks = table.filter(pc.equal(table["event"], "ack")).drop_columns(["queues"])
    acks = acks.append_column("queued", pa.nulls(acks.num_rows, pa.bool_()))
    return pa.concat_tables([split, acks.select(split.column_names)])


def _plain(table: Any) -> Any:
    """``table`` with its dictionary columns decoded."""
    import pyarrow as pa

    fields = [
        pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema
    ]
    return table.cast(pa.schema(fields))


def _picks(
    refs: Any, rids: set[int], snf: set[tuple[str, int]], ids: int, known: dict[str, bool] | None = None
) -> tuple[Any, Any]:
    """Which rows of ``refs`` are client references (or acks) in one of ``rids``, and which are
    store-and-forward ones in one of the ``snf`` pairs: two boolean arrays, computed in Arrow. A range
    id is hashed once per distinct (broker, queue, id bucket), found through an injective string key
    (``len(broker):broker:queue:bucket``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def text(values: Any) -> Any:
        return pc.cast(values, pa.string())

    queue, event = refs["queue"], refs["event"]
    internal_q = pc.fill_null(pc.starts_with(queue, MIRROR_ADDRESS_PREFIX), False)
    internal_a = pc.fill_null(pc.starts_with(refs["address"], MIRROR_ADDRESS_PREFIX), False)
    # transforms.message_refs drops a client queue's reference to a message on an internal address
    dropped = pc.and_(pc.and_(pc.equal(event, "send"), internal_a), pc.invert(internal_q))
    has_queue = pc.is_valid(queue)
    client = pc.and_(pc.and_(has_queue, pc.invert(internal_q)), pc.invert(dropped))
    store = pc.and_(has_queue, internal_q)

    local = text(_bucket(refs["message_id"], ids))
    wanted = pa.array(sorted(f"{q}:{b}" for q, b in snf), pa.string())
    store = pc.and_(
        store, pc.fill_null(pc.is_in(pc.binary_join_element_wise(queue, local, ":"), wanted), False)
    )

    # an orphan ack is keyed by its local name (transforms.identified_acks)
    broker, ident = refs["identity_broker"], refs["identity_id"]
    orphan = pc.and_(pc.equal(event, "ack"), pc.or_(pc.is_null(broker), pc.is_null(ident)))
    broker = pc.coalesce(pc.if_else(orphan, refs["node_id"], broker), "")
    ident = pc.if_else(orphan, refs["message_id"], ident)
    key = pc.binary_join_element_wise(
        text(pc.utf8_length(broker)),
        broker,
        pc.coalesce(queue, ""),
        pc.coalesce(text(_bucket(ident, ids)), ""),
        ":",
    )
    encoded = pc.dictionary_encode(key).combine_chunks()
    known = {} if known is None else known
    in_rids = []
    for k in encoded.dictionary.to_pylist():
        hit = known.get(k)
        if hit is None:
            length, rest = k.split(":", 1)
            b, rest = rest[: int(length)], rest[int(length) + 1 :]
            q, bucket = rest.rsplit(":", 1)
            hit = known[k] = _range_id_of_bucket(b, q, int(bucket) if bucket else None) in rids
        in_rids.append(hit)
    client = pc.and_(client, pc.take(pa.array(in_rids, pa.bool_()), encoded.indices))
    return client, store


def _bucket(values: Any, ids: int) -> Any:
    """An Arrow column of ids in buckets of ``ids``: Spark's ``floor(v / ids)`` (a double division)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if ids <= 1:
        return values
    return pc.cast(pc.floor(pc.divide(pc.cast(values, pa.float64()), float(ids))), pa.int64())


def range_id(broker: str | None, queue: str | None, ident: int | None, ids_per_range: int) -> int:
    """``ranges.range_id``: Spark's ``xxhash64(coalesce(broker, ''), coalesce(queue, ''), bucket)``,
    the bucket being ``floor(ident / ids_per_range)`` (of a double division, as Spark computes it)."""
    if ident is not None and ids_per_range > 1:
        ident = math.floor(float(ident) / ids_per_range)
    return _range_id_of_bucket(broker, queue, ident)


def _range_id_of_bucket(broker: str | None, queue: str | None, bucket: int | None) -> int:
    from xxhash import xxh64_intdigest

    h = xxh64_intdigest((broker or "").encode(), _SEED)
    h = xxh64_intdigest((queue or "").encode(), h)
    if bucket is not None:  # Spark's xxhash64 skips a null
        h = xxh64_intdigest(_LONG.pack(bucket), h)
    return h - (1 << 64) if h >= 1 << 63 else h


def _internal(name: str | None) -> bool:
    return name is not None and name.startswith(MIRROR_ADDRESS_PREFIX)


# ------------------------------------------------------------------------------- one side


def side_state(refs: list[Row], copies: set[int] | frozenset[int] = frozenset()) -> list[Row]:
    """``transforms.side_state`` of one side's client references (sends split per queue, and acks);
    ``copies``: the local ids of the messages whose store-and-forward reference was paged on its own."""
    sends = [r for r in refs if r["event"] == "send"]
    acks = []
    for r in refs:
        if r["event"] != "ack":
            continue
        known = r["identity_broker"] is not None and r["identity_id"] is not None
        acks.append(
            {
                "identity_broker": r["identity_broker"] if known else r["node_id"],
                "identity_id": r["identity_id"] if known else r["message_id"],
                "queue": r["queue"],
                "ack_address": r["address"],
                "ack_reason": r["ack_reason"],
                "ack_via_mirror": r["via_mirror"],
                "acked_ms": r["timestamp_ms"],
                "ack_message_id": r["message_id"],
            }
        )
    out = []
    for ref, settled in full_outer(sends, acks, _key):
        reason = settled["ack_reason"] if settled else None
        via = settled["ack_via_mirror"] if settled else None
        status = _status(ref is not None, reason)
        any_ = ref or settled
        assert any_ is not None
        out.append(
            {
                "identity_broker": any_["identity_broker"],
                "identity_id": any_["identity_id"],
                "queue": any_["queue"],
                "address": _first(ref and ref["address"], settled and settled["ack_address"]),
                "status": status,
                "consumed": reason == AckReason.NORMAL and not via,
                "ack_reason": reason,
                "ack_via_mirror": via,
                "digest": ref and ref["digest64"],
                "size": ref and ref["size"],
                "sent_ms": ref and ref["timestamp_ms"],
                "acked_ms": settled and settled["acked_ms"],
                "segment": ref and ref["segment"],
                "offset": ref and ref["offset"],
                "message_id": _first(ref and ref["message_id"], settled and settled["ack_message_id"]),
                "repaired": ref and ref["repaired"],
                "send_via_mirror": ref and ref["via_mirror"],
                "queued": ref and (bool(ref["queued"]) or ref["message_id"] in copies),
            }
        )
    return out


def _status(sent: bool, reason: int | None) -> str:
    if not sent:
        return "orphan_ack"
    if reason is None:
        return "live"
    return "removed" if reason == REMOVED_WITH_QUEUE else "acked"


def unmirrored(refs: list[Row]) -> dict[str, Any]:
    """``transforms.unmirrored`` of one side's store-and-forward references, as ``reconcile._collect``
    keeps it: kind -> count and oldest time of the references no ack names."""
    acked = {(r["message_id"], r["queue"]) for r in refs if r["event"] == "ack"}
    gap: dict[str, dict[str, Any]] = {}
    for r in refs:
        mid = r["message_id"]
        if r["event"] != "send" or (mid is not None and (mid, r["queue"]) in acked):
            continue
        g = gap.setdefault("event" if _internal(r["address"]) else "message", {"count": 0, "oldest_ms": None})
        g["count"] += 1
        g["oldest_ms"] = _least(g["oldest_ms"], r["timestamp_ms"])
    return gap


# ------------------------------------------------------------------------------- both sides


def classify(
    dc1: list[Row],
    dc2: list[Row],
    *,
    node1: str,
    node2: str,
    marks1: dict[str, int],
    marks2: dict[str, int],
    names: tuple[str, str],
    history: tuple[SideHistory, SideHistory] = (SideHistory(), SideHistory()),
    in_sync: Counter[str | None] | None = None,
) -> list[Row]:
    """``transforms.classify`` of two ``side_state`` results. With ``in_sync``, the references in sync
    are only counted there, per address, not returned."""
    out = []
    for a, b in full_outer(dc1, dc2, _key):
        any_ = a or b
        assert any_ is not None
        broker, ident, queue = any_["identity_broker"], any_["identity_id"], any_["queue"]
        s1 = a["status"] if a else _missing(history[0], node1, marks1, broker, ident, queue, b, history[1])
        s2 = b["status"] if b else _missing(history[1], node2, marks2, broker, ident, queue, a, history[0])
        cls, side = _class(a, b, s1, s2, names)
        address = _first(a and a["address"], b and b["address"])
        if in_sync is not None and cls == "in_sync":
            in_sync[address] += 1
            continue
        times = [r[c] for r in (a, b) if r for c in ("sent_ms", "acked_ms") if r[c] is not None]
        row = {
            "identity_broker": broker,
            "identity_id": ident,
            "queue": any_["queue"],
            "address": address,
            "class": cls,
            "side": side,
            "dc1_status": s1,
            "dc2_status": s2,
            "first_ms": min(times) if times else None,
            "last_ms": max(times) if times else None,
        }
        for prefix, r in (("dc1", a), ("dc2", b)):
            for c in _CARRIED:
                row[f"{prefix}_{c}"] = r[c] if r else None
        out.append(row)
    return out


_CARRIED = ["consumed", "ack_reason", "digest", "size", "segment", "offset", "message_id", "repaired",
            "sent_ms", "acked_ms"]  # fmt: skip


def _missing(
    history: SideHistory,
    node: str,
    marks: dict[str, int],
    broker: str | None,
    ident: int | None,
    queue: str | None,
    other: Row | None,
    other_history: SideHistory,
) -> str:
    """A side with no record of the reference (``history.missing_status``); ``other``: the other
    side's state of it."""
    mark = marks.get(broker) if broker is not None else None
    carried = other is not None and never_carried(
        other_history.trimmed(other["segment"]), other["send_via_mirror"], other["queued"]
    )
    return missing_status(history, node, mark, broker, ident, queue, carried)


def _class(a: Row | None, b: Row | None, s1: str, s2: str, names: tuple[str, str]) -> tuple[str, str | None]:
    holds = ("live", "acked")
    settled = ("acked", "gone")
    if s1 == "orphan_ack" or s2 == "orphan_ack":
        return "orphan_ack", names[0] if s1 == "orphan_ack" else names[1]
    digests = (a and a["digest"], b and b["digest"])
    if s1 in holds and s2 in holds and None not in digests and digests[0] != digests[1]:
        return "payload_differs", None
    if s1 == "acked" and s2 == "acked" and a and b and a["consumed"] and b["consumed"]:
        return "consumed_both", None
    if (s1 == "live" and s2 in settled) or (s2 == "live" and s1 in settled):
        return "acked_one_side", names[1] if s1 == "live" else names[0]
    if (s1 == "live" and s2 == "absent") or (s2 == "live" and s1 == "absent"):
        return "one_side_only", names[0] if s1 == "live" else names[1]
    if (s1 == "live" and s2 in UNHELD) or (s2 == "live" and s1 in UNHELD):
        return "not_mirrored", names[0] if s1 == "live" else names[1]
    return "in_sync", None


def pass2(
    sides: list[tuple[list[Row], list[Row], set[int]]],
    *,
    nodes: list[str],
    marks: list[dict[str, int]],
    names: tuple[str, str],
    plan_limit: int,
    history: list[SideHistory] | None = None,
) -> tuple[list[Row], list[Row], list[dict[str, Any]]]:
    """What ``reconcile._collect`` returns for pass 2's Spark job, from each side's ``Candidates.read``:
    the diverged references (at most ``plan_limit + 1``), the in-sync counts per address, each side's
    recovery-point gap."""
    states = [side_state(client, copies) for client, _, copies in sides]
    in_sync: Counter[str | None] = Counter()
    both = (history[0], history[1]) if history else (SideHistory(), SideHistory())
    diverged = classify(
        *states,
        node1=nodes[0],
        node2=nodes[1],
        marks1=marks[0],
        marks2=marks[1],
        names=names,
        history=both,
        in_sync=in_sync,
    )[: plan_limit + 1]
    gap = [unmirrored(store) for _, store, _ in sides]
    return diverged, [{"address": a, "count": n} for a, n in in_sync.items()], gap


# ------------------------------------------------------------------------------- helpers


def _key(r: Row) -> tuple[Any, Any, Any]:
    return r["identity_broker"], r["identity_id"], r["queue"]


def full_outer(
    left: list[Row], right: list[Row], key: Callable[[Row], tuple[Any, ...]]
) -> list[tuple[Row | None, Row | None]]:
    """SQL's full outer equi-join: every matching pair, and each unmatched row alone; a key with a null
    part matches nothing."""
    index: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for n, r in enumerate(right):
        k = key(r)
        if None not in k:
            index[k].append(n)
    matched = [False] * len(right)
    out: list[tuple[Row | None, Row | None]] = []
    for lrow in left:
        k = key(lrow)
        hits = index.get(k) if None not in k else None
        if not hits:
            out.append((lrow, None))
            continue
        for n in hits:
            matched[n] = True
            out.append((lrow, right[n]))
    out.extend((None, r) for r, m in zip(right, matched, strict=True) if not m)
    return out


def _first(a: Any, b: Any) -> Any:
    """SQL's coalesce."""
    return a if a is not None else b


def _least(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)
