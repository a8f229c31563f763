"""The mirror's rules on whole brokers joined in memory (tests/support/pair.py): milliseconds each, no
socket, no process, deterministic. The process tests beside these check the same rules over real sockets.

- Loop prevention: an event applied from a remote is never sent back to it; a dual mirror does not echo.
- Filters: `address-filter` and the `queue-creation` / `queue-removal` / `message-acknowledgements` toggles.
- Dedup: a redelivered event (its Accepted lost with the link) is applied once; ids are per origin.
- Ack retries: an acknowledgement that arrives before its message matches it on a later retry.
- Sync: a durable send is confirmed only once the target accepted its event.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.message import build_message
from broker_core.vocabulary import AckReason
from mirror import wire
from tests.support.pair import MemoryClient, Network


@pytest.fixture
def net(tmp_path: Path) -> Network:
    return Network(tmp_path)


def snf(net: Network, name: str, to: str) -> int:
    """Events `name` holds for `to` (waiting or out on the link, not yet accepted)."""
    return net.depth(name, wire.snf_name(to))


def dual(net: Network, **options: object) -> tuple[MemoryClient, MemoryClient]:
    net.broker("dc1", mirror_to="dc2", **options)  # type: ignore[arg-type]
    net.broker("dc2", mirror_to="dc1", **options)  # type: ignore[arg-type]
    net.start_all()
    return net.client("dc1"), net.client("dc2")


def target_stats(net: Network, name: str) -> dict[str, int]:
    target = net.brokers[name].mirror_target
    assert target is not None
    return dict(target.stats)


# --------------------------------------------------------------------------------- loop prevention


def test_a_dual_mirror_carries_each_message_once_and_echoes_nothing(net: Network) -> None:
    c1, _ = dual(net)
    sent = [c1.send("orders", f"m{i}") for i in range(5)]
    net.pump()
    assert all(c1.accepted(d) for d in sent)
    assert (net.depth("dc1", "orders"), net.depth("dc2", "orders")) == (5, 5)
    assert (snf(net, "dc1", "dc2"), snf(net, "dc2", "dc1")) == (0, 0)  # all accepted, nothing sent back
    assert target_stats(net, "dc1")["messages"] == 0  # DC2 never mirrored DC1's messages back
    assert target_stats(net, "dc2")["messages"] == 5


def test_a_consumer_on_either_side_empties_both(net: Network) -> None:
    c1, c2 = dual(net)
    for i in range(4):
        c1.send("orders", f"m{i}")
    net.pump()
    assert len(c2.receive("orders", 3)) == 3  # consumed on DC2: the acks go back to DC1
    assert (net.depth("dc1", "orders"), net.depth("dc2", "orders")) == (1, 1)
    assert target_stats(net, "dc1")["acks"] == 3 and target_stats(net, "dc2")["acks"] == 0


def test_an_expiry_copy_is_never_mirrored(net: Network) -> None:
    """Each side expires its own copy; only the acknowledgement (reason EXPIRED) crosses."""
    addresses = (
        '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
        '<address name="Expired"><anycast><queue name="Expired"/></anycast></address>'
    )
    settings = '<address-setting match="#"><expiry-address>Expired</expiry-address></address-setting>'
    dual(net, addresses=addresses, settings=settings)
    dc1 = net.server("dc1")
    message = dc1.route("orders", build_message("short-lived"))
    net.pump()
    assert message is not None and net.depth("dc2", "orders") == 1
    ref = dc1.queues["orders"].waiting[message.id]
    dc1.queues["orders"].remove(ref)
    dc1.outcomes.expire(ref)  # as the expiry scan does when the time to live is over
    net.pump()
    assert (net.depth("dc1", "orders"), net.depth("dc1", "Expired")) == (0, 1)
    assert (net.depth("dc2", "orders"), net.depth("dc2", "Expired")) == (0, 1)  # DC2 expired its own copy
    assert target_stats(net, "dc2")["messages"] == 1  # the expiry copy itself never crossed
    assert target_stats(net, "dc1")["messages"] == 0  # nor did DC2's come back


# ---------------------------------------------------------------------------------------- filters


def test_the_address_filter_keeps_excluded_addresses_at_home(net: Network) -> None:
    addresses = (
        '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
        '<address name="secret.x"><anycast><queue name="secret.x"/></anycast></address>'
    )
    net.broker("dc1", mirror_to="dc2", mirror='<mirror address-filter="!secret"/>', addresses=addresses)
    net.broker("dc2", addresses=addresses)
    net.start_all()
    c1 = net.client("dc1")
    c1.send("orders", "public")
    c1.send("secret.x", "private")
    net.pump()
    assert (net.depth("dc2", "orders"), net.depth("dc2", "secret.x")) == (1, 0)
    c1.receive("secret.x", 1)
    c1.receive("orders", 1)
    assert net.depth("dc2", "orders") == 0 and target_stats(net, "dc2")["acks"] == 1


def test_queue_creation_and_removal_follow_their_toggles(net: Network) -> None:
    mirror = '<mirror queue-creation="true" queue-removal="false"/>'
    net.broker("dc1", mirror_to="dc2", mirror=mirror)
    net.broker("dc2")
    net.start_all()
    dc1 = net.server("dc1")
    dc1.create_queue("made.here", "made.here", "ANYCAST")
    net.pump()
    assert "made.here" in net.server("dc2").queues
    dc1.delete_queue("made.here")
    net.pump()
    assert "made.here" in net.server("dc2").queues  # removal is not mirrored


def test_acknowledgements_stay_home_without_message_acknowledgements(net: Network) -> None:
    net.broker("dc1", mirror_to="dc2", mirror='<mirror message-acknowledgements="false"/>')
    net.broker("dc2")
    net.start_all()
    c1 = net.client("dc1")
    c1.send("orders", "m")
    net.pump()
    c1.receive("orders", 1)
    assert (net.depth("dc1", "orders"), net.depth("dc2", "orders")) == (0, 1)


# ------------------------------------------------------------------------------------------ dedup


def test_events_redelivered_after_a_lost_accepted_are_applied_once(net: Network) -> None:
    net.broker("dc1", mirror_to="dc2")
    net.broker("dc2")
    net.start_all()
    c1 = net.client("dc1")
    net.hold_from("dc2")  # DC2 applies what comes, but its Accepted never reaches DC1
    for i in range(3):
        c1.send("orders", f"m{i}")
    net.pump()
    assert net.depth("dc2", "orders") == 3 and snf(net, "dc1", "dc2") == 3
    net.cut("dc2")  # the link goes with the dispositions in it; DC1 sends the three events again
    net.release_from("dc2")
    net.loop.advance(0.2)  # retry-interval 100 ms
    assert snf(net, "dc1", "dc2") == 0
    assert net.depth("dc2", "orders") == 3
    assert target_stats(net, "dc2")["duplicates"] == 3


def test_the_same_id_from_two_origins_is_two_messages(net: Network) -> None:
    net.broker("dc2")
    net.start_all()
    target = net.brokers["dc2"].mirror_target
    assert target is not None
    body = build_message("same id", durable=True)
    for origin in ("origin-a", "origin-b", "origin-a"):
        target.apply(origin, wire.replicate(body, 7, origin, "orders"))
    net.pump()
    assert net.depth("dc2", "orders") == 2
    assert target.stats["duplicates"] == 1


# ------------------------------------------------------------------------------------ ack retries


def test_an_ack_before_its_message_matches_on_a_later_retry(net: Network) -> None:
    net.broker("dc2")
    net.start_all()
    target = net.brokers["dc2"].mirror_target
    assert target is not None
    target.apply("dc1-node", wire.post_ack_event("orders", "orders", 42, "dc1-node", AckReason.NORMAL))
    assert target.retries.stats["ack_retries"] == 1
    target.apply("dc1-node", wire.replicate(build_message("late", durable=True), 42, "dc1-node", "orders"))
    target.apply("dc1-node", wire.replicate(build_message("other", durable=True), 43, "dc1-node", "orders"))
    net.pump()
    assert net.depth("dc2", "orders") == 2
    net.loop.advance(0.15)  # mirror-ack-manager-retry-delay: 100 ms
    assert net.depth("dc2", "orders") == 1  # the ack found message 42, and only it
    assert target.retries.stats["acks_matched_on_retry"] == 1 and not target.retries.tries


def test_an_ack_that_never_matches_is_given_up_and_counted(net: Network) -> None:
    net.broker("dc2")
    net.start_all()
    target = net.brokers["dc2"].mirror_target
    assert target is not None
    target.apply("dc1-node", wire.post_ack_event("orders", "orders", 9, "dc1-node", AckReason.NORMAL))
    net.loop.advance(1.0)
    assert target.retries.stats["acks_never_matched"] == 1 and not target.retries.tries


# ------------------------------------------------------------------------------------------- sync


def test_a_sync_mirror_confirms_a_send_only_once_the_target_accepted_it(net: Network) -> None:
    net.broker("dc1", mirror_to="dc2", mirror='<mirror sync="true"/>', persistence=True)
    net.broker("dc2", persistence=True)
    net.start("dc1")  # DC2 is not there yet: the mirror connection retries
    c1 = net.client("dc1")
    sent = c1.send("orders", "waits for dc2")
    net.pump()
    net.loop.advance(0.5)
    assert not c1.accepted(sent) and net.depth("dc1", "orders") == 1
    net.start("dc2")
    net.loop.advance(0.2)
    assert c1.accepted(sent) and net.depth("dc2", "orders") == 1


def test_without_sync_a_send_is_confirmed_while_the_target_is_away(net: Network) -> None:
    net.broker("dc1", mirror_to="dc2", persistence=True)
    net.broker("dc2", persistence=True)
    net.start("dc1")
    c1 = net.client("dc1")
    sent = c1.send("orders", "does not wait")
    net.pump()
    # held for DC2: the message, after the announcement of the address and queue it found (addAddress,
    # createQueue for `orders`)
    assert c1.accepted(sent) and snf(net, "dc1", "dc2") == 3


# ------------------------------------------------------------------- the store-and-forward queue


def test_no_client_consumes_browses_or_sends_to_the_store_and_forward_queue(net: Network) -> None:
    """The events held for the other data centre are the broker's own: a consumer would take them from
    the other side (and read addresses it may not consume)."""
    net.broker("dc1", mirror_to="dc2")
    net.broker("dc2")
    net.start("dc1")  # DC2 down: the events wait on the store-and-forward queue
    client = net.client("dc1")
    client.send("orders", "m")
    net.pump()
    held = snf(net, "dc1", "dc2")
    name = wire.snf_name("dc2")
    for address in (name, f"{name}::{name}", "anycast://" + name):
        assert client.receive(address, 10) == [], address
        refused = client.refusals.pop()
        assert refused == (
            "amqp:not-allowed",
            f"address {name} is internal to the broker; clients cannot use it",
        )
    relayed = client.send(None, "into the mirror", to=name)  # an anonymous sender naming the queue
    net.pump()
    assert client.rejected(relayed) == "amqp:not-allowed"
    assert snf(net, "dc1", "dc2") == held  # nothing taken, nothing added
