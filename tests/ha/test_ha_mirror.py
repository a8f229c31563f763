"""Mirroring and HA together: a mirrored data centre whose active broker fails over keeps mirroring from
the new active server, and a mirror reconnects to whichever member of the remote pair is active (the
`#` alternates of its broker connection; a passive member redirects). Nothing lost, nothing twice: the
store-and-forward queue is journalled state and fails over with everything else, and the pair's shared
node id keeps the target's duplicate detection per origin seamless."""

from __future__ import annotations

from pathlib import Path

from connections.cli import Management
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.ha import (
    PAIR_ADDRESSES,
    InDoubtSend,
    Producer,
    failover_uri,
    journal_of,
    replicated_pair,
    shared_pair,
)


def pending(broker: BrokerProcess) -> int:
    with Management(broker.url) as management:
        status = management.call("getMirrorStatus", [])
    return sum(int(s["pendingEvents"]) for s in status["sources"])


def send_all(
    pair: tuple[BrokerProcess, BrokerProcess], first: int, last: int, kill_with: list[Path] | None = None
) -> Producer:
    """Send ids first..last-1 exactly once through the pair (in-doubt sends retried with their
    _AMQ_DUPL_ID). With `kill_with` (the journals whatever serves next writes), SIGKILL the primary
    midway, one more send stored there and cut off in doubt (`InDoubtSend`: retried, stored once)."""
    uri = failover_uri([pair[0].url, pair[1].url])
    with Producer() as producer:
        if kill_with is None:
            producer.start(uri, range(first, last))
            producer.join(60)
            return producer
        with InDoubtSend(pair) as in_doubt:
            in_doubt.ready(kill_with, "kill -9 of the primary")
            producer.start(uri, range(first, last))
            wait_until(lambda: len(producer.confirmed) >= (last - first) // 2, 30, "sends")
            pair[0].kill()
            producer.join(60)
            in_doubt.check()
    return producer


def test_both_data_centres_fail_over_and_the_mirror_carries_on(tmp_path: Path) -> None:
    dc2, dc2_backup = shared_pair(tmp_path / "dc2")
    link = (
        f'uri="tcp://127.0.0.1:{dc2.port}#tcp://127.0.0.1:{dc2_backup.port}" name="DC2" retry-interval="100"'
    )
    mirror = f"<broker-connections><amqp-connection {link}><mirror/></amqp-connection></broker-connections>"
    dc1, dc1_backup = shared_pair(tmp_path / "dc1", extra=mirror)
    for broker in (dc2, dc2_backup, dc1, dc1_backup):
        broker.start()
    dc1_pair = (dc1, dc1_backup)
    shared = [tmp_path / "dc1" / "shared" / "journal"]
    before = send_all(dc1_pair, 0, 200, kill_with=shared)  # DC1's primary dies midway: its backup takes over
    wait_until(lambda: "AMQ221010" in dc1_backup.log(), 10, "DC1's backup to take over")
    dc2.kill()  # and DC2's primary: DC1's mirror must find DC2's backup
    wait_until(lambda: "AMQ221010" in dc2_backup.log(), 10, "DC2's backup to take over")
    retried = len(before.retried) + len(send_all(dc1_pair, 200, 400).retried)
    wait_until(lambda: pending(dc1_backup) == 0, 60, "DC1's mirror to drain to DC2's backup")
    on_dc1 = [m.body for m in receive(dc1_backup.url, "orders", 1000, timeout=2, accept=None)]
    on_dc2 = [m.body for m in receive(dc2_backup.url, "orders", 1000, timeout=2, accept=None)]
    print(f"HA + mirror: 400 sent ({retried} retried), DC1 holds {len(on_dc1)}, DC2 {len(on_dc2)}")
    assert sorted(on_dc1) == list(range(400))  # each once on DC1
    assert on_dc2 == on_dc1  # and on DC2, in the same order: nothing lost, nothing twice
    dc1_backup.stop()
    dc2_backup.stop()


def test_a_replicated_data_centre_fails_over_and_the_mirror_carries_on(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    """DC1 a replicated pair (ZooKeeper): its store-and-forward queue is replicated state, and an event
    leaves for DC2 only once the backup has it too; the primary dies mid-stream, the backup carries on
    mirroring. DC2 ends with what DC1 has, in the same order."""
    dc2 = BrokerProcess(tmp_path / "dc2", name="dc2", xml_kwargs={"addresses": PAIR_ADDRESSES}).start()
    link = f'uri="tcp://127.0.0.1:{dc2.port}" name="DC2" retry-interval="100"'
    mirror = f"<broker-connections><amqp-connection {link}><mirror/></amqp-connection></broker-connections>"
    dc1, dc1_backup = replicated_pair(tmp_path / "dc1", zookeeper.connect_string, "m1", extra=mirror)
    dc1.start()
    dc1_backup.start()
    wait_until(lambda: "AMQ221024" in dc1_backup.log(), 30, "DC1's backup to synchronize")
    dc1_pair = (dc1, dc1_backup)
    both = [journal_of(dc1), journal_of(dc1_backup)]
    before = send_all(dc1_pair, 0, 200, kill_with=both)  # DC1's primary dies midway: its backup takes over
    wait_until(lambda: "AMQ221010" in dc1_backup.log(), 30, "DC1's backup to take over")
    retried = len(before.retried) + len(send_all(dc1_pair, 200, 400).retried)
    wait_until(lambda: pending(dc1_backup) == 0, 60, "DC1's mirror to drain to DC2")
    on_dc1 = [m.body for m in receive(dc1_backup.url, "orders", 1000, timeout=2, accept=None)]
    on_dc2 = [m.body for m in receive(dc2.url, "orders", 1000, timeout=2, accept=None)]
    print(f"replication + mirror: 400 sent ({retried} retried), DC1 holds {len(on_dc1)}, DC2 {len(on_dc2)}")
    assert sorted(on_dc1) == list(range(400))
    assert on_dc2 == on_dc1
    dc1_backup.stop()
    dc2.stop()
