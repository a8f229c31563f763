"""The shared-store node manager over real lock files, two servers' views of one directory in one
process (open-file-description locks conflict within a process too, as between processes)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from broker_core.data_lock import DataLock
from broker_core.ha import node_files
from broker_core.ha.shared_store import SharedStore
from broker_core.ha.states import Event

NODE = str(uuid.uuid4())


def pair(directory: Path) -> tuple[SharedStore, SharedStore]:
    first = SharedStore(directory, DataLock(directory), NODE)
    return first, SharedStore(directory, DataLock(directory), NODE)


def test_server_lock_has_the_reference_layout(tmp_path: Path) -> None:
    primary, _ = pair(tmp_path)
    data = (tmp_path / "server.lock").read_bytes()
    assert data[:3] == b"000" and uuid.UUID(bytes=data[3:19]) == uuid.UUID(NODE)
    primary.begin_primary()
    assert (tmp_path / "server.lock").read_bytes()[0:1] == b"F"
    assert primary.try_primary() == Event.LOCK_ACQUIRED
    primary.announce_active()
    assert (tmp_path / "server.lock").read_bytes()[0:1] == b"L"
    assert node_files.ServerLockFile(tmp_path).node_id() == NODE


def test_a_backup_waits_while_the_primary_lives_and_takes_over_when_it_dies(tmp_path: Path) -> None:
    primary, backup = pair(tmp_path)
    assert backup.try_backup() is None  # the primary never started: nothing to take over
    primary.begin_primary()
    primary.try_primary()
    primary.announce_active()
    assert backup.try_backup() is None  # the primary holds the lock
    before = os.stat(tmp_path / "server.lock").st_mtime_ns
    primary.primary_lock.release()  # it dies: its lock goes, L stays
    assert backup.try_backup() == Event.LOCK_ACQUIRED
    assert os.stat(tmp_path / "server.lock").st_mtime_ns > before  # fenced (touched)


def test_a_clean_stop_or_a_failing_back_primary_keeps_the_backup_passive(tmp_path: Path) -> None:
    primary, backup = pair(tmp_path)
    primary.begin_primary()
    primary.try_primary()
    primary.announce_active()
    primary.stop_paused()
    assert backup.try_backup() == Event.PRIMARY_NOT_FAILED
    assert not backup.primary_lock.held  # it let go again
    primary.begin_primary()  # F: a primary restarting
    assert backup.try_backup() == Event.PRIMARY_NOT_FAILED


def test_the_monitor_sees_a_lost_lock_and_a_fence(tmp_path: Path) -> None:
    primary, _ = pair(tmp_path)
    primary.begin_primary()
    primary.try_primary()
    primary.announce_active()
    assert primary.monitor() is None
    later = os.stat(tmp_path / "server.lock").st_mtime_ns + 1_000_000_000
    os.utime(tmp_path / "server.lock", ns=(later, later))  # another server took over and fenced us
    assert "fenced" in str(primary.monitor())
    primary.primary_lock.release()
    assert primary.monitor() == "the primary lock is not held"


def test_an_active_backup_sees_its_primary_failing_back(tmp_path: Path) -> None:
    primary, backup = pair(tmp_path)
    primary.begin_primary()
    primary.try_primary()
    primary.announce_active()
    primary.primary_lock.release()  # dies
    assert backup.try_backup() == Event.LOCK_ACQUIRED
    backup.announce_active()
    assert not backup.failback_requested()
    primary.begin_primary()  # restarts: F
    assert backup.failback_requested()
    assert primary.try_primary() is None  # until the backup steps down
    backup.stop_failing_over()
    assert primary.try_primary() == Event.LOCK_ACQUIRED
