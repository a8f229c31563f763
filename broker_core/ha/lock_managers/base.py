"""What every lock manager is: the interface the HA controller calls, and its one error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


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
