"""The soak's checker (tests/support/history.py) catches what it is there for: a confirmed send never
received, a message received that was never sent, a message stored twice, and two servers active for one
node id; and it does not mistake a redelivery after a lost connection, or a paused server, for them."""

from __future__ import annotations

from datetime import datetime

from tests.support.history import ClientRecord, Event, Receipt, check, intervals, log_events

NODES = {"p1": "node1", "b1": "node1", "p2": "node2"}


def record(attempted: range, confirmed: range, received: list[tuple[int, int]]) -> ClientRecord:
    return ClientRecord(set(attempted), set(confirmed), [Receipt(b, c) for b, c in received])


def test_a_clean_history_has_no_problem_and_a_redelivery_is_not_a_duplicate() -> None:
    # 2 was taken on connection 1, which was lost: it came again on connection 2 (at-least-once)
    verdict = check(record(range(4), range(3), [(0, 1), (1, 1), (2, 1), (2, 2), (3, 2)]), [])
    assert verdict.problems() == []
    assert verdict.redelivered == [2] and verdict.duplicates == []
    assert verdict.counts().startswith("4 sent, 3 confirmed, 4 received, 0 lost")


def test_a_confirmed_send_never_received_is_lost() -> None:
    verdict = check(record(range(3), range(3), [(0, 1), (2, 1)]), [])
    assert verdict.lost == [1]
    assert any("confirmed sends never received: [1]" in p for p in verdict.problems())


def test_an_unconfirmed_send_may_or_may_not_arrive() -> None:
    assert check(record(range(3), range(2), [(0, 1), (1, 1)]), []).problems() == []
    assert check(record(range(3), range(2), [(0, 1), (1, 1), (2, 1)]), []).problems() == []


def test_a_message_never_sent_is_a_phantom() -> None:
    verdict = check(record(range(2), range(2), [(0, 1), (1, 1), (7, 1)]), [])
    assert verdict.phantoms == [7] and len(verdict.problems()) == 1


def test_a_message_received_twice_on_one_connection_was_stored_twice() -> None:
    verdict = check(record(range(2), range(2), [(0, 1), (1, 1), (1, 1)]), [])
    assert verdict.duplicates == [1] and verdict.redelivered == []
    assert any("stored twice" in p for p in verdict.problems())


def log(*lines: tuple[str, str]) -> str:
    return "\n".join(f"2026-01-01 {at},000 INFO    broker.ha: {text}" for at, text in lines) + "\n"


def at(clock: str) -> float:
    return datetime.strptime(f"2026-01-01 {clock}", "%Y-%m-%d %H:%M:%S").timestamp()


def test_two_actives_for_one_node_id_overlap() -> None:
    """b1 activates while p1 (not killed: its log goes on) still serves: a split brain of 5 s."""
    events = log_events("p1", log(("10:00:00", "AMQ221007: primary p1 is now active"),
                                  ("10:00:20", "AMQ222325: p1 lost its lock")), ended=False)  # fmt: skip
    events += log_events("b1", log(("10:00:15", "AMQ221010: backup b1 is now active")), ended=False)
    active = intervals(events, NODES, now=at("10:01:00"))
    verdict = check(ClientRecord(), active)
    assert [(a.server, b.server, round(s)) for a, b, s in verdict.overlaps] == [("p1", "b1", 5)]
    assert any("two actives for node node1" in p for p in verdict.problems())
    assert check(ClientRecord(), active, tolerance=6).overlaps == []


def test_a_dead_or_paused_server_is_not_active_and_other_nodes_do_not_count() -> None:
    """p1 killed (its log ends at 10:00:10) before b1 activates; p2 active meanwhile (another node id);
    b1 paused from 10:00:30 to 10:00:50 while p1, restarted, is active: no overlap. b1 resumed and
    still active until it stepped down at 10:00:52 overlaps p1 by 2 s."""
    events = log_events(
        "p1", log(("10:00:00", "AMQ221007: primary p1 is now active"), ("10:00:10", "...")), True
    )
    events += log_events("p1", log(("10:00:35", "AMQ221007: primary p1 is now active")), ended=False)
    b1 = log(("10:00:15", "AMQ221010: backup b1 is now active"), ("10:00:52", "AMQ221002: b1 stepping down"))
    events += log_events("b1", b1, ended=False)
    events += log_events("p2", log(("09:00:00", "AMQ221007: primary p2 is now active")), ended=False)
    events += [Event(at("10:00:30"), "b1", "paused"), Event(at("10:00:50"), "b1", "resumed")]
    active = intervals(events, NODES, now=at("10:01:00"))
    found = check(ClientRecord(), active).overlaps
    assert [(a.server, b.server, round(s)) for a, b, s in found] == [("p1", "b1", 2)]
