"""Priority order across a failover: the backup of a shared-store pair, taking over from a primary
killed with messages of mixed priorities waiting and some delivered but not acknowledged, delivers them
all highest priority first and oldest first within one, as the primary would have."""

from __future__ import annotations

from pathlib import Path

from proton import Message
from proton.utils import BlockingConnection

from tests.peers.ports import wait_until
from tests.support.client import connect, receive
from tests.support.ha import shared_pair

PRIORITIES = [4, 1, 9, 4, 0, 7, 9, 4, 5, 1, 9, 3, 255, 8, 2, 6]


def test_the_backup_delivers_in_the_primarys_priority_order(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    try:
        with connect(primary.url) as conn:
            sender = conn.create_sender("orders")
            for i, p in enumerate(PRIORITIES):
                sender.send(Message(body=f"p{i}", durable=True, priority=p))
        ranked = [f"p{i}" for i in sorted(range(len(PRIORITIES)), key=lambda i: (-min(PRIORITIES[i], 9), i))]
        # three delivered, never acknowledged, when the primary dies (the connection dies with it)
        conn = BlockingConnection(primary.url, allowed_mechs="ANONYMOUS", timeout=10)
        receiver = conn.create_receiver("orders", credit=3)
        assert [receiver.receive(timeout=10).body for _ in range(3)] == ranked[:3]
        primary.kill()
        wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to become active")
        assert [m.body for m in receive(backup.url, "orders", 100, timeout=2)] == ranked
    finally:
        primary.kill()
        backup.stop()
