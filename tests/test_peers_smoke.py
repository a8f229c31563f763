"""Smoke tests of the foreign peers themselves: rhea moves exact message counts through each broker."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.peers.protonc import ProtonBroker
from tests.peers.rabbitmq import RabbitMQ
from tests.peers.rhea import Rhea

pytestmark = pytest.mark.peer

COUNT = 100


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


def test_rhea_through_rabbitmq_transient_queue(rhea: Rhea, rabbitmq: RabbitMQ, tmp_path: Path) -> None:
    _round_trip(rhea, rabbitmq.url, f"/queue/smoke-{uuid.uuid4().hex[:8]}", tmp_path)


def test_rhea_through_rabbitmq_durable_queue(rhea: Rhea, rabbitmq: RabbitMQ, tmp_path: Path) -> None:
    name = f"smoke-durable-{uuid.uuid4().hex[:8]}"
    address = rabbitmq.declare_durable_queue(name)
    assert address == f"/amq/queue/{name}"

    _round_trip(rhea, rabbitmq.url, address, tmp_path, durable=True)
    assert rabbitmq.queue_depth(name) == 0


def test_rabbitmq_keeps_durable_messages_until_consumed(rhea: Rhea, rabbitmq: RabbitMQ) -> None:
    name = f"smoke-backlog-{uuid.uuid4().hex[:8]}"
    address = rabbitmq.declare_durable_queue(name)

    sent = rhea.send(rabbitmq.url, address, COUNT, durable=True, timeout=30)

    assert sent["accepted"] == COUNT
    assert rabbitmq.queue_depth(name) == COUNT


def test_rhea_through_proton_c_broker(rhea: Rhea, proton_c_broker: ProtonBroker, tmp_path: Path) -> None:
    _round_trip(rhea, proton_c_broker.url, f"smoke-{uuid.uuid4().hex[:8]}", tmp_path)
