"""The journal's record types: facts about addresses, queues, messages and metadata, never changed.

Ids are allocated by the server, monotonically per kind; the journal only remembers the highest ones.
``HighestIds`` is the journal's own record: compaction writes it so that the highest ids survive even
when every record that carried them is dead and gets dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker_core.vocabulary import ROUTING_TYPES, AckReason


@dataclass(frozen=True, slots=True)
class AddressAdded:
    address_id: int
    name: str
    routing_types: frozenset[str]
    auto_created: bool = False
    internal: bool = False

    def __post_init__(self) -> None:
        if not self.routing_types <= ROUTING_TYPES:
            raise ValueError(f"unknown routing types {sorted(self.routing_types - ROUTING_TYPES)}")


@dataclass(frozen=True, slots=True)
class AddressRemoved:
    address_id: int


@dataclass(frozen=True, slots=True)
class QueueAdded:
    queue_id: int
    name: str
    address: str
    routing_type: str
    durable: bool = True
    filter_string: str | None = None
    max_consumers: int = -1
    auto_created: bool = False
    internal: bool = False
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.routing_type not in ROUTING_TYPES:
            raise ValueError(f"unknown routing type {self.routing_type!r}")


@dataclass(frozen=True, slots=True)
class QueueRemoved:
    queue_id: int


# The two records written per message are not frozen and have a hand-written __init__: compiled, it
# costs 0.05 µs, where a dataclass's generated one runs as interpreted Python (0.3 µs, frozen 1 µs).


@dataclass(slots=True, init=False)
class MessageAdded:
    """A durable message and its references to every queue it was routed to (body written once)."""

    message_id: int
    address: str
    queue_ids: tuple[int, ...]
    body: bytes
    timestamp_ms: int
    expiry_ms: int  # 0: never expires
    priority: int
    origin_broker_id: str | None
    origin_message_id: int | None
    via_mirror: bool
    durable: bool  # False only in a page file: a non-durable message paged to bound memory

    def __init__(
        self,
        message_id: int,
        address: str,
        queue_ids: tuple[int, ...],
        body: bytes,
        timestamp_ms: int = 0,
        expiry_ms: int = 0,
        priority: int = 4,
        origin_broker_id: str | None = None,
        origin_message_id: int | None = None,
        via_mirror: bool = False,
        durable: bool = True,
    ) -> None:
        self.message_id = message_id
        self.address = address
        self.queue_ids = queue_ids
        self.body = body
        self.timestamp_ms = timestamp_ms
        self.expiry_ms = expiry_ms
        self.priority = priority
        self.origin_broker_id = origin_broker_id
        self.origin_message_id = origin_message_id
        self.via_mirror = via_mirror
        self.durable = durable


@dataclass(slots=True, init=False)
class MessageAcked:
    """One reference gone; the message is dead when all its references are acked or their queues removed."""

    queue_id: int
    message_id: int
    reason: int
    via_mirror: bool
    timestamp_ms: int

    def __init__(
        self,
        queue_id: int,
        message_id: int,
        reason: int = AckReason.NORMAL,
        via_mirror: bool = False,
        timestamp_ms: int = 0,
    ) -> None:
        self.queue_id = queue_id
        self.message_id = message_id
        self.reason = reason
        self.via_mirror = via_mirror
        self.timestamp_ms = timestamp_ms


@dataclass(frozen=True, slots=True)
class MessagesAcked:
    """References of one queue gone together, for one reason: the same as a ``MessageAcked`` per id, in
    one record. A mirror source writes one for the events its target accepted in one disposition."""

    queue_id: int
    message_ids: tuple[int, ...]
    reason: int = AckReason.NORMAL
    via_mirror: bool = False
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class DeliveryCountUpdated:
    queue_id: int
    message_id: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class MetaRecord:
    """A small key/value fact; the last write of a key wins."""

    key: str
    value: bytes


@dataclass(frozen=True, slots=True)
class HighestIds:
    """Written by compaction: the highest ids used so far, so they survive dropping dead records."""

    address_id: int
    queue_id: int
    message_id: int


# Paging (broker_core/paging/): messages of an address over its memory limit go to page files, written
# as `MessageAdded` frames; the journal holds what is committed of each page and which references
# in it are gone. Page numbers are unique per broker, whatever the address.


@dataclass(frozen=True, slots=True)
class PageWritten:
    """Page file `page` of `address` is committed up to byte `end`, holding `counts` durable references
    per queue (queue id, count). The last record of a page wins; written in the batch that commits the
    page's bytes (which were synced first), so a crash can never keep a page record the journal lacks."""

    page: int
    address: str
    end: int
    counts: tuple[tuple[int, int], ...]


@dataclass(slots=True, init=False)
class PageAcked:
    """A paged message's reference on one queue gone (the paged form of `MessageAcked`)."""

    queue_id: int
    message_id: int
    page: int
    reason: int
    via_mirror: bool
    timestamp_ms: int

    def __init__(
        self,
        queue_id: int,
        message_id: int,
        page: int,
        reason: int = AckReason.NORMAL,
        via_mirror: bool = False,
        timestamp_ms: int = 0,
    ) -> None:
        self.queue_id = queue_id
        self.message_id = message_id
        self.page = page
        self.reason = reason
        self.via_mirror = via_mirror
        self.timestamp_ms = timestamp_ms


@dataclass(frozen=True, slots=True)
class PageCompleted:
    """Every reference of `queue_id` in `page` is gone (its `PageAcked` records die with this)."""

    queue_id: int
    page: int


@dataclass(frozen=True, slots=True)
class PageRemoved:
    """The page file is deleted (every queue completed it): every record about the page dies."""

    page: int


@dataclass(frozen=True, slots=True)
class DuplicateIdAdded:
    """A send's duplicate id (`_AMQ_DUPL_ID`) remembered for its address; an address keeps its last
    `cache_size` ids (id-cache-size), so older ones die as newer ones come.

    `message_id` names the message the id protects, in memory only (never journalled): when that send is
    refused after all (a full disk), its id's record is dropped with its message's, so a retry of the
    same send is stored, not taken for a duplicate of what was never kept."""

    address: str
    duplicate_id: bytes
    cache_size: int
    message_id: int = field(default=0, compare=False)


Record = (
    AddressAdded
    | AddressRemoved
    | QueueAdded
    | QueueRemoved
    | MessageAdded
    | MessageAcked
    | MessagesAcked
    | DeliveryCountUpdated
    | MetaRecord
    | HighestIds
    | PageWritten
    | PageAcked
    | PageCompleted
    | PageRemoved
    | DuplicateIdAdded
)
