"""Consumers with selectors and browsers on one queue (broker_core/queues.py, `Reader`).

- A consumer with a selector takes only what it matches; the others take the rest, in priority order;
  nothing is delivered twice and the index of waiting references always equals what the queue holds.
- Each consumer with a selector looks at each message once, however long it waits: a selector that
  rarely matches costs its own consumer one evaluation per message, and no other consumer anything.
- What a selector takes out of the middle of a level is skipped there until compacted: the levels never
  hold many more references than wait.
- A browser is sent a copy of each waiting message, in delivery order, when it asks (its flow), once;
  it takes nothing.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker_core.queues import MessageRef, Queue, StoredMessage
from tests.test_queues import TakeAll


def _queue() -> Queue:
    return Queue(1, "q", "q", "ANYCAST")


def _refs(q: Queue, first: int, priorities: list[int]) -> list[MessageRef]:
    return [
        MessageRef(StoredMessage(first + i, "q", b"", True, 0, 0, p), q) for i, p in enumerate(priorities)
    ]


def _ids(consumer: TakeAll) -> list[int]:
    return [r.message.id for r in consumer.got]


def test_a_selector_takes_what_it_matches_and_the_rest_stays_in_order() -> None:
    q = _queue()
    q.enqueue_many(_refs(q, 1, [4, 9, 4, 0, 4, 7, 4, 4]))
    evens = TakeAll(100)
    q.add_consumer(evens, match=lambda m: m.id % 2 == 0)
    q.dispatch()
    assert _ids(evens) == [2, 6, 8, 4]  # priority 9, then 7, then the 4s, oldest first
    plain = TakeAll(100)
    q.add_consumer(plain)
    q.dispatch()
    assert _ids(plain) == [1, 3, 5, 7] and not q.waiting and q.refs() == []


def test_a_rare_selector_looks_at_each_message_once() -> None:
    q = _queue()
    looked = 0

    def rare(msg: StoredMessage) -> bool:
        nonlocal looked
        looked += 1
        return msg.id % 100 == 0

    selective, plain = TakeAll(10**6), TakeAll(10**6)
    q.add_consumer(selective, match=rare)
    q.add_consumer(plain)
    n = 5000
    for ref in _refs(q, 1, [4] * n):
        q.enqueue(ref)
    # the plain consumer took every other message before the selector saw it: at most one look each
    assert looked <= n and len(selective.got) + len(plain.got) == n
    assert [r.message.id for r in selective.got] == list(range(100, n + 1, 100))


def test_holes_left_by_a_selector_are_compacted() -> None:
    q = _queue()
    q.enqueue(_refs(q, 1, [4])[0])  # a message nobody takes, at the head
    taker = TakeAll(10**6)
    q.add_consumer(taker, match=lambda m: m.id > 1)
    for ref in _refs(q, 2, [4] * 2000):
        q.enqueue(ref)
    assert len(taker.got) == 2000 and list(q.waiting) == [1]
    assert len(q.fifo) <= 2 * len(q.waiting) + 65, "the level keeps what was taken from it"
    q.remove_consumer(taker)
    plain = TakeAll(10)
    q.add_consumer(plain)
    q.dispatch()
    assert _ids(plain) == [1] and q.holes == 0 and not q.fifo


def test_a_message_given_back_is_seen_again_by_the_selector() -> None:
    q = _queue()
    q.enqueue_many(_refs(q, 1, [4, 4, 4]))
    first = TakeAll(1)
    q.add_consumer(first, match=lambda m: m.id == 2)
    q.dispatch()
    [taken] = first.got
    assert taken.hole and q.holes == 1
    q.take_in_flight(taken)
    q.requeue([taken])  # back in its place: the hole comes back to life
    assert [r.message.id for r in q.refs()] == [1, 2, 3] and q.holes == 0
    first.credit = 1
    q.dispatch()
    assert _ids(first) == [2, 2]


def test_a_browser_gets_copies_when_it_asks_and_takes_nothing() -> None:
    q = _queue()
    q.enqueue_many(_refs(q, 1, [4, 9, 0]))
    browser, other = TakeAll(2), TakeAll(10)
    q.add_consumer(other, browse=True)
    q.add_consumer(browser, browse=True)
    assert browser.got == []  # nothing until it asks
    q.browse(browser)
    assert other.got == []  # nor for another browser
    assert _ids(browser) == [2, 1]  # its credit's worth, in delivery order
    q.enqueue_many(_refs(q, 4, [9]))
    browser.credit = 10
    q.browse(browser)
    assert _ids(browser) == [2, 1, 4, 3]
    q.browse(browser)
    assert len(browser.got) == 4  # each once
    q.browse(other)
    assert _ids(other) == [2, 4, 1, 3]  # what one browser read, another still reads
    assert (
        q.in_flight == 0
        and sorted(q.waiting) == [1, 2, 3, 4]
        and all(r.consumer is None for r in browser.got)
    )


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["enqueue", "plain", "odd", "big", "requeue", "remove"]),
            st.lists(st.sampled_from([0, 4, 4, 7, 9]), min_size=1, max_size=5),
        ),
        max_size=30,
    )
)
def test_selectors_and_plain_consumers_keep_the_queue_consistent(ops: list[tuple[str, list[int]]]) -> None:
    q = _queue()
    next_id = 1
    consumers = {"plain": TakeAll(0), "odd": TakeAll(0), "big": TakeAll(0)}
    q.add_consumer(consumers["plain"])
    q.add_consumer(consumers["odd"], match=lambda m: m.id % 2 == 1)
    q.add_consumer(consumers["big"], match=lambda m: m.priority >= 7)
    held: list[MessageRef] = []
    delivered: list[int] = []
    for op, values in ops:
        if op == "enqueue":
            q.enqueue_many(_refs(q, next_id, values))
            next_id += len(values)
        elif op in consumers:
            c = consumers[op]
            before = len(c.got)
            c.credit = len(values)
            q.dispatch()
            c.credit = 0
            new = c.got[before:]
            delivered += [r.message.id for r in new]
            held += new
            if op == "odd":
                assert all(r.message.id % 2 == 1 for r in new)
            if op == "big":
                assert all(r.message.priority >= 7 for r in new)
        elif op == "requeue" and held:
            back, held = held[: len(values)], held[len(values) :]
            for ref in back:
                q.take_in_flight(ref)
                delivered.remove(ref.message.id)
            q.requeue(back)
        elif op == "remove" and q.waiting:
            q.remove(q.refs()[-1])
        waiting = q.refs()
        assert q.waiting == {r.message.id: r for r in waiting}
        assert len(set(delivered)) == len(delivered), "a message went to two consumers"
        assert not set(delivered) & set(q.waiting)
        ids = [r.message.id for r in waiting]
        assert ids == sorted(ids, key=lambda i: (-min(q.waiting[i].message.priority, 9), i))
