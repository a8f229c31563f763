"""Journal exceptions, named after whose fault they are."""

from __future__ import annotations


class JournalError(Exception):
    """Base class of the journal's own errors."""


class JournalFormatError(JournalError):
    """The directory holds data this version cannot read (newer format, inconsistent compaction marker).

    Recovery refuses to cut such data: cutting is only for torn or corrupt bytes.
    """


class JournalFailedError(JournalError):
    """A write or fsync failed; nothing appended after that point is durable and the journal is closed.

    After a failed fsync the kernel may have dropped the dirty pages, so retrying could report success
    for data that is not on disk: the only safe recovery is a restart that replays the files.
    """


class JournalClosedError(JournalError):
    """The journal is not open (never opened, or closed)."""


class JournalFull(JournalError):
    """The disk is full: the journal takes no appends until `resume()`. Nothing written before is lost,
    and no partial record stays behind; what could not be written was handed back to its owner."""
