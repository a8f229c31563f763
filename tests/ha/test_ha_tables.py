"""The decisions of a replicated pair, without a socket: the activation sequence's verdicts and claims,
what a passive server does about its copy and the lock, what an active server does about each replica,
and what a held lock goes through. Each table is compared with the one written out again here by hand,
over every (state, event) pair: nothing else moves a server."""

from __future__ import annotations

import itertools

import pytest

from broker_core.ha.activation import (
    Claim,
    NotUpToDate,
    Relation,
    Verdict,
    claim,
    relation,
    verdict,
)
from broker_core.ha.lock_states import LockAction, LockEvent, LockState, LockStep, lock_step
from broker_core.ha.replication_states import (
    Candidate,
    Feed,
    FeedAction,
    FeedEvent,
    FeedStep,
    Follow,
    FollowAction,
    FollowEvent,
    FollowStep,
    feed_step,
    follow_step,
    steps_down,
)

# ---------------------------------------------------------------------------- the activation sequence


@pytest.mark.parametrize(("local", "coordinated"), list(itertools.product(range(0, 6), range(-7, 7))))
def test_every_verdict(local: int, coordinated: int) -> None:
    """Over every pair of small values: equal is in sync; another committed value is stale; a claim of
    our own value is a claim of ours cut short (self repair); a claim of the next one is another's claim
    cut short (maybe in sync: not by ourselves); any other claim is stale."""
    if coordinated == local:
        expected = Verdict.IN_SYNC
    elif coordinated >= 0:
        expected = Verdict.STALE
    elif -coordinated == local:
        expected = Verdict.SELF_REPAIR
    elif -coordinated == local + 1:
        expected = Verdict.MAYBE_IN_SYNC
    else:
        expected = Verdict.STALE
    assert verdict(local, coordinated) == expected


def test_each_relation_has_its_verdict() -> None:
    assert {relation(3, c) for c in (3, 4, 2, -3, -4, -5, -2)} == set(Relation)


@pytest.mark.parametrize(("local", "coordinated"), list(itertools.product(range(0, 5), range(-6, 6))))
def test_every_claim(local: int, coordinated: int) -> None:
    """Activating: in sync claims the next value from the coordinated one; self repair commits its own
    claim without a new one; nothing else activates. Fencing (an active server): only from in sync."""
    found = verdict(local, coordinated)
    if found == Verdict.IN_SYNC:
        assert claim(local, coordinated) == Claim(claim_from=coordinated, sequence=local + 1)
        assert claim(local, coordinated, fencing=True) == Claim(claim_from=coordinated, sequence=local + 1)
        return
    if found == Verdict.SELF_REPAIR:
        assert claim(local, coordinated) == Claim(claim_from=None, sequence=local)
    else:
        with pytest.raises(NotUpToDate, match=str(found)):
            claim(local, coordinated)
    with pytest.raises(NotUpToDate):
        claim(local, coordinated, fencing=True)


def test_activations_add_one_each_as_the_reference_numbers_them() -> None:
    """1 the primary, 2 the backup after a failover, 3 the primary after failback (spec A1's numbers)."""
    coordinated, primary, backup = 0, 0, 0
    step = claim(primary, coordinated)
    primary = coordinated = step.sequence
    backup = primary  # synchronized: the backup holds the primary's value
    step = claim(backup, coordinated)
    backup = coordinated = step.sequence
    primary = backup  # failback: the primary synchronizes from the backup
    step = claim(primary, coordinated)
    assert (step.sequence, verdict(backup, step.sequence)) == (3, Verdict.STALE)


# ----------------------------------------------------------------------------------- a passive server

S, E, A = Follow, FollowEvent, FollowAction
P, PC, B, BC = Candidate.PRIMARY, Candidate.PRIMARY_CHECKING, Candidate.BACKUP, Candidate.BACKUP_WITH_COPY
TRYING = (S.ALONE, S.ORPHANED, S.HANDED_OVER, S.AWAITING_REPAIR)

FOLLOW: dict[tuple[Candidate, Follow, FollowEvent], FollowStep] = {}
for c in Candidate:
    FOLLOW |= {
        (c, s, E.STREAM_UP): FollowStep(S.FOLLOWING, ()) for s in Follow if s not in (S.ACTIVATING, S.PROBING)
    }
    FOLLOW |= {
        (c, S.FOLLOWING, E.SYNCHRONIZED): FollowStep(S.SYNCHRONIZED, ()),
        (c, S.SYNCHRONIZED, E.STREAM_LOST): FollowStep(S.ORPHANED, (A.SAY_ORPHANED, A.TRY_LOCK)),
        (c, S.SYNCHRONIZED, E.SAID_FAILOVER): FollowStep(S.HANDING_OVER, ()),
        (c, S.SYNCHRONIZED, E.SAID_PAUSED): FollowStep(S.PAUSING, ()),
        (c, S.HANDING_OVER, E.STREAM_LOST): FollowStep(S.HANDED_OVER, (A.TRY_LOCK,)),
        (c, S.PAUSING, E.STREAM_LOST): FollowStep(S.PAUSED, ()),
        (c, S.ALONE, E.LOCK_REFUSED): FollowStep(S.FOLLOWING, (A.SAY_FOLLOWING_ACTIVE, A.FOLLOW)),
        (c, S.PROBING, E.STREAM_UP): FollowStep(S.FOLLOWING, (A.SAY_FOUND_ACTIVE,)),
        (c, S.PROBING, E.NONE_FOUND): FollowStep(S.ALONE, (A.UNFOLLOW, A.TRY_LOCK)),
        (c, S.AWAITING_REPAIR, E.LOCK_REFUSED): FollowStep(S.FOLLOWING, (A.SAY_FOLLOWING_ACTIVE, A.FOLLOW)),
    }
    for s in TRYING:
        FOLLOW |= {
            (c, s, E.TICK): FollowStep(s, (A.TRY_LOCK,)),
            (c, s, E.IN_SYNC): FollowStep(S.ACTIVATING, (A.ACTIVATE,)),
            (c, s, E.SELF_REPAIR): FollowStep(S.ACTIVATING, (A.ACTIVATE,)),
            (c, s, E.STALE): FollowStep(S.FOLLOWING, (A.RELEASE_STALE, A.FOLLOW)),
            (c, s, E.MAYBE_IN_SYNC): FollowStep(S.AWAITING_REPAIR, (A.RELEASE_MAYBE,)),
        }
FOLLOW |= {
    (P, S.STARTING, E.TICK): FollowStep(S.ALONE, (A.TRY_LOCK,)),
    (PC, S.STARTING, E.TICK): FollowStep(S.PROBING, (A.PROBE,)),
    (B, S.STARTING, E.TICK): FollowStep(S.FOLLOWING, (A.FOLLOW,)),
    (BC, S.STARTING, E.TICK): FollowStep(S.ALONE, (A.TRY_LOCK,)),
    (BC, S.ALONE, E.MAYBE_IN_SYNC): FollowStep(S.FOLLOWING, (A.RELEASE_MAYBE, A.FOLLOW)),
}


@pytest.mark.parametrize(
    ("candidate", "state", "event"), list(itertools.product(Candidate, Follow, FollowEvent))
)
def test_every_follow_step(candidate: Candidate, state: Follow, event: FollowEvent) -> None:
    expected = FOLLOW.get((candidate, state, event), FollowStep(state, ()))
    assert follow_step(candidate, state, event) == expected


# quorum voting: the lock table but for an orphaned backup, which votes instead of trying the lock
VOTING = dict(FOLLOW)
for c in Candidate:
    VOTING |= {
        (c, S.SYNCHRONIZED, E.STREAM_LOST): FollowStep(S.ORPHANED, (A.SAY_ORPHANED, A.VOTE)),
        (c, S.ORPHANED, E.TICK): FollowStep(S.ORPHANED, ()),
        (c, S.ORPHANED, E.VOTE_WON): FollowStep(S.ORPHANED, (A.TRY_LOCK,)),
        (c, S.ORPHANED, E.VOTE_LOST): FollowStep(S.FOLLOWING, (A.SAY_VOTE_LOST, A.FOLLOW)),
    }


@pytest.mark.parametrize(
    ("candidate", "state", "event"), list(itertools.product(Candidate, Follow, FollowEvent))
)
def test_every_voting_follow_step(candidate: Candidate, state: Follow, event: FollowEvent) -> None:
    expected = VOTING.get((candidate, state, event), FollowStep(state, ()))
    assert follow_step(candidate, state, event, voting=True) == expected


def test_a_voting_backup_activates_only_on_a_vote_won_and_replicates_again_on_one_lost() -> None:
    def voting_walk(*events: FollowEvent) -> list[FollowStep]:
        state, steps = S.STARTING, []
        for event in events:
            steps.append(follow_step(B, state, event, voting=True))
            state = steps[-1].state
        return steps

    *_, orphaned, tick, won, taken = voting_walk(
        E.TICK, E.STREAM_UP, E.SYNCHRONIZED, E.STREAM_LOST, E.TICK, E.VOTE_WON, E.IN_SYNC
    )
    assert orphaned.actions == (A.SAY_ORPHANED, A.VOTE) and not tick.actions  # no lock tried meanwhile
    assert won.actions == (A.TRY_LOCK,) and taken.state == S.ACTIVATING
    *_, lost, late = voting_walk(E.TICK, E.STREAM_UP, E.SYNCHRONIZED, E.STREAM_LOST, E.VOTE_LOST, E.VOTE_WON)
    assert lost == FollowStep(S.FOLLOWING, (A.SAY_VOTE_LOST, A.FOLLOW)) and late == FollowStep(
        S.FOLLOWING, ()
    )
    # a vote is asked only by a synchronized backup: an unfinished copy's loss votes for nothing
    assert voting_walk(E.TICK, E.STREAM_UP, E.STREAM_LOST, E.VOTE_WON)[-1] == FollowStep(S.FOLLOWING, ())


def walk(candidate: Candidate, *events: FollowEvent) -> list[FollowStep]:
    state, steps = S.STARTING, []
    for event in events:
        step = follow_step(candidate, state, event)
        steps.append(step)
        state = step.state
    return steps


def test_a_backup_takes_over_only_synchronized_and_only_with_an_up_to_date_journal() -> None:
    *_, orphaned, refused, stale = walk(
        B, E.TICK, E.STREAM_UP, E.SYNCHRONIZED, E.STREAM_LOST, E.LOCK_REFUSED, E.STALE
    )
    assert orphaned.actions == (A.SAY_ORPHANED, A.TRY_LOCK) and refused.state == S.ORPHANED
    assert stale == FollowStep(S.FOLLOWING, (A.RELEASE_STALE, A.FOLLOW))
    # a copy never completed: the stream's loss tries nothing, whatever the lock would say
    *_, lost, tick, taken = walk(B, E.TICK, E.STREAM_UP, E.STREAM_LOST, E.TICK, E.IN_SYNC)
    assert lost.state == tick.state == taken.state == S.FOLLOWING and not tick.actions + taken.actions


def test_a_clean_stop_hands_over_or_pauses() -> None:
    handed = walk(B, E.TICK, E.STREAM_UP, E.SYNCHRONIZED, E.SAID_FAILOVER, E.STREAM_LOST, E.IN_SYNC)
    assert [s.state for s in handed[-3:]] == [S.HANDING_OVER, S.HANDED_OVER, S.ACTIVATING]
    paused = walk(B, E.TICK, E.STREAM_UP, E.SYNCHRONIZED, E.SAID_PAUSED, E.STREAM_LOST, E.TICK, E.IN_SYNC)
    assert [s.state for s in paused[-3:]] == [S.PAUSED, S.PAUSED, S.PAUSED]


def test_maybe_in_sync_waits_for_its_claimer_and_tries_again() -> None:
    *_, maybe, tick, repaired = walk(P, E.TICK, E.MAYBE_IN_SYNC, E.TICK, E.SELF_REPAIR)
    assert maybe == FollowStep(S.AWAITING_REPAIR, (A.RELEASE_MAYBE,))
    assert tick == FollowStep(S.AWAITING_REPAIR, (A.TRY_LOCK,))
    assert repaired.state == S.ACTIVATING


def test_a_checking_primary_follows_an_active_server_it_finds_and_tries_the_lock_otherwise() -> None:
    found = walk(PC, E.TICK, E.LOCK_REFUSED, E.IN_SYNC, E.STREAM_UP)
    assert [s.state for s in found] == [S.PROBING, S.PROBING, S.PROBING, S.FOLLOWING]  # the lock untouched
    none = walk(PC, E.TICK, E.NONE_FOUND, E.IN_SYNC)
    assert none[-2].actions == (A.UNFOLLOW, A.TRY_LOCK) and none[-1].state == S.ACTIVATING


def test_a_backup_with_a_copy_activates_only_if_it_is_the_newest_and_follows_otherwise() -> None:
    """The last active server, restarted as a backup, activates with its journal; a stale copy, or one
    another server's claim may have overtaken, follows; an empty backup never tries the lock first."""
    assert walk(BC, E.TICK, E.IN_SYNC)[-1].state == S.ACTIVATING
    assert walk(BC, E.TICK, E.SELF_REPAIR)[-1].state == S.ACTIVATING
    for event in (E.STALE, E.MAYBE_IN_SYNC, E.LOCK_REFUSED):
        assert walk(BC, E.TICK, event)[-1].state == S.FOLLOWING
    assert walk(B, E.TICK, E.IN_SYNC)[-1].state == S.FOLLOWING


def test_failback_only_for_a_backup_that_allows_it_and_its_primary() -> None:
    for backup, allow, primary in itertools.product((True, False), repeat=3):
        assert steps_down(backup, allow, primary) == (backup and allow and primary)


# ------------------------------------------------------------------------------ an active server's replica

FS, FE, FA = Feed, FeedEvent, FeedAction
FEED: dict[tuple[Feed, FeedEvent], FeedStep] = {
    (FS.COPYING, FE.COPY_CONFIRMED): FeedStep(FS.SYNCHRONIZED, (FA.HOLD_CONFIRMATIONS,)),
    (FS.COPYING, FE.COPY_TIMED_OUT): FeedStep(FS.ENDED, (FA.SAY_ENDED, FA.DISCONNECT)),
    (FS.COPYING, FE.LINK_LOST): FeedStep(FS.ENDED, (FA.SAY_ENDED,)),
    (FS.COPYING, FE.SERVER_STOPPING): FeedStep(FS.STOPPING, ()),
    (FS.SYNCHRONIZED, FE.LINK_LOST): FeedStep(FS.FENCING, (FA.SAY_ENDED, FA.FENCE)),
    (FS.SYNCHRONIZED, FE.LAGGING): FeedStep(FS.FENCING, (FA.SAY_LAGGING, FA.DISCONNECT, FA.FENCE)),
    (FS.SYNCHRONIZED, FE.SERVER_STOPPING): FeedStep(FS.STOPPING, ()),
    (FS.FENCING, FE.FENCED): FeedStep(FS.ENDED, (FA.RELEASE,)),
    (FS.FENCING, FE.FENCE_FAILED): FeedStep(FS.ENDED, (FA.HALT,)),
    (FS.STOPPING, FE.LINK_LOST): FeedStep(FS.ENDED, (FA.SAY_ENDED,)),
}


@pytest.mark.parametrize(("state", "event"), list(itertools.product(Feed, FeedEvent)))
def test_every_feed_step(state: Feed, event: FeedEvent) -> None:
    assert feed_step(state, event) == FEED.get((state, event), FeedStep(state, ()))


def test_what_waits_for_a_replica_goes_out_only_once_it_is_fenced_off() -> None:
    """Whatever path takes a synchronized replica away while serving, the held confirmations are
    released only after a fence succeeded; an unsynchronized one never held any."""
    for event in (FE.LINK_LOST, FE.LAGGING):
        step = feed_step(FS.SYNCHRONIZED, event)
        assert FA.FENCE in step.actions and FA.RELEASE not in step.actions
        assert feed_step(step.state, FE.FENCED).actions == (FA.RELEASE,)
        assert feed_step(step.state, FE.FENCE_FAILED).actions == (FA.HALT,)
    for event in FeedEvent:
        assert FA.RELEASE not in feed_step(FS.COPYING, event).actions


# ---------------------------------------------------------------------------------------- a lock

LS, LE, LA = LockState, LockEvent, LockAction
LOCK: dict[tuple[LockState, LockEvent], LockStep] = {
    (LS.FREE, LE.ACQUIRED): LockStep(LS.HELD, LA.NONE),
    (LS.HELD, LE.SILENT): LockStep(LS.GIVEN_UP, LA.REPORT_LOST),
    (LS.HELD, LE.NODE_GONE): LockStep(LS.GIVEN_UP, LA.REPORT_LOST),
    (LS.HELD, LE.SESSION_EXPIRED): LockStep(LS.GIVEN_UP, LA.REPORT_LOST),
    (LS.HELD, LE.RELEASED): LockStep(LS.FREE, LA.NONE),
    (LS.GIVEN_UP, LE.ACQUIRED): LockStep(LS.HELD, LA.NONE),
    (LS.GIVEN_UP, LE.RELEASED): LockStep(LS.FREE, LA.NONE),
}


@pytest.mark.parametrize(("state", "event"), list(itertools.product(LockState, LockEvent)))
def test_every_lock_step(state: LockState, event: LockEvent) -> None:
    assert lock_step(state, event) == LOCK.get((state, event), LockStep(state, LA.NONE))


def test_a_lock_never_held_is_never_lost_and_a_held_one_is_lost_once() -> None:
    for event in LockEvent:
        if event != LE.ACQUIRED:
            assert lock_step(LS.FREE, event) == LockStep(LS.FREE, LA.NONE)  # tried, refused, hiccups: nothing
    reports = 0
    state = LS.FREE
    for event in (
        LE.REFUSED,
        LE.SESSION_EXPIRED,
        LE.ACQUIRED,
        LE.HEARD,
        LE.SILENT,
        LE.SESSION_EXPIRED,
        LE.SILENT,
    ):
        step = lock_step(state, event)
        state, reports = step.state, reports + (step.action == LA.REPORT_LOST)
    assert (state, reports) == (LS.GIVEN_UP, 1)
