"""Pass 2 on the driver: the differing ranges classified with Arrow when their records are few.

After pass 1 the references left to classify usually sit in a few local id buckets of each side (a
few percent of the records, or less). Spark's cost for those is fixed, not per row: planning a dozen
joins, scheduling their stages, a cached read; on a 1 M-message pair that was more than the
classification of every reference. So when both sides are Parquet files the driver can read, and the
row groups whose message id statistics overlap those buckets hold at most ``MAX_ROWS`` rows, the
driver reads just those row groups with Arrow and classifies them here, in Arrow's compute functions
and hash joins; otherwise (the journal data source, or a large divergence) pass 2 stays a Spark job.

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
from collections import Counter
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

        self.path, self.buckets, self.ids = path, buckets, ids_per_range
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

    def read(self, rids: set[int], snf: set[tuple[str, int]]) -> tuple[Any, list[Row], set[int]]:
        """The references pass 2 looks at, as ``ranges.pass2_rows`` and the picks select them: client
        sends (one row per queue, ``queue`` naming it) and acks whose range is one of ``rids``, as one
        Arrow table; the store-and-forward sends and acks of the ``snf`` (queue, local id bucket) pairs,
        as rows; and the local ids of the messages whose store-and-forward reference was paged on its
        own (``snf_copies``). Read a few row groups at a time, each batch cut to its wanted buckets and
        picked at once, in Arrow: the memory held is one batch and what is kept."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        ids = self.ids
        wanted = pa.array(sorted(self.buckets), pa.int64())
        known: dict[tuple[Any, ...], bool] = {}  # (broker, queue, id bucket) -> in ``rids``
        client: list[Any] = []
        store: list[Row] = []
        copies: set[int] = set()
        for f, groups in self.groups:
            # the repetitive strings (one node id, a few events, addresses, brokers) read as dictionaries
            # and decoded only for the rows kept
            parquet = pq.ParquetFile(f, read_dictionary=DICTIONARY_COLUMNS)
            for at in range(0, len(groups), READ_GROUPS):
                table = parquet.read_row_groups(groups[at : at + READ_GROUPS], columns=PASS2_COLUMNS)
                local = _bucket(table["message_id"], ids)
                kept = table.filter(pc.fill_null(pc.is_in(local, value_set=wanted), False))
                if kept.num_rows == 0:
                    continue
                plain = _plain(kept)
                copies.update(snf_copies(plain))
                in_client, in_store = _picked(plain, rids, snf, ids, known)
                client.append(in_client)
                store += in_store.to_pylist()
        if not client:  # nothing kept: no reference, in the columns of one
            some = self.groups[0][0] if self.groups else parquet_files(self.path)[0]
            empty = pq.ParquetFile(some).schema_arrow.empty_table().select(PASS2_COLUMNS)
            client.append(_picked(empty, rids, snf, ids, known)[0])
        return pa.concat_tables(client), store, copies


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


def _picked(
    table: Any, rids: set[int], snf: set[tuple[str, int]], ids: int, known: dict[tuple[Any, ...], bool]
) -> tuple[Any, Any]:
    """The references of ``table`` that pass 2 looks at (``_picks``): the client ones and the
    store-and-forward ones. A send is split into one row per queue it names (``queue``), with
    ``queued``: whether it named a store-and-forward queue; an ack keeps its row (``queued`` null).
    Picked on a thin table of the columns the picks read; only the rows kept are assembled whole."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    sends = table.filter(pc.equal(table["event"], "send"))
    acks = table.filter(pc.equal(table["event"], "ack")).drop_columns(["queues"])
    parents = pc.list_parent_indices(sends["queues"])
    queues = pc.list_flatten(sends["queues"])
    named = np.zeros(sends.num_rows, dtype=bool)  # per send: any of its queues a store-and-forward one
    internal = pc.fill_null(pc.starts_with(queues, MIRROR_ADDRESS_PREFIX), False)
    named[parents.filter(internal).to_numpy()] = True
    thin = ["event", "node_id", "message_id", "identity_broker", "identity_id", "address"]
    refs = pa.concat_tables(
        [sends.select(thin).take(parents).append_column("queue", queues), acks.select([*thin, "queue"])]
    )
    split = len(queues)  # refs: the split sends, then the acks

    def assemble(mask: Any) -> Any:
        on_send = mask.slice(0, split)
        kept = parents.filter(on_send)
        out = sends.take(kept).drop_columns(["queues", "queue"])
        out = out.append_column("queue", queues.filter(on_send))
        out = out.append_column("queued", pa.array(named).take(kept))
        settled = acks.filter(mask.slice(split))
        settled = settled.append_column("queued", pa.nulls(settled.num_rows, pa.bool_()))
        return pa.concat_tables([out, settled.select(out.column_names)])

    in_client, in_store = _picks(refs, rids, snf, ids, known)
    return assemble(in_client), assemble(in_store)


def _plain(table: Any) -> Any:
    """``table`` with its dictionary columns decoded."""
    import pyarrow as pa

    fields = [
        pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema
    ]
    return table.cast(pa.schema(fields))


def _picks(
    refs: Any, rids: set[int], snf: set[tuple[str, int]], ids: int, known: dict[tuple[Any, ...], bool]
) -> tuple[Any, Any]:
    """Which rows of ``refs`` are client references (or acks) in one of ``rids``, and which are
    store-and-forward ones in one of the ``snf`` pairs: two boolean arrays, computed in Arrow. A range
    id is hashed once per distinct (broker, queue, id bucket) (``known``, across batches)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    queue, event = refs["queue"], refs["event"]
    internal_q = pc.fill_null(pc.starts_with(queue, MIRROR_ADDRESS_PREFIX), False)
    internal_a = pc.fill_null(pc.starts_with(refs["address"], MIRROR_ADDRESS_PREFIX), False)
    # transforms.message_refs drops a client queue's reference to a message on an internal address
    dropped = pc.and_(pc.and_(pc.equal(event, "send"), internal_a), pc.invert(internal_q))
    has_queue = pc.is_valid(queue)
    client = pc.and_(pc.and_(has_queue, pc.invert(internal_q)), pc.invert(dropped))
    store = pc.and_(has_queue, internal_q)

    by_queue: dict[str, list[int]] = {}
    for name, b in snf:
        by_queue.setdefault(name, []).append(b)
    local = _bucket(refs["message_id"], ids)
    pairs = pa.repeat(False, refs.num_rows)
    for name, buckets in by_queue.items():
        here = pc.and_(pc.equal(queue, name), pc.is_in(local, value_set=pa.array(buckets, pa.int64())))
        pairs = pc.or_(pairs, pc.fill_null(here, False))
    store = pc.and_(store, pairs)

    # an orphan ack is keyed by its local name (transforms.identified_acks)
    broker, ident = refs["identity_broker"], refs["identity_id"]
    orphan = pc.and_(pc.equal(event, "ack"), pc.or_(pc.is_null(broker), pc.is_null(ident)))
    bucket = _bucket(pc.if_else(orphan, refs["message_id"], ident), ids)
    cells = pa.table({
        "b": pc.coalesce(pc.if_else(orphan, refs["node_id"], broker), ""), "q": pc.coalesce(queue, ""),
        "k": pc.fill_null(bucket, 0), "has": pc.cast(pc.is_valid(bucket), pa.int8()),
        "n": pa.array(np.arange(refs.num_rows, dtype=np.int64)),
    }).filter(client)  # fmt: skip
    ranges = cells.group_by(["b", "q", "k", "has"], use_threads=False).aggregate([])
    hits = []
    for b, q, k, has in zip(*(ranges[c].to_pylist() for c in ("b", "q", "k", "has")), strict=True):
        hit = known.get((b, q, k, has))
        if hit is None:
            hit = known[b, q, k, has] = _range_id_of_bucket(b, q, k if has else None) in rids
        hits.append(hit)
    wanted = ranges.filter(pa.array(hits, pa.bool_()))
    rows = cells.join(wanted, ["b", "q", "k", "has"], join_type="left semi")
    in_rids = np.zeros(refs.num_rows, dtype=bool)
    in_rids[rows["n"].to_numpy()] = True
    return pc.and_(client, pa.array(in_rids)), store


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
#
# Both sides' states and their comparison are Arrow tables and joins (Acero's hash join: a key with a
# null part matches nothing, as in SQL); only the statuses of references a side has no record of are
# decided per row in Python (``history.missing_status``), and only the diverged references become
# Python rows.


KEY = ["identity_broker", "identity_id", "queue"]  # a reference: its identity and queue


def side_state(client: Any, copies: set[int] | frozenset[int] = frozenset()) -> Any:
    """``transforms.side_state`` of one side's client references (``Candidates.read``: sends split per
    queue, and acks), an Arrow table keyed by ``KEY``; ``copies``: the local ids of the messages whose
    store-and-forward reference was paged on its own."""
    import pyarrow as pa
    import pyarrow.compute as pc

    event = client["event"]
    sends = client.filter(pc.fill_null(pc.equal(event, "send"), False))
    acks = client.filter(pc.fill_null(pc.equal(event, "ack"), False))
    # an orphan ack (no identity) is keyed by its local name (transforms.identified_acks)
    broker, ident = acks["identity_broker"], acks["identity_id"]
    orphan = pc.or_(pc.is_null(broker), pc.is_null(ident))
    queued = pc.or_(
        pc.fill_null(sends["queued"], False),
        pc.is_in(sends["message_id"], value_set=pa.array(sorted(copies), pa.int64())),
    )
    refs = pa.table({
        **{k: sends[k] for k in KEY}, "send_address": sends["address"], "digest": sends["digest64"],
        "size": sends["size"], "sent_ms": sends["timestamp_ms"], "segment": sends["segment"],
        "offset": sends["offset"], "send_message_id": sends["message_id"], "repaired": sends["repaired"],
        "send_via_mirror": sends["via_mirror"], "queued": queued,
        "sent": pa.repeat(True, sends.num_rows),
    })  # fmt: skip
    settled = pa.table({
        "identity_broker": pc.if_else(orphan, acks["node_id"], broker),
        "identity_id": pc.if_else(orphan, acks["message_id"], ident), "queue": acks["queue"],
        "ack_address": acks["address"], "ack_reason": acks["ack_reason"],
        "ack_via_mirror": acks["via_mirror"], "acked_ms": acks["timestamp_ms"],
        "ack_message_id": acks["message_id"],
    })  # fmt: skip
    state = refs.join(settled, KEY, join_type="full outer")
    sent, reason = pc.fill_null(state["sent"], False), state["ack_reason"]
    status = pc.if_else(
        sent,
        pc.if_else(
            pc.is_null(reason), "live", pc.if_else(pc.equal(reason, REMOVED_WITH_QUEUE), "removed", "acked")
        ),
        "orphan_ack",
    )
    consumed = pc.and_(
        pc.fill_null(pc.equal(reason, AckReason.NORMAL), False),
        pc.invert(pc.fill_null(state["ack_via_mirror"], False)),
    )
    return pa.table({
        **{k: state[k] for k in KEY}, "address": pc.coalesce(state["send_address"], state["ack_address"]),
        "status": status, "consumed": consumed, "ack_reason": reason, "digest": state["digest"],
        "size": state["size"], "sent_ms": state["sent_ms"], "acked_ms": state["acked_ms"],
        "segment": state["segment"], "offset": state["offset"],
        "message_id": pc.coalesce(state["send_message_id"], state["ack_message_id"]),
        "repaired": state["repaired"], "send_via_mirror": state["send_via_mirror"],
        "queued": pc.if_else(sent, state["queued"], pa.scalar(None, pa.bool_())),
    })  # fmt: skip


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


_CARRIED = ["consumed", "ack_reason", "digest", "size", "segment", "offset", "message_id", "repaired",
            "sent_ms", "acked_ms"]  # fmt: skip
_HOLDS, _SETTLED = ["live", "acked"], ["acked", "gone"]


def classify(
    dc1: Any,
    dc2: Any,
    *,
    node1: str,
    node2: str,
    marks1: dict[str, int],
    marks2: dict[str, int],
    names: tuple[str, str],
    history: tuple[SideHistory, SideHistory] = (SideHistory(), SideHistory()),
) -> tuple[list[Row], Counter[str | None]]:
    """``transforms.classify`` of two ``side_state`` tables: the references not in sync, as rows, and
    the count of those in sync per address."""
    import pyarrow as pa
    import pyarrow.compute as pc

    both = dc1.join(dc2, KEY, join_type="full outer", left_suffix="_1", right_suffix="_2")
    statuses = []
    for n, (node, marks) in enumerate(((node1, marks1), (node2, marks2)), start=1):
        other = 3 - n
        # a status is never null: after the outer join, only on the side lacking the reference
        lacking = pc.is_null(both[f"status_{n}"]).combine_chunks()
        facts = [*KEY, f"segment_{other}", f"send_via_mirror_{other}", f"queued_{other}"]
        lacked = [
            _missing(history[n - 1], node, marks, r, history[other - 1], other)
            for r in both.filter(lacking).select(facts).to_pylist()
        ]
        status = both[f"status_{n}"].combine_chunks()
        statuses.append(pc.replace_with_mask(status, lacking, pa.array(lacked, pa.string())))
    s1, s2 = statuses
    cls, side = _class(both, s1, s2, names)
    address = pc.coalesce(both["address_1"], both["address_2"])
    synced = pc.equal(cls, "in_sync")
    counts = pa.table({"address": address.filter(synced)}).group_by("address", use_threads=False)
    counts = counts.aggregate([([], "count_all")])
    in_sync = Counter(dict(zip(counts["address"].to_pylist(), counts["count_all"].to_pylist(), strict=True)))
    times = [both[f"{c}_{n}"] for n in (1, 2) for c in ("sent_ms", "acked_ms")]
    diverged = pa.table({
        **{k: both[k] for k in KEY}, "address": address, "class": cls, "side": side,
        "dc1_status": s1, "dc2_status": s2,
        "first_ms": pc.min_element_wise(*times), "last_ms": pc.max_element_wise(*times),
        **{f"dc{n}_{c}": both[f"{c}_{n}"] for n in (1, 2) for c in _CARRIED},
    }).filter(pc.invert(synced))  # fmt: skip
    rows: list[Row] = diverged.to_pylist()
    return rows, in_sync


def _missing(
    history: SideHistory, node: str, marks: dict[str, int], r: Row, other_history: SideHistory, other: int
) -> str:
    """A side with no record of the reference ``r`` (its key and the other side's state of it,
    suffixed ``other``): ``history.missing_status``."""
    broker = r["identity_broker"]
    mark = marks.get(broker) if broker is not None else None
    carried = never_carried(
        other_history.trimmed(r[f"segment_{other}"]), r[f"send_via_mirror_{other}"], r[f"queued_{other}"]
    )
    return missing_status(history, node, mark, broker, r["identity_id"], r["queue"], carried)


def _class(both: Any, s1: Any, s2: Any, names: tuple[str, str]) -> tuple[Any, Any]:
    """The class of every reference and the side it names (``transforms.classify``'s rules), in order:
    an orphan ack, a payload that differs between two held copies, consumed on both, consumed on one
    side only, held on one side only, held on one side where the mirror does not carry it, else in
    sync."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def one(s: Any, values: list[str]) -> Any:
        return pc.is_in(s, value_set=pa.array(values, pa.string()))

    live1, live2 = pc.equal(s1, "live"), pc.equal(s2, "live")
    d1, d2 = both["digest_1"], both["digest_2"]
    rules = [
        (pc.or_(pc.equal(s1, "orphan_ack"), pc.equal(s2, "orphan_ack")), "orphan_ack",
         pc.if_else(pc.equal(s1, "orphan_ack"), names[0], names[1])),
        (pc.and_(pc.and_(one(s1, _HOLDS), one(s2, _HOLDS)), pc.fill_null(pc.not_equal(d1, d2), False)),
         "payload_differs", None),
        (pc.and_(pc.and_(pc.equal(s1, "acked"), pc.equal(s2, "acked")),
                 pc.fill_null(pc.and_(both["consumed_1"], both["consumed_2"]), False)),
         "consumed_both", None),
        (pc.or_(pc.and_(live1, one(s2, _SETTLED)), pc.and_(live2, one(s1, _SETTLED))), "acked_one_side",
         pc.if_else(live1, names[1], names[0])),
        (pc.or_(pc.and_(live1, pc.equal(s2, "absent")), pc.and_(live2, pc.equal(s1, "absent"))),
         "one_side_only", pc.if_else(live1, names[0], names[1])),
        (pc.or_(pc.and_(live1, one(s2, list(UNHELD))), pc.and_(live2, one(s1, list(UNHELD)))),
         "not_mirrored", pc.if_else(live1, names[0], names[1])),
    ]  # fmt: skip
    cls: Any = pa.repeat("in_sync", len(s1))
    side: Any = pa.nulls(len(s1), pa.string())
    for test, name, named in reversed(rules):  # the first rule that holds wins
        cls = pc.if_else(test, name, cls)
        side = pc.if_else(test, named if named is not None else pa.scalar(None, pa.string()), side)
    return cls, side


# ------------------------------------------------------------------------------- pass 2


def pass2(
    sides: list[tuple[Any, list[Row], set[int]]],
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
    both = (history[0], history[1]) if history else (SideHistory(), SideHistory())
    diverged, in_sync = classify(
        *states, node1=nodes[0], node2=nodes[1], marks1=marks[0], marks2=marks[1], names=names, history=both
    )
    gap = [unmirrored(store) for _, store, _ in sides]
    return diverged[: plan_limit + 1], [{"address": a, "count": n} for a, n in in_sync.items()], gap


# ------------------------------------------------------------------------------- helpers


def _least(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)
