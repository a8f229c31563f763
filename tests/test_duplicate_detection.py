"""Duplicate detection (`_AMQ_DUPL_ID`): a retried send is Accepted and stored once; the ids survive a
restart (persist-id-cache), each address keeps its last id-cache-size of them, and a mirror target
remembers the ids of what it applies (a client retrying on the other data centre is deduped too)."""

from __future__ import annotations

from pathlib import Path

from tests.support.pair import Network

DUP = "_AMQ_DUPL_ID"


def settings(cache: int) -> str:
    return f"<id-cache-size>{cache}</id-cache-size>"


def test_a_retried_send_is_accepted_and_stored_once_across_a_restart(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    first = client.send("orders", "a", properties={DUP: "order-1"})
    again = client.send("orders", "a", properties={DUP: "order-1"})
    other = client.send("orders", "b", properties={DUP: "order-2"})
    plain = client.send("orders", "c")
    net.pump()
    assert all(client.accepted(d) for d in (first, again, other, plain))
    assert net.depth("dc1", "orders") == 3
    assert net.server("dc1").duplicates.rejected == 1
    net.stop("dc1")
    net.broker("dc1", persistence=True)
    net.start("dc1")
    client = net.client("dc1")
    later = client.send("orders", "a", properties={DUP: "order-1"})
    net.pump()
    assert client.accepted(later)
    assert net.depth("dc1", "orders") == 3  # remembered across the restart


def test_an_address_keeps_its_last_id_cache_size_ids(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True, extra=settings(2))
    net.start_all()
    client = net.client("dc1")
    for i in range(3):
        client.send("orders", f"m{i}", properties={DUP: f"id-{i}"})
    client.send("orders", "again", properties={DUP: "id-2"})  # still remembered: not stored again
    client.send("orders", "again", properties={DUP: "id-0"})  # forgotten (the cache holds 2): stored
    net.pump()
    assert net.depth("dc1", "orders") == 4


def test_a_mirror_target_remembers_the_ids_it_applies(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True, mirror_to="dc2")
    net.broker("dc2", persistence=True)
    net.start_all()
    dc1 = net.client("dc1")
    dc1.send("orders", "x", properties={DUP: "once"})
    net.pump()
    assert net.depth("dc2", "orders") == 1
    dc2 = net.client("dc2")
    retry = dc2.send("orders", "x", properties={DUP: "once"})  # the client failed over to DC2 and retried
    net.pump()
    assert dc2.accepted(retry)
    assert net.depth("dc2", "orders") == 1
