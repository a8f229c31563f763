"""Quorum voting in the lock manager's place (replication with no `<manager>`): the replication
coordinator (ha_replication.py) runs as it does with ZooKeeper, and this decides instead.

- The "lock" is always granted: a primary activates on its own (with `check-for-active-server` it first
  looks for an active server of its node id), and a backup asks it only once the quorum said its primary
  is gone (replication_states.py: an orphaned backup votes instead of trying a lock), or once its
  primary handed over on a clean stop.
- The activation sequence is the local one only: there is nothing coordinated to compare it with.
- A primary whose synchronized backup went away confirms, before it confirms anything more, that it is
  still the active server of its node id: with `vote-on-replication-failure`, by a vote (the majority
  must see it active at its own connector); without, at once (Artemis's default: it goes on alone).

The votes are asked of the cluster (ha_cluster.py) on the loop; `confirm` is called from a worker
thread (as every lock manager call is) and waits for its vote there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from broker_core.config.model import HaPolicy
from broker_core.ha.lock_managers import LockManagerError
from broker_core.ha.node_files import read_activation_sequence
from broker_core.ha.quorum import STAY_ACTIVE_WAIT, Outcome, Question, final

from .ha_cluster import ClusterMembership

log = logging.getLogger("broker.ha")


class QuorumVoting:
    """The `LockManager` of a replicated server without a `<manager>`, and the votes it asks."""

    def __init__(
        self,
        name: str,
        policy: HaPolicy,
        membership: ClusterMembership,
        lock_dir: Path,
        loop: asyncio.AbstractEventLoop,
        healthy: Callable[[], bool],
    ) -> None:
        self.name = name
        self.policy = policy
        self.membership = membership
        self.lock_dir = lock_dir
        self.loop = loop
        self.healthy = healthy  # the network check (isolated: every vote is lost)

    # -------------------------------------------------------------------------------- the votes

    async def ask(self, question: Question, node_id: str) -> bool:
        """Up to vote-retries votes, vote-retry-wait apart, until one is won; whether one was."""
        policy = self.policy
        wait = policy.quorum_vote_wait if question == Question.PRIMARY_GONE else STAY_ACTIVE_WAIT
        for attempt in range(1, policy.vote_retries + 1):
            if not self.healthy():
                log.warning(
                    "AMQ951104: %s is isolated from the network (network-check-list): its vote on node id %s "
                    "is lost",
                    self.name,
                    node_id,
                )
                self.membership.counts[f"asked {question.value} {Outcome.LOST.value}"] += 1
                return False
            size = self.membership.size(policy.quorum_size)
            tally = await self.membership.vote(
                question, node_id, size, wait, f"{attempt}/{policy.vote_retries}"
            )
            outcome = final(tally, self.healthy())
            self.membership.counts[f"asked {question.value} {outcome.value}"] += 1
            log.info(
                "AMQ951102: %s's vote on node id %s: %s (%d yes of %d needed; %d of %d voters cast)",
                self.name,
                node_id,
                outcome.value,
                tally.yes,
                tally.needed,
                tally.cast,
                tally.voters,
            )
            if outcome == Outcome.WON:
                return True
            if attempt < policy.vote_retries:
                await asyncio.sleep(policy.vote_retry_wait / 1000)
        return False

    def longest_stay_vote(self) -> float:
        """Seconds the votes of `confirm` may take at most (the coordinator bounds its fence by it)."""
        policy = self.policy
        return policy.vote_retries * (STAY_ACTIVE_WAIT + policy.vote_retry_wait / 1000) + 5

    # ------------------------------------------------------------------------ the lock manager

    def start(self) -> None:
        pass

    def try_lock(self, node_id: str) -> bool:
        return True

    def unlock(self, node_id: str) -> None:
        pass

    def holds(self, node_id: str) -> bool:
        return True

    def why_not_held(self, node_id: str) -> str:
        return ""

    def confirm(self, node_id: str) -> bool:
        if not self.policy.vote_on_replication_failure:
            return True
        future = asyncio.run_coroutine_threadsafe(self.ask(Question.STAY_ACTIVE, node_id), self.loop)
        try:
            won = future.result(self.longest_stay_vote())
        except FutureTimeout:
            future.cancel()
            won = False
        if not won:
            log.critical(
                "AMQ951105: %s lost its backup and the majority of its cluster does not see it active "
                "(vote-on-replication-failure): it stops",
                self.name,
            )
            raise LockManagerError("the quorum does not see this server active (vote-on-replication-failure)")
        return True

    def get_sequence(self, node_id: str) -> int:
        return read_activation_sequence(self.lock_dir)  # nothing coordinated: the local value decides

    def compare_and_set_sequence(self, node_id: str, expected: int, new: int) -> bool:
        return True

    def on_lost(self, callback: Callable[[str], None]) -> None:
        pass  # nothing held elsewhere can be lost

    def stop(self) -> None:
        pass
