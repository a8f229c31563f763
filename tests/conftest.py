"""Shared fixtures: real foreign peers (RabbitMQ, the Proton C broker, rhea) for integration tests.

A missing peer is a skip on a developer machine but a failure in CI (``CI=true``), so CI can never go
green by silently skipping the interoperability tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Make ``tests.peers`` importable however pytest is launched (bare ``pytest`` does not add the cwd).
_REPO_ROOT = str(Path(__file__).resolve().parents[1])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from tests.peers import protonc as protonc_peer  # noqa: E402
from tests.peers import rabbitmq as rabbitmq_peer  # noqa: E402
from tests.peers import rhea as rhea_peer  # noqa: E402


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(peer_name: str, available: bool, why: str) -> None:
    """Skip (laptop) or fail (CI) the current test when ``peer_name`` is not available."""
    if available:
        return
    message = f"{peer_name} unavailable: {why}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rabbitmq_peer.RabbitMQ]:
    """A private RabbitMQ node with AMQP 1.0 (``.host``, ``.port``, ``.url``, ``.declare_durable_queue``)."""
    require("RabbitMQ", *rabbitmq_peer.availability())
    with rabbitmq_peer.running_rabbitmq(tmp_path_factory.mktemp("rabbitmq")) as node:
        yield node


@pytest.fixture(scope="session")
def proton_c_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[protonc_peer.ProtonBroker]:
    """The Proton C example broker (``.host``, ``.port``, ``.url``); in-memory queues made on first use."""
    require("Proton C broker", *protonc_peer.availability())
    with protonc_peer.running_proton_broker(tmp_path_factory.mktemp("proton-c")) as broker:
        yield broker


@pytest.fixture(scope="session")
def rhea() -> rhea_peer.Rhea:
    """Starts rhea send/receive clients against any URL (see ``tests.peers.rhea.Rhea``)."""
    require("rhea", *rhea_peer.availability())
    return rhea_peer.Rhea()


@pytest.fixture(autouse=True)
def _no_broker_left_running() -> Iterator[None]:
    """Kill any broker process this test started and did not stop (a failed assertion skips its cleanup).

    Brokers of module- or session-scoped fixtures were started before this fixture ran and are left alone.
    """
    from tests.support.broker import RUNNING

    before = set(RUNNING)
    yield
    for broker in list(RUNNING - before):
        broker.kill()
