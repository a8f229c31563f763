"""The HA state machine, as one table: what a server does on each event, by role and runtime state.

Seed 001 §1: a server is configured as the *primary* or the *backup* of a pair; at run time it is
*active* (accepting remote connections) or *passive* (not accepting them). Around those two sit the
moments in between: starting, activating (the lock is won; the journal loads), stopping, stopped.

Shared store (seed 001 §2.1, spec A3): the primary lock (`serverlock.1`) decides who is active.
- A primary starts passive: it says it is failing back (`F`) and waits for the lock; a backup that is
  active sees `F` and steps down if `allow-failback`.
- A backup starts passive: it waits for the primary's lock; holding it, it reads the state byte: `L`
  means the primary died (it activates), `P` a clean stop without failover and `F` a primary failing
  back (it lets go and waits again).
- An active server whose lock is lost or fenced stops serving at once: never two actives.
- Stopping, an active server leaves `L` for its backup (failover-on-shutdown, or `forceFailover` from
  management) or `P` (the backup stays passive).
- A backup with `<scale-down>` never serves: where it would activate, it loads the journal, moves every
  message to an active member of its group, and stops.

The table is data: `next_step(role, state, event)` is the only logic, and tests walk every
(role, state, event) triple. An event a state does not list is a no-op (`Step(state, Action.NONE)`):
a late timer or a duplicate notification must never move a server.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from broker_core.config.model import HaRole


class State(StrEnum):
    STARTING = "starting"
    PASSIVE = "passive"
    ACTIVATING = "activating"
    ACTIVE = "active"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Event(StrEnum):
    START = "start"
    LOCK_ACQUIRED = "lock acquired"  # the primary lock is ours (a backup: and the primary died)
    PRIMARY_NOT_FAILED = "primary stopped cleanly or is failing back"  # a backup holds the lock, but P/F
    ACTIVATED = "activated"  # journal loaded, acceptors serving
    FAILBACK_REQUESTED = "failback requested"  # an active backup sees its primary back (F)
    LOCK_LOST = "lock lost"  # the monitor: the lock or the state byte is no longer ours
    STOP = "stop"  # SIGTERM, or management's stop
    FORCE_FAILOVER = "force failover"  # management: stop and let the backup take over
    FAILED = "failed"  # activation could not complete
    STOPPED = "stopped"  # the stop finished
    STEPPED_DOWN = "stepped down"  # a backup gave the primary back and restarts as a backup
    SCALED_DOWN = "scaled down"  # a backup with <scale-down> moved its primary's messages away (or tried)


class Action(StrEnum):
    NONE = "none"
    WAIT_FOR_LOCK = "wait for the primary lock"  # primary: write F first; backup: take the backup lock
    RETRY_LATER = "let go of the lock and wait again"
    ACTIVATE = "activate"  # backup: fence (touch server.lock) first; both: load the journal, serve
    ANNOUNCE_ACTIVE = "announce active"  # write L, start the lock monitor (and the failback checker)
    STEP_DOWN = "step down"  # stop serving, release the primary lock, then wait as a backup again
    HALT = "stop serving now"  # the lock is gone: close everything, release nothing (it is not ours)
    STOP_FAILING_OVER = "stop, leaving L for the backup"
    STOP_PAUSED = "stop, writing P"
    EXIT = "exit"
    SCALE_DOWN = "scale down instead of activating"  # load the journal, move every message away, stop


class Step(NamedTuple):
    state: State
    action: Action


S, E, A = State, Event, Action
PRIMARY, BACKUP = HaRole.PRIMARY, HaRole.BACKUP

# (state, event) -> step, for both roles; then what differs by role
_COMMON: dict[tuple[State, Event], Step] = {
    (S.STARTING, E.START): Step(S.PASSIVE, A.WAIT_FOR_LOCK),
    (S.STARTING, E.STOP): Step(S.STOPPED, A.EXIT),
    (S.PASSIVE, E.LOCK_ACQUIRED): Step(S.ACTIVATING, A.ACTIVATE),
    (S.PASSIVE, E.STOP): Step(S.STOPPED, A.EXIT),
    (S.PASSIVE, E.FAILED): Step(S.STOPPED, A.EXIT),
    (S.ACTIVATING, E.ACTIVATED): Step(S.ACTIVE, A.ANNOUNCE_ACTIVE),
    (S.ACTIVATING, E.FAILED): Step(S.STOPPED, A.HALT),
    (S.ACTIVATING, E.LOCK_LOST): Step(S.STOPPED, A.HALT),
    (S.ACTIVATING, E.STOP): Step(S.STOPPING, A.STOP_PAUSED),
    (S.ACTIVE, E.LOCK_LOST): Step(S.STOPPED, A.HALT),
    (S.ACTIVE, E.FORCE_FAILOVER): Step(S.STOPPING, A.STOP_FAILING_OVER),
    (S.ACTIVE, E.FAILED): Step(S.STOPPED, A.HALT),
    (S.STOPPING, E.STOPPED): Step(S.STOPPED, A.EXIT),
    (S.STOPPING, E.LOCK_LOST): Step(S.STOPPING, A.NONE),  # already going
}
_BY_ROLE: dict[HaRole, dict[tuple[State, Event], Step]] = {
    PRIMARY: {},
    BACKUP: {
        (S.PASSIVE, E.PRIMARY_NOT_FAILED): Step(S.PASSIVE, A.RETRY_LATER),
        (S.ACTIVE, E.FAILBACK_REQUESTED): Step(S.STOPPING, A.STEP_DOWN),
        (S.STOPPING, E.STEPPED_DOWN): Step(S.PASSIVE, A.WAIT_FOR_LOCK),  # restart-backup
        (S.ACTIVATING, E.SCALED_DOWN): Step(S.STOPPED, A.EXIT),
    },
}


def next_step(
    role: HaRole, state: State, event: Event, *, failover_on_shutdown: bool = False, scale_down: bool = False
) -> Step:
    """What a server of `role` in `state` does on `event` (no-op when the table has nothing). A backup
    with `scale_down` never serves: where it would activate, it scales down (then stops)."""
    if scale_down and role == BACKUP and state == S.PASSIVE and event == E.LOCK_ACQUIRED:
        return Step(S.ACTIVATING, A.SCALE_DOWN)
    if state == S.ACTIVE and event == E.STOP:
        return Step(S.STOPPING, A.STOP_FAILING_OVER if failover_on_shutdown else A.STOP_PAUSED)
    step = _BY_ROLE[role].get((state, event)) or _COMMON.get((state, event))
    return step if step is not None else Step(state, A.NONE)
