"""The memory an address's messages hold, the limits on it, and who waits for room.

Artemis's model: every address has a size (its messages in memory) and a `max-size-bytes` /
`max-size-messages` limit from its address settings; the broker as a whole has `global-max-size` /
`global-max-messages`; and the disk has `max-disk-usage` / `min-disk-free`. When an address would go
over a limit, its `address-full-policy` decides: PAGE (to page files, see paging/), BLOCK (producers
get no more credit until there is room), FAIL (the send is refused) or DROP (the message is dropped).

A message counts against the address it was sent to once, however many of that address's queues hold
it, from routing until its last reference there is gone; a reference on a queue of another address (a
mirror's store-and-forward queue) counts against that address, on its own. The cost of a message is its
encoded size plus `MESSAGE_OVERHEAD`, the memory the broker keeps around each one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import IntEnum

Waiter = Callable[[], None]

log = logging.getLogger("broker.limits")

# Bytes of memory per message besides its body: the stored message, its reference on a queue, the
# queue's index entry, the identity index and the journal's live entry. Measured: 762 bytes per durable
# 1 KiB message on one queue (tracemalloc, bench/paging_bench.py --overhead); rounded up for what the
# allocator keeps around them.
MESSAGE_OVERHEAD = 900


class Admission(IntEnum):
    """What routing does with a message for an address, given its usage and policy."""

    MEMORY = 0  # into the queues' memory as usual
    PAGE = 1  # into the address's page files
    FAIL = 2  # refused: amqp:resource-limit-exceeded
    DROP = 3  # dropped, counted


class Budget:
    """The broker-wide limits (global-max-size, global-max-messages) and the disk's state."""

    __slots__ = ("bytes", "disk_full", "max_bytes", "max_messages", "messages", "waiters", "write_failed")

    def __init__(self, max_bytes: int = -1, max_messages: int = -1) -> None:
        self.max_bytes = max_bytes  # -1: no limit
        self.max_messages = max_messages
        self.bytes = 0
        self.messages = 0
        self.disk_full = False  # over max-disk-usage / min-disk-free: producers are blocked everywhere
        self.write_failed = False  # the journal met a full disk: the same, until it writes again
        self.waiters: list[Waiter] = []  # producers blocked by a global limit or the disk

    def over(self, cost: int) -> bool:
        limit = self.max_bytes
        if limit >= 0 and self.bytes + cost > limit:
            return True
        limit = self.max_messages
        return limit >= 0 and self.messages >= limit

    def hold(self, n: int) -> None:
        """Memory held outside every address (a delivery still arriving) counts against the limit too."""
        self.bytes += n

    def release(self, n: int) -> None:
        self.bytes -= n
        if self.waiters and not self.no_room and not self.over(0):
            self.wake()

    @property
    def no_room(self) -> bool:
        """Whether the disk blocks every producer."""
        return self.disk_full or self.write_failed

    def wait(self, waiter: Waiter) -> None:
        self.waiters.append(waiter)

    def wake(self) -> None:
        """Room again (memory freed, or the disk has space): every blocked producer may try again."""
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            waiter()


class Usage:
    """One address's messages in memory, its limits and full policy, and the producers it blocks."""

    __slots__ = (
        "address",
        "blocks",
        "budget",
        "bytes",
        "dropped",
        "max_bytes",
        "max_messages",
        "messages",
        "paged",
        "policy",
        "read_bytes",
        "read_messages",
        "refused",
        "reject_threshold",
        "store",
        "waiters",
    )

    def __init__(
        self,
        address: str,
        budget: Budget,
        *,
        max_bytes: int = -1,
        max_messages: int = -1,
        policy: str = "PAGE",
        reject_threshold: int = -1,
        read_bytes: int = 20 * 1024 * 1024,
        read_messages: int = -1,
    ) -> None:
        self.address = address
        self.budget = budget
        self.max_bytes = max_bytes
        self.max_messages = max_messages
        self.policy = policy
        self.reject_threshold = reject_threshold  # BLOCK: refuse a send past this size (-1: never)
        self.read_bytes = read_bytes  # how much a queue reads back from its pages at a time
        self.read_messages = read_messages
        self.bytes = 0
        self.messages = 0
        self.paged = 0  # references in page files not yet read back, over all the address's queues
        self.dropped = 0  # messages dropped by the DROP policy
        self.refused = 0  # sends refused by the FAIL policy (or BLOCK's reject threshold)
        self.blocks = 0  # times BLOCK held the address's producers
        self.store: object | None = None  # the address's page store while it has one (paging/)
        self.waiters: list[Waiter] = []

    def __repr__(self) -> str:
        return f"<Usage {self.address!r} {self.bytes} bytes, {self.messages} messages, {self.paged} paged>"

    def over(self, cost: int) -> bool:
        """Whether one more message of `cost` bytes would go over this address's or the broker's limits."""
        limit = self.max_bytes
        if limit >= 0 and self.bytes + cost > limit:
            return True
        limit = self.max_messages
        if limit >= 0 and self.messages >= limit:
            return True
        return self.budget.over(cost)

    def refuses(self, cost: int) -> bool:
        """Whether routing would refuse a message of `cost` bytes now (FAIL over a limit; BLOCK over its
        reject threshold), as paging's `admit` decides: a delivery still arriving is refused as soon as
        its size so far shows it will be."""
        if self.store is not None or not self.over(cost):
            return False
        if self.policy == "FAIL":
            return True
        threshold = self.reject_threshold
        return self.policy == "BLOCK" and threshold >= 0 and self.bytes + cost > threshold

    def add(self, cost: int) -> None:
        self.bytes += cost
        self.messages += 1
        budget = self.budget
        budget.bytes += cost
        budget.messages += 1

    def sub(self, cost: int) -> None:
        self.bytes -= cost
        self.messages -= 1
        budget = self.budget
        budget.bytes -= cost
        budget.messages -= 1
        if self.waiters and self.may_send():
            self.wake()
        if budget.waiters and not budget.no_room and not budget.over(0):
            budget.wake()

    def wait(self, waiter: Waiter) -> None:
        """`waiter()` once producers to this address may be given credit again (and maybe earlier: a
        waiter checks again)."""
        if not self.waiters and self.policy == "BLOCK" and self.over(0):
            self.blocks += 1
            log.warning(
                "AMQ222183: Blocking message production on address '%s'; size=%d bytes (%d messages); "
                "maxSize=%d bytes (%d messages)",
                self.address,
                self.bytes,
                self.messages,
                self.max_bytes,
                self.max_messages,
            )
        self.waiters.append(waiter)

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        if self.policy == "BLOCK":
            log.info(
                "AMQ221046: Unblocking message production on address '%s'; size=%d bytes (%d messages)",
                self.address,
                self.bytes,
                self.messages,
            )
        for waiter in waiters:
            waiter()

    def may_send(self) -> bool:
        """Whether producers to this address may be given credit now: not while the disk is full, nor
        while a BLOCK address is full."""
        if self.budget.no_room:
            return False
        return self.policy != "BLOCK" or not self.over(0)
