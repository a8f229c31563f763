"""The shared-store node manager: who of a primary/backup pair is active, decided by the lock files of
their one data directory (node_files.py), as Artemis's `FileLockNodeManager` decides it (spec A3).

Each method is one step the HA controller takes on a timer; none blocks. It returns the state machine's
event (states.py) or None when nothing changed, so the timing and the decisions stay apart.
"""

from __future__ import annotations

from pathlib import Path

from broker_core.data_lock import DataLock

from . import node_files
from .node_files import ACTIVE, FAILING_BACK, FIRST_TIME, NOT_STARTED, PAUSED, FileLock, ServerLockFile
from .states import Event


class SharedStore:
    def __init__(self, directory: Path, primary_lock: DataLock, node_id: str) -> None:
        self.directory = Path(directory)
        self.primary_lock = primary_lock  # serverlock.1: the server's own data lock
        self.backup_lock = FileLock(self.directory / node_files.BACKUP_LOCK)
        self.server_lock = ServerLockFile(self.directory)
        self.server_lock.ensure(node_id)
        self._mtime: int | None = None  # server.lock's mtime after our own last write

    # ---------------------------------------------------------------------------------- primary

    def begin_primary(self) -> None:
        """A primary starting says it is failing back (`F`): an active backup steps down for it."""
        self._write(FAILING_BACK)

    def try_primary(self) -> Event | None:
        return Event.LOCK_ACQUIRED if self.primary_lock.try_acquire() else None

    # ----------------------------------------------------------------------------------- backup

    def begin_backup(self) -> bool:
        """Take the backup lock (one backup waits for the primary at a time); whether we have it."""
        return self.backup_lock.try_acquire()

    def try_backup(self) -> Event | None:
        """A passive backup's poll: the primary lock is free and the primary did not stop cleanly
        (`L` left behind: it died) -> ours; free but `P`/`F` -> let go and wait again."""
        if not self.backup_lock.held and not self.backup_lock.try_acquire():
            return None
        if self.server_lock.read_state() in (NOT_STARTED, FIRST_TIME):
            return None  # the primary never started: nothing to take over
        if not self.primary_lock.try_acquire():
            return None  # the primary is alive (or stopped, SIGSTOP: its lock stays)
        if self.server_lock.read_state() != ACTIVE:
            self.primary_lock.release()
            return Event.PRIMARY_NOT_FAILED
        self.server_lock.touch()  # fence a zombie primary: its monitor sees the mtime move
        return Event.LOCK_ACQUIRED

    def failback_requested(self) -> bool:
        """An active backup's check: its primary is back and waits for the lock (`F`)."""
        return self.server_lock.read_state() == FAILING_BACK

    # ----------------------------------------------------------------------------------- active

    def announce_active(self) -> None:
        self._write(ACTIVE)
        self.backup_lock.release()

    def monitor(self) -> str | None:
        """The lock monitor of an active server: why its lock is no longer its own, or None."""
        if not self.primary_lock.held:
            return "the primary lock is not held"
        mtime = self.server_lock.mtime_ns()
        if mtime is None:
            return f"{self.server_lock.path} is gone"
        # any change, not only a later time: the fence is stamped by the taker's clock (or the file
        # server's), which may be behind the one that stamped our own last write
        if self._mtime is not None and mtime != self._mtime and self.server_lock.read_state() == ACTIVE:
            return f"{self.server_lock.path} was touched by another server taking over (fenced)"
        return None

    def stop_failing_over(self) -> None:
        """Stop, leaving `L`: the backup activates."""
        self.primary_lock.release()

    def stop_paused(self) -> None:
        """Stop writing `P`: the backup stays passive."""
        if self.primary_lock.held:
            self._write(PAUSED)
        self.primary_lock.release()

    def release(self) -> None:
        self.primary_lock.release()
        self.backup_lock.release()

    def backup_waiting(self) -> bool:
        """An active server's look at its pair: whether a backup holds the backup lock, waiting to take
        over (the lock is tried and, if it was free, let go at once: a backup's poll simply retries)."""
        if self.backup_lock.held:
            return False  # ours (a backup that has not let go yet): nobody else waits
        if self.backup_lock.try_acquire():
            self.backup_lock.release()
            return False
        return True

    def state(self) -> str:
        return self.server_lock.read_state()

    def _write(self, state: str) -> None:
        self.server_lock.write_state(state)
        self._mtime = self.server_lock.mtime_ns()
