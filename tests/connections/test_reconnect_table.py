"""The reconnect state machine on its own: every (state, event) pair, and Artemis's counting rules."""

from __future__ import annotations

import itertools
import logging

import pytest

from connections.reconnect import Action, Event, Reconnect, State


def machine(attempts: int = -1, hosts: int = 3) -> Reconnect:
    return Reconnect("c", [f"h{i}:5672" for i in range(hosts)], attempts)


def drive(m: Reconnect, *events: Event) -> None:
    for e in events:
        m.handle(e)


def test_first_attempt_goes_to_the_first_uri_and_retries_rotate_round_robin() -> None:
    m = machine()
    assert m.handle(Event.START).connect == 0
    targets = []
    for _ in range(5):
        action = m.handle(Event.FAILED)
        assert action.schedule_retry and action.log is not None and "AMQ111002" in action.log
        targets.append(m.handle(Event.RETRY_DUE).connect)
    assert targets == [1, 2, 0, 1, 2]


def test_connected_logs_retries_and_resets_the_counter() -> None:
    m = machine()
    drive(m, Event.START, Event.FAILED, Event.RETRY_DUE, Event.FAILED, Event.RETRY_DUE)
    action = m.handle(Event.CONNECTED)
    assert action.log == "AMQ111003: Connected on Server AMQP Connection c on h2:5672 after 2 retries"
    assert m.state is State.CONNECTED and m.counter == 0


def test_attempt_limit_gives_up_into_stopped_with_a_warning() -> None:
    m = machine(attempts=2)
    drive(m, Event.START, Event.FAILED, Event.RETRY_DUE, Event.FAILED, Event.RETRY_DUE)
    action = m.handle(Event.FAILED)
    assert m.state is State.STOPPED and m.gave_up
    assert action.log_level == logging.WARNING and action.log is not None and "AMQ111001" in action.log
    assert "after 2 retries" in action.log
    assert m.handle(Event.RETRY_DUE).connect is None  # nothing more happens until a start


def test_runtime_loss_counts_from_zero_again() -> None:
    m = machine(attempts=1)
    drive(m, Event.START, Event.FAILED, Event.RETRY_DUE, Event.CONNECTED)
    action = m.handle(Event.LOST)
    assert action.schedule_retry and m.counter == 1
    drive(m, Event.RETRY_DUE)
    assert m.handle(Event.FAILED).log_level == logging.WARNING


def test_stop_from_any_state_stops_and_start_restarts_counting() -> None:
    for prefix in ([], [Event.START], [Event.START, Event.FAILED], [Event.START, Event.CONNECTED]):
        m = machine()
        drive(m, *prefix)
        m.handle(Event.STOP)
        assert m.state is State.STOPPED
        assert m.handle(Event.START).connect == 0 and m.counter == 0


# The table of connections/reconnect.py for a machine that may still retry (counter 0 of 3 attempts);
# every pair not listed leaves the state as it was (and does nothing), STOP stops from anywhere.
NEXT_STATE = {
    (State.STOPPED, Event.START): State.CONNECTING,
    (State.CONNECTING, Event.CONNECTED): State.CONNECTED,
    (State.CONNECTING, Event.FAILED): State.WAITING,
    (State.CONNECTED, Event.LOST): State.WAITING,
    (State.WAITING, Event.RETRY_DUE): State.CONNECTING,
    **{(s, Event.STOP): State.STOPPED for s in State},
}


@pytest.mark.parametrize(("state", "event"), list(itertools.product(State, Event)))
def test_every_state_event_pair_is_defined_and_lands_in_a_state(state: State, event: Event) -> None:
    m = machine(attempts=3)
    m.state = state
    action = m.handle(event)
    assert m.state is NEXT_STATE.get((state, event), state)
    if (state, event) not in NEXT_STATE:
        assert action == Action(), "an event that makes no sense in a state must do nothing"
    if event is Event.STOP:
        assert m.state is State.STOPPED
    if action.connect is not None:
        assert m.state is State.CONNECTING and 0 <= action.connect < 3
    if action.schedule_retry:
        assert m.state is State.WAITING
