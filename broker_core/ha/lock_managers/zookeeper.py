"""The ZooKeeper lock manager, through kazoo (the class name of Artemis's Curator manager selects it)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..lock_states import LockEvent, LockState
from .base import LockBook, LockManagerError, int_property

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


class ZooKeeperLockManager(LockBook):
    """A lock goes through lock_states.py's table: held from a successful `try_lock` until `unlock`, or
    until it is given up: the session expired, the lock's node is gone, or nothing was heard from
    ZooKeeper for session-percent of session-ms (measured from when the last answered request was sent,
    so that the servers, which last heard of this session no earlier than that, cannot have expired it
    yet: the holder gives up first). A lock only tried, never held, is never reported lost."""

    def __init__(self, properties: dict[str, str]) -> None:
        super().__init__()
        connect = properties.get("connect-string")
        if not connect:
            raise LockManagerError("the ZooKeeper lock manager needs the property connect-string")
        self.connect_string = connect
        self.session_ms = int_property(properties, "session-ms", 18000)
        self.session_percent = int_property(properties, "session-percent", 33)
        self.connection_ms = int_property(properties, "connection-ms", 8000)
        self.retries = int_property(properties, "retries", 1)
        self.retries_ms = int_property(properties, "retries-ms", 1000)
        namespace = properties.get("namespace", "").strip("/")
        self.root = f"/{namespace}" if namespace else ""
        # how long a holder may go without hearing from ZooKeeper, and how often it asks
        self.grace = self.session_ms * self.session_percent / 100 / 1000
        self.beat = max(self.grace / 4, 0.02)
        self._client: Any = None
        self._held: dict[str, _HeldNode] = {}  # node id -> our node, first in its lock's queue
        self._contact = 0.0  # monotonic time the last answered request was sent
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
