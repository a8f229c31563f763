"""rhea, an independent AMQP 1.0 client (Node.js), against our broker as a separate process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.peers.rhea import Rhea
from tests.support.broker import BrokerProcess
from tests.support.client import receive

pytestmark = pytest.mark.peer

COUNT = 200
ADDRESS = "interop"
QUEUE_XML = f'<address name="{ADDRESS}"><anycast><queue name="{ADDRESS}"/></anycast></address>'


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", xml_kwargs={"addresses": QUEUE_XML})
    b.start()
    yield b
    assert b.stop() == 0


def _assert_all_accepted(sent: dict[str, Any], count: int) -> None:
    assert (sent["sent"], sent["accepted"], sent["rejected"], sent["released"]) == (count, count, 0, 0), sent
    assert sent["exit_code"] == 0, sent


def _assert_queue_empty(broker: BrokerProcess, user: str | None = None, password: str | None = None) -> None:
    leftovers = receive(broker.url, ADDRESS, 1, timeout=0.5, user=user, password=password)
    assert leftovers == [], "the broker delivered more than was sent"


def test_rhea_receives_exactly_what_rhea_sent(rhea: Rhea, broker: BrokerProcess, tmp_path: Path) -> None:
    receiver = rhea.start_receive(broker.url, ADDRESS, COUNT, ready_file=tmp_path / "ready", timeout=30)
    receiver.wait_ready()
    sent = rhea.send(broker.url, ADDRESS, COUNT, durable=True, size=512, timeout=30)
    received = receiver.result(timeout=60)

    _assert_all_accepted(sent, COUNT)
    assert received["received"] == COUNT, received
    assert received["exit_code"] == 0, received
    _assert_queue_empty(broker)


def test_durable_messages_from_rhea_survive_a_restart(
    rhea: Rhea, broker: BrokerProcess, tmp_path: Path
) -> None:
    sent = rhea.send(broker.url, ADDRESS, COUNT, durable=True, size=256, timeout=30)
    _assert_all_accepted(sent, COUNT)

    assert broker.stop() == 0
    broker.start()

    receiver = rhea.start_receive(broker.url, ADDRESS, COUNT, ready_file=tmp_path / "ready", timeout=30)
    received = receiver.result(timeout=60)
    assert received["received"] == COUNT, received
    assert received["exit_code"] == 0, received
    _assert_queue_empty(broker)


def test_rhea_with_plain_credentials_under_security(rhea: Rhea, tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "secure", xml_kwargs={"addresses": QUEUE_XML, "security": True})
    b.start()
    try:
        refused = rhea.send(b.url, ADDRESS, 1, user="alice", password="not-her-password", timeout=10)
        assert refused["accepted"] == 0 and refused["exit_code"] != 0, refused

        sent = rhea.send(b.url, ADDRESS, COUNT, durable=True, user="alice", password="wonderland", timeout=30)
        _assert_all_accepted(sent, COUNT)
        receiver = rhea.start_receive(
            b.url, ADDRESS, COUNT, ready_file=tmp_path / "ready", user="bob", password="builder", timeout=30
        )
        received = receiver.result(timeout=60)
        assert received["received"] == COUNT, received
        _assert_queue_empty(b, user="admin", password="secret")
        assert "wonderland" not in b.log() and "not-her-password" not in b.log()
    finally:
        assert b.stop() == 0
