"""What HA replication needs of the journal: a consistent snapshot of the live state to copy, and every
batch written after it (the journal's batch tap), with nothing in between lost or counted twice.

`Journal.start_replication` takes the snapshot on the writer thread between two batches: it rolls the
active segment (so the live messages all lie in closed files), copies the live state's entities as frames
and the live messages' places, pauses compaction (the files must stay until they are copied), and from
then on taps every batch. `frames()` then reads the messages' frames from the files, in journal order,
on any thread. A backup that replays the snapshot's frames, then the tapped batches in order, holds the
primary's live state (its own journal, compacted its own way).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.journal.codec import encode
from broker_core.journal.compaction import Sources, entity_items, message_frame
from broker_core.journal.records import DeliveryCountUpdated
from broker_core.journal.state import LiveMessage, LiveState


@dataclass
class ReplicationSnapshot:
    entities: list[bytes]  # frames: highest ids, addresses, queues, meta, duplicate ids, pages
    messages: list[tuple[int, LiveMessage]]  # (message id, a copy of where its frame is), journal order
    files: dict[int, Path]  # the closed segments the messages lie in
    pages: dict[int, int] = field(default_factory=dict)  # committed page files: page -> end

    def frames(self, chunk: int = 1 << 20) -> Iterator[bytes]:
        """The snapshot as frames, in chunks of about `chunk` bytes."""
        out: list[bytes] = []
        size = 0
        for frame in self._frames():
            out.append(frame)
            size += len(frame)
            if size >= chunk:
                yield b"".join(out)
                out, size = [], 0
        if out:
            yield b"".join(out)

    def _frames(self) -> Iterator[bytes]:
        yield from self.entities
        with Sources(self.files) as sources:
            for message_id, message in self.messages:
                yield message_frame(message, sources)
                for queue_id, count in (message.counts or {}).items():
                    yield encode(DeliveryCountUpdated(queue_id, message_id, count))


def capture(state: LiveState, files: dict[int, Path]) -> ReplicationSnapshot:
    """The live state now (the writer thread, between batches)."""
    messages = [
        (
            mid,
            LiveMessage(
                m.seq, m.offset, m.size, list(m.refs), dict(m.counts) if m.counts else None, m.trimmed
            ),
        )
        for mid, m in state.messages.items()
    ]
    pages = {seq: page.written.end for seq, page in state.pages.items()}
    return ReplicationSnapshot([frame for frame, _ in entity_items(state)], messages, dict(files), pages)


def _copy(counts: dict[int, int] | None) -> dict[int, int] | None:
    return dict(counts) if counts else None
