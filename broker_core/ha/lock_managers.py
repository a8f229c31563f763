"""Pluggable lock managers (`<manager>`): who of a replicated pair may be active, decided outside the pair.

Seed 001 §2.2.3 and spec A4: a lock per node id (`<nodeId>/locks`) that only the active server holds, and
a coordinated *activation sequence* (`<nodeId>/activation-sequence`) that says how up to date a journal
must be to activate. Two implementations:

- ZooKeeper, through kazoo (the class name of Artemis's Curator manager selects it), with the seed's
  properties: `connect-string`, `session-ms` (18000), `session-percent` (33), `connection-ms` (8000),
  `retries` (1), `retries-ms` (1000), `namespace`. A holder that loses its session connection gives the
  lock up after `session-percent` of `session-ms` (the lock is then `lost`), before the session can expire
  and another server take it: never two actives.
- A file lock for one host (tests, laptops): `locks-folder` holds `<nodeId>.lock` (an OFD lock) and
  `<nodeId>.sequence`.

Every call may block on the network: the HA controller calls them from a worker thread, with its own
timeout (kazoo's own waits are not bounded while a connection is suspended, spec B5).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from broker_core.config.model import FILE_LOCK_MANAGERS as FILE_CLASSES
from broker_core.config.model import ZOOKEEPER_LOCK_MANAGERS as ZOOKEEPER_CLASSES
from broker_core.config.model import LockManager as LockManagerConfig
from broker_core.data_lock import OFD_FLOCK


class LockManagerError(Exception):
    """The lock manager cannot be reached or configured."""


class LockManager(Protocol):
    def start(self) -> None:
        """Connect (blocking, bounded by the manager's own timeouts); LockManagerError if it cannot."""

    def try_lock(self, node_id: str) -> bool:
        """Take the node's lock if it is free; whether we hold it now."""

    def unlock(self, node_id: str) -> None: ...

    def holds(self, node_id: str) -> bool:
        """Whether we hold the lock, as far as we know here (no network)."""

    def confirm(self, node_id: str) -> bool:
        """Whether we hold the lock, asked of the lock manager itself (may block on the network)."""

    def get_sequence(self, node_id: str) -> int: ...

    def compare_and_set_sequence(self, node_id: str, expected: int, new: int) -> bool: ...

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """`callback(why)` (from any thread) when a held lock may no longer be ours."""

    def stop(self) -> None: ...


def lock_manager_for(config: LockManagerConfig) -> LockManager:
    if config.class_name in ZOOKEEPER_CLASSES:
        return ZooKeeperLockManager(config.properties)
    if config.class_name in FILE_CLASSES:
        return FileLockManager(config.properties)
    raise LockManagerError(
        f"lock manager class {config.class_name!r} is not one this broker has; use "
        f"{sorted(ZOOKEEPER_CLASSES)[0]} (ZooKeeper) or {sorted(FILE_CLASSES)[0]} (one host)"
    )


# ------------------------------------------------------------------------------------------- one host


class FileLockManager:
    def __init__(self, properties: dict[str, str]) -> None:
        folder = properties.get("locks-folder")
        if not folder:
            raise LockManagerError("the file lock manager needs the property locks-folder")
        self.folder = Path(folder)
        self._fds: dict[str, int] = {}
        self._lost: list[Callable[[str], None]] = []

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def try_lock(self, node_id: str) -> bool:
        if node_id in self._fds:
            return True
        fd = os.open(self.folder / f"{node_id}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if not _ofd_lock(fd, wait=False):
            os.close(fd)
            return False
        self._fds[node_id] = fd
        return True

    def unlock(self, node_id: str) -> None:
        fd = self._fds.pop(node_id, None)
        if fd is not None:
            os.close(fd)

    def holds(self, node_id: str) -> bool:
        return node_id in self._fds

    def confirm(self, node_id: str) -> bool:
        return self.holds(node_id)  # an OFD lock goes only with its open file description

    def get_sequence(self, node_id: str) -> int:
        path = self.folder / f"{node_id}.sequence"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return 0
        return int(struct.unpack(">q", data[:8])[0]) if len(data) >= 8 else 0

    def compare_and_set_sequence(self, node_id: str, expected: int, new: int) -> bool:
        path = self.folder / f"{node_id}.sequence"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            _ofd_lock(fd, wait=True)
            data = os.pread(fd, 8, 0)
            current = int(struct.unpack(">q", data)[0]) if len(data) == 8 else 0
            if current != expected:
                return False
            os.pwrite(fd, struct.pack(">q", new), 0)
            os.fsync(fd)
            return True
        finally:
            os.close(fd)

    def on_lost(self, callback: Callable[[str], None]) -> None:
        self._lost.append(callback)  # a local lock is lost only with the process

    def stop(self) -> None:
        for node_id in list(self._fds):
            self.unlock(node_id)


def _ofd_lock(fd: int, wait: bool) -> bool:
    try:
        fcntl.fcntl(
            fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, OFD_FLOCK.pack(fcntl.F_WRLCK, 0, 0, 0, 0)
        )
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


# ------------------------------------------------------------------------------------------ ZooKeeper


class ZooKeeperLockManager:
    def __init__(self, properties: dict[str, str]) -> None:
        connect = properties.get("connect-string")
        if not connect:
            raise LockManagerError("the ZooKeeper lock manager needs the property connect-string")
        self.connect_string = connect
        self.session_ms = _int(properties, "session-ms", 18000)
        self.session_percent = _int(properties, "session-percent", 33)
        self.connection_ms = _int(properties, "connection-ms", 8000)
        self.retries = _int(properties, "retries", 1)
        self.retries_ms = _int(properties, "retries-ms", 1000)
        namespace = properties.get("namespace", "").strip("/")
        self.root = f"/{namespace}" if namespace else ""
        self._client: Any = None
        self._locks: dict[str, Any] = {}
        self._lost: list[Callable[[str], None]] = []
        self._suspended_at: float | None = None
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        try:
            from kazoo.client import KazooClient, KazooState
        except ImportError as exc:  # a dependency of the package: only a broken install lacks it
            raise LockManagerError("the ZooKeeper lock manager needs kazoo (pip install kazoo)") from exc
        retry = {"max_tries": self.retries, "delay": self.retries_ms / 1000, "backoff": 1, "max_delay": 60}
        client = KazooClient(
            hosts=self.connect_string,
            timeout=self.session_ms / 1000,
            connection_retry=dict(retry, max_tries=-1),
            command_retry=retry,
        )
        self._state = KazooState
        client.add_listener(self._listen)
        try:
            client.start(timeout=self.connection_ms / 1000)
        except Exception as exc:
            client.stop()
            raise LockManagerError(f"cannot reach ZooKeeper at {self.connect_string}: {exc}") from exc
        self._client = client

    def _path(self, node_id: str, leaf: str) -> str:
        return f"{self.root}/{node_id}/{leaf}"

    def try_lock(self, node_id: str) -> bool:
        client = self._connected()
        lock = self._locks.get(node_id)
        if lock is None:
            lock = self._locks[node_id] = client.Lock(self._path(node_id, "locks"))
        if lock.is_acquired:
            return True
        return bool(lock.acquire(blocking=False))

    def unlock(self, node_id: str) -> None:
        lock = self._locks.pop(node_id, None)
        if lock is not None and self._client is not None and self._client.connected:
            with contextlib.suppress(Exception):  # the session is going anyway: its ephemeral node too
                lock.release()

    def holds(self, node_id: str) -> bool:
        lock = self._locks.get(node_id)
        return bool(lock is not None and lock.is_acquired and self._suspended_at is None)

    def confirm(self, node_id: str) -> bool:
        """Our lock's node is still on the servers, owned by our current session: a session that expired
        while we were paused took the node with it, even if kazoo has connected a new one since."""
        lock = self._locks.get(node_id)
        if lock is None or not lock.is_acquired or lock.node is None:
            return False
        client = self._connected()
        client.sync(lock.path)
        stat = client.exists(f"{lock.path}/{lock.node}")
        return bool(stat is not None and stat.ephemeralOwner == client.client_id[0])

    def get_sequence(self, node_id: str) -> int:
        client = self._connected()
        path = self._path(node_id, "activation-sequence")
        client.ensure_path(path)
        data, _ = client.get(path)
        return int(data.decode()) if data else 0

    def compare_and_set_sequence(self, node_id: str, expected: int, new: int) -> bool:
        from kazoo.exceptions import BadVersionError

        client = self._connected()
        path = self._path(node_id, "activation-sequence")
        client.ensure_path(path)
        data, stat = client.get(path)
        current = int(data.decode()) if data else 0
        if current != expected:
            return False
        try:
            client.set(path, str(new).encode(), version=stat.version)
        except BadVersionError:
            return False
        return True

    def on_lost(self, callback: Callable[[str], None]) -> None:
        self._lost.append(callback)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for node_id in list(self._locks):
            self.unlock(node_id)
        client, self._client = self._client, None
        if client is not None:
            client.stop()
            client.close()

    def _connected(self) -> Any:
        client = self._client
        if client is None or not client.connected:
            raise LockManagerError(f"not connected to ZooKeeper at {self.connect_string}")
        return client

    def _listen(self, state: Any) -> None:
        """kazoo's thread: a suspended session gives the lock up after session-percent of session-ms
        (Curator's rule), before the session can expire and another server take the lock."""
        if state == self._state.CONNECTED:
            self._suspended_at = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return
        if state == self._state.LOST:
            self._give_up("the ZooKeeper session expired")
            return
        self._suspended_at = time.monotonic()  # SUSPENDED
        if self._locks and self._timer is None:
            grace = self.session_ms * self.session_percent / 100 / 1000
            self._timer = threading.Timer(grace, self._give_up, ("the ZooKeeper connection was suspended",))
            self._timer.daemon = True
            self._timer.start()

    def _give_up(self, why: str) -> None:
        self._timer = None
        if not self._locks:
            return
        for callback in self._lost:
            callback(why)


def _int(properties: dict[str, str], key: str, default: int) -> int:
    value = properties.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise LockManagerError(f"lock manager property {key}={value!r} is not a number") from exc
