"""Messages by identity: (origin broker id, origin message id), the name a message keeps everywhere.

A message made here is (our node id, its id); one a mirror brought is (the broker it was first stored
on, that broker's id for it). A mirrored acknowledgement names its message so, and finds it here in
O(1) rather than by scanning a deep queue. A message is indexed while some queue still holds it.

An expiry copy keeps its original's identity (outcomes.py) and is made while the original is still
held (on its other queues, or until its expired reference is acknowledged): the original keeps the
entry and the copy takes it over when the original goes.
"""

from __future__ import annotations

from .queues import MessageRef, Queue, StoredMessage


class MessageIndex:
    __slots__ = ("by_identity", "later", "node_id")

    def __init__(self) -> None:
        self.node_id = ""  # set when the server has read or made its node id
        self.by_identity: dict[tuple[str, int], StoredMessage] = {}
        # copies made while the message they share an identity with is still held, oldest first
        self.later: dict[tuple[str, int], list[StoredMessage]] = {}

    def __len__(self) -> int:
        return len(self.by_identity)

    def identity_of(self, msg: StoredMessage) -> tuple[str, int]:
        return (msg.origin_broker_id or self.node_id, msg.mirror_id)

    def add(self, msg: StoredMessage) -> None:
        key = (msg.origin_broker_id or self.node_id, msg.mirror_id)
        held = self.by_identity.get(key)
        if held is not None and held is not msg and held.live_refs > 0:
            self.later.setdefault(key, []).append(msg)
        else:
            self.by_identity[key] = msg

    def forget(self, msg: StoredMessage) -> None:
        key = (msg.origin_broker_id or self.node_id, msg.mirror_id)
        later = self.later.get(key)
        if self.by_identity.get(key) is msg:  # a mirror copy shares the identity but is not indexed
            if later:
                self.by_identity[key] = later.pop(0)
                if not later:
                    del self.later[key]
            else:
                del self.by_identity[key]
        elif later and msg in later:
            later.remove(msg)
            if not later:
                del self.later[key]

    def get(self, origin: str, message_id: int) -> StoredMessage | None:
        return self.by_identity.get((origin, message_id))

    def waiting_ref(self, queue: Queue, origin: str, message_id: int) -> MessageRef | None:
        """The reference on `queue` to the message with that identity, if it waits there (not in flight)."""
        msg = self.by_identity.get((origin, message_id))
        return None if msg is None else queue.waiting.get(msg.id)
