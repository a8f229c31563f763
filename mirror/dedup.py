"""What a mirror target remembers of each origin broker, to apply every event once (pure).

`RecentIds`: the ids of the messages an origin sent us; `RecentAcks`: the acknowledgements of its
messages we applied. A source re-sends everything not yet Accepted when its link comes back (Artemis's
and ours), so both are asked about every event that arrives.
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

from broker_core.persistence import ID_BLOCK


class RecentIds:
    """Which ids of one origin were applied: an exact window of the latest, and a floor below it.

    Ids of one origin rise, with gaps: ids of its messages that were not mirrored, and up to a reserved
    block (`persistence.ID_BLOCK`) skipped whenever the origin restarts. An Artemis source numbers a
    message when it is sent and queues it for the mirror at commit, so a transaction can also deliver an
    older id after newer ones. The window (Artemis keeps `amqpCredits` ids; we keep more) recognises
    those; ids below the floor count as seen.

    No single id may move the floor, or the watermark persisted for a restart, far ahead: an id of 2^62
    (injected, or corrupt) would make every later id of that origin a "duplicate". So an id counts for
    them only once it is *confirmed*: once a later id at or above it arrived (legitimate traffic always
    catches up with its own ids, jumps included; a lone outlier is never caught up with).
    - Nor can a few ids confirm each other far ahead of the traffic (2^62, then 2^62 + 1): an id more
      than `JUMP` beyond the confirmed ones is confirmed only once `CATCH_UP` arrivals in a row came
      from beyond there, none from the confirmed traffic in between. A legitimate jump (the reserved
      block an origin skips when it restarts: ours `persistence.ID_BLOCK`, Artemis's up to 2^31 after
      a crash; a long run of its messages that were not mirrored) is followed by the origin's traffic
      and nothing below it, so it is caught up with after `CATCH_UP` messages; until then its ids are
      known exactly in the window.
    - The floor rises to the oldest id leaving the window only when that id is at or below the highest
      confirmed id. An id ahead of everything that followed it leaves the window into `ahead` instead, a
      small exact set, so that a re-sent copy of it is still recognised.
    - The watermark persisted for a restart is the highest confirmed id; the newest id is persisted
      beside it (`newest`) and comes back as an exact entry of the window, never as the floor. After a
      restart the watermark becomes the floor, and the ids of the origin's messages still held here are
      known exactly as well (`MirrorTarget` adds them).
    """

    __slots__ = (
        "ahead",
        "ahead_order",
        "batch",
        "beyond",
        "confirmed",
        "floor",
        "high",
        "ids",
        "last",
        "meta_key",
        "newest_key",
        "order",
    )

    WINDOW: ClassVar[int] = 20000
    AHEAD: ClassVar[int] = 1000  # outliers remembered exactly once out of the window
    JUMP: ClassVar[int] = ID_BLOCK  # an id further than this beyond the confirmed ones is a jump
    CATCH_UP: ClassVar[int] = 1000  # arrivals in a row beyond the confirmed ones that make a jump real

    def __init__(self, meta_key: str = "", floor: int = 0, newest_key: str = "") -> None:
        self.meta_key = meta_key  # where the watermark is persisted
        self.newest_key = newest_key  # and the newest id
        self.batch = -1  # the journal batch (server.flushes) whose watermark record is already asked for
        self.ids: set[int] = set()
        self.order: deque[int] = deque()  # arrival order: the oldest id is evicted first
        self.floor = floor  # every id at or below this counts as seen
        self.confirmed = floor  # the highest id that a later id reached
        self.high = floor  # the highest id seen (for status only: one event can set it)
        self.last = -1  # the id that arrived last
        self.beyond = 0  # arrivals in a row more than JUMP beyond the confirmed id
        self.ahead: set[int] = set()
        self.ahead_order: deque[int] = deque()

    def seen(self, mid: int) -> bool:
        return mid <= self.floor or mid in self.ids or (bool(self.ahead) and mid in self.ahead)

    def watermark(self) -> bytes:
        return str(self.confirmed).encode()

    def newest(self) -> bytes:
        return str(self.last).encode()

    def add(self, mid: int) -> None:
        if mid in self.ids:
            return
        reach = self.confirmed + self.JUMP
        self.beyond = self.beyond + 1 if mid > reach else 0
        last = self.last
        if self.confirmed < last <= mid and (last <= reach or self.beyond > self.CATCH_UP):
            self.confirmed = last  # the id before this one was caught up with
        self.last = mid
        self.ids.add(mid)
        self.order.append(mid)
        if mid > self.high:
            self.high = mid
        if len(self.order) > self.WINDOW:
            self._evict(self.order.popleft())

    def _evict(self, oldest: int) -> None:
        self.ids.discard(oldest)
        if oldest <= self.floor:
            return
        if oldest <= self.confirmed:
            self.floor = oldest
            return
        self.ahead.add(oldest)
        self.ahead_order.append(oldest)
        if len(self.ahead_order) > self.AHEAD:
            self.ahead.discard(self.ahead_order.popleft())


class RecentAcks:
    """The latest acknowledgements applied for one origin's messages, by (queue, message id).

    An acknowledgement arrives again when its Accepted was lost with the link: the source re-sends it.
    Its message is gone by then, and without this the re-sent copy would look like an acknowledgement
    that came before its message (retried, then given up with a warning).
    """

    __slots__ = ("keys", "order")

    WINDOW: ClassVar[int] = 20000

    def __init__(self) -> None:
        self.keys: set[tuple[str, int]] = set()
        self.order: deque[tuple[str, int]] = deque()

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self.keys

    def add(self, key: tuple[str, int]) -> None:
        if key in self.keys:
            return
        self.keys.add(key)
        self.order.append(key)
        if len(self.order) > self.WINDOW:
            self.keys.discard(self.order.popleft())
