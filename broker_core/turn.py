"""One loop turn of a server: hand the journal batch over, run the confirmations that are ready, then
write every connection's output once.

Protocol work marks connections dirty; a single `call_soon` per turn flushes all of them after the
journal batch of the same turn was handed over. That keeps the number of syscalls per message low when
many messages arrive in one read. Confirmations come back from the journal's writer thread through
`dispatch`; they run at the loop's next turn, and also between reads (`after_read`): libuv reads a busy
socket up to 32 times in one loop turn, and a confirmation that is ready must not wait for the end of
such a burst (a mirror target's Accepted, a client's, the store-and-forward queue's dispatch).
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from .journal.errors import JournalError
from .persistence import Callback, Persistence

log = logging.getLogger("broker.turn")

BATCH_BETWEEN_READS = 1000  # records (measured: bench/mirror_bench.py --only catch-up --only throughput)


class Writable(Protocol):
    """A connection whose pending output can be written now."""

    def write_out(self) -> None: ...


class Loop(Protocol):
    """What a turn needs of the event loop (asyncio's has it; an in-memory test pump can too)."""

    def call_soon(self, callback: Callback) -> object: ...
    def call_soon_threadsafe(self, callback: Callback) -> object: ...


class Turn:
    def __init__(self, loop: Loop, persistence: Persistence) -> None:
        self.loop = loop
        self.persistence = persistence
        self.dirty: dict[int, Writable] = {}
        self.scheduled = False
        self.ready: deque[Callback] = deque()  # confirmations: appended by the writer thread, run here
        self.on_fatal: Callable[[BaseException], None] | None = None
        self.failed = False
        persistence.set_scheduler(self._schedule)

    def mark_dirty(self, connection: Writable) -> None:
        self.dirty[id(connection)] = connection
        self._schedule()

    def _schedule(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        self.hand_to_journal()
        while self.dirty:
            dirty, self.dirty = self.dirty, {}
            for connection in dirty.values():
                connection.write_out()

    def after_read(self) -> None:
        """After each socket read: a large batch goes to the journal now rather than at the end of the turn
        (a mirror target's batch was up to 7,000 deliveries, its last one holding up the end of a
        catch-up), and confirmations that are ready run now, so that what is durable is confirmed."""
        if self.persistence.pending_records() >= BATCH_BETWEEN_READS:
            self.hand_to_journal()
        self.run_ready()

    def hand_to_journal(self) -> None:
        try:
            self.persistence.flush()
        except JournalError as exc:
            self.journal_failed(exc)

    def journal_failed(self, exc: BaseException) -> None:
        """Nothing can be made durable any more: stop (Artemis's critical I/O policy), loudly, once."""
        if self.failed:  # said, and the stop asked for, once: the batches after it fail too
            log.debug("journal still failed: %s", exc)
            return
        self.failed = True
        log.critical("journal failed, the broker cannot persist and shuts down: %s", exc)
        if self.on_fatal is not None:
            self.on_fatal(exc)

    def dispatch(self, callback: Callback) -> None:
        """The journal's `dispatch` (writer thread): one call per batch of callbacks."""
        self.ready.append(callback)
        with contextlib.suppress(RuntimeError):  # a closed loop: the process ends, nothing is confirmed
            self.loop.call_soon_threadsafe(self.run_ready)

    def run_ready(self) -> None:
        """Run the confirmations that are ready, in order (loop thread)."""
        ready = self.ready
        while ready:
            ready.popleft()()
