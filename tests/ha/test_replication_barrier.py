"""The replication barrier on a whole broker joined in memory (tests/support/pair.py): once a backup is
synchronized, a confirmation waits for the backup to cover the journal batch it is in, by the batch's
tag (what the replication stream's live packets carry), in order; an earlier batch covers nothing
later."""

from __future__ import annotations

from pathlib import Path

from broker_core.ha.replication_source import ReplicationBarrier
from broker_core.journal.writer import Entry
from tests.support.pair import Network


def test_a_confirmation_waits_for_the_backup_to_cover_its_own_batch(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True)
    net.start_all()
    server = net.server("dc1")
    batches: list[Entry] = []
    server.journal.add_tap(batches.extend)  # every batch written, with its tag, as a backup is sent it
    barrier = ReplicationBarrier(server)
    server.persistence.add_barrier(barrier)
    client = net.client("dc1")
    first = client.send("orders", "first-send")
    net.pump()
    second = client.send("orders", "second-send")
    net.pump()

    def tag_of(marker: bytes) -> int:
        return next(entry.tag for entry in batches if marker in entry.data)

    first_batch, second_batch = tag_of(b"first-send"), tag_of(b"second-send")
    assert first_batch < second_batch
    assert first not in client.outcomes and second not in client.outcomes  # on disk, not on the backup
    barrier.covered(first_batch - 1)
    net.pump()
    assert first not in client.outcomes
    barrier.covered(first_batch)
    net.pump()
    assert client.accepted(first) and second not in client.outcomes
    barrier.covered(second_batch)
    net.pump()
    assert client.accepted(second)
    assert barrier.pending == 0
