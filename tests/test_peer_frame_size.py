"""Nothing the broker sends exceeds the max-frame-size its peer declared (AMQP 1.0 part 2.7.1).

A scripted client (proton's codec) declares 512 bytes, the smallest AMQP allows, and asks for links whose
answers would echo long addresses: the broker refuses such a link with amqp:frame-size-too-small instead
of sending a frame the peer cannot take, cuts long error descriptions short, and closes the connection
only when not even a bare refusal fits. The engine's side of it: tests/test_engine.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from proton import symbol, ubyte, uint

from tests.support.broker import BrokerProcess
from tests.support.peer import Frame, PeerClosed, ScriptedClient, performative

SMALLEST = 512
FRAME_SIZE_TOO_SMALL = symbol("amqp:frame-size-too-small")
MIRROR = "$ACTIVEMQ_ARTEMIS_MIRROR"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("frames")).start()
    yield b
    b.stop()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[ScriptedClient]:
    with ScriptedClient(broker.port) as c:
        c.open(max_frame_size=SMALLEST)
        c.begin()
        yield c
        assert c.conn is not None and c.conn.largest_frame <= SMALLEST, "a frame exceeded 512 bytes"


def attach_receiver(client: ScriptedClient, name: str, source: str) -> tuple[Frame, Frame]:
    """Attach a receiving link; the broker's answer and the detach that must follow it."""
    conn = client.conn
    assert conn is not None
    start = len(client.frames)
    conn.send_frame(0, performative(
        0x12, name, uint(7), True, ubyte(0), ubyte(0), performative(0x28, source), performative(0x29, None),
    ))  # fmt: skip
    attach = client.wait_frame(lambda f: f.name == "attach" and f["name"] == name, "the attach", start)
    detach = client.wait_frame(lambda f: f.name == "detach", "the detach", start)
    return attach, detach


def condition(frame: Frame) -> tuple[str, str]:
    error = frame["error"].value
    return error[0], error[1]


def test_a_producer_whose_answer_would_not_fit_is_refused_and_the_connection_carries_on(
    client: ScriptedClient,
) -> None:
    answer = client.attach_sender("long", "orders." + "x" * 600)
    assert answer.attach is not None and answer.attach["target"] is None  # refused: a null terminus
    assert answer.detach is not None and answer.flow is None
    assert condition(answer.detach)[0] == FRAME_SIZE_TOO_SMALL
    short = client.attach_sender("short", "orders")
    assert short.flow is not None and short.detach is None


def test_a_consumer_whose_answer_would_not_fit_is_refused(client: ScriptedClient) -> None:
    attach, detach = attach_receiver(client, "long-consumer", "orders." + "y" * 600)
    assert attach["source"] is None and detach["closed"] is True
    assert condition(detach)[0] == FRAME_SIZE_TOO_SMALL


def test_a_mirror_link_whose_answer_would_not_fit_is_refused(client: ScriptedClient) -> None:
    address = f"{MIRROR}_{'z' * 300}"
    answer = client.attach_sender(
        f"{address}:u",
        address,
        source=address,
        desired_capabilities=["amq.mirror"],
        properties={"x-opt-amq-bkr-id": "dc1"},
    )
    assert answer.detach is not None and condition(answer.detach)[0] == FRAME_SIZE_TOO_SMALL


def test_a_long_refusal_reason_is_cut_short_to_fit(client: ScriptedClient) -> None:
    internal = f"{MIRROR}_{'w' * 470}"  # no client may consume it: the refusal names the address
    attach, detach = attach_receiver(client, "internal", internal)
    assert attach["source"] is None
    cond, description = condition(detach)
    assert cond == symbol("amqp:not-allowed")
    assert description.startswith(f"address {MIRROR}_www") and description.endswith("...")


def test_a_link_name_too_long_for_any_answer_closes_the_connection(broker: BrokerProcess) -> None:
    with ScriptedClient(broker.port) as c:
        c.open(max_frame_size=SMALLEST)
        c.begin()
        with pytest.raises(PeerClosed):  # no answer to the attach: the broker closed instead
            c.attach_sender("n" * 600, "orders")
        [close] = [f for f in c.frames if f.name == "close"]
        assert condition(close)[0] == FRAME_SIZE_TOO_SMALL
        assert not [f for f in c.frames if f.name == "attach"]
        assert c.conn is not None and c.conn.largest_frame <= SMALLEST
