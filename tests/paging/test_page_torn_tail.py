"""Page bytes the journal never committed are cut at recovery, wherever a crash left them: a broker
appends a paged message to its page file at once and commits it with the journal batch that follows
(a `PageWritten` saying how far the page is committed). Here the batch of the last send is lost (the
broker dies before its journal write), and its page bytes are cut at every offset, as a crash could
leave them: each recovery brings back exactly the committed messages, cuts the page back to its
committed end, and pages what is sent next into a file that reads back right after them."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from broker_core.journal import iter_records
from broker_core.journal.records import PageWritten
from tests.support.paging import drain, settings
from tests.support.pair import Network

SETTINGS = settings(max_size=500, page_size=1_000_000, read=1_000)  # one page holds everything
COMMITTED = [f"c{i:02d}" for i in range(20)]


def crashed_with_an_uncommitted_tail(home: Path) -> tuple[Path, int]:
    """A broker that paged `COMMITTED`, then paged one more send whose journal batch never made it to
    disk; its page file, and how far the journal committed it."""
    net = Network(home)
    net.broker("dc1", persistence=True, settings=SETTINGS)
    net.start_all()
    client = net.client("dc1")
    sent = [client.send("orders", body) for body in COMMITTED]
    net.pump()
    assert all(client.accepted(d) for d in sent)
    assert net.server("dc1").queues["orders"].paged > 10
    net.disk_full("dc1")  # its next journal write never happens: the broker then dies
    lost = client.send("orders", "lost")
    net.pump()
    assert not client.accepted(lost)  # never confirmed
    net.stop("dc1")
    (page,) = (home / "dc1" / "paging").glob("page-*.page")
    committed = max(r.end for _, r in iter_records(home / "dc1" / "journal") if isinstance(r, PageWritten))
    assert page.stat().st_size > committed  # the lost send's record is in the page, past its end
    return page, committed


def test_page_bytes_past_the_committed_end_are_cut_at_every_offset(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    page, committed = crashed_with_an_uncommitted_tail(tmp_path / "original")
    data = page.read_bytes()
    for cut_at in range(committed, len(data) + 1):
        home = tmp_path / f"cut-{cut_at}"
        shutil.copytree(tmp_path / "original" / "dc1", home / "dc1")
        torn = home / "dc1" / "paging" / page.name
        torn.write_bytes(data[:cut_at])
        net = Network(home)
        net.broker("dc1", persistence=True, settings=SETTINGS)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            net.start("dc1")
            assert torn.stat().st_size == committed, cut_at  # cut back for good
            client = net.client("dc1")
            after = [client.send("orders", f"after-{i}") for i in range(3)]  # behind the paged ones
            net.pump()
            assert all(client.accepted(d) for d in after), cut_at
            got = drain(client, "orders", credit=100)
        assert got == [*COMMITTED, "after-0", "after-1", "after-2"], cut_at
        said = f"page {page.name} of address orders: cut {cut_at - committed} bytes after offset {committed}"
        assert (said in caplog.text) == (cut_at > committed), (cut_at, caplog.text)
        assert "AMQ222187" not in caplog.text, cut_at  # a cut tail is no corruption
        net.stop("dc1")
