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


def test_a_send_refused_by_a_full_disk_is_stored_when_retried_with_its_id(tmp_path: Path) -> None:
    """The once-and-only-once recipe: a refused send is retried with the same id until it is stored.
    The refused send's id goes with its message: not remembered, and not journalled once the disk has
    room (a restart in between does not bring it back); after a restart the id is remembered once, for
    the stored copy."""
    net = Network(tmp_path)
    net.broker("dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    net.disk_full("dc1")
    refused = client.send("orders", "a", properties={DUP: "order-1"})
    net.pump()
    assert client.rejected(refused) == "amqp:resource-limit-exceeded"
    assert net.depth("dc1", "orders") == 0
    net.server("dc1").persistence.retry()  # the disk has room again: what was held is written
    net.pump()
    net.stop("dc1")
    net.broker("dc1", persistence=True)
    net.start("dc1")
    client = net.client("dc1")
    retried = client.send("orders", "a", properties={DUP: "order-1"})
    net.pump()
    assert client.accepted(retried)
    assert net.depth("dc1", "orders") == 1
    assert net.server("dc1").duplicates.rejected == 0
    net.stop("dc1")
    net.broker("dc1", persistence=True)
    net.start("dc1")
    client = net.client("dc1")
    again = client.send("orders", "a", properties={DUP: "order-1"})
    net.pump()
    assert client.accepted(again)
    assert net.depth("dc1", "orders") == 1  # the stored copy's id survived the restart


def test_a_repeat_of_a_send_the_disk_refuses_is_refused_with_it(tmp_path: Path) -> None:
    """A repeat that arrives while its original waits for the disk is not Accepted as done: the original
    is refused, so the repeat is too, and the next retry is stored."""
    net = Network(tmp_path)
    net.broker("dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    net.disk_full("dc1")
    first = client.send("orders", "a", properties={DUP: "order-1"})
    repeat = client.send("orders", "a", properties={DUP: "order-1"})  # in the same journal batch
    net.pump()
    assert client.rejected(first) == "amqp:resource-limit-exceeded"
    assert client.rejected(repeat) == "amqp:resource-limit-exceeded"
    net.server("dc1").persistence.retry()
    net.pump()
    retried = client.send("orders", "a", properties={DUP: "order-1"})
    net.pump()
    assert client.accepted(retried)
    assert net.depth("dc1", "orders") == 1


def test_a_send_refused_by_a_full_address_is_stored_when_retried_with_its_id(tmp_path: Path) -> None:
    """FAIL policy: a send the full address refuses leaves no id behind."""
    net = Network(tmp_path)
    fail = """<address-setting match="orders"><max-size-messages>1</max-size-messages>
              <address-full-policy>FAIL</address-full-policy></address-setting>"""
    net.broker("dc1", persistence=True, settings=fail)
    net.start_all()
    client = net.client("dc1")
    filler = client.send("orders", "filler")
    refused = client.send("orders", "a", properties={DUP: "order-1"})
    net.pump()
    assert client.accepted(filler)
    assert client.rejected(refused) == "amqp:resource-limit-exceeded"
    assert client.receive("orders", 1) and net.depth("dc1", "orders") == 0  # room again
    retried = client.send("orders", "a", properties={DUP: "order-1"})
    net.pump()
    assert client.accepted(retried)
    assert net.depth("dc1", "orders") == 1


def test_duplicate_ids_are_per_address(tmp_path: Path) -> None:
    """The same id on two addresses protects two different messages: both are stored."""
    net = Network(tmp_path)
    two = (
        '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
        '<address name="invoices"><anycast><queue name="invoices"/></anycast></address>'
    )
    net.broker("dc1", persistence=True, addresses=two)
    net.start_all()
    client = net.client("dc1")
    a = client.send("orders", "a", properties={DUP: "id-1"})
    b = client.send("invoices", "b", properties={DUP: "id-1"})
    net.pump()
    assert client.accepted(a) and client.accepted(b)
    assert net.depth("dc1", "orders") == 1
    assert net.depth("dc1", "invoices") == 1
