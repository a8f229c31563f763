"""The soak's checker (tests/support/history.py) catches what it is there for: a confirmed send never
received, a message received that was never sent, a message stored twice, and two servers active for one
node id; and it does not mistake a redelivery after a lost connection, or a paused server, for them."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.support.history import ClientRecord, Event, Interval, Receipt, check, intervals, log_events

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
    # a tolerance is for a server woken up beside the other, not for this
    assert len(check(ClientRecord(), active, tolerance=6).overlaps) == 1


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


DAY = 86400


def dated(*lines: tuple[str, str]) -> str:
    """Log lines stamped with a date and time each ("2026-01-02 10:00:12", or with milliseconds)."""
    return (
        "\n".join(f"{at if ',' in at else at + ',000'} INFO    broker.ha: {text}" for at, text in lines)
        + "\n"
    )


def test_a_jumped_clock_s_log_lines_are_read_at_their_true_time() -> None:
    """p1's wall clock ran a day ahead from 10:00:10 to 10:00:15, then two days behind: its lock lost at
    10:00:12 is stamped the next day, its restart at 10:00:40 two days before. Read at their true times,
    p1 stopped before b1 activated at 10:00:14 and started again after b1 was killed (10:00:30): no
    overlap. Read as stamped, p1 would seem active until the next day, beside b1."""
    p1 = dated(
        ("2026-01-01 10:00:00", "AMQ221007: primary p1 is now active"),
        ("2026-01-02 10:00:12", "AMQ222325: p1 lost its lock"),
        ("2025-12-30 10:00:40", "AMQ221007: primary p1 is now active"),
    )
    b1 = dated(("2026-01-01 10:00:14", "AMQ221010: backup b1 is now active"), ("2026-01-01 10:00:30", "..."))
    span = (at("09:59:00"), at("10:01:00"))
    events = log_events("p1", p1, ended=False, offsets=[0, DAY, 0, -2 * DAY], span=span)
    events += log_events("b1", b1, ended=True)
    assert [round(e.at - at("10:00:00")) for e in events if e.server == "p1"] == [0, 12, 40]
    active = intervals(events, NODES, now=at("10:01:00"))
    assert check(ClientRecord(), active).overlaps == []
    as_stamped = intervals(
        log_events("p1", p1, ended=False) + log_events("b1", b1, True), NODES, at("10:01:00")
    )
    assert len(check(ClientRecord(), as_stamped).overlaps) == 1  # what reading the stamps as they are gives


def test_a_log_line_that_fits_two_offsets_is_an_error_not_a_guess() -> None:
    """Offsets closer together than the span the log was written in leave a line's true time in doubt:
    the checker says so rather than pick one."""
    text = dated(("2026-01-01 10:00:30", "AMQ221007: primary p1 is now active"))
    with pytest.raises(ValueError, match="fits 2 of the clock's offsets"):
        log_events("p1", text, ended=False, offsets=[0, 20], span=(at("10:00:00"), at("10:01:00")))


def test_only_a_server_woken_beside_the_active_one_is_tolerated_and_only_briefly() -> None:
    """p1 active, paused at 10:00:05; b1 active from 10:00:08; p1 resumed at 10:00:10 stops (its first
    lock check) at 10:00:10.004: 4 ms of a woken server beside b1, within a tolerance of 0.25 s. Woken
    at 10:00:20 and stopping at 10:00:21, it served beside b1 for a second: two actives. And an overlap
    of 0.1 s between two servers neither of which was woken (b1 activating while p1, never paused, still
    serves) is two actives whatever the tolerance."""
    b1 = log_events("b1", log(("10:00:08", "AMQ221010: backup b1 is now active")), ended=False)

    def active(stops: str, resumed: str | None) -> list[Interval]:
        p1 = dated(
            ("2026-01-01 10:00:00", "AMQ221007: p1 is now active"), (stops, "AMQ222325: p1 lost its lock")
        )
        events = log_events("p1", p1, ended=False) + b1
        if resumed is not None:
            events += [Event(at("10:00:05"), "p1", "paused"), Event(at(resumed), "p1", "resumed")]
        return intervals(events, NODES, now=at("10:00:40"))

    brief = active("2026-01-01 10:00:10,004", resumed="10:00:10")
    assert [i.woken for i in brief if i.server == "p1"] == [False, True]
    assert check(ClientRecord(), brief, tolerance=0.25).overlaps == []
    assert len(check(ClientRecord(), brief).overlaps) == 1  # without the tolerance: 4 ms

    found = check(ClientRecord(), active("2026-01-01 10:00:21", resumed="10:00:20"), tolerance=0.25).overlaps
    assert [(a.server, b.server, round(s)) for a, b, s in found] == [("b1", "p1", 1)]

    found = check(ClientRecord(), active("2026-01-01 10:00:08,100", resumed=None), tolerance=0.25).overlaps
    assert [(a.server, b.server, round(s, 1)) for a, b, s in found] == [("p1", "b1", 0.1)]
