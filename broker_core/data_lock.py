"""One broker per data directory: an exclusive lock held for as long as the server runs.

Two brokers on one journal directory (a copied broker.xml with a new port and the old directory) would
both append to it, and after a restart part of what both confirmed would be gone. So a server takes an
exclusive lock first, and refuses to start while another process (or another server of this process)
holds it, naming the holder.

The lock is Artemis's primary lock: `serverlock.1` in the node manager's lock directory (the journal
directory by default), a whole-file `fcntl` write lock, as `FileLockNodeManager` takes it. It is an
open-file-description lock (`F_OFD_SETLK`): it belongs to the open file, not to the process, so two
servers of one process exclude each other too, and it goes when the process dies, however it dies.
The holder's pid and host are written into the file, for the refusal to name them (Artemis leaves it
empty and never reads it). The HA policies build on this file and its neighbours (`server.lock`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct
from pathlib import Path

LOCK_FILE = "serverlock.1"

# struct flock on Linux x86-64 and aarch64: l_type, l_whence (short), l_start, l_len (off_t), l_pid (pid_t);
# an open-file-description lock must say pid 0.
OFD_FLOCK = struct.Struct("hhxxxxqqixxxx")


class DataDirectoryInUse(OSError):
    """Another broker holds the data directory."""


class DataLock:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise `DataDirectoryInUse` saying who holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, OFD_FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise DataDirectoryInUse(
                f"the data directory {self.path.parent} is in use: {self._holder()} holds {self.path}; "
                "a second broker on one data directory would lose messages (give this one its own "
                "journal-directory)",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; whether it is ours now."""
        if self._fd is not None:
            return True
        try:
            self.acquire()
        except DataDirectoryInUse:
            return False
        return True

    def _holder(self) -> str:
        try:
            said = self.path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            said = ""
        return f"process {said.removeprefix('pid ')}" if said.startswith("pid ") else "another process"

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the open file description releases its lock
