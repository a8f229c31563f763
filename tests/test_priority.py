"""Message priority, as Artemis delivers it (its PriorityLinkedListImpl and QueueImpl).

- A queue delivers the highest priority first, oldest first within one; a header priority above 9 counts
  as 9 (Artemis keeps ten levels).
- A message given back (released, or its consumer gone) returns to its place by message id within its
  priority: ahead of younger ones of its priority, behind higher priorities.
- An internal queue (the mirror's store-and-forward) keeps routing order whatever the priorities, so an
  acknowledgement never overtakes its message.
- The order survives a restart, paging (what is read back at a time is delivered by priority) and a
  mirror: both sides of a mirrored pair deliver the same order.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from broker_core.queues import MessageRef, Queue, StoredMessage
from tests.support.paging import body_of, drain, settings
from tests.support.pair import Network
from tests.test_queues import TakeAll


def _queue(internal: bool = False) -> Queue:
    return Queue(1, "q", "q", "ANYCAST", internal=internal)


def _refs(q: Queue, priorities: list[int], first_id: int = 1) -> list[MessageRef]:
    return [
        MessageRef(StoredMessage(first_id + i, "q", b"", True, 0, 0, p), q) for i, p in enumerate(priorities)
    ]


def _take(q: Queue, n: int = 1000) -> list[int]:
    consumer = TakeAll(n)
    q.add_consumer(consumer)
    q.dispatch()
    q.remove_consumer(consumer)
    return [ref.message.id for ref in consumer.got]


def _expected(priorities: list[int], first_id: int = 1) -> list[int]:
    """Highest priority first (above 9 counts as 9), oldest first within one."""
    ids = range(first_id, first_id + len(priorities))
    return [i for _, i in sorted(zip(priorities, ids, strict=True), key=lambda pi: (-min(pi[0], 9), pi[1]))]


def test_highest_priority_first_and_oldest_first_within_one() -> None:
    priorities = [4, 0, 9, 4, 8, 255, 9, 1, 4, 10]
    q = _queue()
    q.enqueue_many(_refs(q, priorities))
    assert [r.message.id for r in q.refs()] == _expected(priorities)
    head = q.head()
    assert head is not None and head.message.id == 3
    assert _take(q) == _expected(priorities) == [3, 6, 7, 10, 5, 1, 4, 9, 8, 2]  # 255 and 10 are 9


def test_a_queue_that_sees_only_the_default_priority_stays_one_deque() -> None:
    q = _queue()
    q.enqueue_many(_refs(q, [4] * 5))
    assert q.levels is None and _take(q) == [1, 2, 3, 4, 5]


def test_a_message_given_back_returns_to_its_place_within_its_priority() -> None:
    q = _queue()
    refs = _refs(q, [4, 4, 4, 4, 6])  # 1-4 normal, 5 higher
    q.enqueue_many(refs)
    got = TakeAll(4)
    q.add_consumer(got)
    q.dispatch()
    q.remove_consumer(got)
    assert [r.message.id for r in got.got] == [5, 1, 2, 3]
    by_id = {r.message.id: r for r in got.got}
    for mid in (3, 1, 5, 2):  # given back one at a time, in an order of their own
        q.take_in_flight(by_id[mid])
        q.requeue([by_id[mid]])
    # Artemis's cancel puts each back sorted by its sequence: 1, 2, 3 ahead of 4, and 5 above them all
    assert [r.message.id for r in q.refs()] == [5, 1, 2, 3, 4]
    assert _take(q) == [5, 1, 2, 3, 4]


def test_an_internal_queue_keeps_routing_order() -> None:
    q = _queue(internal=True)
    q.enqueue_many(_refs(q, [0, 9, 4, 7]))
    consumer = TakeAll(2)
    q.add_consumer(consumer)
    q.dispatch()
    q.remove_consumer(consumer)
    for ref in consumer.got:  # given back: still in routing order
        q.take_in_flight(ref)
    q.requeue(consumer.got)
    assert q.levels is None and _take(q) == [1, 2, 3, 4]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["enqueue", "deliver", "requeue", "remove", "expire_odd"]),
            st.lists(st.sampled_from([0, 1, 4, 4, 4, 5, 9, 200]), min_size=1, max_size=6),
        ),
        max_size=40,
    )
)
def test_waiting_references_are_always_in_priority_then_id_order(
    ops: list[tuple[str, list[int]]],
) -> None:
    q = _queue()
    next_id = 1
    held: list[MessageRef] = []
    for op, priorities in ops:
        if op == "enqueue":
            q.enqueue_many(_refs(q, priorities, next_id))
            next_id += len(priorities)
        elif op == "deliver":
            before = [r.message.id for r in q.refs()]
            consumer = TakeAll(len(priorities))
            q.add_consumer(consumer)
            q.dispatch()
            q.remove_consumer(consumer)
            assert [r.message.id for r in consumer.got] == before[: len(priorities)]
            held += consumer.got
        elif op == "requeue" and held:
            back, held = held[: len(priorities)], held[len(priorities) :]
            for ref in back:
                q.take_in_flight(ref)
            q.requeue(back)
        elif op == "remove" and q.waiting:
            waiting = q.refs()
            q.remove(waiting[len(priorities) % len(waiting)])
        elif op == "expire_odd":
            q.keep_only([r for r in q.refs() if r.message.id % 2])
        ids = [r.message.id for r in q.refs()]
        assert ids == sorted(ids, key=lambda i: (-min(q.waiting[i].message.priority, 9), i))
        assert q.waiting == {r.message.id: r for r in q.refs()}
        head = q.head()
        assert (head.message.id if head else None) == (ids[0] if ids else None)


# ------------------------------------------------------------------------------ whole brokers


SEND = [(f"m{i}", p) for i, p in enumerate([4, 1, 9, 4, 0, 7, 9, 4, 5, 1, 9, 3])]


def _expected_bodies(sent: list[tuple[str, int]]) -> list[str]:
    return [b for _, b in sorted(((-p, i), b) for i, (b, p) in enumerate(sent))]


def _bodies(payloads: list[bytes]) -> list[str]:
    return [body_of(p) for p in payloads]


def test_the_order_survives_a_restart(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("solo", persistence=True)
    net.start("solo")
    client = net.client("solo")
    for body, priority in SEND:
        client.send("orders", body, priority=priority)
    net.pump()
    net.crash("solo")
    got = net.client("solo").receive("orders", len(SEND))
    assert _bodies(got) == _expected_bodies(SEND)


def test_a_mirrored_pair_delivers_the_same_order_on_both_sides(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", mirror_to="dc2", persistence=True)
    net.broker("dc2", mirror_to="dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    for body, priority in SEND:
        client.send("orders", body, priority=priority)
    net.pump()
    assert net.depth("dc2", "orders") == len(SEND)
    on_dc2 = [body_of(r.message.payload) for r in net.server("dc2").queues["orders"].refs()]
    got = net.client("dc1").receive("orders", len(SEND))
    assert _bodies(got) == on_dc2 == _expected_bodies(SEND)


def test_paged_messages_are_read_back_a_window_at_a_time_each_in_priority_order(tmp_path: Path) -> None:
    """Artemis orders what it holds in memory: a paged message is delivered once read back (a window
    of max-read-page-messages), by priority within that window, after what memory already held."""
    net = Network(tmp_path)
    net.broker("solo", persistence=True, settings=settings(max_size=6_000, page_size=3_000, read=5))
    net.start("solo")
    client = net.client("solo")
    cycle = [0, 9, 4, 7, 1, 9, 2]
    sent = [(f"m{i:03}-" + "x" * 300, cycle[i % len(cycle)]) for i in range(60)]
    for body, priority in sent:
        client.send("orders", body, priority=priority)
    net.pump()
    queue = net.server("solo").queues["orders"]
    paged = queue.paged
    assert 0 < paged < len(sent), "the address did not page"
    in_memory, on_pages = sent[: len(sent) - paged], sent[len(sent) - paged :]
    expected = _expected_bodies(in_memory)
    for start in range(0, len(on_pages), 5):
        expected += _expected_bodies(on_pages[start : start + 5])
    assert drain(client, "orders") == expected
