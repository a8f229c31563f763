"""Recovery: live state from adds, acks and removals; torn tails and corrupt records are cut."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker_core.journal import Journal, Position, iter_records
from broker_core.journal.codec import batch_frame, encode
from broker_core.journal.records import (
    AddressAdded,
    AddressRemoved,
    DeliveryCountUpdated,
    MessageAcked,
    MetaRecord,
    QueueRemoved,
)
from broker_core.journal.segment import HEADER_SIZE
from tests.journal.helpers import ADDRESS, QUEUE_A, QUEUE_B, message, reopen, segment_files


def write(directory: Path, *recs: object, **options: object) -> None:
    journal = Journal(directory, **options)  # type: ignore[arg-type]
    journal.open()
    for rec in recs:
        journal.append(rec)  # type: ignore[arg-type]
    journal.close()


def test_empty_directory_recovers_nothing(tmp_path: Path) -> None:
    state = reopen(tmp_path / "new")
    assert (state.addresses, state.queues, state.messages, state.meta) == ({}, {}, {}, {})
    assert (state.max_address_id, state.max_queue_id, state.max_message_id) == (0, 0, 0)


def test_live_state_after_adds_acks_and_removals(tmp_path: Path) -> None:
    other = AddressAdded(2, "gone", frozenset({"ANYCAST"}))
    write(
        tmp_path,
        ADDRESS,
        other,
        QUEUE_A,
        QUEUE_B,
        message(1),  # acked on both queues: dead
        message(2),  # acked (expired) on B: live on A
        message(3),  # live on both, then queue B removed: live on A
        message(4, (2,)),  # only on B, which is removed: dead
        MessageAcked(1, 1),
        MessageAcked(2, 1),
        MessageAcked(2, 2, reason=2),
        DeliveryCountUpdated(1, 3, 5),
        DeliveryCountUpdated(2, 3, 9),
        QueueRemoved(2),
        AddressRemoved(2),
        MetaRecord("k", b"old"),
        MetaRecord("k", b"new"),
        MetaRecord("j", b"1"),
    )
    state = reopen(tmp_path)
    assert state.addresses == {1: ADDRESS}
    assert state.queues == {1: QUEUE_A}
    assert {mid: m.queue_ids for mid, m in state.messages.items()} == {2: [1], 3: [1]}
    assert state.messages[3].delivery_counts == {1: 5}
    assert state.messages[3].record == message(3)
    assert state.meta == {"k": b"new", "j": b"1"}
    assert (state.max_address_id, state.max_queue_id, state.max_message_id) == (2, 2, 4)


def test_state_survives_many_reopens_and_segments(tmp_path: Path) -> None:
    write(tmp_path, ADDRESS, QUEUE_A, *(message(i, (1,)) for i in range(1, 201)), segment_size=4096)
    for round_ in range(3):  # each open starts a new segment and must replay all of the old ones
        write(tmp_path, MessageAcked(1, round_ + 1), segment_size=4096)
    state = reopen(tmp_path, segment_size=4096)
    assert list(state.messages) == list(range(4, 201))
    assert len(segment_files(tmp_path)) > 5


def last_record_bounds(directory: Path) -> tuple[Path, int, int]:
    """The newest non-empty segment and the start/end offsets of its last record."""
    path = [p for p in segment_files(directory) if p.stat().st_size > HEADER_SIZE][-1]
    end = path.stat().st_size
    return path, end - len(encode(message(3))), end


def test_torn_tail_at_every_offset_of_the_last_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    original = tmp_path / "original"
    write(original, ADDRESS, QUEUE_A, QUEUE_B, message(1), message(2), message(3))
    path, start, end = last_record_bounds(original)
    data = path.read_bytes()
    for cut_at in range(start, end):
        directory = tmp_path / f"torn-{cut_at}"
        directory.mkdir()
        for file in segment_files(original):
            (directory / file.name).write_bytes(file.read_bytes())
        (directory / path.name).write_bytes(data[:cut_at])
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            state = reopen(directory)
        assert list(state.messages) == [1, 2], cut_at
        assert (directory / path.name).stat().st_size == start
        if cut_at > start:
            expected = f"journal {path.name}: cut {cut_at - start} bytes after offset {start} ("
            assert expected in caplog.text, cut_at
        assert list(reopen(directory).messages) == [1, 2]  # the cut is permanent and clean


def test_corrupt_crc_in_the_middle_cuts_there_and_drops_later_segments(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, ADDRESS, QUEUE_A, *(message(i, (1,)) for i in range(1, 41)), segment_size=1024)
    write(tmp_path, message(41, (1,)), segment_size=1024)
    files = segment_files(tmp_path)
    victim = files[2]
    data = bytearray(victim.read_bytes())
    first_len = len(encode(message(1, (1,))))
    offset = HEADER_SIZE + first_len  # the second record of the third segment
    data[offset + 20] ^= 0xFF
    victim.write_bytes(bytes(data))
    survivors_before = [m for m in range(1, 41) if m]  # ids are written in order
    with caplog.at_level(logging.WARNING):
        state = reopen(tmp_path, segment_size=1024)
    assert f"journal {victim.name}: cut {len(data) - offset} bytes after offset {offset} (record crc" in (
        caplog.text
    )
    recovered = list(state.messages)
    assert recovered == survivors_before[: len(recovered)]
    assert 41 not in recovered
    assert victim.stat().st_size == offset
    assert all(not f.exists() for f in files[3:])
    assert f"journal {files[3].name}: removing" in caplog.text


def test_a_segment_with_a_torn_header_is_removed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path, ADDRESS, QUEUE_A, message(1, (1,)))
    last = segment_files(tmp_path)[-1]
    torn = tmp_path / f"segment-{int(last.stem.split('-')[1]) + 1:012d}.jnl"
    torn.write_bytes(b"AMQMJR")
    with caplog.at_level(logging.WARNING):
        assert list(reopen(tmp_path).messages) == [1]
    assert "incomplete segment header" in caplog.text
    assert not torn.exists()


def test_sequence_numbers_are_never_reused(tmp_path: Path) -> None:
    write(tmp_path, ADDRESS)
    first = {p.name for p in segment_files(tmp_path)}
    write(tmp_path, QUEUE_A)
    second = {p.name for p in segment_files(tmp_path)}
    assert first < second


def test_a_batch_is_replayed_whole_or_not_at_all(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An ack and the mirror event it caused share a batch: a crash must not keep one without the other."""
    original = tmp_path / "original"
    write(original, ADDRESS, QUEUE_A, QUEUE_B, message(1), message(2))
    journal = Journal(original)
    journal.open()
    batch = [MessageAcked(1, 1), message(3), MessageAcked(2, 1)]
    journal.append_many(batch)
    journal.close()
    path = [p for p in segment_files(original) if p.stat().st_size > HEADER_SIZE][-1]
    data = path.read_bytes()
    start, end = HEADER_SIZE, len(data)  # the batch is the only thing in the last segment
    assert end - start == len(batch_frame(0)) + sum(len(encode(r)) for r in batch)
    assert list(iter_records(original))[-3:] == [
        (Position(int(path.stem[-12:]), o), r) for o, r in _offsets(start, batch)
    ]
    damaged = [("torn", data[:cut]) for cut in range(start + 1, end)]
    damaged += [("flipped", data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]) for i in range(start, end, 7)]
    for n, (how, content) in enumerate(damaged):
        directory = tmp_path / f"{how}-{n}"
        directory.mkdir()
        for file in segment_files(original):
            (directory / file.name).write_bytes(file.read_bytes())
        (directory / path.name).write_bytes(content)
        assert [r for _, r in iter_records(directory)][-1] == message(2), (how, n)  # the reader agrees
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            state = reopen(directory)
        assert {mid: m.queue_ids for mid, m in state.messages.items()} == {1: [1, 2], 2: [1, 2]}, (how, n)
        assert (directory / path.name).stat().st_size == start, (how, n)
        assert f"journal {path.name}: cut " in caplog.text


def _offsets(start: int, records: list[object]) -> list[tuple[int, object]]:
    """Where each record of a batch written at ``start`` begins: each is a whole frame of its own."""
    out, pos = [], start + len(batch_frame(0))
    for r in records:
        out.append((pos, r))
        pos += len(encode(r))  # type: ignore[arg-type]
    return out
