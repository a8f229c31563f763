"""A replicated pair's decisions, as tables of (state, event) -> (state, actions): what a passive server
does about its copy and the lock (`follow_step`), and what an active server does about each replica that
streams from it (`feed_step`). The composition root (amqp_mirror/ha_replication.py) only observes,
feeds the events in and carries the actions out; these tables are the whole of the logic, tested over
every pair (tests/ha/test_replication_states.py). An event a state does not list changes nothing.

**Passive.** A backup follows its primary's stream (one that holds a copy from before, and finds it the
newest, activates with it instead: it was the last active server); once synchronized, a lost stream
(the primary dead, or gone silent past connection-ttl) makes it *orphaned*: it tries the lock until it
has it or the stream comes back. A primary that stopped cleanly says so first: "failover" (a hand-over:
the backup takes the lock at once, the primary having released it) or "paused" (the backup waits for it
to return). A primary starts alone and tries the lock; refused, another server is active with its node
id and it follows that one (failback); with check-for-active-server it first probes its partners, and
follows an active server with its node id if one answers. Holding the lock, the activation sequence
decides (activation.py): in sync or self repair -> activate; stale -> let go and follow the active
server; maybe in sync -> let go and wait for the server that claimed the next sequence.

**Active, per replica.** A replica copies, then is synchronized: from then on every confirmation waits for
it too (a barrier). A synchronized replica that goes away (its link lost, a packet refused, or dropped for
lagging past call-timeout) may be about to activate: the confirmations waiting for it stay held until it
is fenced off (the activation sequence moved on while the lock is still ours); fenced, they go out; if the
fence fails, they never do and the server halts. An unsynchronized replica never held anything back. A
replica lost while the server stops cleanly is not fenced: it is the one taking over.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

# ------------------------------------------------------------------------------------------ passive


class Candidate(StrEnum):
    """Who a passive server is, as far as these decisions go."""

    PRIMARY = "primary"
    PRIMARY_CHECKING = "primary with check-for-active-server"
    BACKUP = "backup"  # an empty one: it has never held a synchronized copy
    BACKUP_WITH_COPY = "backup with a copy"  # its local activation sequence is above 0


class Follow(StrEnum):
    STARTING = "starting"
    ALONE = "alone"  # following nobody: a primary that tries the lock
    PROBING = "probing"  # check-for-active-server: asking the partners for an active server
    FOLLOWING = "following"  # replicating (or connecting to replicate), not synchronized
    SYNCHRONIZED = "synchronized"
    HANDING_OVER = "handing over"  # synchronized, the primary said it stops and hands over
    PAUSING = "pausing"  # synchronized, the primary said it stops without failover
    ORPHANED = "orphaned"  # was synchronized, the stream is gone unannounced: tries the lock
    HANDED_OVER = "handed over"  # the stream gone after a hand-over: tries the lock
    PAUSED = "paused"  # the stream gone after a stop without failover: waits for it
    AWAITING_REPAIR = "awaiting repair"  # the sequence is maybe in sync: waits for its claimer
    ACTIVATING = "activating"


class FollowEvent(StrEnum):
    TICK = "tick"  # the passive server's timer
    STREAM_UP = "stream up"  # a primary's stream began (its hello): a new copy
    SYNCHRONIZED = "synchronized"  # the copy is complete
    STREAM_LOST = "stream lost"
    SAID_FAILOVER = "said failover"  # the primary stops cleanly and hands over
    SAID_PAUSED = "said paused"  # the primary stops cleanly, without failover
    NONE_FOUND = "none found"  # the probe's time is up: no active server of this node id answered
    LOCK_REFUSED = "lock refused"
    IN_SYNC = "lock taken, in sync"
    SELF_REPAIR = "lock taken, self repair"
    MAYBE_IN_SYNC = "lock taken, maybe in sync"
    STALE = "lock taken, stale"
    VOTE_WON = "vote won"  # quorum voting: the majority says the primary is gone
    VOTE_LOST = "vote lost"  # ... it does not (every retry), or this server is isolated


class FollowAction(StrEnum):
    FOLLOW = "follow the active server's stream"
    PROBE = "follow the partners for a while: an active server of this node id answers with its stream"
    UNFOLLOW = "stop following"
    TRY_LOCK = "try the lock"
    SAY_ORPHANED = "say the stream is lost (AMQ951070)"
    SAY_FOLLOWING_ACTIVE = "say another server is active (AMQ221033)"
    SAY_FOUND_ACTIVE = "say the probe found the active server (AMQ951075)"
    RELEASE_STALE = "let the lock go: the journal is stale (AMQ222327)"
    RELEASE_MAYBE = "let the lock go: the sequence awaits its claimer (AMQ951074)"
    ACTIVATE = "activate"
    VOTE = "ask the quorum whether the primary is gone (AMQ951100)"
    SAY_VOTE_LOST = "say the vote is lost: it replicates again (AMQ951103)"


class FollowStep(NamedTuple):
    state: Follow
    actions: tuple[FollowAction, ...]


S, E, A = Follow, FollowEvent, FollowAction
_TAKE = {E.IN_SYNC: (S.ACTIVATING, (A.ACTIVATE,)), E.SELF_REPAIR: (S.ACTIVATING, (A.ACTIVATE,))}
_TRYING = (S.ALONE, S.ORPHANED, S.HANDED_OVER, S.AWAITING_REPAIR)  # where the lock is tried

_FOLLOW: dict[tuple[Follow, FollowEvent], FollowStep] = {
    # a new copy begins wherever it comes from; it completes; the stream goes
    **{(s, E.STREAM_UP): FollowStep(S.FOLLOWING, ()) for s in Follow if s not in (S.ACTIVATING, S.PROBING)},
    (S.FOLLOWING, E.SYNCHRONIZED): FollowStep(S.SYNCHRONIZED, ()),
    (S.SYNCHRONIZED, E.STREAM_LOST): FollowStep(S.ORPHANED, (A.SAY_ORPHANED, A.TRY_LOCK)),
    (S.SYNCHRONIZED, E.SAID_FAILOVER): FollowStep(S.HANDING_OVER, ()),
    (S.SYNCHRONIZED, E.SAID_PAUSED): FollowStep(S.PAUSING, ()),
    (S.HANDING_OVER, E.STREAM_LOST): FollowStep(S.HANDED_OVER, (A.TRY_LOCK,)),
    (S.PAUSING, E.STREAM_LOST): FollowStep(S.PAUSED, ()),
    # the lock, where it is tried: on every tick, and what its holder finds
    **{(s, E.TICK): FollowStep(s, (A.TRY_LOCK,)) for s in _TRYING},
    **{(s, e): FollowStep(*step) for s in _TRYING for e, step in _TAKE.items()},
    **{(s, E.STALE): FollowStep(S.FOLLOWING, (A.RELEASE_STALE, A.FOLLOW)) for s in _TRYING},
    **{(s, E.MAYBE_IN_SYNC): FollowStep(S.AWAITING_REPAIR, (A.RELEASE_MAYBE,)) for s in _TRYING},
}
_FOLLOW |= {
    # a primary refused the lock: another server is active with its node id, and it follows that one
    (S.ALONE, E.LOCK_REFUSED): FollowStep(S.FOLLOWING, (A.SAY_FOLLOWING_ACTIVE, A.FOLLOW)),
    (S.PROBING, E.STREAM_UP): FollowStep(S.FOLLOWING, (A.SAY_FOUND_ACTIVE,)),
    (S.PROBING, E.NONE_FOUND): FollowStep(S.ALONE, (A.UNFOLLOW, A.TRY_LOCK)),
    # waiting for a claimer, and another server is active now (the claimer, repaired): follow it
    (S.AWAITING_REPAIR, E.LOCK_REFUSED): FollowStep(S.FOLLOWING, (A.SAY_FOLLOWING_ACTIVE, A.FOLLOW)),
}
# how each begins: a primary tries the lock (having probed its partners, with check-for-active-server);
# an empty backup follows its primary; a backup with a copy tries the lock first, and activates if its
# copy is the newest (it was the last active server, or an operator broke glass for it), else follows
_BY_CANDIDATE: dict[Candidate, dict[tuple[Follow, FollowEvent], FollowStep]] = {
    Candidate.PRIMARY: {(S.STARTING, E.TICK): FollowStep(S.ALONE, (A.TRY_LOCK,))},
    Candidate.PRIMARY_CHECKING: {(S.STARTING, E.TICK): FollowStep(S.PROBING, (A.PROBE,))},
    Candidate.BACKUP: {(S.STARTING, E.TICK): FollowStep(S.FOLLOWING, (A.FOLLOW,))},
    Candidate.BACKUP_WITH_COPY: {
        (S.STARTING, E.TICK): FollowStep(S.ALONE, (A.TRY_LOCK,)),
        (S.ALONE, E.MAYBE_IN_SYNC): FollowStep(S.FOLLOWING, (A.RELEASE_MAYBE, A.FOLLOW)),
    },
}


# quorum voting: an orphaned backup votes instead of trying a lock; won, it takes the quorum's lock (always
# granted) and activates as any server holding its lock does; lost, it follows again (Artemis's "restart
# as backup"). A vote's result that comes once the backup is not orphaned any more changes nothing.
_VOTING: dict[tuple[Follow, FollowEvent], FollowStep] = {
    (S.SYNCHRONIZED, E.STREAM_LOST): FollowStep(S.ORPHANED, (A.SAY_ORPHANED, A.VOTE)),
    (S.ORPHANED, E.TICK): FollowStep(S.ORPHANED, ()),
    (S.ORPHANED, E.VOTE_WON): FollowStep(S.ORPHANED, (A.TRY_LOCK,)),
    (S.ORPHANED, E.VOTE_LOST): FollowStep(S.FOLLOWING, (A.SAY_VOTE_LOST, A.FOLLOW)),
}


def follow_step(
    candidate: Candidate, state: Follow, event: FollowEvent, *, voting: bool = False
) -> FollowStep:
    step = (_VOTING.get((state, event)) if voting else None) or _BY_CANDIDATE[candidate].get((state, event))
    step = step or _FOLLOW.get((state, event))
    return step if step is not None else FollowStep(state, ())


# ------------------------------------------------------------------------------- active, per replica


class Feed(StrEnum):
    COPYING = "copying"  # the initial copy: nothing waits for this replica
    SYNCHRONIZED = "synchronized"  # every confirmation waits for it too
    FENCING = "fencing"  # a synchronized replica went away: its confirmations held until it is fenced
    STOPPING = "stopping"  # this server stops cleanly: the replica is the one taking over
    ENDED = "ended"


class FeedEvent(StrEnum):
    COPY_CONFIRMED = "copy confirmed"  # the replica settled the end of the initial copy
    COPY_TIMED_OUT = "copy timed out"  # initial-replication-sync-timeout
    LAGGING = "lagging"  # a confirmation has waited for it past call-timeout
    LINK_LOST = "link lost"  # its link or connection went (or it refused a packet)
    FENCED = "fenced"  # the activation sequence moved on: its copy is stale
    FENCE_FAILED = "fence failed"  # the lock or the sequence is not ours any more
    SERVER_STOPPING = "server stopping"  # a clean stop: the replica takes over


class FeedAction(StrEnum):
    HOLD_CONFIRMATIONS = "confirmations wait for the replica too (AMQ221024)"
    DISCONNECT = "close the replica's connection"
    SAY_LAGGING = "say the replica lags past call-timeout (AMQ222207)"
    SAY_ENDED = "say replication stopped (AMQ222092)"
    FENCE = "move the activation sequence on (AMQ221036)"
    RELEASE = "release what waits for the replica (AMQ221035)"
    HALT = "hold what waits for good, and halt (AMQ222330)"


class FeedStep(NamedTuple):
    state: Feed
    actions: tuple[FeedAction, ...]


F, FE, FA = Feed, FeedEvent, FeedAction
_FEED: dict[tuple[Feed, FeedEvent], FeedStep] = {
    (F.COPYING, FE.COPY_CONFIRMED): FeedStep(F.SYNCHRONIZED, (FA.HOLD_CONFIRMATIONS,)),
    (F.COPYING, FE.COPY_TIMED_OUT): FeedStep(F.ENDED, (FA.SAY_ENDED, FA.DISCONNECT)),
    (F.COPYING, FE.LINK_LOST): FeedStep(F.ENDED, (FA.SAY_ENDED,)),
    (F.COPYING, FE.SERVER_STOPPING): FeedStep(F.STOPPING, ()),
    (F.SYNCHRONIZED, FE.LINK_LOST): FeedStep(F.FENCING, (FA.SAY_ENDED, FA.FENCE)),
    (F.SYNCHRONIZED, FE.LAGGING): FeedStep(F.FENCING, (FA.SAY_LAGGING, FA.DISCONNECT, FA.FENCE)),
    (F.SYNCHRONIZED, FE.SERVER_STOPPING): FeedStep(F.STOPPING, ()),
    (F.FENCING, FE.FENCED): FeedStep(F.ENDED, (FA.RELEASE,)),
    (F.FENCING, FE.FENCE_FAILED): FeedStep(F.ENDED, (FA.HALT,)),
    (F.STOPPING, FE.LINK_LOST): FeedStep(F.ENDED, (FA.SAY_ENDED,)),
}


def feed_step(state: Feed, event: FeedEvent) -> FeedStep:
    return _FEED.get((state, event)) or FeedStep(state, ())


def steps_down(candidate_is_backup: bool, allow_failback: bool, replica_is_primary: bool) -> bool:
    """Whether an active server whose replica just synchronized steps down for it: a backup that allows
    failback, for its primary (peers with a coordination-id never fail back)."""
    return candidate_is_backup and allow_failback and replica_is_primary
