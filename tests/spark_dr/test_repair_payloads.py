"""Where a repair finds the failed side's messages (``spark_dr.payloads.fetch``), on a real journal of a
broker joined in memory whose address paged: a paged message's position in a plan is the commit of its
page, and it is found there, in the page file, not looked for again as if it had moved."""

from __future__ import annotations

from pathlib import Path

from spark_dr import payloads
from spark_dr.identity import format_identity, hex64
from spark_dr.rows import COLUMN_NAMES, journal_rows, read_node_id
from tests.support.paging import settings
from tests.support.pair import Network

COL = {c: COLUMN_NAMES.index(c) for c in ("event", "identity_broker", "identity_id", "queues", "segment",
                                          "offset", "digest64")}  # fmt: skip


def test_a_paged_message_is_found_in_its_page_at_its_hint(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True, settings=settings())
    net.start_all()
    client = net.client("dc1")
    for i in range(200):
        client.send("orders", f"m{i:03d}-" + "x" * 100)
    net.pump()
    assert net.server("dc1").queues["orders"].paged > 150
    net.stop("dc1")
    journal = tmp_path / "dc1" / "journal"
    sends = [r for r in journal_rows(journal) if r[COL["event"]] == "send"]
    wanted = [
        payloads.Wanted(format_identity(r[COL["identity_broker"]], r[COL["identity_id"]]), "orders",
                        hex64(r[COL["digest64"]]), (r[COL["segment"]], r[COL["offset"]]))
        for r in sends
    ]  # fmt: skip
    said: list[str] = []
    found = payloads.fetch(journal, wanted, "DC1", said.append, read_node_id(journal))
    assert len(found.bodies) == 200 and not found.problems and found.unreadable is None
    assert said == [], "messages in page files read as moved since the plan"
    stored = b"".join(found.bodies.values())  # the bytes the broker stored, most from page files
    assert all(f"m{i:03d}-".encode() in stored for i in range(200))
