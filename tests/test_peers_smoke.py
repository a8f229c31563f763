"""Smoke tests of the foreign peers themselves: rhea moves exact message counts through each broker."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import require
from tests.peers.ports import LOOPBACK, WaitTimeout, free_port, wait_until
from tests.peers.protonc import ProtonBroker
from tests.peers.rabbitmq import RabbitMQ
from tests.peers.rhea import Rhea

COUNT = 100


def test_free_port_can_be_bound() -> None:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, free_port()))


def test_wait_until_returns_as_soon_as_true_and_names_what_on_timeout() -> None:
    calls = iter([False, False, True])
    wait_until(lambda: next(calls), timeout=5, what="third call")

    started = time.monotonic()
    with pytest.raises(WaitTimeout, match="the impossible"):
        wait_until(lambda: False, timeout=0.2, what="the impossible")
    assert 0.2 <= time.monotonic() - started < 2


def test_require_skips_locally_but_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    require("present", True, "never shown")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="gone unavailable: not installed"):
        require("gone", False, "not installed")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="gone unavailable: not installed"):
        require("gone", False, "not installed")


def _round_trip(rhea: Rhea, url: str, address: str, tmp_path: Path, durable: bool = False) -> None:
    receiver = rhea.start_receive(url, address, COUNT, ready_file=tmp_path / "ready", timeout=30)
    receiver.wait_ready()
    sent = rhea.send(url, address, COUNT, size=1024, durable=durable, timeout=30)
    received = receiver.result(timeout=60)

    assert (sent["sent"], sent["accepted"], sent["rejected"], sent["released"]) == (COUNT, COUNT, 0, 0)
    assert sent["exit_code"] == 0
    assert received["received"] == COUNT
    assert received["latency_ms"]["n"] == COUNT
    assert received["exit_code"] == 0


@pytest.mark.peer
def test_rhea_through_rabbitmq_transient_queue(rhea: Rhea, rabbitmq: RabbitMQ, tmp_path: Path) -> None:
    _round_trip(rhea, rabbitmq.url, f"/queue/smoke-{uuid.uuid4().hex[:8]}", tmp_path)


@pytest.mark.peer
def test_rhea_through_rabbitmq_durable_queue(rhea: Rhea, rabbitmq: RabbitMQ, tmp_path: Path) -> None:
    name = f"smoke-durable-{uuid.uuid4().hex[:8]}"
    address = rabbitmq.declare_durable_queue(name)
    assert address == f"/amq/queue/{name}"

    _round_trip(rhea, rabbitmq.url, address, tmp_path, durable=True)
    assert rabbitmq.queue_depth(name) == 0


@pytest.mark.peer
def test_rabbitmq_keeps_durable_messages_until_consumed(rhea: Rhea, rabbitmq: RabbitMQ) -> None:
    name = f"smoke-backlog-{uuid.uuid4().hex[:8]}"
    address = rabbitmq.declare_durable_queue(name)

    sent = rhea.send(rabbitmq.url, address, COUNT, durable=True, timeout=30)

    assert sent["accepted"] == COUNT
    assert rabbitmq.queue_depth(name) == COUNT


@pytest.mark.peer
def test_rhea_through_proton_c_broker(rhea: Rhea, proton_c_broker: ProtonBroker, tmp_path: Path) -> None:
    _round_trip(rhea, proton_c_broker.url, f"smoke-{uuid.uuid4().hex[:8]}", tmp_path)
