"""The pluggable lock managers against the real thing: a three-node ZooKeeper ensemble on loopback,
and the file lock for one host. The lock is exclusive, the activation sequence a compare-and-set, and a
holder whose ZooKeeper majority goes away says its lock is lost before its session could expire."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from broker_core.config.model import ZOOKEEPER_LOCK_MANAGER, LockManager
from broker_core.ha.lock_managers import LockManagerError, lock_manager_for
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.ha import stays

FILE = "org.apache.activemq.artemis.lockmanager.file.FileBasedLockManager"


def zk(ensemble: Ensemble, **properties: str):  # type: ignore[no-untyped-def]
    manager = lock_manager_for(
        LockManager(
            class_name=ZOOKEEPER_LOCK_MANAGER,
            properties={"connect-string": ensemble.connect_string, **properties},
        )
    )
    manager.start()
    return manager


def test_zookeeper_lock_is_exclusive_and_the_sequence_a_compare_and_set(zookeeper: Ensemble) -> None:
    node = str(uuid.uuid4())
    a, b = zk(zookeeper, namespace="t1"), zk(zookeeper, namespace="t1")
    try:
        assert a.try_lock(node) and a.holds(node)
        assert not b.try_lock(node)
        assert a.get_sequence(node) == 0
        assert a.compare_and_set_sequence(node, 0, -1)  # a claim
        assert not b.compare_and_set_sequence(node, 0, 5)  # stale expectation
        assert b.compare_and_set_sequence(node, -1, 1)  # the commit
        assert b.get_sequence(node) == 1
        a.unlock(node)
        wait_until(lambda: b.try_lock(node), 10, "the other manager to get the freed lock")
    finally:
        a.stop()
        b.stop()


def test_a_node_of_ours_left_by_a_try_cut_off_never_blocks_the_lock(zookeeper: Ensemble) -> None:
    """A try cut off between creating its node and removing it (the connection lost and found again with
    the same session) leaves a node of ours queued for the lock: the next try must not wait behind it,
    nor leave the other servers waiting behind it."""
    node = str(uuid.uuid4())
    a, b = zk(zookeeper, namespace="t4"), zk(zookeeper, namespace="t4")
    try:
        locks = f"/t4/{node}/locks"  # where the recipe queues its contenders
        assert a.try_lock(node)
        path = a._client.Lock(locks).create_path  # the name kazoo's recipe gives a contender
        b._client.create(path, ephemeral=True, sequence=True, makepath=True)  # b's try, cut off
        a.unlock(node)
        assert b.try_lock(node), "b waits behind its own leftover node"
        b.unlock(node)
        wait_until(lambda: a.try_lock(node), 10, "a to take the lock b let go of")
    finally:
        a.stop()
        b.stop()


def test_a_try_cut_by_a_frozen_ensemble_answers_while_it_is_still_frozen(zookeeper: Ensemble) -> None:
    """The ensemble freezes in the middle of a try (after it cleared its leftovers, as it creates its
    node): the try answers with the manager's own error once its retries are spent, not after ZooKeeper
    is back (kazoo's recipe on its own retries without end, backing off to a minute between tries), and
    the lock is taken by a try once the ensemble is back."""
    node = str(uuid.uuid4())
    manager = zk(zookeeper, namespace="t5", retries="0", **{"session-ms": "4000"})
    clear = manager._clear_own_contenders

    def cleared_then_frozen(client, path):  # type: ignore[no-untyped-def]
        clear(client, path)
        for zk_node in zookeeper.nodes:
            zk_node.pause()

    manager._clear_own_contenders = cleared_then_frozen
    answers: list[object] = []

    def attempt() -> None:
        try:
            answers.append(manager.try_lock(node))
        except Exception as exc:
            answers.append(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    try:
        worker.start()
        worker.join(20)
        assert answers, "the try still waits on a frozen ensemble"
        assert isinstance(answers[0], LockManagerError), answers
    finally:
        for zk_node in zookeeper.nodes:
            zk_node.resume()
    try:
        zookeeper.wait_serving()
        manager._clear_own_contenders = clear
        wait_until(lambda: _tried(manager, node), 30, "the lock taken once the ensemble is back")
    finally:
        manager.stop()


def _tried(manager, node: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        return bool(manager.try_lock(node))
    except LockManagerError:
        return False


def test_zookeeper_lock_is_given_up_when_the_majority_goes(zookeeper: Ensemble) -> None:
    node = str(uuid.uuid4())
    manager = zk(zookeeper, namespace="t2", **{"session-ms": "3000", "session-percent": "33"})
    lost = threading.Event()
    manager.on_lost(lambda why: lost.set())
    try:
        assert manager.try_lock(node)
        for zk_node in zookeeper.nodes:  # every node frozen: the client's connection is suspended
            zk_node.pause()
        try:
            assert lost.wait(10), "a holder without its ensemble must give the lock up"
            assert not manager.holds(node)
        finally:
            for zk_node in zookeeper.nodes:
                zk_node.resume()
        zookeeper.wait_serving()
    finally:
        manager.stop()


def test_a_lock_only_tried_is_never_lost_and_one_taken_later_is_held(zookeeper: Ensemble) -> None:
    """A passive server tries the lock while another holds it; its own connection is then suspended for
    longer than its grace: it held nothing, so nothing is lost (a lost lock would halt it the moment it
    activates). Once the lock is free it takes it, and holds it on, its heartbeat answered."""
    node = str(uuid.uuid4())
    holder = zk(zookeeper, namespace="t3")
    waiter = zk(zookeeper, namespace="t3", **{"session-ms": "3000", "session-percent": "33"})
    lost: list[str] = []
    waiter.on_lost(lost.append)
    try:
        assert holder.try_lock(node) and not waiter.try_lock(node)
        for zk_node in zookeeper.nodes:
            zk_node.pause()
        try:
            stays(lambda: bool(lost), 2, "a lock never held reported lost")  # grace: 1 s
        finally:
            for zk_node in zookeeper.nodes:
                zk_node.resume()
        zookeeper.wait_serving()
        # both sessions back (on a loaded machine the holder's can take longer than the waiter's; an
        # unlock sent while it reconnects would leave the lock to its session's expiry)
        wait_until(lambda: waiter._client.connected and holder._client.connected, 20, "both to reconnect")
        holder.unlock(node)
        wait_until(lambda: waiter.try_lock(node), 20, "the waiter to take the freed lock")
        stays(lambda: not waiter.holds(node), 2, "the new holder losing its lock")  # past its grace
        assert lost == []
    finally:
        holder.stop()
        waiter.stop()


def test_file_lock_manager_on_one_host(tmp_path: Path) -> None:
    node = str(uuid.uuid4())
    props = {"locks-folder": str(tmp_path / "locks")}
    a, b = (lock_manager_for(LockManager(class_name=FILE, properties=props)) for _ in range(2))
    a.start()
    b.start()
    assert a.try_lock(node) and not b.try_lock(node)
    assert a.compare_and_set_sequence(node, 0, 1) and not b.compare_and_set_sequence(node, 0, 2)
    a.unlock(node)
    assert b.try_lock(node) and b.get_sequence(node) == 1


def test_a_manager_that_cannot_be_reached_or_configured_says_so() -> None:
    with pytest.raises(LockManagerError, match="connect-string"):
        lock_manager_for(LockManager(class_name=ZOOKEEPER_LOCK_MANAGER, properties={}))
    with pytest.raises(LockManagerError, match="not one this broker has"):
        lock_manager_for(LockManager(class_name="org.example.Mine", properties={}))
    manager = lock_manager_for(
        LockManager(
            class_name=ZOOKEEPER_LOCK_MANAGER,
            properties={"connect-string": "127.0.0.1:1", "connection-ms": "500"},
        )
    )
    with pytest.raises(LockManagerError, match="cannot reach ZooKeeper"):
        manager.start()
