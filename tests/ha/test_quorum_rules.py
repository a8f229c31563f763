"""Quorum voting's arithmetic and answers (broker_core/ha/quorum.py), against the reference's numbers
and against a brute-force count of every way a vote can go."""

from __future__ import annotations

import itertools

import pytest

from broker_core.ha.quorum import Outcome, Question, Tally, answer, final, quorum_size, votes_needed


def test_votes_needed_are_the_references() -> None:
    """1 node: 0 (passes at once); 2: 1; then a strict majority: 3 -> 2, 4 -> 3, 5 -> 3, 6 -> 4."""
    assert [votes_needed(n) for n in range(1, 8)] == [0, 1, 2, 3, 3, 4, 4]


def test_quorum_size_is_the_configured_one_or_the_largest_seen() -> None:
    assert quorum_size(-1, 3) == 3
    assert quorum_size(5, 3) == 5
    assert quorum_size(0, 3) == 0


@pytest.mark.parametrize(("needed", "voters"), list(itertools.product(range(0, 5), range(0, 5))))
def test_a_vote_ends_won_or_lost_exactly_when_its_outcome_is_decided(needed: int, voters: int) -> None:
    """Over every order of yes and no answers: won as soon as the yes votes reach what is needed, lost as
    soon as the votes left cannot make it, open otherwise; with every vote cast it is never open."""
    for answers in itertools.product((True, False), repeat=voters):
        tally = Tally(needed, voters)
        for i, yes in enumerate(answers, start=1):
            tally = tally.with_vote(yes)
            yes_so_far = sum(answers[:i])
            if yes_so_far >= needed:
                expected = Outcome.WON
            elif yes_so_far + voters - i < needed:
                expected = Outcome.LOST
            else:
                expected = Outcome.OPEN
            assert tally.outcome() == expected, (needed, answers[:i])
        assert tally.outcome() != Outcome.OPEN
    # before any answer: nothing needed is won at once; more needed than there are voters is lost at once
    assert Tally(needed, voters).outcome() == (
        Outcome.WON if needed == 0 else Outcome.LOST if needed > voters else Outcome.OPEN
    )


def test_three_pairs_a_backup_needs_both_other_primaries() -> None:
    """Three pairs: size 3, two votes needed, and the backup's voters are the two other primaries."""
    tally = Tally(votes_needed(quorum_size(-1, 3)), voters=2)
    assert tally.with_vote(True).outcome() == Outcome.OPEN
    assert tally.with_vote(True).with_vote(True).outcome() == Outcome.WON
    assert tally.with_vote(False).outcome() == Outcome.LOST


def test_an_isolated_server_never_wins() -> None:
    won = Tally(1, 1).with_vote(True)
    assert final(won, healthy=True) == Outcome.WON
    assert final(won, healthy=False) == Outcome.LOST
    assert final(Tally(2, 2).with_vote(True), healthy=True) == Outcome.LOST  # the wait ran out


def test_a_voters_answers() -> None:
    topology = {"node-1": "10.0.0.1:5672", "node-2": "10.0.0.2:5672"}
    assert not answer(Question.PRIMARY_GONE, "node-1", "", topology)
    assert answer(Question.PRIMARY_GONE, "node-3", "", topology)
    assert answer(Question.STAY_ACTIVE, "node-1", "10.0.0.1:5672", topology)
    assert not answer(Question.STAY_ACTIVE, "node-1", "10.0.0.9:5672", topology)  # its backup took over
    assert not answer(Question.STAY_ACTIVE, "node-3", "10.0.0.3:5672", topology)  # not seen at all
