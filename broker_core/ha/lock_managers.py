"""Pluggable lock managers (`<manager>`): who of a replicated pair may be active, decided outside the pair.

Seed 001 §2.2.3 and spec A4: a lock per node id (`<nodeId>/locks`) that only the active server holds, and
a coordinated *activation sequence* (`<nodeId>/activation-sequence`) that says how up to date a journal
must be to activate. Two implementations:

- ZooKeeper, through kazoo (the class name of Artemis's Curator manager selects it), with the seed's
  properties: `connect-string`, `session-ms` (18000), `session-percent` (33), `connection-ms` (8000),
  `retries` (1), `retries-ms` (1000), `namespace`. A holder that has heard nothing from ZooKeeper for
  `session-percent` of `session-ms` gives the lock up (the lock is then `lost`), before its session can
  expire and another server take it: never two actives. Only a lock held is ever lost: a passive server
  that merely tried one has nothing to give up.
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

from .lock_states import LockAction, LockEvent, LockState, lock_step


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

    def why_not_held(self, node_id: str) -> str:
        """What the manager knows of why the lock is not held (for the log line of a halt)."""

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

    def why_not_held(self, node_id: str) -> str:
        return "it was released" if node_id not in self._fds else ""

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
    """A lock goes through lock_states.py's table: held from a successful `try_lock` until `unlock`, or
    until it is given up: the session expired, the lock's node is gone, or nothing was heard from
    ZooKeeper for session-percent of session-ms (measured from when the last answered request was sent,
    so that the servers, which last heard of this session no earlier than that, cannot have expired it
    yet: the holder gives up first). A lock only tried, never held, is never reported lost."""

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
        # how long a holder may go without hearing from ZooKeeper, and how often it asks
        self.grace = self.session_ms * self.session_percent / 100 / 1000
        self.beat = max(self.grace / 4, 0.02)
        self._client: Any = None
        self._held: dict[str, Any] = {}  # node id -> the kazoo Lock taken
        self._states: dict[str, LockState] = {}
        self._why: dict[str, str] = {}  # node id -> why it was given up
        self._lost: list[Callable[[str], None]] = []
        self._contact = 0.0  # monotonic time the last answered request was sent
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        self._beater: threading.Thread | None = None

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
        self._kazoo_state = KazooState
        client.add_listener(self._listen)
        try:
            client.start(timeout=self.connection_ms / 1000)
        except Exception as exc:
            client.stop()
            raise LockManagerError(f"cannot reach ZooKeeper at {self.connect_string}: {exc}") from exc
        self._client = client
        self._beater = threading.Thread(target=self._heartbeat, name="zookeeper-heartbeat", daemon=True)
        self._beater.start()

    def _path(self, node_id: str, leaf: str) -> str:
        return f"{self.root}/{node_id}/{leaf}"

    def try_lock(self, node_id: str) -> bool:
        client = self._connected()
        if self.holds(node_id):
            return True
        self._held.pop(node_id, None)  # one given up: a fresh try
        lock = client.Lock(self._path(node_id, "locks"))  # a fresh recipe for each try
        sent = time.monotonic()
        if not lock.acquire(blocking=False):
            self._event(node_id, LockEvent.REFUSED)  # not held: nothing of it to report lost later
            return False
        with self._guard:
            self._held[node_id] = lock
            self._contact = sent
        self._event(node_id, LockEvent.ACQUIRED)
        return True

    def unlock(self, node_id: str) -> None:
        lock = self._held.pop(node_id, None)
        self._event(node_id, LockEvent.RELEASED)
        if lock is not None and self._client is not None and self._client.connected:
            with contextlib.suppress(Exception):  # the session is going anyway: its ephemeral node too
                lock.release()

    def holds(self, node_id: str) -> bool:
        return self._states.get(node_id) == LockState.HELD and time.monotonic() - self._contact < self.grace

    def why_not_held(self, node_id: str) -> str:
        state = self._states.get(node_id, LockState.FREE)
        if state == LockState.GIVEN_UP:
            return self._why.get(node_id, "given up")
        if state == LockState.HELD:
            return f"nothing heard from ZooKeeper for {(time.monotonic() - self._contact) * 1000:.0f} ms"
        return "it is not held"

    def confirm(self, node_id: str) -> bool:
        """Our lock's node is still on the servers, owned by our current session: a session that expired
        while we were paused took the node with it, even if kazoo has connected a new one since."""
        lock = self._held.get(node_id)
        if lock is None or lock.node is None or self._states.get(node_id) != LockState.HELD:
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
        self._stopping.set()
        self._lost.clear()  # stopping: nobody is left to tell
        for node_id in list(self._held):
            self.unlock(node_id)
        client, self._client = self._client, None
        if client is not None:
            client.remove_listener(self._listen)
            client.stop()
            client.close()

    def _connected(self) -> Any:
        client = self._client
        if client is None or not client.connected:
            raise LockManagerError(f"not connected to ZooKeeper at {self.connect_string}")
        return client

    def _event(self, node_id: str, event: LockEvent, why: str = "") -> None:
        """One event of the lock's table; told, if it says so (from any thread)."""
        with self._guard:
            step = lock_step(self._states.get(node_id, LockState.FREE), event)
            self._states[node_id] = step.state
            if step.action != LockAction.REPORT_LOST:
                return
            self._why[node_id] = why
            callbacks = list(self._lost)
        for callback in callbacks:
            callback(why)

    def _listen(self, state: Any) -> None:
        """kazoo's thread: an expired session took our lock's node with it."""
        if state == self._kazoo_state.LOST:
            for node_id in list(self._states):
                self._event(node_id, LockEvent.SESSION_EXPIRED, "the ZooKeeper session expired")

    def _heartbeat(self) -> None:
        """While a lock is held: ask ZooKeeper for its node every `beat`; each answer that finds it still
        ours moves `_contact` on to when it was asked. Silence past `grace` (a suspended connection, a
        frozen ensemble, a partition) gives the lock up, before the servers could expire the session."""
        while not self._stopping.wait(self.beat):
            held = [
                (n, lock) for n, lock in list(self._held.items()) if self._states.get(n) == LockState.HELD
            ]
            client = self._client
            if not held or client is None:
                continue
            node_id, lock = held[0]
            sent = time.monotonic()
            with contextlib.suppress(Exception):  # no answer: silence, judged below
                stat = client.exists_async(f"{lock.path}/{lock.node}").get(timeout=self.grace)
                if stat is None or stat.ephemeralOwner != client.client_id[0]:
                    self._event(node_id, LockEvent.NODE_GONE, "the lock's node is gone from ZooKeeper")
                    continue
                with self._guard:
                    self._contact = max(self._contact, sent)
                self._event(node_id, LockEvent.HEARD)
            silent = time.monotonic() - self._contact
            if silent >= self.grace:
                why = f"nothing heard from ZooKeeper for {silent * 1000:.0f} ms"
                for node_id, _ in held:
                    self._event(node_id, LockEvent.SILENT, why)


def _int(properties: dict[str, str], key: str, default: int) -> int:
    value = properties.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise LockManagerError(f"lock manager property {key}={value!r} is not a number") from exc
