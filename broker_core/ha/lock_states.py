"""What a lock manager's lock goes through, as one table: (state, event) -> (state, action).

A lock is *free* (not ours: never taken, released, or only tried and refused), *held*, or *given up*
(it was held and may not be ours any more: the session expired, its node is gone, or nothing was heard
from the lock manager for the holder's grace). Only a held lock is ever reported lost, once: a passive
server that merely tried the lock has nothing to lose, so a hiccup of the lock manager while it waits
cannot halt it later, once it has taken the lock. A fresh acquisition starts over.

An event a state does not list changes nothing (a late answer, a repeated notice).
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class LockState(StrEnum):
    FREE = "free"
    HELD = "held"
    GIVEN_UP = "given up"


class LockEvent(StrEnum):
    ACQUIRED = "acquired"  # a try succeeded
    REFUSED = "refused"  # a try found it held elsewhere
    HEARD = "heard"  # the lock manager answered: the lock's node is still ours
    SILENT = "silent"  # nothing heard for the grace (session-percent of session-ms)
    NODE_GONE = "node gone"  # the lock manager answered: the lock's node is not ours any more
    SESSION_EXPIRED = "session expired"
    RELEASED = "released"  # unlocked by us


class LockAction(StrEnum):
    NONE = "none"
    REPORT_LOST = "report lost"  # tell the HA coordinator: an active server halts


class LockStep(NamedTuple):
    state: LockState
    action: LockAction


F, H, G = LockState.FREE, LockState.HELD, LockState.GIVEN_UP
Ev, Ac = LockEvent, LockAction

TABLE: dict[tuple[LockState, LockEvent], LockStep] = {
    (F, Ev.ACQUIRED): LockStep(H, Ac.NONE),
    (H, Ev.SILENT): LockStep(G, Ac.REPORT_LOST),
    (H, Ev.NODE_GONE): LockStep(G, Ac.REPORT_LOST),
    (H, Ev.SESSION_EXPIRED): LockStep(G, Ac.REPORT_LOST),
    (H, Ev.RELEASED): LockStep(F, Ac.NONE),
    (G, Ev.ACQUIRED): LockStep(H, Ac.NONE),  # taken afresh: what was lost is history
    (G, Ev.RELEASED): LockStep(F, Ac.NONE),
}


def lock_step(state: LockState, event: LockEvent) -> LockStep:
    return TABLE.get((state, event)) or LockStep(state, LockAction.NONE)
