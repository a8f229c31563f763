"""The PostgreSQL lock manager: a lease row per node id, fenced by a monotonic epoch."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..lock_states import LockEvent, LockState
from .base import LockBook, LockManagerError, int_property

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


class PostgreSQLLockManager(LockBook):
    """A lease per node id in PostgreSQL. The row's `expires` is the database's clock plus session-ms at
    each renewal; another server takes the row only once it expired. The holder renews every quarter of
    its grace (session-percent of session-ms) and gives the lock up once it has heard nothing for the
    grace, measured from when its last answered renewal was *sent*: before the database can let anyone
    else take the row (a paused or cut-off holder wakes up to a lock it knows is gone). Every taking
    moves the row's epoch on and a renewal or release names its epoch: a holder whose lease was taken
    over can never renew it back. As with ZooKeeper, the lock goes through lock_states.py's table."""

    def __init__(self, properties: dict[str, str]) -> None:
        super().__init__()
        connect = properties.get("connect-string")
        if not connect:
            raise LockManagerError("the PostgreSQL lock manager needs the property connect-string")
        self.connect_string = connect
        self.session_ms = int_property(properties, "session-ms", 18000)
        self.session_percent = int_property(properties, "session-percent", 33)
        self.connection_ms = int_property(properties, "connection-ms", 8000)
        self.namespace = properties.get("namespace", "")
        self.grace = self.session_ms * self.session_percent / 100 / 1000
        self.beat = max(self.grace / 4, 0.02)
        self.holder = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._conn: Any = None
        self._io = threading.Lock()  # one statement at a time on the connection
        self._epochs: dict[str, int] = {}  # node id -> the epoch we took it with
        self._contact = 0.0
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
