"""A queue marked `after_durable` (the mirror's store-and-forward queue) gets its references only once
their journal batch is on disk: all of a batch at once, in routing order, never for a deleted queue."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.config import load_config
from broker_core.message import Header, MessageView
from broker_core.server import ANYCAST, Server
from tests.support.broker import BrokerProcess


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    cfg, _ = load_config(BrokerProcess(tmp_path, name="solo").write_config())
    srv = Server(cfg)
    srv.start()
    srv.set_flush_scheduler(lambda: None)  # batches are handed to the journal only when the test says
    try:
        yield srv
    finally:
        srv.stop()


def _flush_and_wait(srv: Server) -> None:
    """Hand the batch over and wait until its callbacks ran (they run in order; this one is last)."""
    done = threading.Event()
    srv.after_durable(done.set)
    srv.flush_pending()
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
        server.enqueue_copy(snf, server.identity[(server.node_id, ref_msg)], (None, ref_msg))
    assert plain.depth == 3 and snf.depth == 0  # the plain queue does not wait; the other does
    _flush_and_wait(server)
    assert snf.depth == 3
    assert [r.message.origin_message_id for r in snf.messages] == [m.message.id for m in plain.messages]
    assert snf.added == 3


def test_a_queue_deleted_before_its_batch_is_durable_gets_nothing(server: Server) -> None:
    server.ensure_address("a", {ANYCAST})
    server.create_queue("a", "a", ANYCAST)
    snf = server.create_queue("snf", "snf", ANYCAST, internal=True)
    snf.after_durable = True
    [mid] = _route(server, "a", 1)
    server.enqueue_copy(snf, server.identity[(server.node_id, mid)], (None, mid))
    server.delete_queue("snf")
    _flush_and_wait(server)
    assert snf.depth == 0 and snf.added == 0
