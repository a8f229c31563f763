"""Confirmations where they are wired, on whole brokers: a durable send is Accepted only once its journal
write is done, on a broker with no sync mirror and no replica (nothing but the disk to wait for); and
the store-and-forward queue hands an event on to the other data centre only once every barrier on
confirmations (HA replication is one) has released its batch. Each test holds the one thing the
confirmation must wait for, checks that it waits, then releases it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.support.pair import Network


class Barrier:
    """A barrier on confirmations that holds what it is given until released (a backup that has not
    acknowledged the replicated batch yet)."""

    def __init__(self) -> None:
        self.waiting: list[Callable[[], None]] = []

    def wait(self, release: Callable[[], None]) -> bool:
        self.waiting.append(release)
        return True

    def release_all(self) -> None:
        waiting, self.waiting = self.waiting, []
        for release in waiting:
            release()


def test_a_durable_send_is_accepted_only_after_its_journal_write(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    net.hold_disk()
    durable = client.send("orders", "kept")
    fleeting = client.send("orders", "fleeting", durable=False)
    net.pump()
    assert net.server("dc1").persistence.flushes, "the send's batch was handed to the journal"
    assert client.outcomes.get(durable) is None  # not Accepted while its record is not on disk
    assert client.accepted(fleeting)  # a non-durable send waits for nothing
    net.release_disk()
    assert client.accepted(durable)


def test_the_store_and_forward_queue_hands_on_only_past_every_barrier(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True, mirror_to="dc2")
    net.broker("dc2", persistence=True)
    net.start_all()
    replica = Barrier()
    net.server("dc1").persistence.add_barrier(replica)
    client = net.client("dc1")
    sent = client.send("orders", "m")
    net.pump()
    assert net.depth("dc1", "orders") == 1  # on DC1's disk
    assert net.depth("dc2", "orders") == 0  # but not on its way to DC2 while the replica lacks it
    assert client.outcomes.get(sent) is None
    replica.release_all()
    net.pump()
    assert net.depth("dc2", "orders") == 1
    assert client.accepted(sent)
