"""The journal with its pages, read-only, as if every message had been journalled: for tools (the DR job).

`iter_records` of the journal, with the page records expanded:
- a `PageWritten` is followed by the `MessageAdded` records it committed (the page's bytes since the
  previous `PageWritten` of that page), non-durable ones left out, as recovery leaves them out;
- a `PageAcked` reads as the `MessageAcked` it is;
- a `PageCompleted` reads as a `MessageAcked` of every record of the page for that queue not acked yet
  (compaction drops the `PageAcked` records a completion makes dead), and a `PageRemoved` as one of
  every record of the page not acked yet (every queue was done with it);
- a page whose file is gone already (removed before this read) is left out entirely, acks included,
  as compaction leaves out consumed messages; `gone`, when given, is told of each such page's
  `PageWritten` and `PageRemoved` records (what a reader may have lost: the page's address and queues,
  and where in the journal its last message was consumed).
Expanded records carry the position of the journal record that stands for them. One pass; a page is
read once, in the pieces its commits added.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.journal.reader import Position, iter_records
from broker_core.journal.records import (
    MessageAcked,
    MessageAdded,
    PageAcked,
    PageCompleted,
    PageRemoved,
    PageWritten,
    Record,
)
from broker_core.journal.recovery import decode_frame
from broker_core.journal.segment import HEADER_SIZE, FrameScanner
from broker_core.vocabulary import AckReason

from .pagefile import page_name


def paging_directory_of(journal: Path) -> Path:
    """Where a broker keeps its pages by default: `paging` beside its `journal` directory."""
    return Path(journal).parent / "paging"


@dataclass
class _Page:
    read_to: int = HEADER_SIZE
    gone: bool = False  # its file was removed before it could be read
    refs: dict[int, list[int]] = field(default_factory=dict)  # queue id -> message ids, in page order
    acked: dict[int, set[int]] = field(default_factory=dict)  # queue id -> message ids acked


def iter_records_with_pages(
    journal: Path, paging: Path | None = None, gone: Callable[[Record], None] | None = None
) -> Iterator[tuple[Position, Record]]:
    """Every record of the journal in replay order, page records expanded (see the module's doc)."""
    paging = paging_directory_of(journal) if paging is None else paging
    pages: dict[int, _Page] = {}
    for position, record in iter_records(journal):
        kind = type(record)
        if kind is PageWritten:
            assert isinstance(record, PageWritten)
            written = pages.setdefault(record.page, _Page())
            for added in _committed(paging / page_name(record.page), written, record.end):
                yield position, added
            if written.gone and gone is not None:
                gone(record)
            continue
        if kind is not PageAcked and kind is not PageCompleted and kind is not PageRemoved:
            yield position, record
            continue
        assert isinstance(record, (PageAcked, PageCompleted, PageRemoved))
        page = pages.get(record.page)
        if page is None or page.gone:
            if page is not None and gone is not None and kind is PageRemoved:
                gone(record)
            continue
        if isinstance(record, PageAcked):
            page.acked.setdefault(record.queue_id, set()).add(record.message_id)
            yield (
                position,
                MessageAcked(
                    record.queue_id, record.message_id, record.reason, record.via_mirror, record.timestamp_ms
                ),
            )
            continue
        queues = [record.queue_id] if isinstance(record, PageCompleted) else list(page.refs)
        for queue_id in queues:
            acked = page.acked.setdefault(queue_id, set())
            for message_id in page.refs.get(queue_id, ()):
                if message_id not in acked:
                    acked.add(message_id)
                    yield position, MessageAcked(queue_id, message_id, AckReason.NORMAL)
        if isinstance(record, PageRemoved):
            del pages[record.page]


def _committed(path: Path, page: _Page, end: int) -> Iterator[MessageAdded]:
    """The durable records of a page file from where its last commit ended up to `end`."""
    if end <= page.read_to or page.gone:
        return
    try:
        with path.open("rb") as handle:
            handle.seek(page.read_to)
            data = handle.read(end - page.read_to)
    except FileNotFoundError:
        page.gone = page.read_to == HEADER_SIZE  # never read: leave it out whole (consumed and removed)
        return
    scanner = FrameScanner(data, 0)
    for frame in scanner:
        record = decode_frame(frame)
        if isinstance(record, MessageAdded) and record.durable:
            for queue_id in record.queue_ids:
                page.refs.setdefault(queue_id, []).append(record.message_id)
            yield record
    page.read_to += scanner.valid_end
