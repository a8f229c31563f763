"""Artemis is a peer like the others: a test that needs it skips without it, and fails under CI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import require
from tests.peers import artemis as artemis_peer


@pytest.fixture(scope="session")
def artemis_available() -> None:
    require("Apache ActiveMQ Artemis", *artemis_peer.availability())


@pytest.fixture(autouse=True)
def _no_artemis_left_running() -> Iterator[None]:
    """Kill an Artemis this test started and left running (module fixtures' brokers are left alone)."""
    before = set(artemis_peer.RUNNING)
    yield
    for broker in list(artemis_peer.RUNNING - before):
        broker.kill()
