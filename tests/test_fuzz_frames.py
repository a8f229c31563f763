"""Random and mutated frames against the acceptor while a well-behaved client keeps working."""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

from proton import Message

from broker_core.amqp.codec import Symbol
from broker_core.amqp.framing import AMQP_HEADER, SASL_HEADER, frame
from broker_core.amqp.performatives import Attach, Begin, Flow, Open, SaslInit, Source, Target, Transfer
from tests.support.broker import BrokerProcess
from tests.support.client import connect

ITERATIONS = int(os.environ.get("FUZZ_ITERATIONS", "300"))
SEED = int(os.environ.get("FUZZ_SEED", "7"))


def _valid_session_bytes() -> list[bytes]:
    """A plausible client conversation, frame by frame, to mutate."""
    return [
        SASL_HEADER,
        frame(0, SaslInit(mechanism=Symbol("ANONYMOUS"), initial_response=b"").encode_amqp(), 1),
        AMQP_HEADER,
        frame(0, Open(container_id="fuzz", max_frame_size=65536).encode_amqp()),
        frame(0, Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100).encode_amqp()),
        frame(
            0,
            Attach(
                name="s", handle=0, role=False, source=Source(address="x"), target=Target(address="fuzzq")
            ).encode_amqp(),
        ),
        frame(
            0,
            Attach(
                name="r", handle=1, role=True, source=Source(address="fuzzq"), target=Target(address="y")
            ).encode_amqp(),
        ),
        frame(
            0,
            Flow(
                next_incoming_id=0,
                incoming_window=100,
                next_outgoing_id=0,
                outgoing_window=100,
                handle=1,
                delivery_count=0,
                link_credit=10,
            ).encode_amqp(),
        ),
        frame(
            0,
            Transfer(handle=0, delivery_id=0, delivery_tag=b"t", message_format=0).encode_amqp()
            + b"\x00\x53\x77\xa1\x05hello",
        ),
    ]


def _mutate(rng: random.Random, parts: list[bytes]) -> bytes:
    data = bytearray(b"".join(parts[: rng.randint(1, len(parts))]))
    for _ in range(rng.randint(1, 8)):
        choice = rng.random()
        pos = rng.randrange(len(data))
        if choice < 0.5:
            data[pos] = rng.randrange(256)
        elif choice < 0.7:
            del data[pos : pos + rng.randint(1, 16)]
        elif choice < 0.9:
            data[pos:pos] = rng.randbytes(rng.randint(1, 32))
        else:
            data += rng.randbytes(rng.randint(1, 200))
        if not data:
            data = bytearray(AMQP_HEADER)
    return bytes(data)


def _attack(url_port: int, payload: bytes) -> None:
    try:
        with socket.create_connection(("127.0.0.1", url_port), timeout=2) as s:
            s.sendall(payload)
            s.settimeout(0.5)
            while s.recv(65536):
                pass
    except OSError:
        pass


def test_fuzzed_frames_never_disturb_a_good_client(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b")
    broker.start()
    rng = random.Random(SEED)
    parts = _valid_session_bytes()
    errors: list[BaseException] = []
    done = threading.Event()
    exchanged = [0]

    def good_client() -> None:
        try:
            with connect(broker.url) as conn:
                sender = conn.create_sender("good")
                receiver = conn.create_receiver("good", credit=10)
                i = 0
                while not done.is_set():
                    sender.send(Message(body=i, durable=True))
                    assert receiver.receive(timeout=10).body == i
                    receiver.accept()
                    exchanged[0] += 1
                    i += 1
        except BaseException as exc:
            errors.append(exc)

    # 'good' must be anycast so the receiver sees every message
    with connect(broker.url) as conn:
        from tests.support.client import Capabilities

        conn.create_sender("good", options=Capabilities("queue")).close()
    t = threading.Thread(target=good_client)
    t.start()
    try:
        for _ in range(ITERATIONS):
            payload = _mutate(rng, parts) if rng.random() < 0.8 else rng.randbytes(rng.randint(1, 512))
            _attack(broker.port, payload)
    finally:
        done.set()
        t.join(30)
    assert not errors, f"the good client failed: {errors[0]!r}"
    assert exchanged[0] > 0
    assert broker.proc is not None and broker.proc.poll() is None, "the broker died"
    log = broker.log()
    assert "Traceback" not in log, log[-3000:]
    assert broker.stop() == 0
