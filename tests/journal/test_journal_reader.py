"""The read-only reader and the node id file."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from broker_core.journal import Journal, iter_records, load_or_create_node_id
from broker_core.journal.records import HighestIds, MessageAcked, Record
from broker_core.journal.segment import HEADER_SIZE
from tests.journal.helpers import QUEUE_A, message, segment_files


def test_reader_yields_records_with_positions_in_order(tmp_path: Path) -> None:
    recs: list[Record] = [QUEUE_A, message(1, (1,)), message(2, (1,)), MessageAcked(1, 1)]
    with Journal(tmp_path, segment_size=300) as journal:
        journal.open()
        for rec in recs:
            journal.append(rec)
    read = list(iter_records(tmp_path))
    assert [r for _, r in read] == recs
    assert read[0][0].offset == HEADER_SIZE
    assert [p.segment for p, _ in read] == sorted(p.segment for p, _ in read)
    assert len({p.segment for p, _ in read}) > 1  # the small segment size forced rolls


def test_reader_stops_at_a_torn_tail_without_changing_anything(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.open()
        journal.append(QUEUE_A)
        journal.append(message(1, (1,)))
    path = [p for p in segment_files(tmp_path) if p.stat().st_size > HEADER_SIZE][-1]
    path.write_bytes(path.read_bytes()[:-5])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert [r for _, r in iter_records(tmp_path)] == [QUEUE_A]
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_reader_sees_the_compacted_generation_then_later_segments(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.open()
        journal.append(QUEUE_A)
        journal.append(message(1, (1,)))
        journal.append(message(2, (1,)))
        journal.append(MessageAcked(1, 1))
        journal.compact()
        journal.append(message(3, (1,)))
    records = [r for _, r in iter_records(tmp_path)]
    assert records == [HighestIds(0, 1, 2), QUEUE_A, message(2, (1,)), message(3, (1,))]


def test_node_id_is_created_once_and_kept(tmp_path: Path) -> None:
    first = load_or_create_node_id(tmp_path / "data")
    assert uuid.UUID(first).version == 4
    assert load_or_create_node_id(tmp_path / "data") == first
    assert (tmp_path / "data" / "node-id").read_text().strip() == first
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["node-id"]  # no tmp file left


def test_a_damaged_node_id_file_is_an_error_not_a_new_identity(tmp_path: Path) -> None:
    (tmp_path / "node-id").write_text("not-a-uuid")
    with pytest.raises(ValueError, match="does not hold a UUID"):
        load_or_create_node_id(tmp_path)
