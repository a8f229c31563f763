"""One page file: the journal's 32-byte segment header (kind 2), then `MessageAdded` frames.

The event loop appends (to the page cache; a write of a few microseconds) and cursors read back with
`pread`; the journal's writer thread makes a page durable (`sync`) just before it writes the batch
whose `PageWritten` record commits the page up to that point. A page is never rewritten: it is deleted
whole once every queue is done with it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from broker_core.journal.files import fsync_dir, write_all
from broker_core.journal.segment import HEADER_SIZE, SegmentHeader, pack_header

KIND_PAGE = 2
_NAME = re.compile(r"^page-(\d{12})\.page$")


def page_name(seq: int) -> str:
    return f"page-{seq:012d}.page"


def parse_page_name(name: str) -> int | None:
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


class PageFile:
    __slots__ = ("_dir_synced", "end", "fd", "path", "seq")

    def __init__(self, seq: int, path: Path, fd: int, end: int, dir_synced: bool) -> None:
        self.seq = seq
        self.path = path
        self.fd = fd
        self.end = end  # bytes written so far (the next record goes here)
        self._dir_synced = dir_synced

    @classmethod
    def create(cls, directory: Path, seq: int) -> PageFile:
        """A new page holding only its header (made durable by the first `sync`)."""
        path = directory / page_name(seq)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            write_all(fd, pack_header(SegmentHeader(KIND_PAGE, 0, seq)))
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        return cls(seq, path, fd, HEADER_SIZE, False)

    @classmethod
    def reopen(cls, path: Path, seq: int, committed: int, sync: bool) -> PageFile:
        """A page of an earlier run, cut back to what the journal committed of it."""
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        size = os.fstat(fd).st_size
        if size > committed:
            os.ftruncate(fd, committed)
            if sync:
                os.fdatasync(fd)
            size = committed
        return cls(seq, path, fd, size, True)

    def append(self, data: bytes) -> int:
        """Write `data` at the end; returns where it starts. On failure (a full disk) the page is cut
        back, so it never holds a partial record, and the error propagates."""
        start = self.end
        try:
            view = memoryview(data)
            at = start
            while view:
                written = os.pwrite(self.fd, view, at)
                view = view[written:]
                at += written
        except OSError:
            os.ftruncate(self.fd, start)
            raise
        self.end = start + len(data)
        return start

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def sync(self) -> None:
        """Make what was appended durable (the journal's writer thread, before its batch)."""
        fd = self.fd
        if fd < 0:
            return  # removed meanwhile: nothing of it is needed any more
        os.fdatasync(fd)
        if not self._dir_synced:
            fsync_dir(self.path.parent)
            self._dir_synced = True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
