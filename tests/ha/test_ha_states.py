"""The HA state machine, every (role, state, event) triple: what the table says, and that nothing
else moves a server (a late timer or a repeated notice is a no-op)."""

from __future__ import annotations

import itertools

import pytest

from broker_core.config.model import HaRole
from broker_core.ha.states import Action, Event, State, Step, next_step

P, B = HaRole.PRIMARY, HaRole.BACKUP
S, E, A = State, Event, Action

# Every transition there is, written out once more by hand: the table must say exactly this.
EXPECTED: dict[tuple[HaRole, State, Event], Step] = {}
for role in (P, B):
    EXPECTED |= {
        (role, S.STARTING, E.START): Step(S.PASSIVE, A.WAIT_FOR_LOCK),
        (role, S.STARTING, E.STOP): Step(S.STOPPED, A.EXIT),
        (role, S.PASSIVE, E.LOCK_ACQUIRED): Step(S.ACTIVATING, A.ACTIVATE),
        (role, S.PASSIVE, E.STOP): Step(S.STOPPED, A.EXIT),
        (role, S.PASSIVE, E.FAILED): Step(S.STOPPED, A.EXIT),
        (role, S.ACTIVATING, E.ACTIVATED): Step(S.ACTIVE, A.ANNOUNCE_ACTIVE),
        (role, S.ACTIVATING, E.FAILED): Step(S.STOPPED, A.HALT),
        (role, S.ACTIVATING, E.LOCK_LOST): Step(S.STOPPED, A.HALT),
        (role, S.ACTIVATING, E.STOP): Step(S.STOPPING, A.STOP_PAUSED),
        (role, S.ACTIVE, E.LOCK_LOST): Step(S.STOPPED, A.HALT),
        (role, S.ACTIVE, E.STOP): Step(S.STOPPING, A.STOP_PAUSED),
        (role, S.ACTIVE, E.FORCE_FAILOVER): Step(S.STOPPING, A.STOP_FAILING_OVER),
        (role, S.ACTIVE, E.FAILED): Step(S.STOPPED, A.HALT),
        (role, S.STOPPING, E.STOPPED): Step(S.STOPPED, A.EXIT),
    }
EXPECTED |= {
    (B, S.PASSIVE, E.PRIMARY_NOT_FAILED): Step(S.PASSIVE, A.RETRY_LATER),
    (B, S.ACTIVE, E.FAILBACK_REQUESTED): Step(S.STOPPING, A.STEP_DOWN),
    (B, S.STOPPING, E.STEPPED_DOWN): Step(S.PASSIVE, A.WAIT_FOR_LOCK),
    (B, S.ACTIVATING, E.SCALED_DOWN): Step(S.STOPPED, A.EXIT),
}


@pytest.mark.parametrize(("role", "state", "event"), list(itertools.product((P, B), State, Event)))
def test_every_triple(role: HaRole, state: State, event: Event) -> None:
    expected = EXPECTED.get((role, state, event), Step(state, A.NONE))
    assert next_step(role, state, event) == expected


def test_failover_on_shutdown_makes_a_stop_leave_the_lock_to_the_backup() -> None:
    for role in (P, B):
        assert next_step(role, S.ACTIVE, E.STOP, failover_on_shutdown=True) == Step(
            S.STOPPING, A.STOP_FAILING_OVER
        )


def test_a_primary_never_steps_down_nor_retries_like_a_backup() -> None:
    assert next_step(P, S.ACTIVE, E.FAILBACK_REQUESTED) == Step(S.ACTIVE, A.NONE)
    assert next_step(P, S.PASSIVE, E.PRIMARY_NOT_FAILED) == Step(S.PASSIVE, A.NONE)


def test_nothing_leaves_stopped() -> None:
    for role, event in itertools.product((P, B), Event):
        assert next_step(role, S.STOPPED, event) == Step(S.STOPPED, A.NONE)


def test_a_backup_with_scale_down_scales_down_where_it_would_activate_and_then_stops() -> None:
    assert next_step(B, S.PASSIVE, E.LOCK_ACQUIRED, scale_down=True) == Step(S.ACTIVATING, A.SCALE_DOWN)
    assert next_step(B, S.ACTIVATING, E.SCALED_DOWN, scale_down=True) == Step(S.STOPPED, A.EXIT)
    assert next_step(P, S.PASSIVE, E.LOCK_ACQUIRED, scale_down=True) == Step(S.ACTIVATING, A.ACTIVATE)
    for state, event in itertools.product(State, Event):  # nothing else changes
        if (state, event) != (S.PASSIVE, E.LOCK_ACQUIRED):
            assert next_step(B, state, event, scale_down=True) == next_step(B, state, event)
