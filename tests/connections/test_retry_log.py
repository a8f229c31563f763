"""A broker connection that keeps failing for the same reason says so once, then once a minute with the
count; a new reason, and a connection made, are news at once (on the in-memory pair's virtual clock)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from connections.outbound import RETRY_LOG_EVERY
from tests.support.pair import Network


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and text in r.getMessage()]


def test_the_same_failure_is_said_once_a_minute_with_the_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="broker.connections")
    net = Network(tmp_path)
    net.broker("dc1", mirror_to="dc2")  # retry-interval 100 ms; dc2 never starts
    net.start("dc1")
    net.loop.advance(10.0)  # about a hundred attempts
    assert len(lines(caplog, "nothing listens")) == 1
    [retry] = lines(caplog, "AMQ111002")
    assert "retry 1 of unlimited" in retry
    net.loop.advance(RETRY_LOG_EVERY)
    retries = lines(caplog, "AMQ111002")
    assert len(retries) == 2 and "more attempts since the last such line" in retries[1], retries
    quiet = int(retries[1].rsplit("(", 1)[1].split()[0])
    assert 500 <= quiet <= 700  # a minute of attempts every 100 ms, not logged one by one


def test_a_connection_made_ends_the_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="broker.connections")
    net = Network(tmp_path)
    net.broker("dc1", mirror_to="dc2")
    net.broker("dc2")
    net.start("dc1")
    net.loop.advance(2.0)
    net.start("dc2")
    net.loop.advance(0.2)
    assert len(lines(caplog, "AMQ111003")) == 1  # connected: said at once
    net.stop("dc2")
    net.loop.advance(1.0)
    # before: retry 1; after the loss: retry 1 (the loss is news), retry 2 (its reason, nobody listening,
    # differs from the loss's); then quiet
    assert [r.split(" retry ")[1] for r in lines(caplog, "AMQ111002")] == ["1 of unlimited"] * 2 + [
        "2 of unlimited"
    ]
