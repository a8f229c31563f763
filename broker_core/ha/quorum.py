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
- "is node X still active at connector C?" (`STAY_ACTIVE`): yes iff its topology has X active at C.

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


def answer(question: Question, node_id: str, connector: str, topology: Mapping[str, str]) -> bool:
    """A voter's answer to `question` about `node_id` (asked from `connector`), from its topology."""
    if question == Question.PRIMARY_GONE:
        return node_id not in topology
    return topology.get(node_id) == connector


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
