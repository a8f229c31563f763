"""BLOCK through one anonymous-relay link, on a real broker process with a real client (python-qpid-proton).

The link alternates between a BLOCK address and one with room. Its credit could carry a message to either,
so it gets no more credit while the BLOCK address is over its own limit, or over the broker's
global-max-size. The BLOCK address then holds at most its limit plus what one credit window carries
(`AMQ222183`). The producer goes on once a consumer drains it (`AMQ221046`), and nothing Accepted is lost.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from proton import Message

from broker_core.usage import MESSAGE_OVERHEAD
from connections.cli import Management
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import BackgroundSender, receive

LIMIT = 100 * 1024  # max-size-bytes of the BLOCK address
GLOBAL = 1024 * 1024  # global-max-size, in the variant where the BLOCK address has no limit of its own
WINDOW, LOW = 100, 30  # amqpCredits, amqpLowCredits
SENDS = 600  # half to each address: 3.3 MB for the BLOCK address if nothing held the link
BODY = 10 * 1024
ADDRESSES = "".join(
    f'<address name="{a}"><anycast><queue name="{a}"/></anycast></address>' for a in ("blocked", "free")
)


def address(i: int) -> str:
    return "blocked" if i % 2 == 0 else "free"


def body(i: int) -> str:
    return f"{address(i)}-{i:05d}:" + "x" * BODY


def settings(own_limit: int) -> str:
    return f"""<address-setting match="#"><auto-create-queues>true</auto-create-queues></address-setting>
<address-setting match="blocked">
  <max-size-bytes>{own_limit}</max-size-bytes>
  <address-full-policy>BLOCK</address-full-policy>
</address-setting>"""


@pytest.mark.parametrize("limit", ["max-size-bytes", "global-max-size"])
def test_an_anonymous_relay_link_alternating_addresses_is_held_by_a_full_block_address(
    tmp_path: Path, limit: str
) -> None:
    own = limit == "max-size-bytes"
    broker = BrokerProcess(
        tmp_path,
        xml_kwargs={
            "addresses": ADDRESSES,
            "address_settings": settings(LIMIT if own else -1),
            "acceptor_params": f"amqpCredits={WINDOW};amqpLowCredits={LOW}",
            "extra": "" if own else f"<global-max-size>{GLOBAL}</global-max-size>",
        },
    ).start()
    cost = len(Message(address="blocked", body=body(0), durable=True).encode()) + MESSAGE_OVERHEAD
    bound = (LIMIT if own else GLOBAL) + WINDOW * cost  # the limit, plus what one window carries
    producer = BackgroundSender(broker.url, None, SENDS, body, to=address)
    sizes: list[int] = []
    with Management(broker.url) as management:

        def blocked_size() -> int:
            size = int(management.get("addressSize", resource="address.blocked"))
            sizes.append(size)
            return size

        wait_until(lambda: producer.stalled or producer.done, 30, "the producer to stall")
        assert len(producer.outcomes) < SENDS  # held: the link's credit ran out and was not topped up
        assert "AMQ222183" in broker.log()  # Blocking message production on address 'blocked'
        stalled_at = len(producer.outcomes)
        for _ in range(5):  # held over a window, not just at one instant
            assert blocked_size() <= bound
            time.sleep(0.2)
        assert len(producer.outcomes) == stalled_at and producer.credit == 0
        # A consumer drains the BLOCK address: the link is given credit again each time there is room.
        got: list[str] = []
        deadline = time.monotonic() + 90
        while not producer.done and time.monotonic() < deadline:
            got += [m.body for m in receive(broker.url, "blocked", 200, timeout=0.5)]
            assert blocked_size() <= bound
    assert producer.done, f"the producer is still held after the drain: {len(producer.outcomes)} sent"
    assert set(producer.outcomes.values()) == {"accepted"} and len(producer.outcomes) == SENDS
    assert "AMQ221046" in broker.log()  # Unblocking message production on address 'blocked'
    got += [m.body for m in receive(broker.url, "blocked", SENDS, timeout=2)]
    got += [m.body for m in receive(broker.url, "free", SENDS, timeout=2)]
    assert sorted(got) == sorted(body(i) for i in range(SENDS))  # each Accepted message once
    print(f"{limit}: 'blocked' peaked at {max(sizes)} bytes (bound {bound}) over {len(sizes)} samples")
    assert broker.stop() == 0
