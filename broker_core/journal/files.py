"""Small durable-file helpers: create a segment with its header, fsync a directory, write atomically."""

from __future__ import annotations

import os
from pathlib import Path

from broker_core.journal.segment import SegmentHeader, pack_header


def fsync_dir(directory: Path) -> None:
    """Make creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write may write less than asked (e.g. near a full disk): loop until all is written."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def create_segment(path: Path, header: SegmentHeader, sync: bool) -> int:
    """Create ``path`` (which must not exist) holding just the header; returns a write fd at its end.

    The header and the directory entry are made durable before any record goes in, so a segment that
    exists after a crash always has a valid header unless the crash hit this very call.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, pack_header(header))
        if sync:
            os.fdatasync(fd)
            fsync_dir(path.parent)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_atomically(path: Path, data: bytes, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new content: write a tmp
    file, fsync it, rename it over ``path``, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def remove_files(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
