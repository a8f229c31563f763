"""rhea (Node.js) over WebSocket with Node's ws package: tests/node/send.js and receive.js given a ws://
URL, against our broker with security on (SASL PLAIN inside the WebSocket)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.peers.ports import LOOPBACK
from tests.peers.rhea import Rhea
from tests.support.broker import BrokerProcess

QUEUES = "".join(
    f'<address name="{q}"><anycast><queue name="{q}"/></anycast></address>' for q in ("r", "large")
)
LOGIN = {"user": "admin", "password": "secret"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("rhea-ws"), name="main", xml_kwargs={"addresses": QUEUES, "security": True}
    )
    b.start()
    yield b
    assert b.stop() == 0
    assert "AMQ951122" not in b.log()  # no framing error on any of these connections


def test_rhea_sends_and_receives_over_websocket(rhea: Rhea, broker: BrokerProcess, tmp_path: Path) -> None:
    url = f"ws://{LOOPBACK}:{broker.port}/"
    receiver = rhea.start_receive(url, "r", 2000, ready_file=tmp_path / "ready", **LOGIN)
    receiver.wait_ready()
    sent = rhea.send(url, "r", 2000, size=512, **LOGIN)
    assert (sent["exit_code"], sent["accepted"]) == (0, 2000), sent
    got = receiver.result()
    assert (got["exit_code"], got["received"]) == (0, 2000), got


def test_rheas_whole_amqp_frames_in_one_websocket_message_are_taken(
    rhea: Rhea, broker: BrokerProcess, tmp_path: Path
) -> None:
    """rhea writes each AMQP frame as one WebSocket message: up to the acceptor's maxFrameSize (128 KiB),
    past Artemis's 64 KiB webSocketMaxFramePayloadLength default. Unset, the limit here follows
    maxFrameSize, so a 300 kB message crosses in 128 KiB frames."""
    url = f"ws://{LOOPBACK}:{broker.port}/"
    receiver = rhea.start_receive(url, "large", 5, ready_file=tmp_path / "ready", **LOGIN)
    receiver.wait_ready()
    sent = rhea.send(url, "large", 5, size=300_000, **LOGIN)
    assert (sent["exit_code"], sent["accepted"]) == (0, 5), sent
    got = receiver.result()
    assert (got["exit_code"], got["received"]) == (0, 5), got


def test_a_wrong_password_over_websocket_is_a_refused_login(rhea: Rhea, broker: BrokerProcess) -> None:
    sent = rhea.send(f"ws://{LOOPBACK}:{broker.port}/", "r", 1, user="admin", password="wrong", timeout=20)
    assert sent["exit_code"] == 1 and sent["accepted"] == 0
    assert "AMQ951040" in broker.log()
