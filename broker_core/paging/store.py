"""The page files of one address, and what each holds for which queue.

A page is appended to while it is the store's `current` page; it is *closed* when it reaches the
address's `page-size-bytes`, or when the address stops paging. A queue *completes* a page once its
cursor has read past the end of a closed page and every reference it read from there is gone; a page
every queue has completed is removed.
"""

from __future__ import annotations

from pathlib import Path

from broker_core.journal.segment import HEADER_SIZE
from broker_core.queues import Queue
from broker_core.usage import Usage

from .pagefile import PageFile


class Page:
    __slots__ = (
        "address",
        "closed",
        "counts",
        "dirty",
        "durable_counts",
        "file",
        "journalled",
        "needed",
        "recovered",
        "seq",
        "visible",
    )

    def __init__(self, file: PageFile, address: str, recovered: bool = False) -> None:
        self.file = file
        self.address = address  # of its store (a record's own address is the message's)
        self.seq = file.seq
        self.counts: dict[int, int] = {}  # references per queue id (this run; durable ones if recovered)
        self.durable_counts: dict[int, int] = {}  # what the journal's PageWritten says, per queue id
        self.needed: set[int] = set()  # queues that have not completed the page
        self.closed = recovered  # no more appends
        self.recovered = recovered  # written before this start: its non-durable records are gone
        self.visible = file.end if recovered else HEADER_SIZE  # cursors read up to here (set per batch)
        self.dirty = False  # durable records appended since the last PageWritten
        self.journalled = recovered  # a PageWritten names it: its removal is journalled too

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Page {self.seq} {state} {self.file.end} bytes, needed by {sorted(self.needed)}>"


class PageCursor:
    """Where one queue is in its address's pages, and what it read from each page and still holds."""

    __slots__ = ("accounted", "acked", "bytes", "offset", "outstanding", "page", "queue")

    def __init__(self, queue: Queue, page: int, offset: int = HEADER_SIZE, size_known: bool = True) -> None:
        self.queue = queue
        self.page = page  # the page being read
        self.offset = offset  # of the next frame in it
        # the bodies of this queue's references still in pages, in bytes; None until counted (a restart
        # knows how many references its pages hold, not their sizes: `Paging.paged_bytes` reads them once)
        self.bytes: int | None = 0 if size_known else None
        self.outstanding: dict[int, int] = {}  # by page: references read back and not yet gone
        self.acked: dict[int, set[int]] = {}  # by page: message ids acknowledged before being read back
        self.accounted: dict[int, int] = {}  # by page: references read back or acknowledged in the page

    def __repr__(self) -> str:
        return f"<PageCursor {self.queue.name!r} at {self.page}:{self.offset}>"

    def read_past(self, page: Page) -> bool:
        """Whether this cursor read the whole of `page` (which no longer grows)."""
        return page.closed and (
            self.page > page.seq or (self.page == page.seq and self.offset >= page.file.end)
        )

    def done_with(self, page: Page) -> bool:
        """Whether every reference of this queue in `page` (which no longer grows) was read back or
        acknowledged, and none read back is still held: the queue completes the page."""
        seq = page.seq
        if not page.closed or self.outstanding.get(seq):
            return False
        return self.read_past(page) or self.accounted.get(seq, 0) >= page.counts.get(self.queue.id, 0)


class PageStore:
    """One address's pages, in page order, and the cursor of each of its queues."""

    __slots__ = ("address", "current", "cursors", "directory", "page_size", "pages", "usage")

    def __init__(self, address: str, usage: Usage, directory: Path, page_size: int) -> None:
        self.address = address
        self.usage = usage
        self.directory = directory
        self.page_size = page_size
        self.pages: dict[int, Page] = {}
        self.current: Page | None = None
        self.cursors: dict[int, PageCursor] = {}  # by queue id

    def __repr__(self) -> str:
        return f"<PageStore {self.address!r} pages={list(self.pages)} paged={self.usage.paged}>"

    @property
    def empty(self) -> bool:
        return not self.pages
