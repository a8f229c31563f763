"""Our failover client against an Apache ActiveMQ Artemis HA pair (shared store: a primary and a backup
on one journal directory; the backup becomes active when the primary's file lock goes).

SIGKILL of the primary: the client carries on on the backup, a send cut off is reported in doubt, and
what the primary had accepted is on the backup, because it is the same journal.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Message

from connections.failover import FailoverConnection, InDoubtError
from tests.artemis.support import artemis, config, depth
from tests.peers.artemis import ArtemisProcess
from tests.peers.ports import free_port

pytestmark = pytest.mark.usefixtures("artemis_available")

FAST = "initialReconnectDelay=50&maxReconnectDelay=500&randomize=false&maxReconnectAttempts=200"
BACKUP_STARTED = "AMQ221109"  # "Backup Server ... started; waiting for primary to fail"
BACKUP_ACTIVE = "AMQ221010"  # "Backup Server is now active"


def ha_config(port: int, store: Path, role: str) -> str:
    """One broker.xml for both members: its port, the shared directories, and primary or backup."""
    text = config(port, extra=f"<ha-policy><shared-store><{role}/></shared-store></ha-policy>")
    for kind in ("journal", "bindings", "paging", "large-messages"):
        text = text.replace(f"data/{kind}", str(store / kind))
    return text


@pytest.fixture
def ha_pair(tmp_path: Path, artemis_available: None) -> Iterator[tuple[ArtemisProcess, ArtemisProcess]]:
    store = tmp_path / "shared-store"
    p_port, b_port = free_port(), free_port()
    primary = artemis(tmp_path / "primary", p_port, ha_config(p_port, store, "primary"))
    backup = artemis(tmp_path / "backup", b_port, ha_config(b_port, store, "backup"))
    try:
        primary.start()
        backup.start(wait_active=False)
        backup.wait_for(BACKUP_STARTED, 60, "to wait as the backup")
        yield primary, backup
    finally:
        primary.stop()
        backup.stop()


def test_the_client_fails_over_from_the_primary_to_the_backup(
    ha_pair: tuple[ArtemisProcess, ArtemisProcess],
) -> None:
    primary, backup = ha_pair
    uri = f"failover:({primary.url},{backup.url})?{FAST}"
    with FailoverConnection(uri) as conn:
        sender = conn.sender("orders")
        for i in range(20):
            sender.send(Message(body=f"before-{i}", durable=True))
        assert conn.connected_uri is not None and conn.connected_uri.port == primary.port
        in_doubt: list[InDoubtError] = []
        sent_after: list[str] = []

        def keep_sending() -> None:
            for i in range(20):
                message = Message(body=f"after-{i}", durable=True)
                try:
                    sender.send(message)
                except InDoubtError as error:
                    in_doubt.append(error)
                    sender.send(error.message)  # this test's choice: resend (a duplicate is possible)
                sent_after.append(str(message.body))

        primary.kill()
        thread = threading.Thread(target=keep_sending)
        thread.start()
        backup.wait_for(BACKUP_ACTIVE, 60, "to become active")
        thread.join(60)
        assert sent_after == [f"after-{i}" for i in range(20)]
        assert conn.connected_uri is not None and conn.connected_uri.port == backup.port
        assert conn.failovers == 1
        receiver = conn.receiver("orders", credit=100)
        got = []
        while len(got) < 40 + len(in_doubt):
            got.append(receiver.receive(timeout=10).body)
            receiver.accept()
    assert set(got) == {f"before-{i}" for i in range(20)} | {f"after-{i}" for i in range(20)}
    assert depth(backup, "orders") == 0
