"""SIGKILL cycles against a broker process, with the client's exact knowledge of what was confirmed.

Each cycle sends uniquely numbered durable messages and consumes some, while a timer SIGKILLs the
broker at a random moment. The client knows for certain which sends were Accepted and which acks were
confirmed (the broker answers a detach only once the link's acks are on disk); operations cut off by the
kill are "in doubt". After restart the queue must hold exactly the confirmed, unacked messages plus any
subset of the in-doubt ones, each at most once, in order.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

from proton import ConnectionException, Message

from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive


@dataclass
class Ledger:
    """What the client knows: confirmed in the queue, and the operations the kill left in doubt."""

    present: set[int] = field(default_factory=set)
    in_doubt_send: set[int] = field(default_factory=set)
    in_doubt_ack: set[int] = field(default_factory=set)
    next_id: int = 0
    sent: int = 0
    acked: int = 0


def kill_cycle(
    broker: BrokerProcess,
    address: str,
    ledger: Ledger,
    rng: random.Random,
    *,
    padding: int = 0,
    batch: tuple[int, int] = (5, 30),
    take: tuple[int, int] = (1, 10),
    kill_after: tuple[float, float] = (0.3, 1.5),
) -> None:
    """Start the broker, send and consume until a random SIGKILL, restart it and check the queue."""
    broker.start()
    killer = threading.Timer(rng.uniform(*kill_after), broker.kill)
    killer.start()
    cut_off = False  # the loop below only ends by an exception
    try:
        with connect(broker.url, timeout=5) as conn:
            sender = conn.create_sender(address)
            while True:
                for _ in range(rng.randint(*batch)):
                    mid = ledger.next_id
                    ledger.next_id += 1
                    ledger.in_doubt_send.add(mid)
                    sender.send(Message(body=mid, durable=True, properties={"pad": "x" * padding}))
                    ledger.in_doubt_send.discard(mid)
                    ledger.present.add(mid)
                    ledger.sent += 1
                receiver = conn.create_receiver(address, credit=10)
                taken = []
                for _ in range(rng.randint(*take)):
                    m = receiver.receive(timeout=5)
                    ledger.in_doubt_ack.add(m.body)  # from here the ack may or may not reach the broker
                    receiver.accept()
                    taken.append(m.body)
                receiver.close()  # returns once the broker answered: the acks are durable
                for mid in taken:
                    ledger.in_doubt_ack.discard(mid)
                    ledger.present.discard(mid)
                    ledger.acked += 1
    except ConnectionException:  # the kill; a Timeout or a refused send is a failure, not "in doubt"
        cut_off = True
    killer.join()
    assert cut_off, "the kill should have cut the client off mid-operation"
    broker.kill()
    broker.start()
    check_recovered(broker, address, ledger)
    broker.stop()


def check_recovered(broker: BrokerProcess, address: str, ledger: Ledger) -> None:
    """Settle the in-doubt sets against what the broker recovered (looked at, not consumed)."""
    remaining = [m.body for m in receive(broker.url, address, 1_000_000, timeout=1.0, accept=None)]
    assert len(remaining) == len(set(remaining)), "a message came back twice"
    got = set(remaining)
    missing = ledger.present - got - ledger.in_doubt_ack
    assert not missing, f"accepted messages lost: {sorted(missing)[:10]}"
    unexpected = got - ledger.present - ledger.in_doubt_send - ledger.in_doubt_ack
    assert not unexpected, f"acknowledged or never-sent messages present: {sorted(unexpected)[:10]}"
    assert remaining == sorted(remaining), "queue order changed across recovery"
    ledger.present = got
    ledger.in_doubt_send.clear()
    ledger.in_doubt_ack.clear()
