"""Paging and address-full policies on whole brokers joined in memory (tests/support/pair.py).

- PAGE: past max-size-bytes, new messages go to page files, memory stays bounded, and the queue reads
  them back in order as consumers drain it; consumed pages are deleted; a restart keeps what was paged
  and not acknowledged, exactly once.
- A mirror's store-and-forward queue pages like any other, and catches up in order.
- FAIL refuses with amqp:resource-limit-exceeded; DROP accepts, drops and counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror import wire
from tests.support.paging import body_of, drain, pages, settings
from tests.support.pair import MemoryClient, Network


@pytest.fixture
def net(tmp_path: Path) -> Network:
    return Network(tmp_path)


def test_past_its_limit_an_address_pages_and_reads_back_in_order(net: Network) -> None:
    net.broker("dc1", persistence=True, settings=settings())
    net.start_all()
    client = net.client("dc1")
    sent = [client.send("orders", f"m{i:03d}-" + "x" * 100) for i in range(200)]
    net.pump()
    assert all(client.accepted(d) for d in sent)
    server = net.server("dc1")
    queue = server.queues["orders"]
    usage = server.addresses["orders"].usage
    assert queue.depth == 200
    assert queue.paged > 150  # most of them wait on disk
    assert usage.bytes <= 20_000  # memory stayed under max-size-bytes
    assert len(pages(net, "dc1")) >= 3  # page-size-bytes 8,000: several pages
    got = drain(client, "orders")
    assert got == [f"m{i:03d}-" + "x" * 100 for i in range(200)]
    net.pump()
    assert queue.depth == 0 and queue.paged == 0
    assert pages(net, "dc1") == []  # every page consumed, so deleted
    assert usage.store is None and usage.bytes == 0


def test_new_messages_stay_behind_paged_ones_until_the_pages_are_read(net: Network) -> None:
    net.broker("dc1", persistence=True, settings=settings(max_size=5_000, read=3))
    net.start_all()
    client = net.client("dc1")
    for i in range(60):
        client.send("orders", f"a{i}")
    net.pump()
    got = [body_of(p) for p in client.receive("orders", 10)]  # some read back; memory has room again
    for i in range(20):
        client.send("orders", f"b{i}")
    net.pump()
    got += drain(client, "orders")
    assert got == [f"a{i}" for i in range(60)] + [f"b{i}" for i in range(20)]


def test_paged_messages_survive_a_restart_exactly_once(net: Network) -> None:
    net.broker("dc1", persistence=True, settings=settings())
    net.start_all()
    client = net.client("dc1")
    for i in range(150):
        client.send("orders", f"m{i}")
    net.pump()
    consumed = [body_of(p) for p in client.receive("orders", 40)]  # some from memory, some paged
    assert consumed == [f"m{i}" for i in range(40)]
    net.stop("dc1")
    net.broker("dc1", persistence=True, settings=settings())
    net.start("dc1")
    queue = net.server("dc1").queues["orders"]
    assert queue.depth == 110
    client = net.client("dc1")
    assert drain(client, "orders") == [f"m{i}" for i in range(40, 150)]
    net.pump()
    assert pages(net, "dc1") == []


def test_a_store_and_forward_queue_pages_while_its_target_is_down_and_catches_up(net: Network) -> None:
    snf_settings = settings() + (
        '<address-setting match="$ACTIVEMQ_ARTEMIS_MIRROR_dc2"><max-size-bytes>10000</max-size-bytes>'
        "<page-size-bytes>6000</page-size-bytes></address-setting>"
    )
    net.broker("dc1", persistence=True, mirror_to="dc2", settings=snf_settings)
    net.broker("dc2", persistence=True, settings=settings(max_size=1_000_000))
    net.start("dc1")
    client = net.client("dc1")
    for i in range(120):
        client.send("orders", f"m{i}")
    net.pump()
    got = [body_of(p) for p in client.receive("orders", 30)]  # acks become events too
    assert len(got) == 30
    snf_queue = net.server("dc1").queues[wire.snf_name("dc2")]
    assert snf_queue.paged > 0
    assert any(True for _ in pages(net, "dc1"))
    net.start("dc2")
    net.loop.advance(1)  # dc1 retries its connection every 100 ms
    net.pump()
    assert snf_queue.depth == 0
    assert net.depth("dc2", "orders") == 90
    dc2 = net.client("dc2")
    assert drain(dc2, "orders") == [f"m{i}" for i in range(30, 120)]


def test_fail_refuses_with_resource_limit_exceeded(net: Network) -> None:
    net.broker("dc1", persistence=True, settings=settings(max_size=3_000, policy="FAIL"))
    net.start_all()
    client = net.client("dc1")
    outcomes = [client.send("orders", f"m{i}") for i in range(10)]
    net.pump()
    accepted = [d for d in outcomes if client.accepted(d)]
    refused = [client.rejected(d) for d in outcomes if not client.accepted(d)]
    assert accepted and refused
    assert set(refused) == {"amqp:resource-limit-exceeded"}
    assert net.depth("dc1", "orders") == len(accepted)
    assert pages(net, "dc1") == []


def test_drop_accepts_and_counts_what_it_drops(net: Network) -> None:
    net.broker("dc1", persistence=True, settings=settings(max_size=3_000, policy="DROP"))
    net.start_all()
    client = net.client("dc1")
    outcomes = [client.send("orders", f"m{i}") for i in range(10)]
    net.pump()
    assert all(client.accepted(d) for d in outcomes)
    usage = net.server("dc1").addresses["orders"].usage
    assert usage.dropped > 0
    assert net.depth("dc1", "orders") + usage.dropped == 10


def test_block_withholds_credit_until_the_address_has_room(net: Network) -> None:
    net.broker("dc1", persistence=True, settings=settings(max_size=50_000, policy="BLOCK"))
    net.start_all()
    client = net.client("dc1")
    sent = [client.send("orders", f"m{i}") for i in range(700)]  # the default window: 1,000, topped at 300
    net.pump()
    assert all(client.accepted(d) for d in sent)  # what was granted is taken
    link = client.senders["orders"]
    assert link.credit == 300  # but no more: the address is over max-size-bytes
    assert net.depth("dc1", "orders") == 700
    assert len(drain(client, "orders")) == 700
    net.pump()
    assert link.credit == 1000  # room again: the window is granted


@pytest.mark.parametrize("limit", ["address", "global"])
def test_block_holds_an_anonymous_relay_link_alternating_with_an_address_that_has_room(
    net: Network, limit: str
) -> None:
    """One anonymous-relay link alternating between a full BLOCK address and one with room: the link is
    judged by every BLOCK address it sent to, not by the last message's, so it gets no more credit while
    the BLOCK address is over its own limit or the broker over global-max-size."""
    addresses = "".join(
        f'<address name="{a}"><anycast><queue name="{a}"/></anycast></address>' for a in ("blocked", "free")
    )
    own = "<max-size-bytes>20000</max-size-bytes>" if limit == "address" else ""
    block = f'<address-setting match="blocked">{own}<address-full-policy>BLOCK</address-full-policy>'
    net.broker(
        "dc1",
        addresses=addresses,
        settings=block + "</address-setting>",
        extra="<global-max-size>20000</global-max-size>" if limit == "global" else "",
        acceptor_params="amqpCredits=20;amqpLowCredits=5",
    )
    net.start_all()
    client = net.client("dc1")
    sent = []
    for i in range(200):
        if client.senders.get("") is not None and client.senders[""].credit == 0:
            break
        sent.append(client.send(None, f"m{i}", to="blocked" if i % 2 == 0 else "free"))
        net.pump()
    assert all(client.accepted(d) for d in sent)  # what was granted is taken
    assert len(sent) < 60  # but no more: 20 credits at a time, and the full address stops the refills
    usage = net.server("dc1").addresses["blocked"].usage
    assert usage.bytes <= 20_000 + 20 * usage.bytes // usage.messages  # its limit plus one window
    to_blocked = usage.messages
    assert len(drain(client, "blocked")) == to_blocked and to_blocked == (len(sent) + 1) // 2
    assert len(drain(client, "free")) == len(sent) // 2  # what was paged is read back too
    net.pump()
    assert client.senders[""].credit == 20  # room again: the window is granted


def test_a_mirrored_acknowledgement_finds_its_message_in_a_page(net: Network) -> None:
    net.broker("dc1", persistence=True, mirror_to="dc2", settings=settings(max_size=10_000_000))
    net.broker("dc2", persistence=True, settings=settings(max_size=5_000, read=10))
    net.start_all()
    client = net.client("dc1")
    for i in range(200):
        client.send("orders", f"m{i}")
    net.pump()
    dc2_queue = net.server("dc2").queues["orders"]
    assert dc2_queue.depth == 200 and dc2_queue.paged > 150  # DC2 holds the copies in pages
    assert len(drain(client, "orders", credit=50)) == 200  # consumed on DC1: 200 acks mirrored
    net.pump()
    stats = net.brokers["dc2"].mirror_target.stats  # type: ignore[union-attr]
    assert dc2_queue.depth == 0
    assert stats.get("ack_retries", 0) == 0  # every ack matched at once, none waited to be retried
    net.pump()
    assert pages(net, "dc2") == []


def read_back_windows(net: Network, client: MemoryClient, count: int) -> list[tuple[int, int]]:
    """Drain the queue one message at a time; each time it runs dry with messages still paged, the
    number of references and bytes it read back from its pages at once (what its memory then holds)."""
    queue = net.server("dc1").queues["orders"]
    in_memory = queue.depth - queue.paged
    assert len(client.receive("orders", in_memory)) == in_memory  # what never paged
    assert not queue.refs() and queue.paged > 0
    windows: list[tuple[int, int]] = []
    taken = in_memory
    while taken < count:
        dry, paged = not queue.refs(), queue.paged
        assert len(client.receive("orders", 1)) == 1
        taken += 1
        if dry:
            read = paged - queue.paged
            held = [ref.message for ref in queue.refs()]
            assert len(held) == read - 1  # one of them went to the consumer
            windows.append((read, sum(len(m.payload) for m in held)))
    return windows


def test_a_queue_reads_back_at_most_max_read_page_messages_at_a_time(net: Network) -> None:
    net.broker("dc1", persistence=True, settings=settings(max_size=2_000, read=7))
    net.start_all()
    client = net.client("dc1")
    for i in range(100):
        client.send("orders", f"m{i:03d}-" + "x" * 50)
    net.pump()
    paged = net.server("dc1").queues["orders"].paged
    windows = [read for read, _ in read_back_windows(net, client, 100)]
    assert windows == [7] * (paged // 7) + ([paged % 7] if paged % 7 else [])


def test_a_queue_reads_back_at_most_max_read_page_bytes_at_a_time(net: Network) -> None:
    window = 1_000
    limits = f"""<address-setting match="orders">
      <max-size-bytes>2000</max-size-bytes>
      <page-size-bytes>8000</page-size-bytes>
      <max-read-page-bytes>{window}</max-read-page-bytes>
    </address-setting>"""
    net.broker("dc1", persistence=True, settings=limits)
    net.start_all()
    client = net.client("dc1")
    for i in range(100):
        client.send("orders", f"m{i:03d}-" + "x" * 150)
    net.pump()
    queue = net.server("dc1").queues["orders"]
    sizes = {len(ref.message.payload) for ref in queue.refs()}
    assert len(sizes) == 1  # every message costs the same
    size = sizes.pop()
    per_window = -(-window // size)  # a read stops once the window is used up: the last one crosses it
    paged = queue.paged
    windows = read_back_windows(net, client, 100)
    full, rest = divmod(paged, per_window)
    assert [read for read, _ in windows] == [per_window] * full + ([rest] if rest else [])
    assert all(held <= window for _, held in windows)  # in memory besides the one delivered
