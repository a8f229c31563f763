"""The replication coordinator: wires a lock manager and the replication stream's two ends
(broker_core/ha/: lock_managers/, replica.py, replication_source.py) to the decisions of
broker_core/ha/: the activation sequence's rules (activation.py), what a passive server does about its copy
and the lock, and what an active server does about each replica (replication_states.py), and what a held
lock goes through (lock_states.py). This module decides nothing: it observes, feeds the tables their
events, and carries their actions out (the network calls off the loop, each bounded).

Without a `<manager>`, quorum voting decides in the lock manager's place (ha_quorum.py), over the
cluster connection's members (ha_cluster.py): an orphaned backup asks them whether its primary is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Container
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from broker_core.config.model import AmqpConnection, Connector, Endpoint, HaRole
from broker_core.config.uri import parse_acceptor_uri
from broker_core.ha import activation
from broker_core.ha.cluster_service import CLUSTER_ADDRESS, ClusterService
from broker_core.ha.lock_managers import LockManager, LockManagerError, lock_manager_for
from broker_core.ha.node_files import read_activation_sequence, write_activation_sequence
from broker_core.ha.quorum import Activation, Question, superseded
from broker_core.ha.replica import Replica
from broker_core.ha.replication_source import ReplicationService, ReplicationSettings
from broker_core.ha.replication_states import (
    Candidate,
    Follow,
    FollowAction,
    FollowEvent,
    follow_step,
    steps_down,
)
from broker_core.ha.replication_wire import REPLICATION_ADDRESS
from broker_core.ha.states import Event, State
from broker_core.journal.node_id import adopt_node_id, coordinated_node_id, load_or_create_node_id
from connections.outbound import OutboundConnection

from .colocation import locate_active
from .ha_admin import clear_break_glass, node_id_of, read_break_glass
from .ha_cluster import ClusterMembership
from .ha_quorum import QuorumVoting
from .ha_replica_link import ReplicaPolicy

if TYPE_CHECKING:
    from broker_core.config.model import BrokerConfig

    from .broker import Broker

log = logging.getLogger("broker.ha")

POLL = 0.1  # seconds between a passive server's looks at the lock (its calls leave the loop)
WATCH = 0.2  # seconds: an active server checks it still holds its lock (and whether to fail back)
REPAIR_WAIT = 2.0  # seconds between looks while the activation sequence awaits its claimer
TICK = 0.1  # seconds between looks at the replication connection's keep-alives and silence
FENCE_TIMEOUT = 10.0  # seconds to fence off a lost replica before giving up (and stopping)
CALL_BOUND = 15.0  # seconds a lock manager call may go unanswered before the poll says so and moves on
VERDICT_EVENTS = {
    activation.Verdict.IN_SYNC: FollowEvent.IN_SYNC,
    activation.Verdict.SELF_REPAIR: FollowEvent.SELF_REPAIR,
    activation.Verdict.MAYBE_IN_SYNC: FollowEvent.MAYBE_IN_SYNC,
    activation.Verdict.STALE: FollowEvent.STALE,
}


class Controller(Protocol):
    """What the coordinator needs of its HA controller (amqp_mirror/ha.py)."""

    config: BrokerConfig
    loop: asyncio.AbstractEventLoop
    broker: Broker
    rejoin: str | None  # why the pair stopped this server: it exits to rejoin as a backup
    state: State

    async def on(self, event: Event) -> None: ...

    def send_clients_to(self, where: tuple[str, int] | None) -> None:
        """Where this server, while passive, sends its clients: the active server of its node id."""


class ReplicationCoordinator:
    def __init__(self, controller: Controller, stepped_down: bool = False) -> None:
        """`stepped_down`: a backup that has just handed over to its primary (restart-backup) follows it,
        though its copy is as new as the primary's until the primary activates."""
        config = controller.config
        policy = config.ha_policy
        self.controller = controller
        self.loop = controller.loop
        self.role = policy.role
        self.policy = policy
        self.lock_dir = Path(config.node_manager_lock_directory or config.journal_directory)
        self.healthy: Callable[[], bool] = lambda: True  # the network check's verdict (isolated: False)
        # quorum voting (no <manager>): the cluster's members decide, over their member connections
        self.voting = policy.manager is None
        self.membership: ClusterMembership | None = None
        self.quorum: QuorumVoting | None = None
        self.manager: LockManager
        if policy.manager is None:
            self.membership = ClusterMembership(controller.broker, self._cluster_changed)
            self.membership.own = lambda: (self._node_id(), self.service is not None)
            self.manager = self.quorum = QuorumVoting(
                config.name, policy, self.membership, self.lock_dir, self.loop, lambda: self.healthy()
            )
        else:
            self.manager = lock_manager_for(policy.manager)
        self._vote: asyncio.Task[None] | None = None
        self.won_vote = False  # it activates (or is active) because the quorum said its primary is gone
        self._superseded: asyncio.Task[None] | None = None
        self.replica = Replica(
            Path(config.journal_directory),
            Path(config.paging_directory),
            self.lock_dir,
            policy.max_saved_replicated_journals_size,
            controller.broker.turn.dispatch,
            config.journal_file_size,
            policy.group_name,
            self._observe,
        )
        if policy.coordination_id is not None and self.role == HaRole.PRIMARY:
            shared = coordinated_node_id(policy.coordination_id)
            if adopt_node_id(Path(config.journal_directory), shared):
                log.info(
                    "AMQ221037: %s takes the shared node id %s of coordination-id %r; its peers compete "
                    "with it for activation",
                    config.name,
                    shared,
                    policy.coordination_id,
                )
        self.break_glass = read_break_glass(config)
        if self.break_glass is not None:
            log.warning(
                "AMQ951076: %s starts after an operator broke glass (%s): it activates with its journal",
                config.name,
                ", ".join(f"{k} {v}" for k, v in self.break_glass.items()),
            )
        if self.role == HaRole.BACKUP:
            # quorum voting has no coordinated sequence to judge a copy by: a backup always copies anew
            has_copy = read_activation_sequence(self.lock_dir) > 0 and node_id_of(config) is not None
            has_copy = has_copy and not self.voting
            has_copy = has_copy and not stepped_down
            self.candidate = Candidate.BACKUP_WITH_COPY if has_copy else Candidate.BACKUP
        elif policy.check_for_active_server:
            self.candidate = Candidate.PRIMARY_CHECKING
        else:
            self.candidate = Candidate.PRIMARY
        self.follow = Follow.STARTING
        self._pending: list[FollowAction] = []  # actions of events seen between two polls
        self._said_maybe = False
        self.poll_every = POLL
        self.watch_every = WATCH
        self.client: OutboundConnection | None = None
        self._locating: asyncio.Task[None] | None = None  # a colocated primary asks where its backup is
        self.service: ReplicationService | None = None
        self.lost: str | None = None  # why the lock manager says our lock is gone
        self.primary_back = False  # an active backup: its primary replicates from it, synchronized
        self.coordinated: int | None = None
        self.fence_timeout = FENCE_TIMEOUT if self.quorum is None else self.quorum.longest_stay_vote()
        self._call: asyncio.Future[Any] | None = None  # the lock manager call last made (one at a time)
        cluster = config.cluster_connection()
        self.call_timeout = (cluster.call_timeout if cluster is not None else 30000) / 1000
        self.probe_time = max(2.0, len(config.ha_partners()) * policy.retry_replication_wait / 1000)
        self._fencing: asyncio.Task[None] | None = None
        self._probe: asyncio.TimerHandle | None = None
        self._ticker: asyncio.TimerHandle | None = None
        self._started = False
        self._cluster_started = False

    # ------------------------------------------------------------------------------- passive

    async def begin(self) -> None:
        if self.membership is not None and not self._cluster_started:
            self._cluster_started = True
            self.membership.start()
        await self._start_manager()

    def _cluster_changed(self) -> None:
        """A member came or went: this server's clients are told of the active members; an active server
        that sees a newer activation of its node id stops."""
        membership = self.membership
        if membership is not None:
            self.controller.broker.server.failover_servers = membership.live_members()
            self._check_superseded(membership)

    def _check_superseded(self, membership: ClusterMembership) -> None:
        """Two actives for one node id: the older activation (quorum.superseded) stops serving at once,
        writes nothing more, and exits to rejoin as a backup of the newer one."""
        node = self._node_id()
        if self.service is None or node is None or self._superseded is not None:
            return
        if self.controller.state != State.ACTIVE:
            return  # stopping already (a failback's hand-over to the newer one, a clean stop)
        own = Activation(read_activation_sequence(self.lock_dir), self.won_vote, membership.connector)
        for member in membership.members:
            if member.node_id != node or member.reached_at == membership.connector:
                continue
            other = Activation(member.sequence, member.by_vote, member.reached_at or "")
            if not superseded(own, other):
                continue
            why = (
                f"{other.connector} is active with its node id {node} at activation sequence "
                f"{other.sequence}{' (by a vote)' if other.by_vote else ''}, this server at {own.sequence}"
                f"{' (by a vote)' if own.by_vote else ''}"
            )
            log.critical(
                "AMQ951170: %s sees %s: it stops serving now and rejoins as a backup",
                self.controller.config.name,
                why,
            )
            self.controller.rejoin = (
                f"another server is active with a newer activation of its node id ({why})"
            )
            self._superseded = self.loop.create_task(self.controller.on(Event.LOCK_LOST))
            return

    async def _start_manager(self) -> bool:
        if self._started:
            return True
        try:
            await self._run(self.manager.start)
        except LockManagerError as exc:  # said once a poll; the poll tries again
            log.warning("HA %s: %s", self.controller.config.name, exc)
            return False
        self.manager.on_lost(self._lost_from_any_thread)
        self._started = True
        return True

    def _observe(self, event: FollowEvent) -> None:
        """News of the stream (the replica's callbacks, on the loop): a step now, its actions at the poll."""
        self._pending += self._step(event)

    def _step(self, event: FollowEvent) -> tuple[FollowAction, ...]:
        step = follow_step(self.candidate, self.follow, event, voting=self.voting)
        if step.state != self.follow:
            log.debug(
                "HA %s follows: %s on %s -> %s", self.controller.config.name, self.follow, event, step.state
            )
        self.follow = step.state
        if step.state != Follow.ORPHANED and self._vote is not None:
            self._vote.cancel()  # the stream is back (or the vote is over): nothing left to decide
            self._vote = None
        self.poll_every = REPAIR_WAIT if step.state == Follow.AWAITING_REPAIR else POLL
        if step.state != Follow.AWAITING_REPAIR:
            self._said_maybe = False
        return step.actions

    async def poll(self) -> Event | None:
        if not await self._start_manager():
            return None
        actions, self._pending = self._pending, []
        queue = list(actions) or list(self._step(FollowEvent.TICK))
        while queue:
            queue += await self._act(queue.pop(0))
        return Event.LOCK_ACQUIRED if self.follow == Follow.ACTIVATING else None

    async def _act(self, action: FollowAction) -> list[FollowAction]:
        """Carry one action out; the actions of the events it brings about (the lock's answer)."""
        name = self.controller.config.name
        if action == FollowAction.FOLLOW:
            self._replicate()
        elif action == FollowAction.UNFOLLOW:
            self._stop_replicating()
        elif action == FollowAction.PROBE:
            self._replicate()
            self._probe = self.loop.call_later(self.probe_time, self._probe_over)
        elif action == FollowAction.TRY_LOCK:
            return list(await self._try_lock())
        elif action == FollowAction.SAY_ORPHANED:
            log.info(
                "AMQ951070: %s lost the replication stream of %s: it takes over once %s",
                name,
                self.replica.primary,
                "the quorum says its primary is gone" if self.voting else "its lock is free",
            )
        elif action == FollowAction.VOTE:
            if self._vote is None:
                self._vote = self.loop.create_task(self._vote_on_primary())
        elif action == FollowAction.SAY_VOTE_LOST:
            log.warning(
                "AMQ951103: %s will not take over: the quorum did not say its primary is gone (or it is "
                "isolated); it replicates again, from the start",
                name,
            )
        elif action == FollowAction.SAY_FOLLOWING_ACTIVE:
            log.info("AMQ221033: %s finds another server active: replicating from it", name)
        elif action == FollowAction.SAY_FOUND_ACTIVE:
            if self._probe is not None:
                self._probe.cancel()
            log.info(
                "AMQ951075: %s found %s active with its node id (check-for-active-server): it replicates "
                "from it, and fails back once synchronized",
                name,
                self.replica.primary,
            )
        elif action in (FollowAction.RELEASE_STALE, FollowAction.RELEASE_MAYBE):
            node = self._node_id()
            if node is not None:
                await self._run(self.manager.unlock, node)
            local = read_activation_sequence(self.lock_dir)
            if action == FollowAction.RELEASE_STALE:
                log.warning(
                    "AMQ222327: %s will not activate: its journal is stale (activation sequence %d, "
                    "coordinated %s); it replicates from the active server first",
                    name,
                    local,
                    self.coordinated,
                )
            elif not self._said_maybe:  # said once, when the wait begins
                self._said_maybe = True
                log.warning(
                    "AMQ951074: %s will not activate yet: the activation sequence %s was claimed by another "
                    "server that never committed it (this server's is %d); it waits for that server to "
                    "come back and repair it, or for an operator (amqp-mirror ha break-glass)",
                    name,
                    self.coordinated,
                    local,
                )
        return []

    async def _vote_on_primary(self) -> None:
        node, quorum = self._node_id(), self.quorum
        won = node is not None and quorum is not None and await quorum.ask(Question.PRIMARY_GONE, node)
        self._vote = None
        self.won_vote = won
        self._pending += self._step(FollowEvent.VOTE_WON if won else FollowEvent.VOTE_LOST)

    def _probe_over(self) -> None:
        self._probe = None
        self._pending += self._step(FollowEvent.NONE_FOUND)

    async def _try_lock(self) -> tuple[FollowAction, ...]:
        node = self._node_id()
        if node is None:
            return ()  # a backup that has not heard from its primary yet
        if not await self._run(self.manager.try_lock, node):
            return self._step(FollowEvent.LOCK_REFUSED)
        self.lost = None  # a fresh acquisition: what was lost before is history
        local = read_activation_sequence(self.lock_dir)
        coordinated = self.coordinated = await self._run(self.manager.get_sequence, node)
        return self._step(VERDICT_EVENTS[activation.verdict(local, coordinated)])

    async def activating(self) -> None:
        self._stop_replicating()
        self.replica.close()
        node = self._node_id()
        assert node is not None
        sequence = await self._run(self._claim, node)
        log.info("AMQ221029: %s activates with activation sequence %d", self.controller.config.name, sequence)
        if self.break_glass is not None:
            clear_break_glass(self.controller.config)  # done: the next start is an ordinary one

    def _claim(self, node: str, fencing: bool = False) -> int:
        """activation.claim's steps against the lock manager (a worker thread). `fencing`: an active
        server moving the sequence on must still hold the lock, asked of the lock manager itself."""
        if fencing and not self.manager.confirm(node):
            raise LockManagerError("the lock manager says the lock is no longer ours")
        local = read_activation_sequence(self.lock_dir)
        coordinated = self.manager.get_sequence(node)
        try:
            plan = activation.claim(local, coordinated, fencing=fencing)
        except activation.NotUpToDate as exc:
            raise LockManagerError(str(exc)) from exc
        sequence = plan.sequence
        if plan.claim_from is not None and not self.manager.compare_and_set_sequence(
            node, plan.claim_from, -sequence
        ):
            raise OSError("the activation sequence moved under our claim")
        write_activation_sequence(self.lock_dir, sequence)
        if not self.manager.compare_and_set_sequence(node, -sequence, sequence):
            raise OSError("the activation sequence moved before our commit")
        self.coordinated = sequence
        return sequence

    # -------------------------------------------------------------------------------- active

    def activated(self, broker: Broker) -> None:
        config = self.controller.config
        cluster = config.cluster_connection()
        self.service = ReplicationService(
            broker.server,
            broker.turn.dispatch,
            self._replica_changed,
            lambda: read_activation_sequence(self.lock_dir),
            self._fence,
            ReplicationSettings(
                sync_timeout_ms=self.policy.initial_replication_sync_timeout,
                call_timeout_ms=cluster.call_timeout if cluster is not None else 30000,
                group_name=self.policy.group_name,
                connection_ttl_override=config.connection_ttl_override,
            ),
        )
        broker.services.register_sender(REPLICATION_ADDRESS, self.service)
        membership, node = self.membership, self._node_id()
        if membership is not None and node is not None:
            membership.remember(node, read_activation_sequence(self.lock_dir))
            counts = membership.counts
            broker.services.register_sender(
                CLUSTER_ADDRESS,
                ClusterService(
                    config.name,
                    node,
                    membership.connector,
                    self.policy.group_name,
                    membership.topology,
                    lambda question, yes: counts.update([f"cast {question.value} {'yes' if yes else 'no'}"]),
                    sequence=lambda: read_activation_sequence(self.lock_dir),
                    by_vote=lambda: self.won_vote,
                    newest=lambda: membership.newest,
                    promises=lambda: membership.promises,
                ),
            )
            self._cluster_changed()

    def _fence(self, done: Callable[[bool], None]) -> None:
        """A synchronized replica is gone: move the activation sequence on while we still hold the lock
        (its copy is stale from then on: it never activates with it). Only then do the confirmations
        held for it go out. If we cannot (the lock is no longer ours: it may have activated), we stop."""

        async def fence() -> None:
            node = self._node_id()
            try:
                if node is None:
                    raise LockManagerError("no node id")
                sequence = await asyncio.wait_for(self._run(self._claim, node, True), self.fence_timeout)
            except Exception as exc:  # the lock manager's, a timeout, a moved sequence: all say stop
                why = str(exc) or type(exc).__name__
                self.lost = f"the lost replica could not be fenced off: {why}"
                done(False)
                return
            log.info(
                "AMQ221036: %s moved its activation sequence to %d: the lost replica's copy is stale",
                self.controller.config.name,
                sequence,
            )
            if self.membership is not None:
                self.membership.remember(node, sequence)
            done(True)

        self._fencing = self.loop.create_task(fence())

    def _replica_changed(self, synchronized: bool, role: str) -> None:
        if steps_down(self.role == HaRole.BACKUP, self.policy.allow_failback, role == "primary"):
            self.primary_back = synchronized

    async def watch(self) -> Event | None:
        node = self._node_id()
        if self.lost is not None or node is None or not self.manager.holds(node):
            log.critical(
                "AMQ222325: %s lost its lock (%s): it stops serving now",
                self.controller.config.name,
                self.lost or self.manager.why_not_held(node or ""),
            )
            return Event.LOCK_LOST
        if self.primary_back:
            return Event.FAILBACK_REQUESTED
        return None

    def _lost_from_any_thread(self, why: str) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: this server has stopped already
            self.loop.call_soon_threadsafe(self._on_lost, why)

    def _on_lost(self, why: str) -> None:
        self.lost = why

    def stopping(self, failover: bool) -> None:
        if self.service is not None:
            self.service.stopping(failover)

    def kept_connections(self) -> Container[object]:
        feed = self.service.feed if self.service is not None else None
        return (feed.peer.conn,) if feed is not None else ()

    async def hand_over(self) -> None:
        """A clean stop hands over to a synchronized replica, once it has every batch (bounded by the
        cluster connection's call-timeout); without one, nobody takes over."""
        service, name = self.service, self.controller.config.name
        if service is None:
            return
        peer = service.feed.peer.name if service.feed is not None else ""
        complete = await service.hand_over(self.call_timeout)
        if complete is None:
            log.info("AMQ951071: %s stops with no synchronized backup: nobody takes over", name)
        elif complete:
            log.info("AMQ951072: %s handed over to %s with every batch it wrote", name, peer)
        else:
            log.warning(
                "AMQ951073: %s hands over to %s, which did not confirm the last batches within "
                "call-timeout %d ms (their confirmations never went out: the clients resend them)",
                name,
                peer,
                self.call_timeout * 1000,
            )

    def stop_failing_over(self) -> None:
        self._unlock()

    def stop_paused(self) -> None:
        self._unlock()

    def _stop_cluster(self) -> None:
        if self._vote is not None:
            self._vote.cancel()
            self._vote = None
        if self.membership is not None:
            self.membership.stop()

    def release(self) -> None:
        self._stop_cluster()
        self._stop_replicating()
        self.replica.close()
        self._unlock()
        self.manager.stop()

    def halt(self) -> None:
        self._stop_cluster()
        self._stop_replicating()
        self.replica.close()
        manager = self.manager
        # its session closes (the lock, if still ours, goes sooner), off the loop: it may wait on the network
        threading.Thread(target=manager.stop, name="lock-manager-stop", daemon=True).start()

    def _unlock(self) -> None:
        node = self._node_id()
        if node is not None and self._started:
            self.manager.unlock(node)

    async def may_serve_again(self) -> bool:
        """After an isolation: under quorum voting, not if a member is active with our node id elsewhere
        (our backup won its vote meanwhile); the members are given time to be reached again first. A lock
        manager's lock held all along says nobody else took over (a lost lock halts)."""
        membership, node = self.membership, self._node_id()
        if membership is None or node is None:
            return True
        cluster = self.controller.config.cluster_connection()
        settle = (cluster.retry_interval if cluster is not None else 500) * 2 / 1000 + 1.0
        await asyncio.sleep(settle)
        elsewhere = membership.topology().get(node)
        return elsewhere is None or elsewhere == membership.connector

    def backup_present(self) -> bool:
        service = self.service
        return service is not None and service.feed is not None

    def counters(self) -> dict[str, int]:
        service = self.service
        votes = dict(self.membership.counts) if self.membership is not None else {}
        return {
            "replicas_dropped_lagging": service.dropped_lagging if service is not None else 0,
            **{f"votes {outcome}": n for outcome, n in votes.items()},
        }

    def status(self) -> dict[str, object]:
        service = self.service
        synchronized = service.synchronized if service is not None else self.replica.synchronized
        return {
            "synchronized": synchronized,
            "activationSequence": read_activation_sequence(self.lock_dir),
            "coordinatedSequence": self.coordinated,
            "lockManager": type(self.manager).__name__,
            **({"cluster": self.membership.describe()} if self.membership is not None else {}),
            **({"following": str(self.follow)} if service is None else {}),
        }

    # ---------------------------------------------------------------------------- replicating

    def _node_id(self) -> str | None:
        if self.candidate != Candidate.BACKUP and self.client is None:  # its own journal's (or adopted) id
            return load_or_create_node_id(Path(self.controller.config.journal_directory))
        return self.replica.node_id

    def _replicate(self) -> None:
        """Follow the partners (the active server): its stream into our replica. Each static connector of
        the cluster connection in turn, every retry-replication-wait, until one streams to us. A colocated
        primary follows its backup instead, wherever a member of its cluster says it is active."""
        if self.client is not None or self._locating is not None:
            return
        config = self.controller.config
        partners = config.ha_partners()
        if not partners:
            log.error("AMQ222328: %s has no partner <connector> to replicate from", config.name)
            return
        if self.candidate != Candidate.BACKUP:  # a primary follows only an active server of its node id
            node = self.replica.expected_node_id = load_or_create_node_id(Path(config.journal_directory))
            if self.policy.colocated is not None:
                self._locating = self.loop.create_task(self._locate_backup(node))
                return
        self._follow(partners)

    async def _locate_backup(self, node: str) -> None:
        """A colocated primary whose node id is active elsewhere: its backup, hosted by another primary
        (at an offset port, or behind that one's HTTP upgrade endpoint), not at a static connector. The
        members are asked where it is, every retry-replication-wait until one says; then it is followed."""
        config, said = self.controller.config, False
        while (found := await self._locate(node)) is None:
            if not said:
                said = True
                log.warning(
                    "AMQ951185: %s finds its node id %s active elsewhere, but no member of its cluster says "
                    "it hosts that server; it asks them again every %d ms",
                    config.name,
                    node,
                    self.policy.retry_replication_wait,
                )
            await asyncio.sleep(self.policy.retry_replication_wait / 1000)
        self._locating = None
        backup, host = found
        log.info(
            "AMQ951189: %s finds its node id active at %s (%s, hosted by %s): it replicates from it, and "
            "fails back once synchronized",
            config.name,
            backup.uri,
            backup.name.rsplit(":", 1)[-1],
            host,
        )
        self.controller.send_clients_to((backup.host, backup.port))
        self._follow((backup,))

    async def _locate(self, node: str) -> tuple[Connector, str] | None:
        try:
            return await locate_active(self.controller.config, self.controller.broker, node)
        except Exception:  # a member's answer we cannot use (a malformed connector, say): asked again
            log.exception(
                "AMQ951141: %s: unexpected error asking where its backup runs", self.controller.config.name
            )
            return None

    def _follow(self, partners: tuple[Connector, ...]) -> None:
        config = self.controller.config
        cluster = config.cluster_connection()
        connection = AmqpConnection(
            name=f"replication:{self.role}:{config.name}",
            uri=partners[0].uri,  # its parameters too: sslEnabled and the trust store make it TLS
            endpoints=tuple(_endpoint(p) for p in partners),
            user=config.cluster_user,
            password=config.cluster_password,
            retry_interval=self.policy.retry_replication_wait,
            idle_timeout=cluster.connection_ttl if cluster is not None else 60000,
        )
        broker = self.controller.broker
        partner = "the primary" if self.role == HaRole.BACKUP else "the active server"
        refused = (
            f"AMQ951041: {partner} refused the cluster user's password (user {config.cluster_user}): check "
            "<cluster-user>/<cluster-password>, which must be the same on both servers"
        )
        policy = ReplicaPolicy(self.replica, connection.name, self.policy.group_name, self._stream_lost)
        self.client = OutboundConnection(
            broker.server, connection, self.loop, broker.turn, [policy], login_refused=refused
        )
        self.client.start()
        self._tick()

    def _stream_lost(self) -> None:
        self._pending += self._step(FollowEvent.STREAM_LOST)

    def _tick(self) -> None:
        """The replication connection's clock: keep-alives out, and a silent partner noticed within
        connection-ttl (no broker-connection manager ticks this one)."""
        self._ticker = None
        client = self.client
        if client is not None:
            client.tick(time.monotonic())
            self._ticker = self.loop.call_later(TICK, self._tick)

    def _stop_replicating(self) -> None:
        if self._locating is not None:
            self._locating.cancel()
            self._locating = None
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        client, self.client = self.client, None
        if client is not None:
            client.stop()

    async def _run(self, call: Any, *args: Any) -> Any:
        """A lock manager call, off the loop (it may wait on the network), and one at a time. One still
        unanswered after CALL_BOUND is said (the poll moves on and tries again), and the next call waits
        for it first: two tries at once would race each other's contender nodes, and a try that ends in
        its thread after all leaves the manager holding the lock, which the next try then reports."""
        previous = self._call
        if previous is not None and not previous.done():
            await self._bounded(previous, "its previous call")
        self._call = asyncio.get_running_loop().run_in_executor(None, call, *args)
        self._call.add_done_callback(_retrieved)  # an answer nobody awaits any more is no error to log
        return await self._bounded(self._call, getattr(call, "__name__", "a call"))

    async def _bounded(self, call: asyncio.Future[Any], what: str) -> Any:
        bound = max(CALL_BOUND, self.fence_timeout)  # a quorum's stay-active vote may take longer
        try:
            return await asyncio.wait_for(asyncio.shield(call), bound)
        except TimeoutError:
            raise LockManagerError(f"the lock manager has not answered {what} in {bound:g} s") from None


def _endpoint(connector: Connector) -> Endpoint:
    parsed = parse_acceptor_uri(connector.uri)  # ws:// too (a colocated backup behind an HTTP upgrade)
    return Endpoint(
        host=connector.host, port=connector.port, params=parsed.params, scheme=parsed.scheme, path=parsed.path
    )


def _retrieved(call: asyncio.Future[Any]) -> None:
    if not call.cancelled():
        call.exception()
