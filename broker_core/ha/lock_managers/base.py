"""What every lock manager is: the interface the HA controller calls, and its one error."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from ..lock_states import LockAction, LockEvent, LockState, lock_step


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


def int_property(properties: dict[str, str], key: str, default: int) -> int:
    value = properties.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise LockManagerError(f"lock manager property {key}={value!r} is not a number") from exc


class LockBook:
    """What a networked lock manager keeps of its locks: each one's state in lock_states.py's table, why
    one was given up, and whom to tell when a held one is lost. `_guard` guards them (and whatever else
    the manager keeps beside them)."""

    def __init__(self) -> None:
        self._states: dict[str, LockState] = {}
        self._why: dict[str, str] = {}  # node id -> why it was given up
        self._lost: list[Callable[[str], None]] = []
        self._guard = threading.Lock()

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
