"""Between socket reads, a large pending batch goes to the journal at once; a small one waits for the end
of the loop turn (one group commit per turn), as before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.config.parser import load_config
from broker_core.journal.errors import JournalError
from broker_core.journal.records import MetaRecord
from broker_core.server import Server
from broker_core.turn import BATCH_BETWEEN_READS, Turn
from tests.support.broker import broker_xml


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Server, Turn, asyncio.AbstractEventLoop]]:
    (tmp_path / "broker.xml").write_text(broker_xml("batching", 5672))
    config, _ = load_config(tmp_path / "broker.xml")
    loop = asyncio.new_event_loop()
    srv = Server(config)
    turn = Turn(loop, srv.persistence)  # the server's flushes now wait for the end of the loop turn
    srv.start(dispatch=turn.dispatch)
    turn.flush()  # what starting wrote (the configured addresses) is not part of the test's batches
    try:
        yield srv, turn, loop
    finally:
        srv.stop()
        loop.close()


def _written(srv: Server) -> int:
    assert srv.journal is not None
    srv.journal.flush()  # whatever was handed over is on disk now
    return int(srv.journal.stats()["records_written"])


def test_a_large_batch_goes_to_the_journal_between_reads(
    server: tuple[Server, Turn, asyncio.AbstractEventLoop],
) -> None:
    srv, flusher, loop = server
    before = _written(srv)
    for i in range(BATCH_BETWEEN_READS - 1):
        srv.persist(MetaRecord(f"k{i % 7}", b"v"))
    flusher.after_read()
    assert _written(srv) == before, "a small batch waits for the end of the loop turn"
    srv.persist(MetaRecord("k", b"last"))
    flusher.after_read()
    assert _written(srv) == before + BATCH_BETWEEN_READS  # handed over mid-turn
    srv.persist(MetaRecord("k", b"small"))
    flusher.after_read()
    loop.run_until_complete(asyncio.sleep(0))  # the end of the loop turn
    assert _written(srv) == before + BATCH_BETWEEN_READS + 1


def test_a_journal_that_fails_during_a_read_stops_the_broker_instead_of_raising(
    server: tuple[Server, Turn, asyncio.AbstractEventLoop],
) -> None:
    """The hand-over between reads treats a dead journal as the end of the loop turn does: the broker
    is told to stop, and nothing is raised into the socket layer."""
    srv, flusher, _loop = server
    fatal: list[BaseException] = []
    flusher.on_fatal = fatal.append
    assert srv.journal is not None
    srv.journal.close()  # what a failed write leaves behind: a journal that takes nothing more
    for i in range(BATCH_BETWEEN_READS):
        srv.persist(MetaRecord(f"k{i % 7}", b"v"))
    flusher.after_read()
    assert len(fatal) == 1 and isinstance(fatal[0], JournalError)
