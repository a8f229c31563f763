"""Runs one broker under its HA policy: the state machine of broker_core/ha/states.py, stepped on the
loop's timers by a *coordinator* that knows how the pair decides who is active: the shared store's lock
files (`SharedStoreCoordinator`, below) or a lock manager and a replication stream
(`ReplicationCoordinator`, ha_replication.py).

While passive, the broker's acceptors answer clients with a redirect to the active server
(broker_core/passive.py); activating, it recovers its journal and serves; active, the coordinator's watch
stops it at once if the lock is no longer its own (never two active servers), and an active backup steps
down when its primary comes back (allow-failback). Every transition is a log line with a stable id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Container
from pathlib import Path
from typing import Protocol

from broker_core.config.model import BrokerConfig, HaKind, HaRole
from broker_core.ha import storage
from broker_core.ha.lock_managers import LockManagerError
from broker_core.ha.shared_store import SharedStore
from broker_core.ha.states import Action, Event, State, next_step
from broker_core.journal.node_id import load_or_create_node_id
from broker_core.passive import PassiveListener

from .broker import Broker
from .colocation import COLOCATION_ADDRESS, BackupRequester, ColocationService, Hosting
from .network_check import NetworkCheck, NetworkGuard, targets_of
from .scale_down import ScaleDownRun

log = logging.getLogger("broker.ha")

POLL = 0.1  # seconds between tries for the primary lock (Artemis blocks on it; a poll is as quick)
RETRY = 2.0  # after a backup found the primary stopped cleanly or failing back (Artemis: 2 s)
MONITOR = 2.0  # the lock monitor of an active server (Artemis: 2 s)
FAILBACK_CHECK = 1.0  # an active backup looks for its primary coming back (Artemis: 1 s)

# Log ids in the reference's style, one per transition worth knowing
_SAY = {
    (HaRole.PRIMARY, Action.WAIT_FOR_LOCK): "AMQ221034: primary %s waiting to obtain the primary lock",
    (HaRole.BACKUP, Action.WAIT_FOR_LOCK): "AMQ221109: backup %s started, waiting for its primary to fail",
    (HaRole.PRIMARY, Action.ANNOUNCE_ACTIVE): "AMQ221007: primary %s is now active",
    (HaRole.BACKUP, Action.ANNOUNCE_ACTIVE): "AMQ221010: backup %s is now active",
}


# The exit code of a server the pair stopped (failback, a requested failover), not an operator: the
# service manager starts it again (the unit's RestartForceExitStatus), and it rejoins the pair.
EXIT_REJOIN = 4


def uses_ha(config: BrokerConfig) -> bool:
    return config.ha_policy.kind != HaKind.PRIMARY_ONLY


class Coordinator(Protocol):
    """How a pair decides who is active; the controller asks, on its timers, and acts on the answers."""

    poll_every: float  # seconds between polls while passive
    watch_every: float  # ... and watches while active

    async def begin(self) -> None:
        """Passive now: announce ourselves (a primary: failing back), start following the primary."""

    async def poll(self) -> Event | None:
        """Passive: LOCK_ACQUIRED when we may activate, PRIMARY_NOT_FAILED to back off, else None."""

    async def activating(self) -> None:
        """The lock is ours: the last step before the journal loads (claim the activation sequence)."""

    def activated(self, broker: Broker) -> None:
        """Active and serving: say so where the pair looks (write L; let a backup replicate from us)."""

    async def watch(self) -> Event | None:
        """Active: LOCK_LOST, FAILBACK_REQUESTED, or None."""

    def stopping(self, failover: bool) -> None:
        """This active server is about to stop: from now on it confirms nothing its partner may lack."""

    def kept_connections(self) -> Container[object]:
        """Stopping with a hand-over: the engines of the connections that must outlive the clients'."""

    async def hand_over(self) -> None:
        """Stopping, failing over, its clients gone: give the partner what it lacks, then the word."""

    def stop_failing_over(self) -> None:
        """The broker has stopped: let the partner take over."""

    def stop_paused(self) -> None:
        """About to stop without failover: the partner must stay passive."""

    def release(self) -> None: ...

    def halt(self) -> None:
        """This server halts: stop every thread of the coordinator's, tell nothing more to anyone."""

    def status(self) -> dict[str, object]: ...

    def backup_present(self) -> bool:
        """Active: whether a backup is there to take over (waiting on the shared store, or replicating)."""
        ...

    def counters(self) -> dict[str, int]:
        """What the coordinator counts, for the metrics (replicas dropped for lagging)."""
        ...

    async def may_serve_again(self) -> bool:
        """The network is back after an isolation: whether this active server may serve again (not if
        another server took over its node id meanwhile)."""
        ...


class SharedStoreCoordinator:
    """The shared store's lock files decide (broker_core/ha/shared_store.py)."""

    def __init__(self, controller: HaController) -> None:
        config = controller.config
        self.controller = controller
        self.role = config.ha_policy.role
        self.allow_failback = config.ha_policy.allow_failback
        directory = Path(config.node_manager_lock_directory or config.journal_directory)
        directory.mkdir(parents=True, exist_ok=True)
        for finding in storage.check(directory):
            log.warning("%s: %s: %s", finding.log_id, config.name, finding.what)
        node_id = load_or_create_node_id(Path(config.journal_directory))
        self.store = SharedStore(directory, controller.broker.server.data_lock, node_id)
        self.poll_every = POLL
        self.watch_every = MONITOR if self.role == HaRole.PRIMARY else FAILBACK_CHECK

    async def begin(self) -> None:
        if self.role == HaRole.PRIMARY:
            self.store.begin_primary()

    async def poll(self) -> Event | None:
        if self.role == HaRole.BACKUP:
            event = self.store.try_backup()
            self.poll_every = RETRY if event == Event.PRIMARY_NOT_FAILED else POLL
            return event
        return self.store.try_primary()

    async def activating(self) -> None:
        pass  # a backup fenced the old primary as it took the lock (SharedStore.try_backup)

    def activated(self, broker: Broker) -> None:
        self.store.announce_active()

    async def watch(self) -> Event | None:
        lost = self.store.monitor()
        if lost is not None:
            log.critical(
                "AMQ222325: %s lost its lock (%s): it stops serving now", self.controller.config.name, lost
            )
            return Event.LOCK_LOST
        if self.role == HaRole.BACKUP and self.allow_failback and self.store.failback_requested():
            return Event.FAILBACK_REQUESTED
        return None

    def stopping(self, failover: bool) -> None:
        pass  # one store: nothing to tell a partner that the lock files do not say

    def kept_connections(self) -> Container[object]:
        return ()

    async def hand_over(self) -> None:
        pass  # one store: the backup reads what the journal holds

    def stop_failing_over(self) -> None:
        self.store.stop_failing_over()

    def stop_paused(self) -> None:
        self.store.stop_paused()

    def release(self) -> None:
        self.store.release()

    def halt(self) -> None:
        pass  # lock files only: what is held goes with the process

    def status(self) -> dict[str, object]:
        return {"sharedState": self.store.state()}

    def backup_present(self) -> bool:
        return self.store.backup_waiting()

    def counters(self) -> dict[str, int]:
        return {}

    async def may_serve_again(self) -> bool:
        return True  # it kept the primary lock: nobody else took over


class HaController:
    def __init__(
        self,
        config: BrokerConfig,
        loop: asyncio.AbstractEventLoop,
        on_exit: Callable[[int, str], None],
        prepare: Callable[[Broker], None] = lambda broker: None,
    ) -> None:
        self.config = config
        self.loop = loop
        self.on_exit = on_exit  # (exit code, why): the process should end
        self.prepare = prepare  # what the runtime does to every broker it makes (its fatal handler)
        self.policy = config.ha_policy
        self.role = self.policy.role
        scale_down = self.policy.scale_down
        # a backup with <scale-down> never serves: it moves its primary's messages away instead
        self.scale_down = scale_down if scale_down is not None and scale_down.enabled else None
        if self.role != HaRole.BACKUP:
            self.scale_down = None
        self.state = State.STARTING
        # the network isolation check: an active server stops serving while isolated, a passive one never
        # activates then (broker_core/ha/isolation.py)
        self.network = NetworkCheck(config.name, targets_of(config), loop)
        self.guard = NetworkGuard(
            self.network, lambda: self.broker if self.state == State.ACTIVE else None, self._may_serve_again
        )
        self._said_isolated = False
        # <colocated>: the backups this primary hosts for its cluster, and its own request for one
        colocated = self.policy.colocated
        self.hosting = Hosting(self, self._hosted) if colocated is not None else None
        self.requester = BackupRequester(self) if colocated is not None and colocated.request_backup else None
        self.backs_up: str | None = None  # a hosted (colocated) backup: the primary it backs up
        self.broker: Broker = self._new_broker()
        self.coordinator = self._new_coordinator()
        other = config.ha_partner()
        self.active_elsewhere = (other.host, other.port) if other is not None else None
        if colocated is not None and self.role == HaRole.PRIMARY:
            self.active_elsewhere = None  # its partners are other primaries: its backup's place is found
        self.passive: PassiveListener | None = None
        self._waiting_since = 0.0  # a primary: when it began to wait for its lock
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        # Why this server stops, when the pair (not an operator) stopped it: it must be started again to
        # rejoin the pair as its backup (`EXIT_REJOIN`: the service manager restarts it)
        self.rejoin: str | None = None
        # told of every change of state (old, event, new): operations count failovers, tell systemd
        self.on_transition: list[Callable[[State, Event, State], None]] = []

    def _hosted(self, config: BrokerConfig, on_exit: Callable[[int, str], None]) -> HaController:
        """A backup this primary hosts (colocated): run as this one is, on its loop."""
        return HaController(config, self.loop, on_exit, self.prepare)

    def _new_broker(self) -> Broker:
        broker = Broker(self.config, self.loop)
        broker.ha = self
        if self.hosting is not None:
            broker.services.register_sender(COLOCATION_ADDRESS, ColocationService(self.hosting))
        self.prepare(broker)
        return broker

    def _new_coordinator(self, stepped_down: bool = False) -> Coordinator:
        if self.policy.kind == HaKind.REPLICATION:
            from .ha_replication import ReplicationCoordinator

            replication = ReplicationCoordinator(self, stepped_down)
            replication.healthy = lambda: self.network.healthy  # an isolated server's votes are lost
            return replication
        return SharedStoreCoordinator(self)

    # ------------------------------------------------------------------------------- driving

    async def start(self) -> None:
        self.network.start()
        await self.on(Event.START)

    async def stop(self) -> None:
        self.network.stop()
        if self.requester is not None:
            self.requester.stop()
        if self.hosting is not None:
            await self.hosting.stop()
        await self.on(Event.STOP)

    async def _may_serve_again(self) -> bool:
        if await self.coordinator.may_serve_again():
            return True
        log.warning(
            "AMQ951112: %s finds another server active with its node id after its isolation: it stops, "
            "to rejoin as its backup",
            self.config.name,
        )
        self.rejoin = "another server took over its node id while it was isolated"
        await self.stop()
        return False

    def send_clients_to(self, where: tuple[str, int] | None) -> None:
        self.active_elsewhere = where
        if self.passive is not None:
            self.passive.active = where

    async def force_failover(self) -> None:
        self.rejoin = "it failed over to its backup on request"
        await self.on(Event.FORCE_FAILOVER)

    async def on(self, event: Event) -> None:
        # a replicated server's clean stop always hands over to its synchronized replica (not configurable)
        failover = self.policy.failover_on_shutdown or self.policy.kind == HaKind.REPLICATION
        step = next_step(
            self.role,
            self.state,
            event,
            failover_on_shutdown=failover,
            scale_down=self.scale_down is not None,
        )
        if step.action == Action.NONE and step.state == self.state:
            return
        level = logging.INFO if step.state != self.state else logging.DEBUG  # a retry is not news
        log.log(
            level, "HA %s (%s): %s on %s -> %s", self.config.name, self.role, self.state, event, step.state
        )
        old, self.state = self.state, step.state
        for listener in self.on_transition:
            listener(old, event, step.state)
        await self._do(step.action)

    def status(self) -> dict[str, object]:
        return {
            "role": str(self.role),
            "state": str(self.state),
            "policy": str(self.policy.kind),
            "nodeId": self.broker.server.node_id,
            "partner": f"{self.active_elsewhere[0]}:{self.active_elsewhere[1]}"
            if self.active_elsewhere
            else None,
            **self.coordinator.status(),
            **({"backupPresent": self.backup_present()} if self.state == State.ACTIVE else {}),
            **({"backsUp": self.backs_up} if self.backs_up is not None else {}),
            **({"colocatedBackups": self.hosting.status()} if self.hosting is not None else {}),
            **(self.requester.status() if self.requester is not None else {}),
        }

    def backup_present(self) -> bool:
        """Active: whether the pair has a backup ready to take over (False: a pair without a backup)."""
        try:
            return self.coordinator.backup_present()
        except OSError:  # the shared store unreachable: no backup can be counted on either
            return False

    # ------------------------------------------------------------------------------- actions

    async def _do(self, action: Action) -> None:
        name = self.config.name
        say = _SAY.get((self.role, action))
        if say and action != Action.ANNOUNCE_ACTIVE:
            log.info(say, name)
        if action == Action.WAIT_FOR_LOCK:
            self._waiting_since = self.loop.time()
            await self.coordinator.begin()
            await self._go_passive()
            self._every(lambda: self.coordinator.poll_every, self._poll)
        elif action == Action.RETRY_LATER:
            self._every(lambda: self.coordinator.poll_every, self._poll)
        elif action == Action.ACTIVATE:
            await self._activate()
        elif action == Action.SCALE_DOWN:
            await self._scale_down()
        elif action == Action.ANNOUNCE_ACTIVE:
            self.coordinator.activated(self.broker)
            if say:  # said once it is so where the pair looks (L written: a fence from now on is seen)
                log.info(say, name)
            self._every(lambda: self.coordinator.watch_every, self.coordinator.watch)
            if self.requester is not None:
                self.requester.start()
        elif action == Action.STEP_DOWN:
            log.info("AMQ221002: backup %s stepping down: its primary is back (allow-failback)", name)
            await self._stop_handing_over()  # the lock goes to the primary, which waits for it
            if self.policy.restart_backup:
                self.coordinator.release()
                self.broker = self._new_broker()
                self.coordinator = self._new_coordinator(stepped_down=True)
                await self.on(Event.STEPPED_DOWN)
            else:
                self.rejoin = "it stepped down for its primary (failback; restart-backup is false)"
                await self.on(Event.STOPPED)
        elif action == Action.HALT:
            await self._halt()
        elif action == Action.STOP_FAILING_OVER:
            log.info("AMQ221008: %s stopping; its backup, if it has one, takes over", name)
            await self._stop_handing_over()
            await self.on(Event.STOPPED)
        elif action == Action.STOP_PAUSED:
            log.info("AMQ221001: %s stopping; its backup stays passive (failover-on-shutdown false)", name)
            self.coordinator.stopping(failover=False)
            self.coordinator.stop_paused()  # first: the lock, released by the stop, must not look lost
            await self._close_broker()
            await self.on(Event.STOPPED)
        elif action == Action.EXIT:
            self.network.stop()
            self._cancel()
            await self._close_passive()
            self.coordinator.release()
            if self.state == State.STOPPED:
                if self.rejoin is not None and self.backs_up is not None:
                    self.on_exit(EXIT_REJOIN, self.rejoin)  # a hosted backup: its host says so (AMQ951187)
                elif self.rejoin is not None:
                    log.warning(
                        "AMQ951030: %s stopped because %s: it exits with code %d so that its service starts "
                        "it again, to rejoin the pair (until then the pair has no backup)",
                        name,
                        self.rejoin,
                        EXIT_REJOIN,
                    )
                    self.on_exit(EXIT_REJOIN, "")
                else:
                    self.on_exit(0, "")

    async def _go_passive(self) -> None:
        if self.passive is None:
            self.passive = PassiveListener(self.broker.server, self.loop, self.active_elsewhere)
            await self.passive.start()

    async def _close_passive(self) -> None:
        passive, self.passive = self.passive, None
        if passive is not None:
            await passive.stop()

    async def _activate(self) -> None:
        self._cancel()
        await self._close_passive()
        try:
            await self.coordinator.activating()
            await self.broker.start()
        except Exception as exc:  # the journal or a port: say so and stop
            log.error("AMQ222010: %s could not activate: %s", self.config.name, exc)
            await self.on(Event.FAILED)
            return
        await self.on(Event.ACTIVATED)

    async def _scale_down(self) -> None:
        """A backup with `<scale-down>` whose primary is gone: its journal loaded (no acceptor: no client
        comes here), every message moved to an active member of its group, then it stops. What could
        not be moved stays in the journal, and the exit code says so."""
        self._cancel()
        await self._close_passive()
        assert self.scale_down is not None
        name = self.config.name
        try:
            await self.coordinator.activating()
            self.broker.assemble()
        except Exception as exc:  # the journal: say so and stop
            log.error("AMQ222010: %s could not load its journal to scale down: %s", name, exc)
            await self.on(Event.FAILED)
            return
        log.info("AMQ951164: backup %s scales down instead of activating: its primary is gone", name)
        moved = await ScaleDownRun(self.broker, self.scale_down).run()
        await self.broker.stop()
        if not moved:
            self.on_exit(1, f"{name}: its scale-down did not complete; what is left is in its journal")
        await self.on(Event.SCALED_DOWN)

    async def _halt(self) -> None:
        """The lock is not ours: stop serving now, before anything else is written (the journal may be
        another server's from now on). The CRITICAL line that led here says why: nothing more is said,
        and no thread of this server's calls into the loop once it is closed."""
        self._cancel()
        if self.requester is not None:
            self.requester.stop()
        journal = self.broker.server.journal
        if journal is not None:
            journal.abandon()
        self.coordinator.halt()
        await self._close_passive()
        listener = self.broker.listener
        if listener is not None:
            listener.stop_accepting()
            await listener.close_connections()
        # a newer activation of its node id serves: it comes back as a backup (AMQ951030 said at the exit)
        self.on_exit(EXIT_REJOIN if self.rejoin is not None else 1, "")

    async def _close_broker(self) -> None:
        self._cancel()
        await self.broker.stop()

    async def _stop_handing_over(self) -> None:
        """Clients first (what they sent is in the journal or in doubt), then the partner gets the last
        batches and the word to take over, then the broker stops and the lock goes."""
        self._cancel()
        self.broker.quiesce(self.coordinator.kept_connections())
        await self.coordinator.hand_over()
        await self._close_broker()
        self.coordinator.stop_failing_over()

    # -------------------------------------------------------------------------------- timers

    def _every(self, seconds: Callable[[], float], step: Callable[[], Awaitable[Event | None]]) -> None:
        """Ask `step` every `seconds()`, until it answers an event; then act on it."""
        self._cancel()

        async def ask() -> None:
            try:
                event = await step()
            except (OSError, LockManagerError) as exc:  # the store or the manager is unreachable: retry
                log.warning("AMQ951140: %s cannot decide now, it asks again: %s", self.config.name, exc)
                event = None
            except Exception:  # a defect: said with its trace, and the server keeps polling, not stuck
                log.exception(
                    "AMQ951141: %s: unexpected error in its HA poll; it asks again", self.config.name
                )
                event = None
            if self._timer is not None or self.state in (State.STOPPING, State.STOPPED):
                return  # superseded meanwhile
            if event is None:
                self._every(seconds, step)
                return
            await self.on(event)

        def tick() -> None:
            self._timer = None
            self._task = self.loop.create_task(ask())

        self._timer = self.loop.call_later(seconds(), tick)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _poll(self) -> Event | None:
        if not self.network.healthy:  # never activate while isolated; a lock is not even tried
            if not self._said_isolated:
                self._said_isolated = True
                log.warning(
                    "AMQ951104: %s is isolated from the network (network-check-list): it will not activate",
                    self.config.name,
                )
            return None
        self._said_isolated = False
        event = await self.coordinator.poll()
        if self.role == HaRole.BACKUP:
            return event
        timeout = self.config.journal_lock_acquisition_timeout
        if event is None and timeout >= 0 and self.loop.time() - self._waiting_since > timeout / 1000:
            log.error(
                "AMQ222229: %s could not obtain the primary lock in journal-lock-acquisition-timeout %d ms",
                self.config.name,
                timeout,
            )
            self.on_exit(1, f"{self.config.name}: the primary lock was not obtained in time")
            return Event.FAILED
        return event
