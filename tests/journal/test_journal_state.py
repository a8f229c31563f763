"""The writer thread's in-line apply keeps exactly the state that applying records one by one keeps."""

from __future__ import annotations

import random

from broker_core.journal.records import (
    AddressAdded,
    DeliveryCountUpdated,
    MessageAcked,
    MessageAdded,
    MessagesAcked,
    MetaRecord,
    QueueAdded,
    QueueRemoved,
    Record,
)
from broker_core.journal.state import LiveState


def _records(rng: random.Random) -> list[Record]:
    out: list[Record] = [AddressAdded(1, "a", frozenset({"ANYCAST"}))]
    out += [QueueAdded(1, "q1", "a", "ANYCAST"), QueueAdded(2, "q2", "a", "ANYCAST")]
    for mid in range(1, 400):
        roll = rng.random()
        if roll < 0.6:  # one queue, now and then one that does not exist or an id written twice
            qid = rng.choice((1, 1, 2, 9))
            out.append(MessageAdded(rng.choice((mid, mid, mid - 1)), "a", (qid,), b"x" * rng.randint(1, 50)))
        elif roll < 0.75:
            out.append(MessageAdded(mid, "a", (1, 2), b"y"))
        elif roll < 0.85:
            out.append(MessageAcked(rng.choice((1, 2)), rng.randint(1, mid), 0))
        elif roll < 0.9:
            out.append(DeliveryCountUpdated(1, rng.randint(1, mid), 2))
        elif roll < 0.95:
            out.append(MetaRecord(f"k{mid % 3}", b"v"))
        else:
            out.append(MessageAdded(mid, "a", (), b""))
    out.append(QueueRemoved(2))
    out.append(MessageAdded(1000, "a", (2,), b"late"))  # to a removed queue: not live
    return out


def _snapshot(state: LiveState) -> tuple[object, ...]:
    return (
        {mid: (m.seq, m.offset, m.size, m.refs, m.counts, m.trimmed) for mid, m in state.messages.items()},
        state.meta,
        state.queues,
        state.max_ids,
        state.segment_total,
        state.segment_live,
        state.locations,
        state.records,
    )


def test_apply_written_equals_apply_one_by_one() -> None:
    for seed in range(5):
        records = _records(random.Random(seed))
        sizes = tuple(random.Random(seed).randint(20, 90) for _ in records)
        one, inline = LiveState(keep_records=True), LiveState(keep_records=True)
        for state in (one, inline):
            state.segment_total[3] = state.segment_live[3] = 0  # the active segment, as the writer makes it
        offset = 100
        for record, size in zip(records, sizes, strict=True):
            one.apply(record, 3, offset, size)
            offset += size
        # the writer hands whole entries over: cut the records into entries of varied lengths
        at, position, rng = 0, 100, random.Random(seed)
        while at < len(records):
            n = rng.randint(1, 40)
            position = inline.apply_written(tuple(records[at : at + n]), sizes[at : at + n], 3, position)
            at += n
        assert position == offset
        assert _snapshot(inline) == _snapshot(one), seed


def test_a_run_of_acks_is_the_same_as_its_acks_one_by_one() -> None:
    for seed in range(5):
        rng = random.Random(seed)
        records = _records(rng)
        runs: list[Record] = []  # the same records, with some MessageAcked gathered into MessagesAcked
        singles: list[Record] = []
        for r in records:
            runs.append(r)
            singles.append(r)
            if isinstance(r, MessageAcked) and rng.random() < 0.5:
                more = tuple(rng.randint(1, 1100) for _ in range(rng.randint(0, 6)))  # unknown ids too
                runs[-1] = MessagesAcked(r.queue_id, (r.message_id, *more), r.reason)
                singles += [MessageAcked(r.queue_id, mid, r.reason) for mid in more]
        with_runs, one_by_one = LiveState(keep_records=True), LiveState(keep_records=True)
        for state, recs in ((with_runs, runs), (one_by_one, singles)):
            for r in recs:
                state.apply(r, 3, 0, 0)  # sizes 0: only the messages, refs and ids are compared
        assert _snapshot(with_runs) == _snapshot(one_by_one), seed
        assert any(isinstance(r, MessagesAcked) for r in runs)
