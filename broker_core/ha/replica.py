"""The backup's side of replication: a copy of its primary's journal and page files in its own data
directories, from which it activates when the primary is gone (replication_wire.py has the packets).

On `hello` the backup starts over: what its directories held goes to `oldreplica.<n>` beside them (the
last `max-saved-replicated-journals-size` are kept), it takes the primary's node id, and opens a journal
of its own. The snapshot's frames and then each live batch's are appended to that journal as records
(its live state is the primary's; it compacts its own way), page bytes go to the page files at their
offsets, and a removed page goes too. Each packet is settled once applied (written, not synced: as
Artemis's backup, the copy is in the primary's fsync and the backup's page cache). After `synchronized`
the backup holds everything the primary confirmed: it may take over.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_core.journal.journal import Journal
from broker_core.journal.node_id import adopt_node_id
from broker_core.journal.records import PageRemoved, Record
from broker_core.journal.recovery import decode_frame
from broker_core.journal.segment import FrameScanner
from broker_core.paging.pagefile import page_name

from . import replication_wire as wire
from .node_files import write_activation_sequence
from .replication_states import FollowEvent

Callback = Callable[[], None]
log = logging.getLogger("broker.ha")

KEEP = ("serverlock.1", "serverlock.2", "server.lock")  # lock files stay where they are


class Replica:
    def __init__(
        self,
        journal_dir: Path,
        paging_dir: Path,
        lock_dir: Path,
        keep_old: int,
        dispatch: Callable[[Callback], None],
        segment_size: int,
        group_name: str | None = None,
        on_event: Callable[[FollowEvent], None] = lambda event: None,
    ) -> None:
        self.journal_dir = Path(journal_dir)
        self.paging_dir = Path(paging_dir)
        self.lock_dir = Path(lock_dir)
        self.keep_old = keep_old
        self.dispatch = dispatch
        self.segment_size = segment_size
        self.group_name = group_name  # replicate only from a primary of this group-name, when both say
        self.on_event = on_event  # the stream's news, for the coordinator's follow table
        self.expected_node_id: str | None = None  # a primary follows only an active server of its node id
        self.journal: Journal | None = None
        self.node_id: str | None = None
        self.activation_sequence = 0
        self.synchronized = False
        self.primary = ""
        self.primary_stopped: str | None = None  # "failover" or "paused": the primary said it stops

    def apply(self, payload: bytes, done: Callback) -> None:
        """One packet; `done()` once it is applied (possibly later, from the journal)."""
        kind, body = wire.parse(payload)
        if kind == wire.HELLO:
            self._begin(body)
            done()
        elif kind == wire.SNAPSHOT:
            self._append(_records(body), done)
        elif kind == wire.PAGE:
            self._write_page(body)
            done()
        elif kind == wire.SYNCHRONIZED:
            self._synchronized(done)
        elif kind == wire.STOPPING:
            failover = bool(body.get("failover"))
            self.primary_stopped = "failover" if failover else "paused"
            log.info("AMQ221028: primary %s is stopping (%s)", self.primary, self.primary_stopped)
            done()
            self.on_event(FollowEvent.SAID_FAILOVER if failover else FollowEvent.SAID_PAUSED)
        else:
            _tag, chunks, frames = body
            for chunk in chunks:
                self._write_page(chunk)
            records = _records(frames)
            gone = [r.page for r in records if isinstance(r, PageRemoved)]
            self._append(records, lambda: self._remove_pages(gone, done))

    def _begin(self, hello: dict[str, Any]) -> None:
        theirs = hello.get("groupName")
        if self.group_name is not None and theirs != self.group_name:
            raise wire.ReplicationFormatError(
                f"primary {hello.get('name')} is in group-name {theirs!r}, this server in {self.group_name!r}"
            )
        expected = self.expected_node_id
        if expected is not None and hello.get("nodeId") != expected:
            theirs_id = hello.get("nodeId")
            raise wire.ReplicationFormatError(
                f"{hello.get('name')} is active with node id {theirs_id}, not this server's {expected}"
            )
        self.close()
        self.synchronized = False
        self.primary_stopped = None
        self._put_aside()
        self.node_id = str(hello["nodeId"])
        self.activation_sequence = int(hello["activationSequence"])
        self.primary = str(hello.get("name", ""))
        self.journal_dir.mkdir(parents=True, exist_ok=True)
        self.paging_dir.mkdir(parents=True, exist_ok=True)
        adopt_node_id(self.journal_dir, self.node_id)
        journal = Journal(
            self.journal_dir, segment_size=self.segment_size, fsync=False, dispatch=self.dispatch
        )
        journal.open()
        self.journal = journal
        log.info("AMQ221026: replicating from primary %s (node id %s)", self.primary, self.node_id)
        self.on_event(FollowEvent.STREAM_UP)

    def _append(self, records: list[Record], done: Callback) -> None:
        if self.journal is None:
            raise wire.ReplicationFormatError("replication data before hello")
        self.journal.append_many(records, on_durable=done)

    def _synchronized(self, done: Callback) -> None:
        def finished() -> None:
            write_activation_sequence(self.lock_dir, self.activation_sequence)
            self.synchronized = True
            log.info("AMQ221024: backup is synchronized with primary %s", self.primary)
            done()
            self.on_event(FollowEvent.SYNCHRONIZED)

        self._append([], finished)  # after everything appended before it

    def _write_page(self, chunk: wire.PageChunk) -> None:
        fd = os.open(self.paging_dir / page_name(chunk.page), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.pwrite(fd, chunk.data, chunk.offset)
        finally:
            os.close(fd)

    def _remove_pages(self, pages: list[int], done: Callback) -> None:
        for page in pages:
            (self.paging_dir / page_name(page)).unlink(missing_ok=True)
        done()

    def _put_aside(self) -> None:
        """What the directories held before: into oldreplica.<n> (Artemis keeps the last few)."""
        held = [p for p in self._contents() if p.name not in KEEP]
        if not held:
            return
        parent = self.journal_dir.parent
        numbers = sorted(
            int(p.name.split(".")[1]) for p in parent.glob("oldreplica.*") if p.name.split(".")[1].isdigit()
        )
        target = parent / f"oldreplica.{(numbers[-1] + 1) if numbers else 1}"
        for path in held:
            destination = target / path.parent.name / path.name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), destination)
        log.info("AMQ221027: the data this backup held before is kept in %s", target.name)
        numbers.append(int(target.name.split(".")[1]))
        while self.keep_old >= 0 and len(numbers) > self.keep_old:
            shutil.rmtree(parent / f"oldreplica.{numbers.pop(0)}", ignore_errors=True)

    def _contents(self) -> list[Path]:
        found: list[Path] = []
        for directory in (self.journal_dir, self.paging_dir):
            if directory.is_dir():
                found += list(directory.iterdir())
        return found

    def close(self) -> None:
        journal, self.journal = self.journal, None
        if journal is not None:
            journal.close()


def _records(frames: bytes) -> list[Record]:
    scanner = FrameScanner(frames, 0)
    records = [decode_frame(frame) for frame in scanner]
    if scanner.problem is not None:
        raise wire.ReplicationFormatError(f"bad frames in a replication packet: {scanner.problem}")
    return records
