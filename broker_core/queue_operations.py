"""What management does to a queue's messages: count, browse, remove, move, pause, as Artemis's QueueControl.

Each works on the messages waiting in the queue, those in memory and those in page files (read back in
batches, as consumers would have them); messages being delivered to a consumer are its consumer's and are
left alone, as on Artemis. Browsing reads the stored bytes: nothing is acquired, delivered or counted.

A removal is an acknowledgement with Artemis's reason KILLED (journalled, and mirrored as such); a move
routes a copy to the other queue only, then acknowledges the original, so a crash between the two leaves
the message on both queues, never on neither. A retry is a move back to the queue a dead-letter or expiry
copy names in its breadcrumbs (`x-opt-ORIG-QUEUE`, as Artemis's retryMessages). Each change is one log
line (AMQ95106x, AMQ951085) naming the queue, the count and the user who asked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from .errors import InvalidField, NotFound
from .management import json_text
from .message import MESSAGE_ANNOTATIONS, ORIG_ADDRESS, ORIG_QUEUE, MessageView
from .message_fields import Fields, selector
from .message_json import browse_item, list_entry
from .queues import MessageRef, Queue
from .server import Server
from .vocabulary import AckReason

PAUSED_META = "management.paused-queues"  # the journal's record of queues paused with persist=true
BROWSE_PAGE = 200  # Artemis's management-browse-page-size default

Match = Callable[[MessageRef], bool]


def everything(_: MessageRef) -> bool:
    return True


def message_filter(filter_string: object) -> Match:
    """The messages a management filter selects (Artemis's filter expressions, with its names for the
    header fields: AMQPriority, ...; filters/selector.py): an empty one (or none) selects every message;
    an invalid one is refused, so that a purge or a move never touches messages nobody chose."""
    if filter_string is None:
        return everything
    if not isinstance(filter_string, str):
        raise InvalidField(f"a filter is a string, not {filter_string!r}")
    chosen = selector(filter_string)
    if chosen is None:
        return everything
    return lambda ref: chosen.matches(Fields(ref.message).get)


class QueueOperations:
    def __init__(self, server: Server, select: Callable[[object], Match] = message_filter) -> None:
        self.server = server
        self.select = select
        self.requester: Callable[[], str | None] = lambda: None
        self._persisted_pauses: set[str] = set()
        raw = server.meta.get(PAUSED_META)
        if raw:
            for name in json.loads(raw.decode()):
                q = server.queues.get(name)
                if q is not None:
                    q.paused = True
                    self._persisted_pauses.add(name)

    def queue(self, name: str) -> Queue:
        q = self.server.queues.get(name)
        if q is None:
            raise NotFound(f"AMQ229067: Cannot find resource with name queue.{name}")
        return q

    # ------------------------------------------------------------------------------------ reading

    def count(self, name: str, filter_string: object = None) -> int:
        q = self.queue(name)
        match = self.select(filter_string)
        if match is everything:
            return q.depth
        return sum(1 for ref in q.refs() if match(ref))

    def count_by(self, name: str, filter_string: object, group_by: str) -> str:
        """Artemis's countMessages(filter, groupByProperty): JSON text {value: count}."""
        q = self.queue(name)
        match = self.select(filter_string)
        counts: dict[str, int] = {}
        for ref in q.refs():
            if match(ref):
                value = MessageView(ref.message.payload).section_map(0x74).get(group_by)
                key = "null" if value is None else str(value)
                counts[key] = counts.get(key, 0) + 1
        return json_text(counts)

    def _waiting(self, q: Queue, match: Match) -> Iterator[MessageRef]:
        return (ref for ref in q.refs() if match(ref))

    def browse(
        self, name: str, page: int = 1, page_size: int = BROWSE_PAGE, filter_string: object = None
    ) -> list[dict[str, Any]]:
        """A page of the messages waiting in memory, oldest first, as `browse` items (never acquired)."""
        if page < 1 or page_size < 1:
            raise ValueError(f"page {page} of {page_size}: pages count from 1, with at least one message")
        refs = list(self._waiting(self.queue(name), self.select(filter_string)))
        start = (page - 1) * page_size
        return [browse_item(ref) for ref in refs[start : start + page_size]]

    def list_messages(self, name: str, filter_string: object = None) -> list[dict[str, Any]]:
        return [list_entry(ref) for ref in self._waiting(self.queue(name), self.select(filter_string))]

    # ----------------------------------------------------------------------------------- changing

    def _take(self, q: Queue, match: Match, limit: int) -> Iterator[MessageRef]:
        """Take the waiting references `match` selects out of `q` (at most `limit`, -1: no limit), page
        files included: each batch read back is taken before the next is read."""
        taken = 0
        while True:
            chosen: list[MessageRef] = []
            kept: list[MessageRef] = []
            for ref in q.refs():
                if (limit < 0 or taken + len(chosen) < limit) and match(ref):
                    chosen.append(ref)
                else:
                    kept.append(ref)
            if chosen:
                q.keep_only(kept)
                taken += len(chosen)
                yield from chosen
            pager = q.pager
            if 0 <= limit <= taken or not q.paged or pager is None or not pager.fill(q):
                return

    def remove(self, name: str, filter_string: object = None, limit: int = -1) -> int:
        """Artemis's removeMessages / removeAllMessages: how many were removed."""
        return self._remove(name, self.select(filter_string), limit)

    def remove_one(self, name: str, message_id: int) -> bool:
        """Artemis's removeMessage(messageID): whether the waiting message with that id was removed."""
        q = self.queue(name)
        ref = self._take_one(q, message_id)
        if ref is None:
            return False
        self.server.outcomes.acknowledge(ref, AckReason.KILLED)
        q.killed += 1
        self.server.log.info("AMQ951061: queue %s: %d messages removed by management (user %s)",
                             name, 1, self.requester() or "<anonymous>")  # fmt: skip
        return True

    def dead_letter_one(self, name: str, message_id: int) -> bool:
        """Artemis's sendMessageToDeadLetterAddress(messageID): the waiting message with that id moved
        to the queue's dead-letter address (dropped, with a warning, when that has no queue)."""
        ref = self._take_one(self.queue(name), message_id)
        if ref is None:
            return False
        self.server.outcomes.dead_letter(ref)
        self.server.log.info("AMQ951150: queue %s: message %d sent to its dead-letter address by management "
                             "(user %s)", name, message_id, self.requester() or "<anonymous>")  # fmt: skip
        return True

    def expire_one(self, name: str, message_id: int) -> bool:
        """Artemis's expireMessage(messageID): the waiting message with that id expired now (to the
        expiry address, as when its time to live is over)."""
        ref = self._take_one(self.queue(name), message_id)
        if ref is None:
            return False
        self.server.outcomes.expire(ref)
        self.server.log.info("AMQ951151: queue %s: message %d expired by management (user %s)",
                             name, message_id, self.requester() or "<anonymous>")  # fmt: skip
        return True

    def _take_one(self, q: Queue, message_id: int) -> MessageRef | None:
        """The reference to the message with that id (its own, as a journal names it) taken out of the
        queue, when it waits there: in memory, or in a page not read back yet (read back alone, without
        the rest of its page). Not one out to a consumer."""
        ref = q.waiting.get(message_id)
        if ref is not None:
            q.remove(ref)
            return ref
        paging = self.server.paging
        identity = paging.identity_of_unread(q, message_id)
        return None if identity is None else paging.take_unread(q, *identity)

    def _remove(self, name: str, match: Match, limit: int) -> int:
        q = self.queue(name)
        outcomes = self.server.outcomes
        n = 0
        for ref in self._take(q, match, limit):
            outcomes.acknowledge(ref, AckReason.KILLED)
            q.killed += 1
            n += 1
        if n:
            self.server.log.info("AMQ951061: queue %s: %d messages removed by management (user %s)",
                                 name, n, self.requester() or "<anonymous>")  # fmt: skip
        return n

    def move(self, name: str, other: str, filter_string: object = None, limit: int = -1) -> int:
        """Artemis's moveMessages: each selected message to queue `other` alone; how many moved."""
        q = self.queue(name)
        target = self.server.queues.get(other)
        if target is None:
            raise NotFound(f"AMQ229049: No queue found for {other}")
        if target is q:
            raise ValueError(f"queue {name} cannot move messages to itself")
        n = self._transfer(q, self.select(filter_string), limit, lambda _: target)
        if n:
            self.server.log.info("AMQ951062: queue %s: %d messages moved to queue %s by management (user %s)",
                            name, n, other, self.requester() or "<anonymous>")  # fmt: skip
        return n

    def retry(self, name: str, filter_string: object = None) -> int:
        """Artemis's retryMessages: each message whose breadcrumbs name its original queue (a dead-letter
        or expiry copy) goes back to that queue alone, if it still exists; the others stay. How many."""
        q = self.queue(name)
        queues = self.server.queues

        def origin(ref: MessageRef) -> Queue | None:
            notes = MessageView(ref.message.payload).section_map(MESSAGE_ANNOTATIONS)
            target = queues.get(str(notes.get(ORIG_QUEUE)))
            if target is None or target is q or target.address != notes.get(ORIG_ADDRESS):
                return None
            return target

        match = self.select(filter_string)
        n = self._transfer(q, lambda ref: match(ref) and origin(ref) is not None, -1, origin)
        if n:
            self.server.log.info("AMQ951085: queue %s: %d messages retried to their original queues by "
                                 "management (user %s)", name, n,
                                 self.requester() or "<anonymous>")  # fmt: skip
        return n

    def _transfer(
        self, q: Queue, match: Match, limit: int, target_of: Callable[[MessageRef], Queue | None]
    ) -> int:
        """Route each message `match` takes out of `q` to its target queue alone, then acknowledge it (a
        crash between the two leaves it on both queues, never on neither); how many."""
        server = self.server
        n = 0
        for ref in self._take(q, match, limit):
            target = target_of(ref)
            assert target is not None  # `match` takes only messages with a target
            payload = ref.message.payload
            server.router.route(target.address, payload, MessageView(payload), only_queues=[target.name])
            server.outcomes.acknowledge(ref, AckReason.NORMAL)
            n += 1
        return n

    def pause(self, name: str, persist: bool = False) -> None:
        """Deliver nothing from the queue until resumed (and, with `persist`, after a restart too)."""
        q = self.queue(name)
        q.paused = True
        if persist:
            self._persisted_pauses.add(name)
            self._save_pauses()
        self.server.log.info("AMQ951063: queue %s paused by management%s (user %s)", name,
                             " until resumed, across restarts" if persist else "",
                             self.requester() or "<anonymous>")  # fmt: skip

    def resume(self, name: str) -> None:
        q = self.queue(name)
        was = q.paused
        q.paused = False
        if name in self._persisted_pauses:
            self._persisted_pauses.discard(name)
            self._save_pauses()
        if was:
            self.server.log.info("AMQ951064: queue %s resumed by management (user %s)", name,
                                 self.requester() or "<anonymous>")  # fmt: skip
        q.dispatch(self.server.outcomes.is_expired)

    def _save_pauses(self) -> None:
        self.server.set_meta(PAUSED_META, json.dumps(sorted(self._persisted_pauses)).encode())
