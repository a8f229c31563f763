"""The failover client's connect loop without brokers: an injected connector, clock and sleep make the
schedule, limits, timeout and logging observable exactly."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from proton import ConnectionException

from connections.failover import (
    ClosedError,
    FailoverConnection,
    FailoverTimeoutError,
    ReconnectExhaustedError,
)
from tests.peers.ports import free_port

D1, D2 = "amqp://127.0.0.1:1", "amqp://127.0.0.1:2"


class FakeContainer:
    timeout = 0.0

    def process(self) -> bool:
        return True


class FakeConnection:
    """Stands in for a BlockingConnection that opened fine."""

    def __init__(self) -> None:
        self.container = FakeContainer()
        self.disconnected = False
        self.closed = False
        self.url = "fake"

    def close(self) -> None:
        self.closed = True


class Harness:
    """Records connect calls and sleeps on a fake clock; ``up`` lists the URLs that accept."""

    def __init__(self, up: tuple[str, ...] = ()) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.up = up

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def connect(self, url: str, **kwargs: Any) -> FakeConnection:
        self.calls.append((url, kwargs))
        if url not in self.up:
            raise ConnectionException(f"Connection {url} disconnected: refused")
        return FakeConnection()

    def open(self, uri: str, **kwargs: Any) -> FailoverConnection:
        return FailoverConnection(uri, clock=self.clock, sleep=self.sleep, connector=self.connect, **kwargs)


def test_startup_gives_up_after_the_allowed_passes_with_exact_delays() -> None:
    harness = Harness()
    with pytest.raises(ReconnectExhaustedError) as raised:
        harness.open(f"failover:({D1},{D2})?randomize=false&startupMaxReconnectAttempts=2")
    assert [url for url, _ in harness.calls] == [D1, D2] * 3
    assert harness.sleeps == [0.010, 0.020]
    assert "startupMaxReconnectAttempts=2" in str(raised.value) and "refused" in str(raised.value)


def test_warning_every_warn_after_reconnect_attempts_failed_passes(caplog: pytest.LogCaptureFixture) -> None:
    harness = Harness()
    with pytest.raises(ReconnectExhaustedError):
        harness.open(f"failover:({D1})?startupMaxReconnectAttempts=5&warnAfterReconnectAttempts=2")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"failed to connect to any of [{D1}] after 2 attempt(s), continuing to retry",
        f"failed to connect to any of [{D1}] after 4 attempt(s), continuing to retry",
    ]


def test_timeout_bounds_the_wait_for_a_connection() -> None:
    harness = Harness()
    with pytest.raises(FailoverTimeoutError, match="timeout=50ms"):
        harness.open(f"failover:({D1})?timeout=50")
    assert harness.sleeps == [0.010, 0.020]  # the 40 ms wait would pass the 50 ms deadline
    assert len(harness.calls) == 3


def test_connects_to_the_first_reachable_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="connections.failover")
    harness = Harness(up=(D2,))
    conn = harness.open(f"failover:({D1},{D2})?randomize=false")
    assert conn.connected_uri is not None and conn.connected_uri.url == D2
    assert conn.generation == 1 and conn.failovers == 0 and harness.sleeps == []
    assert f"connected to {D2}" in caplog.text
    conn.close()
    with pytest.raises(ClosedError):
        conn.sender("q")


def test_nested_options_and_credentials_reach_the_connection() -> None:
    harness = Harness(up=(D1,))
    harness.open(
        f"failover:({D1})?nested.transport.connectTimeout=250&nested.amqp.idleTimeout=1000",
        user="alice",
        password="wonderland",
    ).close()
    assert harness.calls == [
        (
            D1,
            {
                "timeout": 0.25,
                "heartbeat": 1.0,
                "user": "alice",
                "password": "wonderland",
                "allowed_mechs": "PLAIN",
            },
        )
    ]


def test_anonymous_without_user_and_timeout_caps_the_connect_timeout() -> None:
    harness = Harness(up=(D1,))
    harness.open(f"failover:({D1})?timeout=2000").close()
    assert harness.calls == [(D1, {"timeout": 2.0, "allowed_mechs": "ANONYMOUS"})]


def test_unused_uri_options_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    harness = Harness(up=(D1,))
    harness.open(f"failover:({D1})?nested.wireFormat.maxInactivityDuration=1000").close()
    assert f"options wireFormat.maxInactivityDuration of {D1} are not used" in caplog.text


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_invalid_nested_option_fails_before_connecting(value: str) -> None:
    harness = Harness(up=(D1,))
    with pytest.raises(ValueError, match=r"transport\.connectTimeout.*positive number of milliseconds"):
        harness.open(f"failover:({D1})?nested.transport.connectTimeout={value}")
    assert harness.calls == []


def test_receiver_credit_must_be_positive() -> None:
    harness = Harness(up=(D1,))
    with harness.open(D1) as conn, pytest.raises(ValueError, match="credit"):
        conn.receiver("q", credit=0)


def test_refused_port_with_the_real_proton_connector() -> None:
    dead = f"amqp://127.0.0.1:{free_port()}"
    with pytest.raises(ReconnectExhaustedError, match="could not connect"):
        FailoverConnection(f"failover:({dead})?startupMaxReconnectAttempts=1")
