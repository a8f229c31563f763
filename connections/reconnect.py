"""The reconnect state machine of one broker connection, as a table (Artemis's rules, spec §7).

    state        event             guard                         next         action
    STOPPED      start             -                             CONNECTING   counter=0, connect to uris[0]
    CONNECTING   connected         -                             CONNECTED    log AMQ111003, counter=0
    CONNECTING   failed            attempts<0 or counter<limit   WAITING      counter+=1, log AMQ111002
    CONNECTING   failed            otherwise                     STOPPED      log AMQ111001 (gave up)
    CONNECTED    lost              attempts<0 or 0<limit         WAITING      counter=1, log AMQ111002
    CONNECTED    lost              otherwise                     STOPPED      log AMQ111001
    WAITING      retry_due         -                             CONNECTING   connect to uris[counter % n]
    any          stop              -                             STOPPED      close

The retry interval is fixed (no back-off); each retry moves to the next URI of the `#` list (round
robin). Errors after the socket connected but before the links were accepted (link refusal, missing
capability, self-connection) count as `failed`: they keep the counter. A connection that was up and is
lost starts counting again from zero. Pure: no clock, no I/O; the caller executes the actions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum


class State(Enum):
    STOPPED = "stopped"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    WAITING = "waiting"


class Event(Enum):
    START = "start"
    CONNECTED = "connected"
    FAILED = "failed"
    LOST = "lost"
    RETRY_DUE = "retry_due"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Action:
    """What the caller must do now: `connect` to an endpoint index, `schedule_retry`, log, `close`."""

    connect: int | None = None
    schedule_retry: bool = False
    close: bool = False
    log_level: int = logging.INFO
    log: str | None = None


class Reconnect:
    def __init__(self, name: str, endpoints: list[str], reconnect_attempts: int = -1) -> None:
        if not endpoints:
            raise ValueError("a broker connection needs at least one endpoint")
        self.name = name
        self.endpoints = endpoints
        self.attempts = reconnect_attempts
        self.state = State.STOPPED
        self.counter = 0
        self.current = 0
        self.gave_up = False

    def _may_retry(self) -> bool:
        return self.attempts < 0 or self.counter < self.attempts

    def _endpoint(self) -> str:
        return self.endpoints[self.current]

    def _retry(self) -> Action:
        if not self._may_retry():
            self.state = State.STOPPED
            self.gave_up = True
            return Action(
                log_level=logging.WARNING,
                log=f"AMQ111001: Could not re-establish AMQP Server Connection {self.name} on "
                f"{self._endpoint()} after {self.counter} retries",
            )
        self.counter += 1
        self.current = self.counter % len(self.endpoints)
        self.state = State.WAITING
        limit = self.attempts if self.attempts >= 0 else "unlimited"
        return Action(
            schedule_retry=True,
            log_level=logging.INFO,
            log=f"AMQ111002: Retrying Server AMQP Connection {self.name} on {self._endpoint()} "
            f"retry {self.counter} of {limit}",
        )

    def handle(self, event: Event) -> Action:
        """Apply one event; return the action. Events that make no sense in a state change nothing."""
        s = self.state
        if event is Event.STOP:
            self.state = State.STOPPED
            return Action(close=s is not State.STOPPED)
        if event is Event.START:
            if s is not State.STOPPED:
                return Action()
            self.counter = self.current = 0
            self.gave_up = False
            self.state = State.CONNECTING
            return Action(connect=0)
        if s is State.CONNECTING and event is Event.CONNECTED:
            retries, self.counter = self.counter, 0
            self.state = State.CONNECTED
            return Action(
                log_level=logging.INFO,
                log=f"AMQ111003: Connected on Server AMQP Connection {self.name} on {self._endpoint()} "
                f"after {retries} retries",
            )
        if s is State.CONNECTING and event is Event.FAILED:
            return self._retry()
        if s is State.CONNECTED and event is Event.LOST:
            self.counter = 0
            return self._retry()
        if s is State.WAITING and event is Event.RETRY_DUE:
            self.state = State.CONNECTING
            return Action(connect=self.current)
        return Action()
