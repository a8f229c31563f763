"""A replicated primary (a real process) confirms nothing its backup does not have: the backup is scripted
frame by frame (tests/support/ha.py `ScriptedBackup`), so the test decides when it settles each packet of
the replication stream. It takes the initial copy up to `synchronized`, then holds the live batches: a
client's durable send stays unsettled for as long as the batch it is in is not settled by the backup,
and is Accepted once it is, batch by batch in order."""

from __future__ import annotations

from pathlib import Path

from proton import Message

from tests.peers.ports import wait_until
from tests.support.ha import FILE_LOCKS, ScriptedBackup, lock_manager, replicated_primary, stays
from tests.support.peer import ScriptedClient

WINDOW = 2.0  # seconds a held confirmation is watched for


def durable(body: str) -> bytes:
    return bytes(Message(body=body, durable=True).encode())


def test_a_durable_send_is_accepted_only_once_the_backup_has_its_batch(tmp_path: Path) -> None:
    primary = replicated_primary(tmp_path / "primary", lock_manager(FILE_LOCKS, locks_folder=str(tmp_path)))
    primary.start()
    with ScriptedBackup(primary.port) as backup:
        backup.attach_replication()
        backup.synchronize()
        wait_until(lambda: "AMQ221024" in primary.log(), 10, "the primary to count its backup synchronized")
        with ScriptedClient(primary.port) as client:
            client.attach_sender("producer", "orders")
            first = client.send_nowait(durable("first-send"))
            first_batch = backup.live_packet_with(b"first-send")  # on the primary's disk, streamed
            second = client.send_nowait(durable("second-send"))
            second_batch = backup.live_packet_with(b"second-send")
            assert first_batch.delivery_id < second_batch.delivery_id  # two batches, in order

            def settled(delivery_id: int) -> bool:
                return any(
                    f.name == "disposition" and int(f["first"]) <= delivery_id <= int(f["last"] or f["first"])
                    for f in client.frames
                )

            stays(lambda: settled(first) or settled(second), WINDOW, "a send confirmed before its backup")
            backup.settle_through(first_batch)
            assert client.disposition_of(first).state == "accepted"
            stays(lambda: settled(second), WINDOW, "a send confirmed before the backup had its batch")
            backup.settle_through(second_batch)
            assert client.disposition_of(second).state == "accepted"
    wait_until(lambda: "AMQ221035" in primary.log(), 10, "the primary to fence off its lost backup")
    assert primary.stop() == 0
