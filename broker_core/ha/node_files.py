"""The shared-store lock files, in the reference's layout (spec A3), in the node manager lock directory.

- `server.lock`: byte 0 the state (`0` first start, `N` not started, `L` active, `F` failing back, `P`
  paused); bytes 1-2 `0`; bytes 3-18 the node id (16 raw UUID bytes). Read and written under a brief
  whole-file lock.
- `serverlock.1`: the primary lock, held for as long as a server of the pair is active (data_lock.py).
- `serverlock.2`: the backup lock, held by the one backup waiting for the primary.
- `server.activation.sequence`: 8 bytes, big-endian signed: the activation sequence (replication).

Every lock is an open-file-description `fcntl` lock (`F_OFD_SETLK`): it conflicts with Artemis's Java
locks, holds within one process too, survives other descriptors of the file being closed, and goes
when the process dies, however it dies. A stopped (SIGSTOP) process keeps it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import uuid
from pathlib import Path

from broker_core.data_lock import OFD_FLOCK

SERVER_LOCK = "server.lock"
BACKUP_LOCK = "serverlock.2"
ACTIVATION_SEQUENCE = "server.activation.sequence"

FIRST_TIME = "0"
NOT_STARTED = "N"
ACTIVE = "L"
FAILING_BACK = "F"
PAUSED = "P"
_SEQUENCE = struct.Struct(">q")


def _lock(fd: int, wait: bool) -> bool:
    command = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
    try:
        fcntl.fcntl(fd, command, OFD_FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


class FileLock:
    """An exclusive lock on one file, taken without waiting."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if not _lock(fd, wait=False):
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class ServerLockFile:
    """`server.lock`: the pair's state byte and node id."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / SERVER_LOCK

    def ensure(self, node_id: str) -> None:
        """Create it on the pair's first start (`000` and the node id), as Artemis does."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            _lock(fd, wait=True)
            if os.fstat(fd).st_size < 19:
                os.pwrite(fd, b"000" + uuid.UUID(node_id).bytes, 0)
                os.fsync(fd)
        finally:
            os.close(fd)  # and the lock with it

    def read_state(self) -> str:
        """The state byte (an empty or missing file reads as `N`)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return NOT_STARTED
        try:
            _lock_shared(fd)
            state = os.pread(fd, 1, 0)
        finally:
            os.close(fd)
        return state.decode("ascii", "replace") if state else NOT_STARTED

    def write_state(self, state: str) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            _lock(fd, wait=True)
            os.pwrite(fd, state.encode("ascii"), 0)
            os.fsync(fd)
        finally:
            os.close(fd)

    def node_id(self) -> str | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return str(uuid.UUID(bytes=data[3:19])) if len(data) >= 19 else None

    def touch(self) -> None:
        """Move its mtime on: the fence a zombie primary's lock monitor sees (ARTEMIS-4143)."""
        os.utime(self.path)

    def mtime_ns(self) -> int | None:
        try:
            return os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            return None


def _lock_shared(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, OFD_FLOCK.pack(fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0))


def read_activation_sequence(directory: Path) -> int:
    try:
        data = (Path(directory) / ACTIVATION_SEQUENCE).read_bytes()
    except FileNotFoundError:
        return 0
    return int(_SEQUENCE.unpack(data[:8])[0]) if len(data) >= 8 else 0


def write_activation_sequence(directory: Path, value: int) -> None:
    path = Path(directory) / ACTIVATION_SEQUENCE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.pwrite(fd, _SEQUENCE.pack(value), 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)
