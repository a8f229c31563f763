"""What a side's journal may have dropped: when a missing record means "never had it" and when "gone".

A side with no record of a message reference either never had it or had it and lost the record:
compaction drops settled messages, and a page file whose every message was consumed is deleted. The
reader (``rows.journal_rows``) knows where that can have happened and says so in a few ``history``
rows after the records (``HISTORY`` in the ``event`` column, the fact in ``meta_key``, a number in
``meta_value``):

- ``version``: the reader reports its history (a Parquet export of an earlier version has no such
  row, and is read as before: anything settled may have been lost, no record is taken at its word);
- ``compacted_first``, ``compacted_last``: the sequences of the compacted generation's files, whose
  message records may have been re-encoded without their dead queue references (``trimmed``);
- ``lost|ORIGIN|QUEUE`` = ``H``: records of ORIGIN's messages up to id ``H`` on QUEUE may be gone (an
  empty QUEUE: on every queue; an empty ORIGIN: of every origin). Compaction: per origin, the highest
  id the journal had heard of when the generation was written (the mirror's dedup marks then, and the
  highest local message id for its own messages); a deleted page file: the same when the page was
  removed, for the queues the page held;
- ``queue|NAME``: a queue the journal holds at its end (created, and not removed since).

So "no record" is exact above those horizons (the recent past, where failover divergence lives): the
side never had the reference. Below them, a missing record may be a settled one (``classify``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from broker_core.journal.records import PageRemoved, PageWritten, Record
from broker_core.persistence import ID_RESERVATION
from mirror.target import DEDUP_PREFIX, NEWEST_PREFIX

HISTORY = "history"  # the event of a history row
VERSION = "version"
COMPACTED_FIRST, COMPACTED_LAST = "compacted_first", "compacted_last"
LOST, QUEUE = "lost|", "queue|"
# a side's statuses for a reference it does not hold where the mirror would not have brought it
# (``unmirrored``), or held until its queue was removed (``removed``: a removal the mirror does not carry
# with queue-removal="false"): beside the other side's live reference, no divergence (``not_mirrored``)
UNHELD = ("unmirrored", "removed")
EVERYTHING = (1 << 63) - 1  # a horizon above every id: everything settled may be gone (an export)


def lost_key(origin: str, queue: str) -> str:
    return f"{LOST}{origin}|{queue}"


def history_row(node: str, key: str, value: int, width: int, key_at: int) -> tuple[Any, ...]:
    """A history row of ``width`` columns: node id, event, then the key and value at ``key_at``."""
    row: list[Any] = [None] * width
    row[0], row[3], row[key_at], row[key_at + 1] = node, HISTORY, key, str(value)
    return tuple(row)


class Losses:
    """What a journal being replayed may have dropped, gathered as it is read (``rows._rows``).

    ``known``: per origin, the highest id this journal has heard of so far (the mirror target's dedup
    marks, confirmed and newest); ``top``: its own highest message id (of its records, and below the
    block of ids it reserved: a paged message's record is not in the journal). Their values when the replay
    leaves the compacted generation are the compaction's horizons; their values when a deleted page's
    ``PageRemoved`` is read, that page's (its messages were all consumed by then). A deleted page with
    no ``PageRemoved`` left takes the values at the end."""

    def __init__(
        self, node: str, compacted: tuple[int, int] | None, queues: dict[int, tuple[str, str]]
    ) -> None:
        self.node, self.compacted, self.queues = node, compacted, queues
        self.in_generation = compacted is not None
        self.known: dict[str, int] = {}
        self.top = -1
        self.lost: dict[tuple[str, str], int] = {}
        self.pages: dict[int, set[int]] = {}  # a deleted page -> the queue ids it held
        self.removed: set[int] = set()  # the queue ids removed

    def meta(self, key: str, value: bytes) -> None:
        if key != ID_RESERVATION and not key.startswith((DEDUP_PREFIX, NEWEST_PREFIX)):
            return
        try:
            mark = int(value)
        except ValueError:
            return
        if key == ID_RESERVATION:  # every id handed out is below it, a paged message's included
            self.top = max(self.top, mark - 1)
            return
        origin = key[len(DEDUP_PREFIX) :] if key.startswith(DEDUP_PREFIX) else key[len(NEWEST_PREFIX) :]
        if mark > self.known.get(origin, -1):
            self.known[origin] = mark

    def leave_generation(self) -> None:
        """The replay is past the compacted generation: whatever was settled before it may be gone."""
        self.in_generation = False
        for origin, mark in self._horizons().items():
            self._lose(origin, "", mark)

    def queue_removed(self, queue_id: int) -> None:
        self.removed.add(queue_id)

    def gone(self, record: Record) -> None:
        """A deleted page's record (``paging.replay``'s ``gone``)."""
        if isinstance(record, PageWritten):
            self.pages.setdefault(record.page, set()).update(q for q, _ in record.counts)
        elif isinstance(record, PageRemoved) and record.page in self.pages:
            self._page_lost(self.pages.pop(record.page))

    def rows(self, row: Callable[[str, int], tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
        """The history rows, once the replay is done."""
        if self.in_generation:  # nothing after the generation
            self.leave_generation()
        for queue_ids in self.pages.values():
            self._page_lost(queue_ids)
        yield row(VERSION, 1)
        if self.compacted is not None:
            yield row(COMPACTED_FIRST, self.compacted[0])
            yield row(COMPACTED_LAST, self.compacted[1])
        for (origin, queue), mark in sorted(self.lost.items()):
            yield row(lost_key(origin, queue), mark)
        for name in sorted({name for q, (name, _) in self.queues.items() if q not in self.removed}):
            yield row(QUEUE + name, 1)

    def _horizons(self) -> dict[str, int]:
        return {**self.known, self.node: max(self.top, self.known.get(self.node, -1))}

    def _page_lost(self, queue_ids: set[int]) -> None:
        horizons = self._horizons()
        for q in queue_ids:
            name = self.queues.get(q, (f"#{q}", ""))[0]
            for origin, mark in horizons.items():
                self._lose(origin, name, mark)

    def _lose(self, origin: str, queue: str, mark: int) -> None:
        if mark >= 0 and mark > self.lost.get((origin, queue), -1):
            self.lost[origin, queue] = mark


@dataclass
class SideHistory:
    """A side's history as the driver reads it from pass 1 (``parse``); ``known`` False for an input
    without history rows (an export of an earlier version: anything may be lost, nothing is exact)."""

    known: bool = False
    compacted: tuple[int, int] | None = None
    lost: dict[tuple[str, str], int] = field(default_factory=dict)
    queues: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, facts: dict[str, int]) -> SideHistory:
        """From the history keys and their values (the highest of each)."""
        h = cls(known=VERSION in facts)
        if COMPACTED_FIRST in facts and COMPACTED_LAST in facts:
            h.compacted = (facts[COMPACTED_FIRST], facts[COMPACTED_LAST])
        for key, value in facts.items():
            if key.startswith(LOST):
                origin, _, queue = key[len(LOST) :].partition("|")
                h.lost[origin, queue] = value
            elif key.startswith(QUEUE):
                h.queues.add(key[len(QUEUE) :])
        return h

    def may_have_lost(self, broker: str | None, ident: int | None, queue: str | None) -> bool:
        """Whether this side could have dropped its records of that reference."""
        if not self.known:
            return True
        if ident is None:
            return False
        for key in ((broker or "", ""), (broker or "", queue or ""), ("", "")):
            mark = self.lost.get(key)
            if mark is not None and ident <= mark:
                return True
        return False

    def never_had_queue(self, queue: str | None) -> bool:
        """This side does not hold that queue: it never had it, or removed it."""
        return self.known and queue is not None and queue not in self.queues

    def trimmed(self, segment: int | None) -> bool:
        """Whether a record at ``segment`` may lack queue references it once had (compaction re-encodes
        a message without its dead references); always, for an input without history or a record
        that is not in a journal (an Artemis export's)."""
        if not self.known or segment is None:
            return True
        return self.compacted is not None and self.compacted[0] <= segment <= self.compacted[1]


def never_carried(trimmed: bool, via_mirror: bool | None, queued: bool | None) -> bool:
    """A holder's record that the mirror never carried: its own (not via the mirror), named no
    store-and-forward queue, and was not re-encoded since (so its queues are as routed)."""
    return not trimmed and via_mirror is False and queued is False


def missing_status(
    history: SideHistory,
    node: str,
    mark: int | None,
    broker: str | None,
    ident: int | None,
    queue: str | None,
    other_never_carried: bool,
) -> str:
    """The status on a side with no record of the reference: ``unmirrored`` (it never had it, and the
    mirror would never have brought it), ``absent`` (it never had it) or ``gone`` (it had it, settled
    it, and the record was dropped). The other side holds the reference; whether the mirror ever
    carried its record is ``other_never_carried``.

    - the other side's own record the mirror never carried (an address the mirror filters out, an
      expiry copy: each side makes its own, a message from before the mirror, ...), or a queue this
      side does not hold (its creation was not mirrored; or it removed it, which the mirror does not
      carry with ``queue-removal="false"``): unmirrored,
      whatever the dedup mark says (ids of one origin rise with gaps: a mark past an id says nothing of
      that id);
    - above the side's horizons (``may_have_lost``): absent, exactly;
    - its own message: gone (a side always had what it produced);
    - an id at or below the side's dedup mark for its origin: gone; else absent.
    A side without history (an export of an earlier version) may have lost anything, and holds every
    queue."""
    if other_never_carried or history.never_had_queue(queue):
        return "unmirrored"
    if not history.may_have_lost(broker, ident, queue):
        return "absent"
    produced = broker is not None and broker == node
    received = ident is not None and mark is not None and ident <= mark
    return "gone" if produced or received else "absent"
