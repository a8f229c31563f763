"""A file lock for one host (tests, laptops): `locks-folder` holds `<nodeId>.lock` (an OFD lock) and
`<nodeId>.sequence`."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Callable
from pathlib import Path

from broker_core.data_lock import OFD_FLOCK

from .base import LockManagerError


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
