"""Shared builders for the journal tests."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from broker_core.journal import Journal, Recovered
from broker_core.journal.records import AddressAdded, MessageAdded, QueueAdded

ADDRESS = AddressAdded(1, "orders", frozenset({"ANYCAST", "MULTICAST"}))
QUEUE_A = QueueAdded(1, "orders.a", "orders", "MULTICAST")
QUEUE_B = QueueAdded(2, "orders.b", "orders", "MULTICAST", filter_string="color = 'red'")


def message(message_id: int, queue_ids: tuple[int, ...] = (1, 2), size: int = 100) -> MessageAdded:
    return MessageAdded(message_id, "orders", queue_ids, bytes([message_id % 256]) * size, timestamp_ms=7)


def reopen(directory: Path, **options: object) -> Recovered:
    """Open and close a journal on ``directory``, returning what it recovered."""
    journal = Journal(directory, logger=logging.getLogger("test.journal"), **options)  # type: ignore[arg-type]
    try:
        return journal.open()
    finally:
        journal.close()


def summary(state: Recovered) -> dict[str, object]:
    """The parts of a recovered state that must survive restarts and compaction, comparable with ==."""
    return {
        "addresses": state.addresses,
        "queues": state.queues,
        "messages": {
            # compaction may re-encode a message with only its live queues: compare the rest of it
            mid: (replace(m.record, queue_ids=()), tuple(m.queue_ids), m.delivery_counts)
            for mid, m in state.messages.items()
        },
        "order": list(state.messages),
        "meta": state.meta,
        "max_ids": (state.max_address_id, state.max_queue_id, state.max_message_id),
    }


def segment_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix == ".jnl")
