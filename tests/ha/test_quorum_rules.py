"""Quorum voting's arithmetic and answers (broker_core/ha/quorum.py), against the reference's numbers
and against a brute-force count of every way a vote can go."""

from __future__ import annotations

import itertools

import pytest

from broker_core.ha.quorum import (
    Activation,
    Outcome,
    Promise,
    Question,
    Tally,
    answer,
    final,
    kept,
    promised,
    quorum_size,
    remember,
    superseded,
    votes_needed,
)


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


@pytest.mark.parametrize("question", list(Question))
@pytest.mark.parametrize(("asker", "newest"), list(itertools.product(range(0, 4), range(0, 4))))
def test_a_voter_refuses_a_journal_older_than_the_newest_activation_it_has_seen(
    question: Question, asker: int, newest: int
) -> None:
    """Whatever the topology says, an asker below the newest activation sequence seen for the node id
    gets no; at or above it, the topology decides as before."""
    here = "10.0.0.1:5672"
    for topology in ({}, {"node-1": here}, {"node-1": "10.0.0.9:5672"}):
        by_topology = answer(question, "node-1", here, topology)
        expected = by_topology and asker >= newest
        assert answer(question, "node-1", here, topology, asker, newest) == expected, (
            topology,
            asker,
            newest,
        )


def test_the_memory_of_activations_only_grows() -> None:
    newest = remember({}, "node-1", 2)
    assert newest == {"node-1": 2}
    assert remember(newest, "node-1", 1) == {"node-1": 2}  # an older one seen later changes nothing
    assert remember(newest, "node-1", 3) == {"node-1": 3}
    assert remember(newest, "node-2", 1) == {"node-1": 2, "node-2": 1}
    assert newest == {"node-1": 2}  # a new memory: the old one is not changed under its readers


SERVERS = [
    Activation(sequence, by_vote, connector)
    for sequence in (1, 2, 3)
    for by_vote in (False, True)
    for connector in ("10.0.0.1:5672", "10.0.0.2:5672")
]


@pytest.mark.parametrize(("own", "other"), list(itertools.permutations(SERVERS, 2)))
def test_of_two_actives_for_one_node_exactly_one_stops(own: Activation, other: Activation) -> None:
    """Every pair of distinct activations: exactly one of the two is superseded; the higher sequence
    wins; at equal sequences the one that won a vote; then the connector that sorts first."""
    assert superseded(own, other) != superseded(other, own)
    if own.sequence != other.sequence:
        expected = other.sequence > own.sequence
    elif own.by_vote != other.by_vote:
        expected = other.by_vote
    else:
        expected = other.connector < own.connector
    assert superseded(own, other) == expected


def test_the_woken_primary_and_its_backup_that_took_over() -> None:
    """The two cases that matter: a primary woken with its older journal beside the backup that took over
    stops; one that moved its sequence on to the backup's value without a vote stops too."""
    backup = Activation(2, True, "10.0.0.2:5672")
    assert superseded(Activation(1, False, "10.0.0.1:5672"), backup)
    assert superseded(Activation(2, False, "10.0.0.1:5672"), backup)
    assert not superseded(backup, Activation(2, False, "10.0.0.1:5672"))
    assert not superseded(backup, Activation(1, False, "10.0.0.3:5672"))


PRIMARY, BACKUP = "10.0.0.1:5672", "10.0.0.2:5672"


@pytest.mark.parametrize("question", list(Question))
@pytest.mark.parametrize("asker", [PRIMARY, BACKUP])
@pytest.mark.parametrize(("sequence", "promise"), list(itertools.product(range(0, 4), range(1, 4))))
def test_a_promise_to_one_asker_refuses_the_others_below_it(
    question: Question, asker: str, sequence: int, promise: int
) -> None:
    """A voter that let the primary move on to `promise` refuses any other asker below it; the primary
    itself (its retries) and anyone at or past it are answered as without the promise."""
    topology = {"node-1": asker} if question == Question.STAY_ACTIVE else {}
    without = answer(question, "node-1", asker, topology, sequence, 0)
    assert without  # the topology says yes: only the promise can say no
    given = Promise(promise, PRIMARY)
    expected = asker == PRIMARY or sequence >= promise
    assert answer(question, "node-1", asker, topology, sequence, 0, given) == expected


def test_only_a_stay_active_yes_promises_and_seeing_the_node_keeps_or_ends_it() -> None:
    assert promised(Question.STAY_ACTIVE, True, 1, PRIMARY) == Promise(2, PRIMARY)
    assert promised(Question.STAY_ACTIVE, False, 1, PRIMARY) is None
    assert promised(Question.PRIMARY_GONE, True, 1, BACKUP) is None
    assert promised(Question.PRIMARY_GONE, False, 1, BACKUP) is None
    pending = Promise(2, PRIMARY)
    assert kept(pending, 1) == pending  # seen at the old sequence: the move is still to come
    assert kept(pending, 2) is None  # seen where it was promised: the newest seen says the rest
    assert kept(pending, 3) is None
    assert kept(None, 1) is None


def test_the_paused_backup_cannot_win_while_its_primary_goes_on_unseen() -> None:
    """The soak's case: backup 1 paused, primary 1 wins its stay-active vote at 1 (promised 2) and moves
    on; primary 1 is paused before the voters see it at 2; backup 1 wakes, asks whether primary 1 is
    gone with its copy at 1: no, though nobody sees primary 1 active."""
    promise = promised(Question.STAY_ACTIVE, True, 1, PRIMARY)
    assert answer(Question.PRIMARY_GONE, "node-1", BACKUP, {}, 1, 1, promise) is False
    assert answer(Question.PRIMARY_GONE, "node-1", BACKUP, {}, 2, 1, promise) is True  # copied since
