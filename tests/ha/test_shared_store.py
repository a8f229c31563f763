"""A shared-store primary/backup pair, one broker process each on one data directory (spec A1's NM
scenarios where they apply): kill -9, SIGSTOP/SIGCONT, clean stops with and without
failover-on-shutdown, failback, forceFailover, fencing, the lock timeout, and clients that follow.

Traffic goes through the failover client; at the end every send a broker confirmed must be received and
nothing received may be one never sent. The first test does not retry the sends the failure leaves in
doubt (so none is stored twice); the others retry them with their `_AMQ_DUPL_ID`, and each has one
send stored and then cut off in doubt by the failure, whose retry duplicate detection must store once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import ConnectionException, Message

from amqp_mirror.ha import MONITOR
from broker_core.data_lock import OFD_FLOCK
from connections.cli import Management
from connections.failover import FailoverConnection, InDoubtError
from tests.conftest import require
from tests.peers.ports import wait_until
from tests.support import faketime
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.faketime import WallClock
from tests.support.ha import FAST, InDoubtSend, Producer, failover_uri, shared_pair, stays, traffic_through


def active(b: BrokerProcess) -> bool:
    return "is now active" in b.log()


def test_kill_9_of_the_primary_the_backup_takes_over_and_the_client_follows(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    confirmed: list[int] = []
    in_doubt: list[int] = []
    with FailoverConnection(failover_uri([primary.url, backup.url])) as conn:
        sender = conn.sender("orders")
        for i in range(100):
            sender.send(Message(body=i, durable=True))
            confirmed.append(i)
        # SIGKILL mid-stream, as soon as 50 more sends are confirmed
        killer = threading.Thread(
            target=lambda: (wait_until(lambda: len(confirmed) >= 150, 30, "sends"), primary.kill())
        )
        killer.start()
        for i in range(100, 400):
            try:
                sender.send(Message(body=i, durable=True))
                confirmed.append(i)
            except InDoubtError:
                in_doubt.append(i)
        killer.join()
        assert conn.connected_uri is not None and conn.connected_uri.port == backup.port
    wait_until(lambda: "AMQ221010" in backup.log(), 10, "the backup to become active")
    assert "AMQ951079" in primary.log()  # its store is a local disk: said at start
    got = [m.body for m in receive(backup.url, "orders", 1000, timeout=2)]
    duplicates = len(got) - len(set(got))
    counts = f"{len(confirmed)} confirmed, {len(in_doubt)} in doubt, {len(got)} received, {duplicates} dup"
    print(f"kill -9: {counts}")
    assert set(confirmed) <= set(got)  # every confirmed send is there
    assert set(got) <= set(confirmed) | set(in_doubt)  # nothing never sent
    assert duplicates == 0
    backup.stop()


def test_a_passive_backup_redirects_clients_to_the_active_primary(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    try:
        send(backup.url, "orders", ["x"])
    except ConnectionException as exc:
        text = str(exc)
    else:
        raise AssertionError("a passive backup accepted a client")
    assert "amqp:connection:redirect" in text and str(primary.port) in text
    primary.stop()
    backup.stop()


def test_a_sigstopped_primary_never_makes_two_actives(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    send(primary.url, "orders", ["before"])
    assert primary.proc is not None
    os.kill(primary.proc.pid, signal.SIGSTOP)
    try:
        stays(lambda: "AMQ221010" in backup.log(), 3.0, "the backup activating beside a paused primary")
    finally:
        os.kill(primary.proc.pid, signal.SIGCONT)
    assert [m.body for m in receive(primary.url, "orders", 1)] == ["before"]  # the primary goes on
    primary.stop()
    backup.stop()


def test_a_clean_stop_keeps_the_backup_passive_unless_failover_on_shutdown(tmp_path: Path) -> None:
    """Under traffic: without failover-on-shutdown the backup stays passive and the clients wait for the
    primary's restart; with it, the backup takes over. Either way every message once."""
    primary, backup = shared_pair(tmp_path / "paused")
    primary.start()
    backup.start()

    def stop_and_start_again() -> None:
        assert primary.stop() == 0
        stays(lambda: "AMQ221010" in backup.log(), 2.0, "the backup activating after a clean stop")
        primary.start()

    journal = [tmp_path / "paused" / "shared" / "journal"]
    what = "shared store, stop without failover-on-shutdown, then start"
    traffic_through((primary, backup), stop_and_start_again, what, journal)
    assert "AMQ221001" in primary.log_path.with_name("broker-1.log").read_text()  # type: ignore[union-attr]
    assert receive(primary.url, "orders", 10, timeout=1) == []  # each stored once
    primary.stop()
    backup.stop()

    primary, backup = shared_pair(
        tmp_path / "failing-over", primary_options="<failover-on-shutdown>true</failover-on-shutdown>"
    )
    primary.start()
    backup.start()
    journal = [tmp_path / "failing-over" / "shared" / "journal"]
    traffic_through((primary, backup), primary.stop, "shared store, stop with failover-on-shutdown", journal)
    assert primary.proc is not None and primary.proc.returncode == 0
    assert "AMQ221010" in backup.log()
    assert receive(backup.url, "orders", 10, timeout=1) == []  # each stored once
    backup.stop()


def test_failback_the_restarted_primary_takes_over_from_the_active_backup(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    send(primary.url, "orders", [f"m{i}" for i in range(10)])
    primary.kill()
    wait_until(lambda: "AMQ221010" in backup.log(), 10, "the backup to take over")
    send(backup.url, "orders", ["on-backup"])
    primary.start()  # writes F; the backup steps down (allow-failback), the primary activates
    assert "AMQ221002" in backup.log()
    # restart-backup false: it exits, with the code that makes its service start it again (rejoin)
    assert backup.proc is not None and backup.proc.wait(timeout=10) == 4
    assert "AMQ951030" in backup.log()
    got = [m.body for m in receive(primary.url, "orders", 20)]
    assert got == [f"m{i}" for i in range(10)] + ["on-backup"]
    primary.stop()


def test_failback_under_traffic(tmp_path: Path) -> None:
    """The same failover and failback with a producer and a consumer on the failover client throughout."""
    primary, backup = shared_pair(tmp_path, backup_options="<restart-backup>true</restart-backup>")
    primary.start()
    backup.start()
    journal = [tmp_path / "shared" / "journal"]
    pair = (primary, backup)
    traffic_through(pair, primary.kill, "shared store, kill -9 of the primary", journal, count=400)
    primary.ready_text = "AMQ221034"  # it waits for the backup to step down
    traffic_through(
        pair, primary.start, "shared store, failback to the restarted primary", journal, count=400
    )
    wait_until(lambda: "AMQ221007" in primary.log(), 10, "the primary to be active again")
    assert "AMQ221002" in backup.log()
    assert receive(primary.url, "orders", 10, timeout=1) == []  # each stored once
    primary.stop()
    backup.stop()


def test_force_failover_over_management(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    send(primary.url, "orders", ["m"])
    with Management(primary.url) as management:
        status = management.call("getHAStatus", [])
        assert status["role"] == "primary" and status["state"] == "active" and status["sharedState"] == "L"
        assert management.call("forceFailover", []) is True
    wait_until(lambda: "AMQ221010" in backup.log(), 10, "the backup to take over")
    assert primary.proc is not None and primary.proc.wait(timeout=10) == 4  # to be started again: rejoin
    with Management(backup.url) as management:
        assert management.call("getHAStatus", [])["state"] == "active"
    assert [m.body for m in receive(backup.url, "orders", 1)] == ["m"]
    backup.stop()

    primary, backup = shared_pair(tmp_path / "under-traffic")
    primary.start()
    backup.start()

    def force_failover() -> None:
        with Management(primary.url) as management:
            assert management.call("forceFailover", []) is True

    journal = [tmp_path / "under-traffic" / "shared" / "journal"]
    traffic_through((primary, backup), force_failover, "shared store, forceFailover", journal)
    assert receive(backup.url, "orders", 10, timeout=1) == []
    backup.stop()


def test_an_active_server_whose_lock_file_is_fenced_stops_at_once(tmp_path: Path) -> None:
    primary, _ = shared_pair(tmp_path)
    primary.start()
    lock = tmp_path / "shared" / "journal" / "server.lock"
    later = time.time() + 5
    os.utime(lock, (later, later))  # what a backup taking over does to a zombie primary
    assert primary.proc is not None and primary.proc.wait(timeout=10) == 1
    assert "AMQ222325" in primary.log() and "Traceback" not in primary.log()


@contextlib.contextmanager
def announcements_held(server_lock: Path) -> Iterator[None]:
    """A read lock on `server.lock`: a server may read the state byte, but one that writes it (a backup
    announcing itself active) waits until the lock is let go."""
    fd = os.open(server_lock, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, OFD_FLOCK.pack(fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0))
        yield
    finally:
        os.close(fd)


def waiting_to_write(path: Path) -> bool:
    """Whether a process waits for a write lock on `path` (a blocked request in /proc/locks)."""
    inode = os.stat(path).st_ino
    locks = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and "WRITE" in line and f":{inode} " in line for line in locks)


@pytest.mark.parametrize("backup_clock", [0, -86400], ids=["same clock", "backup a day behind"])
def test_a_backup_taking_over_fences_a_primary_whose_lock_was_lost(tmp_path: Path, backup_clock: int) -> None:
    """The primary's lock is lost while it is paused (SIGSTOP), as on a shared file system whose lock
    lease ran out; here its lock file is replaced, so the backup's lock on the new one is granted. The
    backup fences the old primary as it takes the lock (`server.lock`'s mtime moves): the old primary,
    once it runs again, stops serving by itself, while the backup is held back from so much as writing
    that it is active (the test holds a read lock on `server.lock`). Then the backup serves, with what the
    primary had, and still serves seconds later: never two active servers.

    With the backup's wall clock a day behind the primary's (libfaketime), its fence stamps `server.lock`
    a day before the primary's own last write, as a file system that takes a file's times from the
    client's clock would: the mtime moved, though back, and the primary is fenced all the same."""
    primary, backup = shared_pair(tmp_path)
    if backup_clock:
        require("libfaketime", *faketime.availability())
        clock = WallClock(tmp_path / "backup.faketime")
        clock.set(backup_clock)
        backup.env.update(clock.environment())
    primary.start()
    backup.start()
    assert send(primary.url, "orders", ["before"]) == 1
    journal = tmp_path / "shared" / "journal"
    assert primary.proc is not None and backup.proc is not None
    pid = primary.proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        with announcements_held(journal / "server.lock"):
            (journal / "serverlock.1").unlink()  # the paused primary's lock is lost
            # the backup takes the lock, fences, activates, and blocks writing that it is active (it says
            # AMQ221010 once it has written it)
            wait_until(lambda: waiting_to_write(journal / "server.lock"), 20, "the backup to announce itself")
            assert "AMQ221010" not in backup.log()
            os.kill(pid, signal.SIGCONT)
            try:
                code = primary.proc.wait(timeout=MONITOR + 8)  # its lock monitor sees the fence
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the fenced primary still runs: {primary.log()[-2000:]}") from None
            assert code == 1
            assert "AMQ222325" in primary.log() and "fenced" in primary.log()
            assert backup.proc.poll() is None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    wait_until(lambda: "AMQ221010" in backup.log(), 10, "the backup to say it is active")
    stays(lambda: backup.proc.poll() is not None, 3, "the backup stopping")  # it goes on serving
    assert [m.body for m in receive(backup.url, "orders", 1)] == ["before"]
    assert backup.stop() == 0


def test_a_second_primary_gives_up_after_journal_lock_acquisition_timeout(tmp_path: Path) -> None:
    primary, other = shared_pair(
        tmp_path,
        backup_options="",
        extra="<journal-lock-acquisition-timeout>500</journal-lock-acquisition-timeout>",
    )
    primary.start()
    text = other.config_path.read_text().replace("<backup>", "<primary>").replace("</backup>", "</primary>")
    other.config_path.write_text(text)
    other.ready_text = "AMQ221034"
    other.start()
    assert other.proc is not None and other.proc.wait(timeout=10) == 1
    assert "AMQ222229" in other.log()
    assert not active(other)
    primary.stop()


def test_a_client_that_knows_one_server_follows_the_pair(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    # told only of the passive backup: redirected to the active primary
    with FailoverConnection(f"failover:({backup.url})?{FAST}") as conn:
        conn.sender("orders").send(Message(body="via-redirect", durable=True))
        assert conn.connected_uri is not None and conn.connected_uri.port == primary.port
    # told only of the primary and to keep to the URIs given: the backup named in its list is not learnt
    with FailoverConnection(f"failover:({primary.url})?{FAST}&updateURIsSupported=false") as conn:
        conn.sender("orders").send(Message(body="kept", durable=True))
        assert [u.port for u in conn.uris] == [primary.port]
    # told only of the primary: learns the backup from its failover-server-list, and follows it there
    with FailoverConnection(f"failover:({primary.url})?{FAST}") as conn:
        sender = conn.sender("orders")
        sender.send(Message(body="before", durable=True))
        assert [u.port for u in conn.uris] == [primary.port, backup.port]
        primary.kill()
        sender.send(Message(body="after", durable=True))  # the loss is noticed before: not in doubt
        assert conn.connected_uri is not None and conn.connected_uri.port == backup.port
    assert [m.body for m in receive(backup.url, "orders", 4)] == ["via-redirect", "kept", "before", "after"]
    backup.stop()


def test_once_and_only_once_across_a_failover_with_duplicate_detection(tmp_path: Path) -> None:
    """Seed 001 §5: every message carries a unique `_AMQ_DUPL_ID`; a send left in doubt by the failover
    is sent again with the same id; the broker stores it once. Every run, one more send is stored and
    then cut off in doubt by the kill -9 (`InDoubtSend`), so a retry finds its id on the backup. Every
    message ends up exactly once."""
    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    with Producer() as producer, InDoubtSend((primary, backup)) as in_doubt:
        in_doubt.ready([tmp_path / "shared" / "journal"], "kill -9 of the primary")
        producer.start(failover_uri([primary.url, backup.url]), range(400))
        wait_until(lambda: len(producer.confirmed) >= 150, 30, "sends confirmed by the primary")
        primary.kill()
        producer.join(60)
        in_doubt.check()
    got = [m.body for m in receive(backup.url, "orders", 1000, timeout=2)]
    print(f"once and only once: 400 sent, {producer.summary()}, {len(got)} received")
    assert sorted(got) == list(range(400))  # each exactly once, nothing lost
    backup.stop()


def test_the_ha_command_shows_the_pair_and_fails_it_over(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    def ha(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "amqp_mirror", "ha", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    primary, backup = shared_pair(tmp_path)
    primary.start()
    backup.start()
    shown = ha("status", "--url", primary.url, "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert (status["role"], status["state"], status["sharedState"]) == ("primary", "active", "L")
    passive = ha("status", "--url", backup.url)
    assert (
        passive.returncode == 0
        and f"passive; the active server is 127.0.0.1:{primary.port}" in passive.stdout
    )
    assert ha("failover", "--url", backup.url).returncode == 1  # only the active server can fail over
    assert ha("failover", "--url", primary.url).returncode == 0
    wait_until(lambda: "AMQ221010" in backup.log(), 10, "the backup to take over")
    assert json.loads(ha("status", "--url", backup.url, "--json").stdout)["state"] == "active"
    backup.stop()
