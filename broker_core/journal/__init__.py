"""The broker's durable journal: append-only checksummed segments, group commit, recovery, compaction.

The on-disk format is specified in docs/journal-format.md.
"""

from ..compiled import overlay

__path__ = overlay(__name__, __path__)  # the compiled hot path, when built and current

from broker_core.journal import records
from broker_core.journal.errors import (
    JournalClosedError,
    JournalError,
    JournalFailedError,
    JournalFormatError,
)
from broker_core.journal.journal import Journal
from broker_core.journal.node_id import load_or_create_node_id
from broker_core.journal.reader import Position, iter_records
from broker_core.journal.state import Recovered, RecoveredMessage

__all__ = [
    "Journal",
    "JournalClosedError",
    "JournalError",
    "JournalFailedError",
    "JournalFormatError",
    "Position",
    "Recovered",
    "RecoveredMessage",
    "iter_records",
    "load_or_create_node_id",
    "records",
]
