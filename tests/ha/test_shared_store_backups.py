"""A shared-store primary with more than one backup, and a backup that does not fail back (spec A1's
NM3, NM5 and SS3): backups alone never activate, one waits on the backup lock at a time and takes over
when the primary dies, the next one when that one dies; with allow-failback false, the active backup
keeps serving when its primary comes back. And wait-for-activation: a primary that starts while its
backup is active tells systemd it is ready only once it has taken over (or at once, with false)."""

from __future__ import annotations

from pathlib import Path

from tests.ops.test_systemd import NotifySocket
from tests.peers.ports import wait_until
from tests.support.client import receive, send
from tests.support.ha import shared_servers, stays, still_serving


def test_backups_alone_never_activate_and_take_over_one_after_the_other(tmp_path: Path) -> None:
    primary, first, second = shared_servers(
        tmp_path, [("primary", "primary", ""), ("first", "backup", ""), ("second", "backup", "")]
    )
    first.start()
    second.start()  # no primary ever started (state 0): nobody activates
    stays(lambda: "AMQ221010" in first.log() + second.log(), 2, "a backup activating without a primary")
    primary.start()
    assert send(primary.url, "orders", ["a"]) == 1
    primary.kill()
    wait_until(lambda: "AMQ221010" in first.log() + second.log(), 10, "a backup to take over")
    active, spare = (first, second) if "AMQ221010" in first.log() else (second, first)
    stays(lambda: "AMQ221010" in spare.log(), 2, "the other backup activating too")  # one at a time
    assert send(active.url, "orders", ["b"]) == 1
    active.kill()
    wait_until(lambda: "AMQ221010" in spare.log(), 10, "the spare to take over")
    assert [m.body for m in receive(spare.url, "orders", 10)] == ["a", "b"]
    spare.stop()


def test_without_allow_failback_the_active_backup_keeps_serving_when_its_primary_returns(
    tmp_path: Path,
) -> None:
    primary, backup = shared_servers(
        tmp_path, [("primary", "primary", ""), ("backup", "backup", "<allow-failback>false</allow-failback>")]
    )
    primary.start()
    backup.start()
    assert send(primary.url, "orders", ["before"]) == 1
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 10, "the backup to take over")
    primary.ready_text = "AMQ221034"  # it waits for the primary lock
    primary.start()
    still_serving(backup, 3, "the backup, its primary back")
    assert "AMQ221002" not in backup.log() and "AMQ221007" not in primary.log()
    assert [m.body for m in receive(backup.url, "orders", 10)] == ["before"]
    backup.stop()  # a clean stop (no failover-on-shutdown): P, and the primary takes the lock
    wait_until(lambda: "AMQ221007" in primary.log(), 10, "the primary to activate once the backup stops")
    primary.stop()


def test_wait_for_activation_says_ready_once_the_primary_is_active_or_at_once(tmp_path: Path) -> None:
    for waits in (True, False):
        option = "" if waits else "<wait-for-activation>false</wait-for-activation>"
        primary, backup = shared_servers(
            tmp_path / str(waits), [("primary", "primary", option), ("backup", "backup", "")]
        )
        primary.start()
        backup.start()
        primary.kill()
        wait_until(lambda b=backup: "AMQ221010" in b.log(), 10, "the backup to take over")
        notify = NotifySocket()
        try:
            primary.env = {"NOTIFY_SOCKET": notify.path}
            primary.start()  # it fails back: the backup steps down for it
            wait_until(lambda n=notify: n.seen("READY=1"), 20, "READY=1")
            [(_, first)] = [(t, m) for t, m in notify.messages if "READY=1" in m.split("\n")][:1]
            if waits:
                assert "primary: active, accepting clients" in first, first
            else:
                assert "primary: passive primary" in first, first
        finally:
            notify.close()
        primary.stop()
        backup.kill()
