"""Read-only access to a journal directory, for tools such as the DR reconciliation job.

``iter_records`` yields what recovery would replay, in the same order, but never changes anything:
it skips compaction debris and superseded files instead of deleting them, and stops at a torn or
corrupt tail instead of cutting it. On a live directory it sees a consistent prefix of the journal
(a record is only yielded when it is complete and its crc matches); a compaction finishing while it
reads can remove files it has not reached yet, which ends the iteration with FileNotFoundError.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from broker_core.journal.layout import plan
from broker_core.journal.records import Record
from broker_core.journal.recovery import ReplayScan, decode_frame


class Position(NamedTuple):
    segment: int  # segment sequence number
    offset: int  # of the record's frame within the segment file


def iter_records(directory: Path) -> Iterator[tuple[Position, Record]]:
    """Every valid record of the journal in ``directory``, in replay order."""
    for header, frame in ReplayScan(plan(Path(directory)).replay):
        yield Position(header.seq, frame.offset), decode_frame(frame)
