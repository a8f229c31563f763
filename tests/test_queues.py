"""Queues on their own and inside a server.

- The index of waiting references by message id always equals what the queue holds (`refs()`), whatever the
  sequence of enqueues, deliveries, requeues and removals.
- A queue marked `after_durable` (the mirror's store-and-forward queue) gets its references only once
  their journal batch is on disk: all of a batch at once, in routing order, never for a deleted queue.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.config import load_config
from broker_core.message import Header, MessageView
from broker_core.queues import MessageRef, Queue, StoredMessage
from broker_core.server import Server
from broker_core.vocabulary import ANYCAST
from tests.support.broker import BrokerProcess


class TakeAll:
    """A consumer with `credit` deliveries left; it keeps what it gets."""

    def __init__(self, credit: int) -> None:
        self.credit = credit
        self.got: list[MessageRef] = []

    def can_take(self) -> bool:
        return self.credit > 0

    def deliver(self, ref: MessageRef) -> None:
        self.credit -= 1
        self.got.append(ref)

    def kick(self, condition: str, description: str) -> None:
        self.credit = 0


OPS = st.lists(
    st.tuples(
        st.sampled_from(["enqueue", "many", "deliver", "requeue", "remove", "keep_odd"]), st.integers(1, 4)
    ),
    max_size=40,
)


@given(OPS)
def test_the_waiting_index_follows_every_change(ops: list[tuple[str, int]]) -> None:
    q = Queue(1, "q", "q", ANYCAST)
    next_id, held = 0, []

    def new(n: int) -> list[MessageRef]:
        nonlocal next_id
        refs = [MessageRef(StoredMessage(next_id + i, "q", b"", True, 0, 0), q) for i in range(n)]
        next_id += n
        return refs

    for op, n in ops:
        if op == "enqueue":
            q.enqueue(new(1)[0])
        elif op == "many":
            q.enqueue_many(new(n))
        elif op == "deliver":
            consumer = TakeAll(n)
            q.add_consumer(consumer)
            q.dispatch()
            q.remove_consumer(consumer)
            held += consumer.got
        elif op == "requeue" and held:
            back, held = held[:n], held[n:]
            for ref in back:
                q.take_in_flight(ref)
            q.requeue(back)
        elif op == "remove" and q.waiting:
            waiting = q.refs()
            q.remove(waiting[min(n, len(waiting)) - 1])
        elif op == "keep_odd":
            q.keep_only([r for r in q.refs() if r.message.id % 2])
        assert q.waiting == {r.message.id: r for r in q.refs()}
        assert all(q.waiting.get(r.message.id) is None for r in held)


def test_what_is_given_back_in_several_goes_waits_in_message_order() -> None:
    """A JMS rollback gives the acknowledged message back, then the client releases what it had prefetched
    (newer): the first must still come first, as Artemis's addSorted keeps it."""
    q = Queue(1, "q", "q", ANYCAST)
    refs = [MessageRef(StoredMessage(i, "q", b"", True, 0, 0), q) for i in range(5)]
    q.enqueue_many(refs)
    consumer = TakeAll(3)
    q.add_consumer(consumer)
    q.dispatch()
    q.remove_consumer(consumer)
    first, second, third = consumer.got
    for ref in (first, third, second):  # given back one at a time, out of order
        q.take_in_flight(ref)
        q.requeue([ref])
    assert [r.message.id for r in q.refs()] == [0, 1, 2, 3, 4]
    assert q.waiting == {r.message.id: r for r in q.refs()}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    cfg, _ = load_config(BrokerProcess(tmp_path, name="solo").write_config())
    srv = Server(cfg)
    srv.start()
    srv.persistence.set_scheduler(lambda: None)  # batches are handed to the journal only when the test says
    try:
        yield srv
    finally:
        srv.stop()


def _flush_and_wait(srv: Server) -> None:
    """Hand the batch over and wait until its callbacks ran (they run in order; this one is last)."""
    done = threading.Event()
    srv.after_durable(done.set)
    srv.persistence.flush()
    assert done.wait(10), "the journal batch never became durable"


def _route(srv: Server, address: str, n: int) -> list[int]:
    payload = Header(durable=True).encode() + b"\x00\x53\x77\xa1\x01x"
    return [srv.route(address, payload, MessageView(payload)).id for _ in range(n)]  # type: ignore[union-attr]


def test_references_arrive_after_the_batch_is_durable_in_order(server: Server) -> None:
    server.ensure_address("a", {ANYCAST})
    plain = server.create_queue("a", "a", ANYCAST)
    snf = server.create_queue("snf", "snf", ANYCAST, internal=True)
    snf.after_durable = True
    for ref_msg in _route(server, "a", 3):
        original = server.index.get(server.node_id, ref_msg)
        assert original is not None
        server.router.enqueue_internal(snf, original.payload, address="a", origin=(None, ref_msg))
    assert plain.depth == 3 and snf.depth == 0  # the plain queue does not wait; the other does
    _flush_and_wait(server)
    assert snf.depth == 3
    assert [r.message.origin_message_id for r in snf.refs()] == [m.message.id for m in plain.refs()]
    assert snf.added == 3


def test_a_queue_deleted_before_its_batch_is_durable_gets_nothing(server: Server) -> None:
    server.ensure_address("a", {ANYCAST})
    server.create_queue("a", "a", ANYCAST)
    snf = server.create_queue("snf", "snf", ANYCAST, internal=True)
    snf.after_durable = True
    [mid] = _route(server, "a", 1)
    server.router.enqueue_internal(snf, b"event", origin=(None, mid))
    server.delete_queue("snf")
    _flush_and_wait(server)
    assert snf.depth == 0 and snf.added == 0


def test_the_index_finds_waiting_references_only(server: Server) -> None:
    server.ensure_address("a", {ANYCAST})
    q = server.create_queue("a", "a", ANYCAST)
    first, second, third = _route(server, "a", 3)
    consumer = TakeAll(1)
    q.add_consumer(consumer)
    q.dispatch()
    [out] = consumer.got
    node = server.node_id
    index = server.index
    assert out.message.id == first and index.waiting_ref(q, node, first) is None  # in flight
    ref = index.waiting_ref(q, node, third)
    assert ref is not None and ref.message.id == third
    q.remove(ref)
    assert index.waiting_ref(q, node, third) is None and [r.message.id for r in q.refs()] == [second]
    assert index.waiting_ref(q, node, 10**9) is None  # no such message
