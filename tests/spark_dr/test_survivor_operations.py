"""What a DR reconciliation and repair need of the broker, on whole brokers joined in memory
(tests/support/pair.py):

- an expiry copy keeps its original's identity on both sides of a mirror, so the two copies pair up,
  and a consumption of one side's copy settles the other's (as for a mirrored dead letter);
- while the original is still held elsewhere (a multicast message expired on one subscription), the
  original keeps the identity index: a mirrored acknowledgement of its other reference still finds it;
- management removes one message by its own id (Artemis's ``removeMessage`` and
  ``sendMessageToDeadLetterAddress``), from memory or from a page, and says where a queue's dead letters
  go (``deadLetterAddress``, an address's ``queueNames``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.message import build_message
from tests.support.paging import body_of, settings
from tests.support.pair import MemoryClient, Network

NEWS = (
    '<address name="news"><multicast><queue name="news.eu"/><queue name="news.us"/></multicast></address>'
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="Expired"><anycast><queue name="Expired"/></anycast></address>'
    '<address name="DLA"><anycast><queue name="DLA"/></anycast></address>'
)
EXPIRY = (
    '<address-setting match="#"><expiry-address>Expired</expiry-address>'
    "<dead-letter-address>DLA</dead-letter-address></address-setting>"
)


@pytest.fixture
def net(tmp_path: Path) -> Network:
    return Network(tmp_path)


def dual(net: Network) -> tuple[MemoryClient, MemoryClient]:
    net.broker("dc1", mirror_to="dc2", addresses=NEWS, settings=EXPIRY)
    net.broker("dc2", mirror_to="dc1", addresses=NEWS, settings=EXPIRY)
    net.start_all()
    return net.client("dc1"), net.client("dc2")


def expire(net: Network, side: str, queue: str, message_id: int) -> None:
    """As the expiry scan does when the time to live is over."""
    q = net.server(side).queues[queue]
    ref = q.waiting[message_id]
    q.remove(ref)
    net.server(side).outcomes.expire(ref)
    net.pump()


def identities(net: Network, side: str, queue: str) -> list[tuple[str, int]]:
    server = net.server(side)
    return [server.index.identity_of(ref.message) for ref in server.queues[queue].refs()]


def test_an_expiry_copy_keeps_its_original_identity_on_both_sides(net: Network) -> None:
    dual(net)
    original = net.server("dc1").route("orders", build_message("short-lived"))
    net.pump()
    assert original is not None and net.depth("dc2", "orders") == 1
    identity = net.server("dc1").index.identity_of(original)
    expire(net, "dc1", "orders", original.id)
    assert net.depth("dc1", "Expired") == net.depth("dc2", "Expired") == 1  # each side its own copy
    assert identities(net, "dc1", "Expired") == identities(net, "dc2", "Expired") == [identity]

    # a consumer of DC2's copy settles DC1's: the acknowledgement names the identity both copies keep
    assert len(net.client("dc2").receive("Expired", 5)) == 1
    assert net.depth("dc1", "Expired") == 0


def test_a_multicast_original_still_held_keeps_the_index_from_its_expiry_copy(net: Network) -> None:
    c1, _ = dual(net)
    original = net.server("dc1").route("news", build_message("to both subscriptions"))
    net.pump()
    assert original is not None and net.depth("dc2", "news.us") == 1
    expire(net, "dc1", "news.eu", original.id)  # news.eu's reference expires, news.us's stays
    assert net.depth("dc2", "news.eu") == 0 and net.depth("dc2", "Expired") == 1
    assert len(c1.receive("news::news.us", 5)) == 1  # consumed on DC1: its acknowledgement crosses
    assert net.depth("dc2", "news.us") == 0, "DC2 did not find the original its copy shares an identity with"
    # the original gone, its copy answers to the identity on both sides
    assert len(c1.receive("Expired", 5)) == 1
    assert net.depth("dc2", "Expired") == 0


def test_management_removes_one_message_by_its_id(net: Network) -> None:
    net.broker("dc1", addresses=NEWS, settings=EXPIRY)
    net.start_all()
    server = net.server("dc1")
    ids = [m.id for m in (server.route("orders", build_message(f"m{i}")) for i in range(4)) if m is not None]
    invoke = net.brokers["dc1"].management.invoke
    assert invoke("queue.orders", "removeMessage", [ids[1]]) is True
    assert invoke("queue.orders", "sendMessageToDeadLetterAddress", [ids[2]]) is True
    assert invoke("queue.orders", "removeMessage", [ids[1]]) is False  # once
    assert invoke("queue.orders", "removeMessage", [10**9]) is False
    assert [body_of(p) for p in net.client("dc1").receive("orders", 5)] == ["m0", "m3"]
    assert net.depth("dc1", "DLA") == 1  # moved there; the deleted one is nowhere
    attribute = net.brokers["dc1"].management.attribute
    assert attribute("queue.orders", "deadLetterAddress") == "DLA"
    assert attribute("address.DLA", "queueNames") == ["DLA"]


def test_management_removes_a_paged_message_by_its_id(net: Network) -> None:
    net.broker("dc1", persistence=True, settings=settings() + EXPIRY)
    net.start_all()
    client = net.client("dc1")
    for i in range(200):
        client.send("orders", f"m{i:03d}")
    net.pump()
    queue = net.server("dc1").queues["orders"]
    assert queue.paged > 150
    in_memory = {ref.message.id for ref in queue.refs()}
    newest = max(in_memory) + queue.paged  # ids are given in order: the last message sent is paged
    invoke = net.brokers["dc1"].management.invoke
    assert invoke("queue.orders", "removeMessage", [newest]) is True
    assert invoke("queue.orders", "removeMessage", [newest]) is False
    net.pump()
    got = []
    while batch := client.receive("orders", 50):
        got += [body_of(p) for p in batch]
    assert got == [f"m{i:03d}" for i in range(199)] and queue.depth == 0
