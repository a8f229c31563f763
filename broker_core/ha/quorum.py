"""Quorum voting: how a replicated server with no `<manager>` decides, with the other active servers of
its cluster, whether a primary is gone (a backup that lost its stream) or whether it is still the active
server of its node id (a primary that lost its backup, with `vote-on-replication-failure`). Pure rules;
the cluster connection (amqp_mirror/ha_cluster.py) asks and answers.

**Size.** `quorum-size` when set, else the largest number of node ids this server has seen active at
once, its own counted (Artemis's "maximum cluster size").

**Votes needed** for a size `n`: `n / 2` (rounded down) up to 2 nodes, so 1 for a pair and 0 alone (the
vote passes at once: one pair alone needs the network check or a lock manager), `n / 2 + 1` (rounded
down) from 3: 3 -> 2, 4 -> 3, 5 -> 3, 6 -> 4.

**Voters** are the other active servers this server reaches, those of its own node id excepted; one it
cannot reach casts no vote. A voter answers from its own view of the cluster (its *topology*: node id ->
the connector of the server active with it, itself included while it is active):
- "is node X gone?" (`PRIMARY_GONE`): yes iff no server is active with X in its topology;
- "is node X still active at connector C?" (`STAY_ACTIVE`): yes iff its topology has X active at C;
- either way no if the asker's activation sequence is below the newest this voter has seen active for X
  (`newest_seen`): the asker's journal is older than one that was active after it, and what that one
  confirmed is not in it. Each member says its activation sequence when it answers as active, and its
  memory of the newest it has seen per node id (`remember`); the memory is in memory only: a cluster
  whose every server restarts at once starts it afresh.
- a voter that says yes to a stay-active vote from a journal at `n` remembers a *promise* of `n + 1` to
  that asker (it moves its sequence on, to fence off its lost backup, once it won): until it is seen
  active at `n + 1` or more, another asker below `n + 1` gets no (the asker's own retries are let
  through), so a backup cut off with the copy from before cannot win its vote while the primary,
  unseen, goes on confirming alone.

**Two actives for one node id** (a member seen active with this server's node id): the older activation
stops serving and rejoins (`superseded`). The higher activation sequence is the newer. At equal
sequences (two journals that parted from the same one: a primary that moved its sequence on without a
vote, or that started alone, beside a backup that took over), the server that activated by winning a
vote keeps serving, since the majority agreed to it; if neither or both did, the one whose connector
sorts first keeps serving, so that exactly one of the two stops.

**A vote** ends once its yes votes reach what is needed (won), once it cannot reach it any more with the
votes left to cast (lost), or when its wait is over (`quorum-vote-wait` seconds; 5 s for `STAY_ACTIVE`,
as Artemis hard-codes): lost. A backup asks up to `vote-retries` times, `vote-retry-wait` ms apart; a
network check that fails makes any vote lost (the server is isolated: its voters' yes means nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

STAY_ACTIVE_WAIT = 5.0  # seconds a primary waits for each vote on whether it is still active


class Question(StrEnum):
    PRIMARY_GONE = "primary-gone"
    STAY_ACTIVE = "stay-active"


class Outcome(StrEnum):
    OPEN = "open"
    WON = "won"
    LOST = "lost"


def quorum_size(configured: int, largest_seen: int) -> int:
    """`quorum-size` (-1: the largest cluster seen)."""
    return largest_seen if configured < 0 else configured


def votes_needed(size: int) -> int:
    return size // 2 if size <= 2 else size // 2 + 1


def answer(
    question: Question,
    node_id: str,
    connector: str,
    topology: Mapping[str, str],
    asker_sequence: int = 0,
    newest_seen: int = 0,
    promise: Promise | None = None,
) -> bool:
    """A voter's answer to `question` about `node_id` (asked from `connector`, whose journal is at
    `asker_sequence`), from its topology, the newest activation sequence it has seen for `node_id`, and
    the sequence it promised to another asker of `node_id`, if any."""
    if asker_sequence < newest_seen:
        return False  # a newer activation of this node id has been seen: the asker's journal misses it
    if promise is not None and asker_sequence < promise.sequence and promise.connector != connector:
        return False  # another server of this node id was let move its sequence on past the asker's
    if question == Question.PRIMARY_GONE:
        return node_id not in topology
    return topology.get(node_id) == connector


@dataclass(frozen=True)
class Promise:
    """A yes to a stay-active vote: the asker at `connector` moves its sequence on to `sequence`."""

    sequence: int
    connector: str


def promised(question: Question, vote: bool, asker_sequence: int, connector: str) -> Promise | None:
    """What a voter promises by its answer: the next sequence to a primary it lets stay active."""
    return Promise(asker_sequence + 1, connector) if question == Question.STAY_ACTIVE and vote else None


def kept(promise: Promise | None, seen: int) -> Promise | None:
    """A promise still pending once the node id was seen active at `seen`: none once seen at it or past."""
    return promise if promise is not None and seen < promise.sequence else None


def remember(newest: Mapping[str, int], node_id: str, sequence: int) -> dict[str, int]:
    """The memory of the newest activation sequence seen per node id, once `node_id` was seen at
    `sequence` (never lowered)."""
    return {**newest, node_id: max(sequence, newest.get(node_id, 0))}


@dataclass(frozen=True)
class Activation:
    """How a server active with a node id got there: its activation `sequence`, whether it activated by
    winning a vote (`by_vote`: a backup that took over), and its `connector`."""

    sequence: int
    by_vote: bool
    connector: str


def superseded(own: Activation, other: Activation) -> bool:
    """Whether an active server (`own`) must stop on seeing `other` active with its node id: exactly one
    of two such servers is (see the module's text)."""
    if own.sequence != other.sequence:
        return other.sequence > own.sequence
    if own.by_vote != other.by_vote:
        return other.by_vote
    return other.connector < own.connector


@dataclass(frozen=True)
class Tally:
    """One vote as it stands: `voters` asked, `cast` of them answered (or failed to), `yes` of those said
    yes; `needed` is votes_needed of the quorum size."""

    needed: int
    voters: int
    cast: int = 0
    yes: int = 0

    def outcome(self) -> Outcome:
        if self.yes >= self.needed:
            return Outcome.WON
        if self.yes + (self.voters - self.cast) < self.needed:
            return Outcome.LOST  # even every vote left would not make it
        return Outcome.OPEN

    def with_vote(self, yes: bool) -> Tally:
        return Tally(self.needed, self.voters, self.cast + 1, self.yes + (1 if yes else 0))


def final(tally: Tally, healthy: bool) -> Outcome:
    """A vote's result once it ended (all cast, or its wait over): won only if won and the network check
    passes (an isolated server never acts on a vote)."""
    return Outcome.WON if tally.outcome() == Outcome.WON and healthy else Outcome.LOST
