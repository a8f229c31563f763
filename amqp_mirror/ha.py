"""Runs one broker under its shared-store HA policy: the state machine of broker_core/ha/states.py,
stepped by the node manager's polls (broker_core/ha/shared_store.py) on the loop's timers.

While passive, the broker's acceptors answer clients with a redirect to the active server
(broker_core/passive.py); activating, it recovers the shared journal and serves; active, a lock monitor
stops it at once if the lock is no longer its own (never two active servers), and an active backup
steps down when its primary comes back (allow-failback). Every transition is a log line with a stable id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from broker_core.config.model import BrokerConfig, Connector, HaKind, HaRole
from broker_core.ha.shared_store import SharedStore
from broker_core.ha.states import Action, Event, State, next_step
from broker_core.journal.node_id import load_or_create_node_id
from broker_core.passive import PassiveListener

from .broker import Broker

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


def uses_ha(config: BrokerConfig) -> bool:
    return config.ha_policy.kind == HaKind.SHARED_STORE


def partner(config: BrokerConfig) -> Connector | None:
    """The other server of the pair, when the configuration names exactly one."""
    others = config.ha_partners()
    return others[0] if len(others) == 1 else None


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
        self.state = State.STARTING
        self.broker = self._new_broker()
        self.store = self._new_store()
        other = partner(config)
        self.active_elsewhere = (other.host, other.port) if other is not None else None
        self.passive: PassiveListener | None = None
        self._waiting_since = 0.0  # a primary: when it began to wait for its lock
        self._timer: asyncio.TimerHandle | None = None
        self._busy = False  # an action is running: events wait for the next tick
        # told of every change of state (old, event, new): operations count failovers, tell systemd
        self.on_transition: list[Callable[[State, Event, State], None]] = []

    def _new_broker(self) -> Broker:
        broker = Broker(self.config, self.loop)
        broker.ha = self
        self.prepare(broker)
        return broker

    def _new_store(self) -> SharedStore:
        directory = Path(self.config.node_manager_lock_directory or self.config.journal_directory)
        node_id = load_or_create_node_id(Path(self.config.journal_directory))
        return SharedStore(directory, self.broker.server.data_lock, node_id)

    # ------------------------------------------------------------------------------- driving

    async def start(self) -> None:
        await self.on(Event.START)

    async def stop(self) -> None:
        await self.on(Event.STOP)

    async def force_failover(self) -> None:
        await self.on(Event.FORCE_FAILOVER)

    async def on(self, event: Event) -> None:
        step = next_step(self.role, self.state, event, failover_on_shutdown=self.policy.failover_on_shutdown)
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
            "sharedState": self.store.state(),
            "partner": f"{self.active_elsewhere[0]}:{self.active_elsewhere[1]}"
            if self.active_elsewhere
            else None,
        }

    # ------------------------------------------------------------------------------- actions

    async def _do(self, action: Action) -> None:
        name = self.config.name
        say = _SAY.get((self.role, action))
        if say:
            log.info(say, name)
        if action == Action.WAIT_FOR_LOCK:
            if self.role == HaRole.PRIMARY:
                self.store.begin_primary()
                self._waiting_since = self.loop.time()
            await self._go_passive()
            self._every(POLL, self._poll)
        elif action == Action.RETRY_LATER:
            self._every(RETRY, self._poll)
        elif action == Action.ACTIVATE:
            await self._activate()
        elif action == Action.ANNOUNCE_ACTIVE:
            self.store.announce_active()
            self._every(MONITOR if self.role == HaRole.PRIMARY else FAILBACK_CHECK, self._watch)
        elif action == Action.STEP_DOWN:
            log.info("AMQ221002: backup %s stepping down: its primary is back (allow-failback)", name)
            await self._close_broker()
            self.store.stop_failing_over()  # leaves the state to the primary, which wrote F
            if self.policy.restart_backup:
                self.broker = self._new_broker()
                self.store = self._new_store()
                await self.on(Event.STEPPED_DOWN)
            else:
                await self.on(Event.STOPPED)
        elif action == Action.HALT:
            await self._halt()
        elif action == Action.STOP_FAILING_OVER:
            log.info("AMQ221008: %s stopping; its backup takes over", name)
            await self._close_broker()
            self.store.stop_failing_over()
            await self.on(Event.STOPPED)
        elif action == Action.STOP_PAUSED:
            log.info("AMQ221001: %s stopping; its backup stays passive (failover-on-shutdown false)", name)
            self.store.stop_paused()  # P first: the lock, released by the stop, must not look lost
            await self._close_broker()
            await self.on(Event.STOPPED)
        elif action == Action.EXIT:
            self._cancel()
            await self._close_passive()
            self.store.release()
            if self.state == State.STOPPED:
                self.on_exit(0, "stopped")

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
            await self.broker.start()
        except Exception as exc:  # the journal or a port: say so and stop
            log.error("AMQ222010: %s could not activate: %s", self.config.name, exc)
            await self.on(Event.FAILED)
            return
        await self.on(Event.ACTIVATED)

    async def _halt(self) -> None:
        """The lock is not ours: stop serving now, before anything else is written."""
        self._cancel()
        await self._close_passive()
        listener = self.broker.listener
        if listener is not None:
            listener.stop_accepting()
            await listener.close_connections()
        self.on_exit(1, f"{self.config.name} halted: its lock is no longer its own")

    async def _close_broker(self) -> None:
        self._cancel()
        await self.broker.stop()

    # -------------------------------------------------------------------------------- timers

    def _every(self, seconds: float, step: Callable[[], Event | None]) -> None:
        self._cancel()

        def tick() -> None:
            self._timer = None
            if self._busy:
                self._every(seconds, step)
                return
            try:
                event = step()
            except OSError as exc:  # the shared store is unreachable: say so, try again
                log.warning("HA %s: the shared store failed: %s", self.config.name, exc)
                event = None
            if event is None:
                self._every(seconds, step)
                return
            self._busy = True
            task = self.loop.create_task(self.on(event))
            task.add_done_callback(lambda _: setattr(self, "_busy", False))

        self._timer = self.loop.call_later(seconds, tick)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _poll(self) -> Event | None:
        if self.role == HaRole.BACKUP:
            return self.store.try_backup()
        event = self.store.try_primary()
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

    def _watch(self) -> Event | None:
        lost = self.store.monitor()
        if lost is not None:
            log.critical("AMQ222325: %s lost its lock (%s): it stops serving now", self.config.name, lost)
            return Event.LOCK_LOST
        if self.role == HaRole.BACKUP and self.policy.allow_failback and self.store.failback_requested():
            return Event.FAILBACK_REQUESTED
        return None
