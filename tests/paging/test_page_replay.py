"""Page files are readable by tools: the journal replayed with its pages expanded (what the DR job
reads) says exactly which messages a broker holds, whether they wait in memory, in pages, or not at all."""

from __future__ import annotations

from pathlib import Path

from broker_core.journal.records import MessageAcked, MessageAdded
from broker_core.paging.replay import iter_records_with_pages
from tests.support.paging import drain, settings
from tests.support.pair import Network


def live_ids(journal: Path, queue_id: int) -> set[int]:
    """Message ids on the queue after replaying sends and acks (ids the queue holds)."""
    held: set[int] = set()
    for _, record in iter_records_with_pages(journal):
        if isinstance(record, MessageAdded) and queue_id in record.queue_ids:
            held.add(record.message_id)
        elif isinstance(record, MessageAcked) and record.queue_id == queue_id:
            held.discard(record.message_id)
    return held


def test_the_replay_holds_what_the_broker_holds_with_pages_live_and_removed(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True, settings=settings(max_size=8_000, page_size=4_000, read=5))
    net.start_all()
    client = net.client("dc1")
    for i in range(150):
        client.send("orders", f"m{i}")
    net.pump()
    consumed = [p for p in client.receive("orders", 90)]  # early pages read back and removed
    assert len(consumed) == 90
    queue = net.server("dc1").queues["orders"]
    expected = {ref.message.id for ref in queue.refs()}
    assert queue.paged > 0
    net.stop("dc1")
    journal = tmp_path / "dc1" / "journal"
    held = live_ids(journal, queue.id)
    assert len(held) == 60
    assert expected <= held  # what was in memory, plus what waited in pages
    net.broker("dc1", persistence=True, settings=settings(max_size=8_000, page_size=4_000, read=5))
    net.start("dc1")
    assert net.depth("dc1", "orders") == 60
    client = net.client("dc1")
    assert len(drain(client, "orders")) == 60
    net.stop("dc1")
    assert live_ids(journal, queue.id) == set()  # every page removed; the replay agrees
