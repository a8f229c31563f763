"""A mirrored acknowledgement finds its message without scanning the queue (brokers joined in memory).

The message is found by identity (`identity.MessageIndex`, then the queue's `waiting` by message id: two
dict look-ups) and taken out of the queue from its nearer end. What the queue's deque is asked to step
over is counted here by a counting deque in place of the queue's own: a regression to scanning a deep
backlog shows up as thousands of steps.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

from broker_core.queues import MessageRef
from tests.support.pair import MemoryClient, Network

BACKLOG = 5000


class CountingDeque(deque[MessageRef]):
    """A deque that counts the elements `remove` and `pop` step over."""

    steps = 0

    def remove(self, value: MessageRef) -> None:
        self.steps += self.index(value) + 1
        super().remove(value)

    def pop(self) -> MessageRef:
        self.steps += 1
        return super().pop()


def test_acks_take_their_messages_out_of_a_deep_queue_from_the_nearer_end(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", mirror_to="dc2")
    net.broker("dc2")
    net.start_all()
    c1, c2 = net.client("dc1"), net.client("dc2")
    c1.send("orders", "oldest")
    net.pump()
    for i in range(BACKLOG):  # DC2's own messages: a deep backlog behind the oldest, ahead of the rest
        c2.send("orders", f"dc2-{i}")
        if i % 100 == 99:
            net.pump()  # the broker tops the credit up
    for i in range(3):
        c1.send("orders", f"newest-{i}")
    net.pump()
    queue = net.server("dc2").queues["orders"]
    assert queue.depth == BACKLOG + 4
    counting = CountingDeque(queue.fifo)
    queue.fifo = counting
    consume_on_dc1(c1, 4)  # their postAcks reach DC2: the oldest message, and the three newest
    assert queue.depth == BACKLOG and counting.steps <= 10, f"{counting.steps} steps for 4 acks"
    assert net.brokers["dc2"].mirror_target is not None
    assert net.brokers["dc2"].mirror_target.stats["acks"] == 4


def consume_on_dc1(client: MemoryClient, count: int) -> None:
    assert len(client.receive("orders", count)) == count
