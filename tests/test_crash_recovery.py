"""SIGKILL at random points: no Accepted message is lost, no acknowledged one comes back.

Each cycle sends uniquely numbered durable messages and consumes some, while a timer SIGKILLs the
broker at a random moment. The client knows for certain which sends were Accepted and which acks were
confirmed (the broker answers a detach only once the link's acks are on disk); operations cut off by the
kill are "in doubt". After restart the queue must hold exactly the confirmed, unacked messages plus any
subset of the in-doubt ones, each at most once.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from proton import ConnectionException, Message

from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive

CYCLES = 5


@pytest.mark.slow
def test_random_sigkill_cycles_keep_exactly_the_acknowledged_state(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    # Unlimited delivery attempts: looking at the queue after each restart is a consumer loss, and
    # dead-lettering after a few of those would hide the state under test.
    broker = BrokerProcess(
        tmp_path / "b",
        xml_kwargs={
            "addresses": '<address name="work"><anycast><queue name="work"/></anycast></address>',
            "address_settings": '<address-setting match="#"><max-delivery-attempts>-1</max-delivery-attempts>'
            "</address-setting>",
        },
    )
    present: set[int] = set()  # confirmed in the queue
    in_doubt_send: set[int] = set()
    in_doubt_ack: set[int] = set()
    next_id = 0
    for _cycle in range(CYCLES):
        broker.start()
        killer = threading.Timer(rng.uniform(0.3, 1.5), broker.kill)
        killer.start()
        cut_off = False  # the loop below only ends by an exception
        try:
            with connect(broker.url, timeout=5) as conn:
                sender = conn.create_sender("work")
                while True:
                    for _ in range(rng.randint(5, 30)):
                        mid = next_id
                        next_id += 1
                        in_doubt_send.add(mid)
                        sender.send(Message(body=mid, durable=True))
                        in_doubt_send.discard(mid)
                        present.add(mid)
                    receiver = conn.create_receiver("work", credit=10)
                    taken = []
                    for _ in range(rng.randint(1, 10)):
                        m = receiver.receive(timeout=5)
                        in_doubt_ack.add(m.body)  # from here the ack may or may not reach the broker
                        receiver.accept()
                        taken.append(m.body)
                    receiver.close()  # returns once the broker answered: the acks are durable
                    for mid in taken:
                        in_doubt_ack.discard(mid)
                        present.discard(mid)
        except ConnectionException:  # the kill; a Timeout or a refused send is a failure, not "in doubt"
            cut_off = True
        killer.join()
        assert cut_off, "the kill should have cut the client off mid-operation"
        broker.kill()
        # Settle the in-doubt set against what the broker recovered.
        broker.start()
        remaining = [m.body for m in receive(broker.url, "work", 100000, timeout=1.0, accept=None)]
        assert len(remaining) == len(set(remaining)), "a message came back twice"
        got = set(remaining)
        missing = present - got - in_doubt_ack
        assert not missing, f"accepted messages lost: {sorted(missing)[:10]}"
        unexpected = got - present - in_doubt_send - in_doubt_ack
        assert not unexpected, f"acknowledged or never-sent messages present: {sorted(unexpected)[:10]}"
        present = got
        in_doubt_send.clear()
        in_doubt_ack.clear()
        assert remaining == sorted(remaining), "queue order changed across recovery"
        broker.stop()
    assert next_id > 0
