"""Duplicate detection: a send carrying `_AMQ_DUPL_ID` is stored once, however often it is retried.

Artemis's recipe for once-and-only-once (seed 001 §5): the producer gives each message a unique id in
the `_AMQ_DUPL_ID` application property and, after a failover leaves a send in doubt, sends it again
with the same id. The broker remembers the last `id-cache-size` ids of each address and takes a
repeat as done: Accepted (once the original is durable) and not routed again. With `persist-id-cache`
the ids are journalled with their message, in the same batch, so they survive a restart and fail over
with the journal (shared store) or with its copy (replication). A mirror target remembers the ids of
what it applies too, so a client retrying on the other data centre after a DR failover is deduped.
"""

from __future__ import annotations

from typing import Any

from .journal import records
from .message import APPLICATION_PROPERTIES, MessageView
from .persistence import Persistence

PROPERTY = "_AMQ_DUPL_ID"
_MARK = PROPERTY.encode()


def duplicate_id(view: MessageView) -> bytes | None:
    """The message's `_AMQ_DUPL_ID` (a string or binary value), or None; the application properties are
    decoded only when the bytes of the name are in the message."""
    if _MARK not in view.payload:
        return None
    value: Any = view.section_map(APPLICATION_PROPERTIES).get(PROPERTY)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return None


class DuplicateIds:
    """The last `size` duplicate ids of each address."""

    def __init__(self, size: int, persist: bool, persistence: Persistence) -> None:
        self.size = size
        self.persist = persist
        self.persistence = persistence
        self.by_address: dict[str, dict[bytes, None]] = {}
        self.rejected = 0  # repeats taken as done

    def restore(self, recovered: dict[str, list[bytes]]) -> None:
        for address, ids in recovered.items():
            self.by_address[address] = dict.fromkeys(ids[-self.size :] if self.size else [])

    def seen(self, address: str, dup: bytes) -> bool:
        ids = self.by_address.get(address)
        return ids is not None and dup in ids

    def remember(self, address: str, dup: bytes, message_id: int = 0) -> None:
        """Remember `dup` for the message `message_id` just routed: its record joins the message's
        journal batch, and goes with it if that batch is refused (`forget`)."""
        if self.size <= 0:
            return
        ids = self.by_address.get(address)
        if ids is None:
            ids = self.by_address[address] = {}
        ids.pop(dup, None)
        ids[dup] = None
        while len(ids) > self.size:
            del ids[next(iter(ids))]
        if self.persist and self.persistence.enabled:
            self.persistence.persist(records.DuplicateIdAdded(address, dup, self.size, message_id))

    def forget(self, address: str, dup: bytes) -> None:
        """The send that `dup` protected was refused after all (its message taken back): a retry with the
        same id must be stored. Its record, if still unwritten, is dropped with the message's."""
        ids = self.by_address.get(address)
        if ids is not None:
            ids.pop(dup, None)
