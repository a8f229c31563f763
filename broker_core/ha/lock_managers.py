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
- PostgreSQL, for sites that run a database and no ZooKeeper (ours: `PostgreSQLLockManager`): a lease
  row per node id, taken when free or expired, renewed by its holder, each taking fenced by a monotonic
  epoch; the activation sequence is a row too. Same properties and the same holder's grace as ZooKeeper.

Every call may block on the network: the HA controller calls them from a worker thread, one at a time,
and says so when one is slow to answer (kazoo's own waits are not bounded while a connection is
suspended, spec B5). A manager's failures, whatever their cause, reach it as LockManagerError.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from broker_core.config.model import FILE_LOCK_MANAGERS as FILE_CLASSES
from broker_core.config.model import POSTGRESQL_LOCK_MANAGERS as POSTGRESQL_CLASSES
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
    if config.class_name in POSTGRESQL_CLASSES:
        return PostgreSQLLockManager(config.properties)
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


_CONTENDER = "__lock__"  # kazoo's lock recipe names its nodes "<uuid>__lock__<sequence>"


def _contender_sequence(child: str) -> str | None:
    """A contender's place in the queue (ten digits, so they compare as text), as kazoo's recipe reads it."""
    _, found, sequence = child.rpartition(_CONTENDER)
    digits = sequence.removeprefix("-")
    return sequence if found and len(digits) == 10 and digits.isdigit() else None


@dataclass(frozen=True)
class _HeldNode:
    path: str  # the lock's folder
    node: str  # our contender node in it, first in the queue

    @property
    def name(self) -> str:
        return f"{self.path}/{self.node}"


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
        self._held: dict[str, _HeldNode] = {}  # node id -> our node, first in its lock's queue
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
        # a call, then `retries` more (kazoo counts calls; its 0 would mean without end)
        retry = {
            "max_tries": self.retries + 1,
            "delay": self.retries_ms / 1000,
            "backoff": 1,
            "max_delay": 60,
        }
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

    @contextlib.contextmanager
    def _answers(self) -> Iterator[None]:
        """kazoo's failures (a connection lost mid-call, a session expired) as the interface's error."""
        from kazoo.exceptions import KazooException

        try:
            yield
        except KazooException as exc:
            raise LockManagerError(
                f"ZooKeeper at {self.connect_string}: {type(exc).__name__} {exc}".rstrip()
            ) from exc

    def _wait(self, answer: Any) -> Any:
        """A request's answer, waited for at most connection-ms. kazoo's own waits have no end: a request
        made while the connection is being found again waits in its queue until it is found (and its
        lock recipe retries without end, and cleans up after itself with such a wait)."""
        try:
            return answer.get(timeout=self.connection_ms / 1000)
        except self._client.handler.timeout_exception:
            raise LockManagerError(
                f"ZooKeeper at {self.connect_string} did not answer in {self.connection_ms} ms"
            ) from None

    def try_lock(self, node_id: str) -> bool:
        """The lock recipe's contest, once: our node in the queue, held if no node is ahead of it, else
        taken out of the queue again. Its node names are kazoo's recipe's, the order its order."""
        with self._answers():
            client = self._connected()
            if self.holds(node_id):
                return True
            self._held.pop(node_id, None)  # one given up: a fresh try
            path = self._path(node_id, "locks")
            self._clear_own_contenders(client, path)
            sent = time.monotonic()
            created = self._wait(
                client.create_async(
                    f"{path}/{uuid.uuid4().hex}{_CONTENDER}",
                    ephemeral=True,
                    sequence=True,
                    makepath=True,
                )
            )
            node = created[len(path) + 1 :]
            mine = _contender_sequence(node)
            if mine is None:  # ZooKeeper numbers sequential nodes: never without one
                raise LockManagerError(f"ZooKeeper named our contender node {created!r} without a sequence")
            queue = [_contender_sequence(child) for child in self._wait(client.get_children_async(path))]
            ahead = [sequence for sequence in queue if sequence is not None and sequence < mine]
            if ahead:
                self._wait(client.delete_async(created))  # if cut off here, the next try removes it
                self._event(node_id, LockEvent.REFUSED)  # not held: nothing of it to report lost later
                return False
            with self._guard:
                self._held[node_id] = _HeldNode(path, node)
                self._contact = sent
            self._event(node_id, LockEvent.ACQUIRED)
            return True

    def _clear_own_contenders(self, client: Any, path: str) -> None:
        """Remove this session's nodes left under the lock. A try cut off between creating its node and
        removing it again (the connection lost, then found again with the same session) leaves a node
        of ours in the queue: every later try would wait behind it for ever, and so would every other
        server. We hold nothing when we try, so any node of ours is such a leftover."""
        from kazoo.exceptions import NoNodeError

        own = client.client_id[0]
        try:
            children = self._wait(client.get_children_async(path))
        except NoNodeError:
            return
        for child in children:
            stat = self._wait(client.exists_async(f"{path}/{child}"))
            if stat is not None and stat.ephemeralOwner == own:
                with contextlib.suppress(NoNodeError):
                    self._wait(client.delete_async(f"{path}/{child}"))

    def unlock(self, node_id: str) -> None:
        held = self._held.pop(node_id, None)
        self._event(node_id, LockEvent.RELEASED)
        if held is not None and self._client is not None and self._client.connected:
            with contextlib.suppress(Exception):  # the session is going anyway: its ephemeral node too
                self._wait(self._client.delete_async(held.name))

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
        if lock is None or self._states.get(node_id) != LockState.HELD:
            return False
        with self._answers():
            client = self._connected()
            self._wait(client.sync_async(lock.path))
            stat = self._wait(client.exists_async(lock.name))
            return bool(stat is not None and stat.ephemeralOwner == client.client_id[0])

    def get_sequence(self, node_id: str) -> int:
        with self._answers():
            client = self._connected()
            path = self._path(node_id, "activation-sequence")
            self._wait(client.ensure_path_async(path))
            data, _ = self._wait(client.get_async(path))
            return int(data.decode()) if data else 0

    def compare_and_set_sequence(self, node_id: str, expected: int, new: int) -> bool:
        from kazoo.exceptions import BadVersionError

        with self._answers():
            client = self._connected()
            path = self._path(node_id, "activation-sequence")
            self._wait(client.ensure_path_async(path))
            data, stat = self._wait(client.get_async(path))
            current = int(data.decode()) if data else 0
            if current != expected:
                return False
            try:
                self._wait(client.set_async(path, str(new).encode(), version=stat.version))
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
                stat = client.exists_async(lock.name).get(timeout=self.grace)
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


# ----------------------------------------------------------------------------------------- PostgreSQL

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS amqp_mirror_ha_locks (name text PRIMARY KEY, holder text,"
    " epoch bigint NOT NULL, expires timestamptz NOT NULL)",
    "CREATE TABLE IF NOT EXISTS amqp_mirror_ha_sequences (name text PRIMARY KEY, sequence bigint NOT NULL)",
)
# taken when nobody holds it, or its lease expired (by the database's clock), or it is ours already; each
# taking moves the epoch on, and only the holder of the current epoch renews or releases it
_TAKE = (
    "INSERT INTO amqp_mirror_ha_locks AS l (name, holder, epoch, expires)"
    " VALUES (%(name)s, %(holder)s, 1, clock_timestamp() + %(session)s * interval '1 millisecond')"
    " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = l.epoch + 1,"
    " expires = excluded.expires"
    " WHERE l.holder IS NULL OR l.expires < clock_timestamp() OR l.holder = excluded.holder"
    " RETURNING epoch"
)
_RENEW = (
    "UPDATE amqp_mirror_ha_locks SET expires = clock_timestamp() + %(session)s * interval '1 millisecond'"
    " WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s AND expires >= clock_timestamp()"
    " RETURNING epoch"
)
_RELEASE = (
    "UPDATE amqp_mirror_ha_locks SET holder = NULL, expires = clock_timestamp()"
    " WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s"
)


class PostgreSQLLockManager:
    """A lease per node id in PostgreSQL. The row's `expires` is the database's clock plus session-ms at
    each renewal; another server takes the row only once it expired. The holder renews every quarter of
    its grace (session-percent of session-ms) and gives the lock up once it has heard nothing for the
    grace, measured from when its last answered renewal was *sent*: before the database can let anyone
    else take the row (a paused or cut-off holder wakes up to a lock it knows is gone). Every taking
    moves the row's epoch on and a renewal or release names its epoch: a holder whose lease was taken
    over can never renew it back. As with ZooKeeper, the lock goes through lock_states.py's table."""

    def __init__(self, properties: dict[str, str]) -> None:
        connect = properties.get("connect-string")
        if not connect:
            raise LockManagerError("the PostgreSQL lock manager needs the property connect-string")
        self.connect_string = connect
        self.session_ms = _int(properties, "session-ms", 18000)
        self.session_percent = _int(properties, "session-percent", 33)
        self.connection_ms = _int(properties, "connection-ms", 8000)
        self.namespace = properties.get("namespace", "")
        self.grace = self.session_ms * self.session_percent / 100 / 1000
        self.beat = max(self.grace / 4, 0.02)
        self.holder = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._conn: Any = None
        self._io = threading.Lock()  # one statement at a time on the connection
        self._epochs: dict[str, int] = {}  # node id -> the epoch we took it with
        self._states: dict[str, LockState] = {}
        self._why: dict[str, str] = {}
        self._lost: list[Callable[[str], None]] = []
        self._contact = 0.0
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        self._beater: threading.Thread | None = None

    def _where(self) -> str:
        """The server, for messages: host and database only (never the connect string: a password)."""
        try:
            from psycopg.conninfo import conninfo_to_dict

            info = conninfo_to_dict(self.connect_string)
        except Exception:
            return "PostgreSQL"
        return (
            f"PostgreSQL at {info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"
        )

    def _name(self, node_id: str) -> str:
        return f"{self.namespace}/{node_id}" if self.namespace else node_id

    def start(self) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise LockManagerError("the PostgreSQL lock manager needs psycopg (pip install psycopg)") from exc
        for statement in _SCHEMA:
            self._execute(statement, {})
        self._beater = threading.Thread(target=self._heartbeat, name="postgresql-heartbeat", daemon=True)
        self._beater.start()
        # silence is judged apart from the renewals: a renewal may hang on a database that does not answer
        threading.Thread(target=self._watchdog, name="postgresql-watchdog", daemon=True).start()

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            import psycopg

            # libpq's own bounds, so that a cut network fails a statement rather than hanging it
            bound = max(int(self.grace * 1000), 500)
            try:
                self._conn = psycopg.connect(
                    self.connect_string,
                    autocommit=True,
                    connect_timeout=max(1, self.connection_ms // 1000),
                    tcp_user_timeout=bound,
                    keepalives=1,
                    keepalives_idle=1,
                    keepalives_interval=1,
                    keepalives_count=max(1, bound // 1000),
                    options=f"-c statement_timeout={bound}",
                )
            except Exception as exc:
                raise LockManagerError(f"cannot reach {self._where()}: {type(exc).__name__}") from exc
        return self._conn

    def _execute(self, statement: str, params: dict[str, object]) -> list[tuple[Any, ...]]:
        with self._io:
            conn = self._connection()
            try:
                with conn.cursor() as cursor:
                    cursor.execute(statement, params)
                    return list(cursor.fetchall()) if cursor.description is not None else []
            except Exception as exc:
                with contextlib.suppress(Exception):
                    conn.close()  # reconnect next time
                self._conn = None
                raise LockManagerError(f"{self._where()}: {type(exc).__name__}: {exc}") from exc

    def _params(self, node_id: str, **more: object) -> dict[str, object]:
        return {"name": self._name(node_id), "holder": self.holder, "session": self.session_ms, **more}

    def try_lock(self, node_id: str) -> bool:
        if self.holds(node_id):
            return True
        sent = time.monotonic()
        rows = self._execute(_TAKE, self._params(node_id))
        if not rows:
            self._event(node_id, LockEvent.REFUSED)
            return False
        with self._guard:
            self._epochs[node_id] = int(rows[0][0])
            self._contact = sent
        self._event(node_id, LockEvent.ACQUIRED)
        return True

    def unlock(self, node_id: str) -> None:
        epoch = self._epochs.pop(node_id, None)
        self._event(node_id, LockEvent.RELEASED)
        if epoch is not None:
            with contextlib.suppress(LockManagerError):  # unreachable: the lease expires on its own
                self._execute(_RELEASE, self._params(node_id, epoch=epoch))

    def holds(self, node_id: str) -> bool:
        return self._states.get(node_id) == LockState.HELD and time.monotonic() - self._contact < self.grace

    def why_not_held(self, node_id: str) -> str:
        state = self._states.get(node_id, LockState.FREE)
        if state == LockState.GIVEN_UP:
            return self._why.get(node_id, "given up")
        if state == LockState.HELD:
            return (
                f"nothing heard from {self._where()} for {(time.monotonic() - self._contact) * 1000:.0f} ms"
            )
        return "it is not held"

    def confirm(self, node_id: str) -> bool:
        """Our lease renewed, by the database itself: the row still ours, at our epoch, not expired."""
        epoch = self._epochs.get(node_id)
        if epoch is None or self._states.get(node_id) != LockState.HELD:
            return False
        sent = time.monotonic()
        if not self._execute(_RENEW, self._params(node_id, epoch=epoch)):
            return False
        with self._guard:
            self._contact = max(self._contact, sent)
        return True

    def get_sequence(self, node_id: str) -> int:
        rows = self._execute(
            "SELECT sequence FROM amqp_mirror_ha_sequences WHERE name = %(name)s", self._params(node_id)
        )
        return int(rows[0][0]) if rows else 0

    def compare_and_set_sequence(self, node_id: str, expected: int, new: int) -> bool:
        params = self._params(node_id, expected=expected, new=new)
        if expected == 0:  # never set: the row may not be there yet
            self._execute(
                "INSERT INTO amqp_mirror_ha_sequences (name, sequence) VALUES (%(name)s, 0)"
                " ON CONFLICT DO NOTHING",
                params,
            )
        rows = self._execute(
            "UPDATE amqp_mirror_ha_sequences SET sequence = %(new)s"
            " WHERE name = %(name)s AND sequence = %(expected)s RETURNING sequence",
            params,
        )
        return bool(rows)

    def on_lost(self, callback: Callable[[str], None]) -> None:
        self._lost.append(callback)

    def stop(self) -> None:
        self._stopping.set()
        self._lost.clear()
        for node_id in list(self._epochs):
            self.unlock(node_id)
        with self._io:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _event(self, node_id: str, event: LockEvent, why: str = "") -> None:
        with self._guard:
            step = lock_step(self._states.get(node_id, LockState.FREE), event)
            self._states[node_id] = step.state
            if step.action != LockAction.REPORT_LOST:
                return
            self._why[node_id] = why
            callbacks = list(self._lost)
        for callback in callbacks:
            callback(why)

    def _heartbeat(self) -> None:
        """While a lease is held: renew it every `beat`; an answer that finds it ours moves `_contact` on
        to when it was sent; one that does not (taken over, expired) gives it up. The watchdog gives it
        up after silence past `grace` (the database unreachable), before the lease can expire."""
        while not self._stopping.wait(self.beat):
            held = [(n, e) for n, e in list(self._epochs.items()) if self._states.get(n) == LockState.HELD]
            if not held:
                continue
            node_id, epoch = held[0]
            sent = time.monotonic()
            try:
                renewed = bool(self._execute(_RENEW, self._params(node_id, epoch=epoch)))
            except LockManagerError:
                renewed = None  # no answer: silence, judged below
            if renewed is False:
                self._event(
                    node_id, LockEvent.NODE_GONE, f"the lease was taken over or expired in {self._where()}"
                )
                continue
            if renewed:
                with self._guard:
                    self._contact = max(self._contact, sent)
                self._event(node_id, LockEvent.HEARD)

    def _watchdog(self) -> None:
        while not self._stopping.wait(self.beat):
            silent = time.monotonic() - self._contact
            if silent < self.grace:
                continue
            why = f"nothing heard from {self._where()} for {silent * 1000:.0f} ms"
            for node_id, state in list(self._states.items()):
                if state == LockState.HELD:
                    self._event(node_id, LockEvent.SILENT, why)


def _int(properties: dict[str, str], key: str, default: int) -> int:
    value = properties.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise LockManagerError(f"lock manager property {key}={value!r} is not a number") from exc
