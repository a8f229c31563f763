"""The replication coordinator: a lock manager decides who is active, a replication stream keeps the
passive server's copy of the journal (broker_core/ha/: lock_managers.py, replica.py, replication_source.py).

Seed 001 §2.2 with a pluggable lock manager, spec A4's activation sequence:
- a server activates only while it holds the node id's lock, and only if its journal is up to date:
  its local activation sequence equals the coordinated one (InSync), or it was cut short by a crash in the
  middle of its own claim (SelfRepair: the coordinated value is the negated claim of local+1);
  a coordinated value ahead of it (Stale) never activates;
- activating, it claims (coordinated -> -(n+1)), writes its local n+1, and commits (coordinated -> n+1);
- a backup replicates from its primary (the partner connector, as the cluster user); it may take over
  only once synchronized, when the replication is lost and the lock is free (the primary dead: its
  session gone) - unless the primary said it stopped cleanly without failover;
- a primary that finds the lock held (its backup is active) or its journal stale replicates from the
  active server instead; once synchronized, the active backup steps down (allow-failback) and the
  primary, now up to date, takes the lock: failback;
- an active server whose lock is lost (the manager says so, or no longer holds it) stops serving.
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

from broker_core.amqp.performatives import ACCEPTED_BYTES, Attach, Source, Target
from broker_core.config.model import AmqpConnection, Endpoint, HaRole
from broker_core.config.uri import parse_acceptor_uri
from broker_core.ha.lock_managers import LockManager, LockManagerError, lock_manager_for
from broker_core.ha.node_files import read_activation_sequence, write_activation_sequence
from broker_core.ha.replica import Replica
from broker_core.ha.replication_source import ReplicationService
from broker_core.ha.replication_wire import REPLICATION_ADDRESS, ReplicationFormatError
from broker_core.ha.states import Event
from broker_core.journal.node_id import adopt_node_id, coordinated_node_id, load_or_create_node_id
from connections.outbound import OutboundConnection
from connections.policies import ConnectError, LinkHost, LinkRole

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link
    from broker_core.config.model import BrokerConfig

    from .broker import Broker

log = logging.getLogger("broker.ha")

POLL = 0.1  # seconds between a passive server's looks at the lock (its calls leave the loop)
WATCH = 0.2  # seconds: an active server checks it still holds its lock (and whether to fail back)
REPLICA_CREDIT = 100
TICK = 0.1  # seconds between looks at the replication connection's keep-alives and silence
FENCE_TIMEOUT = 10.0  # seconds to fence off a lost replica before giving up (and stopping)


class Controller(Protocol):
    """What the coordinator needs of its HA controller (amqp_mirror/ha.py)."""

    config: BrokerConfig
    loop: asyncio.AbstractEventLoop
    broker: Broker


class ReplicationCoordinator:
    def __init__(self, controller: Controller) -> None:
        config = controller.config
        policy = config.ha_policy
        assert policy.manager is not None  # the configuration refuses replication without one
        self.controller = controller
        self.loop = controller.loop
        self.role = policy.role
        self.policy = policy
        self.manager: LockManager = lock_manager_for(policy.manager)
        self.lock_dir = Path(config.node_manager_lock_directory or config.journal_directory)
        self.replica = Replica(
            Path(config.journal_directory),
            Path(config.paging_directory),
            self.lock_dir,
            policy.max_saved_replicated_journals_size,
            controller.broker.turn.dispatch,
            config.journal_file_size,
            policy.group_name,
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
        self.poll_every = POLL
        self.watch_every = WATCH
        self.client: OutboundConnection | None = None
        self.service: ReplicationService | None = None
        self.lost: str | None = None  # why the lock manager says our lock is gone
        self.primary_back = False  # an active backup: its primary replicates from it, synchronized
        self.coordinated: int | None = None
        self.fence_timeout = FENCE_TIMEOUT
        cluster = config.cluster_connection()
        self.call_timeout = (cluster.call_timeout if cluster is not None else 30000) / 1000
        self._fencing: asyncio.Task[None] | None = None
        self._ticker: asyncio.TimerHandle | None = None
        self._started = False
        self._orphaned = False  # the stream is gone and the lock has been tried (said once)

    # ------------------------------------------------------------------------------- passive

    async def begin(self) -> None:
        if not self._started:
            await self._run(self.manager.start)
            self.manager.on_lost(self._lost_from_any_thread)
            self._started = True
        if self.role == HaRole.BACKUP:
            self._replicate()

    async def poll(self) -> Event | None:
        node = self._node_id()
        if node is None:
            return None  # a backup that has not heard from its primary yet
        if self.role == HaRole.BACKUP or self.client is not None:
            replica = self.replica
            if not replica.synchronized or self._replicating():
                self._orphaned = False
                return None  # the primary is alive and streaming, or we are not up to date yet
            if replica.primary_stopped == "paused":
                return Event.PRIMARY_NOT_FAILED  # a clean stop without failover: stay passive
            if not self._orphaned:
                self._orphaned = True
                log.info(
                    "AMQ951060: %s lost the replication stream of its primary %s: it takes over once the "
                    "primary's lock is free",
                    self.controller.config.name,
                    replica.primary,
                )
        if not await self._run(self.manager.try_lock, node):
            if self.role == HaRole.PRIMARY and self.client is None:
                log.info(
                    "AMQ221033: %s finds another server active: replicating from it",
                    self.controller.config.name,
                )
                self._replicate()
            return None
        self.lost = None  # a fresh acquisition: what was lost before is history
        verdict = await self._run(self._verdict, node)
        if verdict != "stale":
            return Event.LOCK_ACQUIRED
        await self._run(self.manager.unlock, node)
        log.warning(
            "AMQ222327: %s will not activate: its journal is stale (activation sequence %d, coordinated %s); "
            "it replicates from the active server first",
            self.controller.config.name,
            read_activation_sequence(self.lock_dir),
            self.coordinated,
        )
        if self.client is None:
            self._replicate()
        return None

    def _verdict(self, node: str) -> str:
        """Spec A4's rules: 'in sync', 'self repair' (our own claim was cut short) or 'stale'."""
        local = read_activation_sequence(self.lock_dir)
        coordinated = self.coordinated = self.manager.get_sequence(node)
        if coordinated == local:
            return "in sync"
        if coordinated < 0 and -coordinated in (local, local + 1):
            return "self repair"
        return "stale"

    async def activating(self) -> None:
        self._stop_replicating()
        self.replica.close()
        node = self._node_id()
        assert node is not None
        sequence = await self._run(self._claim, node)
        log.info("AMQ221029: %s activates with activation sequence %d", self.controller.config.name, sequence)

    def _claim(self, node: str, in_sync: bool = False) -> int:
        """Claim (coordinated -> -(n+1)), then local n+1, then commit (coordinated -> n+1).

        `in_sync`: an active server fencing off its lost replica: it must still hold the lock (asked of
        the lock manager, not remembered) and the coordinated sequence must still be its own."""
        local = read_activation_sequence(self.lock_dir)
        if in_sync and not self.manager.confirm(node):
            raise LockManagerError("the lock manager says the lock is no longer ours")
        coordinated = self.manager.get_sequence(node)
        if in_sync and coordinated != local:
            raise LockManagerError(f"the activation sequence moved to {coordinated} (ours {local})")
        claim = max(local, -coordinated if coordinated < 0 else coordinated) + 1
        if coordinated >= 0 and not self.manager.compare_and_set_sequence(node, coordinated, -claim):
            raise OSError("the activation sequence moved under our claim")
        write_activation_sequence(self.lock_dir, claim)
        if not self.manager.compare_and_set_sequence(
            node, -claim if coordinated >= 0 else coordinated, claim
        ):
            raise OSError("the activation sequence moved before our commit")
        self.coordinated = claim
        return claim

    # -------------------------------------------------------------------------------- active

    def activated(self, broker: Broker) -> None:
        self.service = ReplicationService(
            broker.server,
            broker.turn.dispatch,
            self._replica_changed,
            lambda: read_activation_sequence(self.lock_dir),
            self._fence,
            self.policy.initial_replication_sync_timeout,
            self.policy.group_name,
        )
        broker.services.register_sender(REPLICATION_ADDRESS, self.service)

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
            done(True)

        self._fencing = self.loop.create_task(fence())

    def _replica_changed(self, synchronized: bool, role: str) -> None:
        if role == "primary" and self.role == HaRole.BACKUP and self.policy.allow_failback:
            self.primary_back = synchronized

    async def watch(self) -> Event | None:
        node = self._node_id()
        if self.lost is not None or node is None or not self.manager.holds(node):
            log.critical(
                "AMQ222325: %s lost its lock (%s): it stops serving now",
                self.controller.config.name,
                self.lost or "the lock manager no longer holds it",
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
            log.info("AMQ951061: %s stops with no synchronized backup: nobody takes over", name)
        elif complete:
            log.info("AMQ951062: %s handed over to %s with every batch it wrote", name, peer)
        else:
            log.warning(
                "AMQ951063: %s hands over to %s, which did not confirm the last batches within "
                "call-timeout %d ms (their confirmations never went out: the clients resend them)",
                name,
                peer,
                self.call_timeout * 1000,
            )

    def stop_failing_over(self) -> None:
        self._unlock()

    def stop_paused(self) -> None:
        self._unlock()

    def release(self) -> None:
        self._stop_replicating()
        self.replica.close()
        self._unlock()
        self.manager.stop()

    def halt(self) -> None:
        self._stop_replicating()
        self.replica.close()
        manager = self.manager
        # its session closes (the lock, if still ours, goes sooner), off the loop: it may wait on the network
        threading.Thread(target=manager.stop, name="lock-manager-stop", daemon=True).start()

    def _unlock(self) -> None:
        node = self._node_id()
        if node is not None:
            self.manager.unlock(node)

    def backup_present(self) -> bool:
        service = self.service
        return service is not None and service.feed is not None

    def status(self) -> dict[str, object]:
        service = self.service
        synchronized = service.synchronized if service is not None else self.replica.synchronized
        return {
            "synchronized": synchronized,
            "activationSequence": read_activation_sequence(self.lock_dir),
            "coordinatedSequence": self.coordinated,
            "lockManager": type(self.manager).__name__,
        }

    # ---------------------------------------------------------------------------- replicating

    def _node_id(self) -> str | None:
        if self.role == HaRole.PRIMARY and self.client is None:
            return load_or_create_node_id(Path(self.controller.config.journal_directory))
        return self.replica.node_id

    def _replicate(self) -> None:
        """Follow the partner (the active server): its stream into our replica."""
        if self.client is not None:
            return
        config = self.controller.config
        other = config.ha_partner()
        if other is None:
            log.error("AMQ222328: %s has no partner <connector> to replicate from", config.name)
            return
        cluster = config.cluster_connection()
        connection = AmqpConnection(
            name=f"replication:{self.role}:{config.name}",
            uri=other.uri,  # its parameters too: sslEnabled and the trust store make it TLS
            endpoints=(
                Endpoint(host=other.host, port=other.port, params=parse_acceptor_uri(other.uri).params),
            ),
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
        self.client = OutboundConnection(
            broker.server,
            connection,
            self.loop,
            broker.turn,
            [ReplicaPolicy(self.replica, connection.name)],
            login_refused=refused,
        )
        self.client.start()
        self._tick()

    def _tick(self) -> None:
        """The replication connection's clock: keep-alives out, and a silent partner noticed within
        connection-ttl (no broker-connection manager ticks this one)."""
        self._ticker = None
        client = self.client
        if client is not None:
            client.tick(time.monotonic())
            self._ticker = self.loop.call_later(TICK, self._tick)

    def _replicating(self) -> bool:
        return self.client is not None and self.client.connected

    def _stop_replicating(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        client, self.client = self.client, None
        if client is not None:
            client.stop()

    async def _run(self, call: Any, *args: Any) -> Any:
        """A lock manager call, off the loop (it may wait on the network)."""
        return await asyncio.get_running_loop().run_in_executor(None, call, *args)


class ReplicaPolicy:
    """The link policy of a replication connection: one receiving link from the primary's stream."""

    def __init__(self, replica: Replica, name: str) -> None:
        self.replica = replica
        self.name = name
        self._pending = 0

    def install(self) -> None:
        pass

    def attach_all(self, conn: LinkHost) -> None:
        attach = Attach(
            name=self.name,
            role=True,
            snd_settle_mode=0,
            rcv_settle_mode=0,
            source=Source(address=REPLICATION_ADDRESS),
            target=Target(),
        )
        conn.attach(attach, LinkRole(self))
        self._pending = 1

    def remote_attached(self, conn: LinkHost, link: Link) -> None:
        self._pending = 0
        answer = link.remote_attach
        if answer is None or answer.source is None:
            raise ConnectError("the primary refused replication (is the cluster user and password right?)")
        engine = conn.conn
        if engine is not None:
            engine.flow(link, credit=REPLICA_CREDIT)
            conn.mark_dirty()

    def local_queue_added(self, conn: LinkHost, queue: Any) -> None:
        pass

    def on_delivery(
        self, conn: LinkHost, link: Link, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        engine, session = conn.conn, link.session

        def applied() -> None:
            if conn.conn is engine and engine is not None and not link.closed_locally:
                session.incoming_unsettled.pop(delivery_id, None)
                engine.settle_incoming(session, delivery_id, delivery_id, ACCEPTED_BYTES)
                if link.credit <= REPLICA_CREDIT // 2:
                    engine.flow(link, credit=REPLICA_CREDIT)
                conn.mark_dirty()

        try:
            self.replica.apply(payload, applied)
        except (ReplicationFormatError, OSError, ValueError) as exc:
            log.error("AMQ222329: replication packet not applied (%s); replicating again from the start", exc)
            if engine is not None:
                engine.close("amqp:internal-error", f"replication packet not applied: {exc}")
                conn.mark_dirty()

    def on_outcome(self, conn: LinkHost, link: Link, context: Any, state: Any) -> None:
        pass

    def outcomes_done(self, conn: LinkHost) -> None:
        pass

    def on_flow(self, conn: LinkHost, link: Link) -> None:
        pass

    def detached_all(self, conn: LinkHost) -> None:
        self._pending = 0

    def pending(self) -> int:
        return self._pending
