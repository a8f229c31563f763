"""The PostgreSQL lock manager against a real PostgreSQL server: the lease is exclusive and the
activation sequence a compare-and-set (as with ZooKeeper); a holder that hears nothing from the database
gives its lock up before its lease can expire, and another manager takes it only after; a lease taken
over moves the epoch on, and its old holder can never renew it back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.config.model import POSTGRESQL_LOCK_MANAGER, LockManager
from broker_core.ha.lock_managers import LockManagerError, PostgreSQLLockManager, lock_manager_for
from tests.conftest import require
from tests.peers import postgresql as postgresql_peer
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.ha import (
    Producer,
    failover_uri,
    lock_manager,
    replicated_servers,
    stays,
    still_serving,
)


@pytest.fixture(scope="module")
def postgresql() -> Iterator[postgresql_peer.PostgreSQL]:
    require("PostgreSQL", *postgresql_peer.availability())
    with postgresql_peer.running_postgresql() as server:
        yield server


def pg(server: postgresql_peer.PostgreSQL, **properties: str) -> PostgreSQLLockManager:
    manager = lock_manager_for(
        LockManager(
            class_name=POSTGRESQL_LOCK_MANAGER,
            properties={"connect-string": server.connect_string, **properties},
        )
    )
    assert isinstance(manager, PostgreSQLLockManager)
    manager.start()
    return manager


def test_the_lease_is_exclusive_and_the_sequence_a_compare_and_set(
    postgresql: postgresql_peer.PostgreSQL,
) -> None:
    node = str(uuid.uuid4())
    a, b = pg(postgresql, namespace="t1"), pg(postgresql, namespace="t1")
    try:
        assert a.try_lock(node) and a.holds(node) and a.confirm(node)
        assert not b.try_lock(node) and not b.holds(node)
        assert a.get_sequence(node) == 0
        assert a.compare_and_set_sequence(node, 0, -1)  # a claim
        assert not b.compare_and_set_sequence(node, 0, 5)  # stale expectation
        assert b.compare_and_set_sequence(node, -1, 1)  # the commit
        assert b.get_sequence(node) == 1
        a.unlock(node)
        assert b.try_lock(node)  # released: free at once
        other = pg(postgresql, namespace="t2")  # another namespace: another lock
        assert other.try_lock(node)
        other.stop()
    finally:
        a.stop()
        b.stop()


def test_a_holder_cut_from_the_database_gives_up_before_another_takes_over(
    postgresql: postgresql_peer.PostgreSQL,
) -> None:
    """The database paused (SIGSTOP) for longer than the session: the holder says its lock is lost
    within its grace; once the database is back the lease has expired, the other manager takes it (a
    new epoch), and the old holder's renewal is refused: it stays lost."""
    node = str(uuid.uuid4())
    session = {"session-ms": "3000", "session-percent": "33", "connection-ms": "2000"}
    holder, other = pg(postgresql, namespace="t3", **session), pg(postgresql, namespace="t3", **session)
    lost = threading.Event()
    holder.on_lost(lambda why: lost.set())
    try:
        assert holder.try_lock(node)
        first_epoch = holder._epochs[node]
        postgresql.pause()
        paused_at = time.monotonic()
        try:
            wait_until(lost.is_set, 10, "the holder to give its lock up")
            gave_up_after = time.monotonic() - paused_at
            assert not holder.holds(node)
            assert gave_up_after < 3.0, f"gave up {gave_up_after:.1f}s after the pause: past the lease"
            time.sleep(max(0.0, 3.2 - (time.monotonic() - paused_at)))  # the lease (3 s) runs out meanwhile
        finally:
            postgresql.resume()
        wait_until(lambda: _try(other, node), 20, "the other manager to take the expired lease")
        assert other._epochs[node] == first_epoch + 1
        assert not holder.confirm(node)
        stays(lambda: holder.holds(node), 1, "the old holder holding its lock again")
    finally:
        holder.stop()
        other.stop()


def test_a_live_holder_keeps_its_lease_past_the_session(postgresql: postgresql_peer.PostgreSQL) -> None:
    node = str(uuid.uuid4())
    session = {"session-ms": "1000"}
    holder, other = pg(postgresql, namespace="t4", **session), pg(postgresql, namespace="t4", **session)
    try:
        assert holder.try_lock(node)
        stays(lambda: _try(other, node) or not holder.holds(node), 3, "the renewed lease taken or lost")
    finally:
        holder.stop()
        other.stop()


def test_an_unreachable_database_is_a_clear_error_without_the_connect_string(tmp_path: Path) -> None:
    manager = lock_manager_for(
        LockManager(
            class_name=POSTGRESQL_LOCK_MANAGER,
            properties={"connect-string": "host=127.0.0.1 port=1 password=s3cret", "connection-ms": "1000"},
        )
    )
    with pytest.raises(LockManagerError) as caught:
        manager.start()
    assert "127.0.0.1:1" in str(caught.value) and "s3cret" not in str(caught.value)


def _try(manager: PostgreSQLLockManager, node: str) -> bool:
    try:
        return manager.try_lock(node)
    except LockManagerError:
        return False


def started_pair(server: postgresql_peer.PostgreSQL, home: Path) -> list[BrokerProcess]:
    """A replicated pair started on a lock manager of its own on `server` (a short session: 2 s)."""
    manager = lock_manager(
        POSTGRESQL_LOCK_MANAGER,
        connect_string=server.connect_string,
        namespace=f"pair-{uuid.uuid4().hex[:8]}",
        session_ms="2000",
    )
    members = [("primary", "primary", ""), ("backup", "backup", "")]
    pair = replicated_servers(home, "", "", members, manager=manager)
    for broker in pair:
        broker.start()
    return pair


def test_a_pair_fails_over_on_postgresql(postgresql: postgresql_peer.PostgreSQL, tmp_path: Path) -> None:
    """A replicated pair whose lock manager is PostgreSQL: kill -9 of the primary under traffic, the
    backup takes over once the lease has expired (session-ms), with every confirmed send, and serves on;
    the activation sequence moved from 1 to 2 as with ZooKeeper."""
    primary, backup = started_pair(postgresql, tmp_path)
    try:
        wait_until(lambda: "AMQ221024" in backup.log(), 30, "the backup to synchronize")
        with Producer() as producer:
            producer.start(failover_uri([primary.url, backup.url]), range(200))
            wait_until(lambda: len(producer.confirmed) >= 60, 30, "sends before the kill")
            primary.kill()
            producer.join(60)
        wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
        assert "AMQ221029: backup activates with activation sequence 2" in backup.log()
        still_serving(backup, 2, "the backup")
        got = [m.body for m in receive(backup.url, "orders", 210, timeout=3)]
        assert sorted(got) == list(range(200)), f"{len(got)} received, {len(set(got))} distinct of 200"
    finally:
        backup.stop()


def test_a_database_that_stops_answering_is_said_and_the_backup_takes_over_once_it_answers(
    postgresql: postgresql_peer.PostgreSQL, tmp_path: Path
) -> None:
    """The database frozen (SIGSTOP: its sockets stay open, so no network bound of libpq fires) while the
    backup of a dead primary tries the lock: its try hangs in the manager. The backup says so once the
    call has gone unanswered for its bound (AMQ951140) and asks nothing more of the manager meanwhile;
    thawed, the database answers and the backup takes over and serves on."""
    primary, backup = started_pair(postgresql, tmp_path)
    try:
        wait_until(lambda: "AMQ221024" in backup.log(), 30, "the backup to synchronize")
        primary.kill()
        wait_until(lambda: "AMQ951070" in backup.log(), 10, "the backup to try the lock")
        postgresql.pause()
        try:
            wait_until(
                lambda: "has not answered" in backup.log(), 40, "the backup to say its call is unanswered"
            )
            assert "AMQ951140: backup cannot decide now" in backup.log(), backup.log()[-3000:]
            stays(lambda: "AMQ221010" in backup.log(), 2, "the backup activating with the database frozen")
        finally:
            postgresql.resume()
        wait_until(
            lambda: "AMQ221010" in backup.log(), 40, "the backup to take over once the database answers"
        )
        still_serving(backup, 3, "the backup that took over")
    finally:
        backup.stop()
