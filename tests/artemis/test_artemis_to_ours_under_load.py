"""Artemis mirrors to us beside a disk- and CPU-heavy neighbour: every message of every new queue arrives.

Under load an Artemis source sends the first message of a queue it has just created before that queue's
addAddress and createQueue (its operation contexts race: docs/mirror.md, "Held messages"); our target
holds such a message until the queue exists here. Each round sends to three new queues on Artemis at
once (each created by its first send), waits for exactly that many here (the first wait on a queue the
test has just created, where the message used to be lost), checks the bodies, then consumes some of one
on Artemis and waits for exactly the rest here; other traffic streams to Artemis all along.
The neighbour (tests/support/neighbour.py: processes spinning both cores and writing and
fsyncing a file) runs for the rounds only, started and stopped by the test.

CI runs ROUNDS rounds, about a minute; ``AMQP_MIRROR_LOAD_ROUNDS=N`` runs N (a soak).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from proton import Message

from tests.artemis.support import (
    artemis,
    bodies,
    call,
    config,
    depth,
    mirror_complaints,
    mirror_connection,
    ours,
    reaches,
)
from tests.peers.artemis import CONNECTED
from tests.peers.ports import free_port
from tests.support.client import Capabilities, connect, receive
from tests.support.neighbour import busy_neighbour

ROUNDS = int(os.environ.get("AMQP_MIRROR_LOAD_ROUNDS", "10"))
QUEUES = 3  # new queues per round, each made by its first send, from three senders at once
PER_QUEUE = 5
CONSUMED = 2  # of each round's first queue, consumed on Artemis: their acknowledgements remove them here

# long enough for a wait's diagnostic (90 s) after the rounds, on a loaded machine
pytestmark = [pytest.mark.usefixtures("artemis_available"), pytest.mark.timeout(300 + 20 * ROUNDS)]


class Sender:
    """Sends to a new queue on Artemis (made by the send, as an application's first send makes it)."""

    def __init__(self, url: str, queue: str, bodies: list[str]) -> None:
        self.accepted = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(url, queue, bodies), daemon=True)
        self._thread.start()

    def _run(self, url: str, queue: str, bodies: list[str]) -> None:
        try:
            with connect(url, timeout=60) as conn:
                sender = conn.create_sender(queue, options=Capabilities("queue"))
                for body in bodies:
                    sender.send(Message(body=body, durable=True))
                    self.accepted += 1
        except BaseException as exc:  # kept: `join` asserts there was none
            self.error = exc

    def join(self) -> None:
        self._thread.join(90)
        assert not self._thread.is_alive(), "a sender to Artemis never finished"
        assert self.error is None, f"a send to Artemis failed: {self.error!r}"


class Stream:
    """Other traffic on Artemis while the rounds run: durable sends to one queue, one after another."""

    def __init__(self, url: str, address: str) -> None:
        self.url, self.address = url, address
        self.accepted: list[str] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Stream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the other traffic's sender did not stop"

    def _run(self) -> None:
        try:
            with connect(self.url, timeout=60) as conn:
                sender = conn.create_sender(self.address, options=Capabilities("queue"))
                while not self._stop.is_set():
                    body = f"s{len(self.accepted)}"
                    sender.send(Message(body=body, durable=True))
                    self.accepted.append(body)
        except BaseException as exc:  # kept: the test asserts there was none
            self.error = exc


def test_each_new_queue_gets_every_message_beside_a_busy_neighbour(tmp_path: Path) -> None:
    a_port, o_port = free_port(), free_port()
    target = ours(tmp_path / "ours", o_port, config(o_port)).start()
    source = artemis(tmp_path / "artemis", a_port, config(a_port, mirror_connection("ours", o_port)))
    try:
        source.start().wait_for(CONNECTED, 30, "to connect its mirror to ours")
        with busy_neighbour(tmp_path / "neighbour"), Stream(source.url, "busy.stream") as stream:
            for r in range(ROUNDS):
                sent = {f"busy.{r}.{k}": [f"{r}.{k}.{i}" for i in range(PER_QUEUE)] for k in range(QUEUES)}
                senders = [Sender(source.url, queue, bodies_) for queue, bodies_ in sent.items()]
                for sender in senders:
                    sender.join()
                for queue, sent_bodies in sent.items():
                    reaches(source, target, queue, PER_QUEUE, f"round {r}: every message of {queue} here")
                    assert bodies(target, queue, timeout=0.3) == sorted(sent_bodies)
                first, first_bodies = next(iter(sent.items()))
                assert [m.body for m in receive(source.url, first, CONSUMED)] == first_bodies[:CONSUMED]
                reaches(
                    source, target, first, PER_QUEUE - CONSUMED, f"round {r}: Artemis's acks applied here"
                )
                assert bodies(target, first, timeout=0.3) == sorted(first_bodies[CONSUMED:])
                assert depth(source, first) == PER_QUEUE - CONSUMED
        assert stream.error is None, f"the other traffic stopped: {stream.error!r}"
        reaches(source, target, "busy.stream", len(stream.accepted), "the other traffic, all of it here")
        status = call(target, "getMirrorStatus")["target"]
        # what was held (the race seen) was stored once its queue came; nothing was given up on
        assert status["heldNow"] == 0 and status["held_dead_lettered"] == 0, status
        assert status["unrouted"] == 0 and status["duplicates"] == 0, status
        assert status["acks_never_matched"] == 0, status
        print(f"{ROUNDS * QUEUES} new queues: {status['held_stored']} messages held until their queue came")
        assert mirror_complaints(source) == []
    finally:
        source.stop()
        target.stop()
