"""Mirroring and HA together: a mirrored data centre whose active broker fails over keeps mirroring from
the new active server, and a mirror reconnects to whichever member of the remote pair is active (the
`#` alternates of its broker connection; a passive member redirects). Nothing lost, nothing twice: the
store-and-forward queue is journalled state and fails over with everything else, and the pair's shared
node id keeps the target's duplicate detection per origin seamless."""

from __future__ import annotations

import threading
from pathlib import Path

from proton import Message

from connections.cli import Management
from connections.failover import FailoverConnection, InDoubtError
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.ha import ORDERS, replicated_pair, shared_pair

FAST = "initialReconnectDelay=10&maxReconnectDelay=200&randomize=false"


def pending(broker: BrokerProcess) -> int:
    with Management(broker.url) as management:
        status = management.call("getMirrorStatus", [])
    return sum(int(s["pendingEvents"]) for s in status["sources"])


def send_all(uri: str, first: int, last: int, kill: BrokerProcess | None = None) -> int:
    """Send ids first..last-1 exactly once (in-doubt sends retried with their _AMQ_DUPL_ID); with `kill`,
    SIGKILL it midway. Returns how many sends were retried."""
    sent, retried = 0, 0
    with FailoverConnection(uri) as conn:
        sender = conn.sender("orders")
        killer = None
        if kill is not None:
            midway = (last - first) // 2
            killer = threading.Thread(
                target=lambda: (wait_until(lambda: sent >= midway, 30, "sends"), kill.kill())
            )
            killer.start()
        for i in range(first, last):
            message = Message(body=i, durable=True, properties={"_AMQ_DUPL_ID": f"order-{i}"})
            while True:
                try:
                    sender.send(message)
                    break
                except InDoubtError:
                    retried += 1
            sent += 1
        if killer is not None:
            killer.join()
    return retried


def test_both_data_centres_fail_over_and_the_mirror_carries_on(tmp_path: Path) -> None:
    dc2, dc2_backup = shared_pair(tmp_path / "dc2")
    link = (
        f'uri="tcp://127.0.0.1:{dc2.port}#tcp://127.0.0.1:{dc2_backup.port}" name="DC2" retry-interval="100"'
    )
    mirror = f"<broker-connections><amqp-connection {link}><mirror/></amqp-connection></broker-connections>"
    dc1, dc1_backup = shared_pair(tmp_path / "dc1", extra=mirror)
    for broker in (dc2, dc2_backup, dc1, dc1_backup):
        broker.start()
    dc1_uri = f"failover:({dc1.url},{dc1_backup.url})?{FAST}"
    retried = send_all(dc1_uri, 0, 200, kill=dc1)  # DC1's primary dies midway: its backup takes over
    wait_until(lambda: "AMQ221010" in dc1_backup.log(), 10, "DC1's backup to take over")
    dc2.kill()  # and DC2's primary: DC1's mirror must find DC2's backup
    wait_until(lambda: "AMQ221010" in dc2_backup.log(), 10, "DC2's backup to take over")
    retried += send_all(dc1_uri, 200, 400)
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
    dc2 = BrokerProcess(tmp_path / "dc2", name="dc2", xml_kwargs={"addresses": ORDERS}).start()
    link = f'uri="tcp://127.0.0.1:{dc2.port}" name="DC2" retry-interval="100"'
    mirror = f"<broker-connections><amqp-connection {link}><mirror/></amqp-connection></broker-connections>"
    dc1, dc1_backup = replicated_pair(tmp_path / "dc1", zookeeper.connect_string, "m1", extra=mirror)
    dc1.start()
    dc1_backup.start()
    wait_until(lambda: "AMQ221024" in dc1_backup.log(), 30, "DC1's backup to synchronize")
    dc1_uri = f"failover:({dc1.url},{dc1_backup.url})?{FAST}"
    retried = send_all(dc1_uri, 0, 200, kill=dc1)  # DC1's primary dies midway: its backup takes over
    wait_until(lambda: "AMQ221010" in dc1_backup.log(), 30, "DC1's backup to take over")
    retried += send_all(dc1_uri, 200, 400)
    wait_until(lambda: pending(dc1_backup) == 0, 60, "DC1's mirror to drain to DC2")
    on_dc1 = [m.body for m in receive(dc1_backup.url, "orders", 1000, timeout=2, accept=None)]
    on_dc2 = [m.body for m in receive(dc2.url, "orders", 1000, timeout=2, accept=None)]
    print(f"replication + mirror: 400 sent ({retried} retried), DC1 holds {len(on_dc1)}, DC2 {len(on_dc2)}")
    assert sorted(on_dc1) == list(range(400))
    assert on_dc2 == on_dc1
    dc1_backup.stop()
    dc2.stop()
