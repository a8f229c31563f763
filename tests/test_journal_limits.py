"""Nothing is confirmed that the journal could not record: a name over 65,535 bytes (the journal's
short-string limit) is refused up front, at the attach or the delivery, and a restart finds nothing of it.
Before, such a message was Accepted, its record dropped, and it was gone after a restart."""

from __future__ import annotations

from pathlib import Path

from broker_core.amqp.performatives import Attach, Source, Target
from tests.support.pair import Network

LONG = "a" * 70_000


def test_an_address_the_journal_cannot_record_is_refused_at_attach(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    assert client.session is not None
    attach = Attach(name="long", role=False, source=Source(), target=Target(address=LONG))
    link = client.conn.attach(client.session, attach)
    client._write()
    net.pump()
    assert link.credit == 0
    assert client.refusals and client.refusals[0][0] == "amqp:invalid-field"
    assert "65,535" in client.refusals[0][1]
    assert LONG not in net.server("dc1").addresses


def test_an_anonymous_send_to_such_an_address_is_rejected_and_not_kept(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    delivery = client.send(None, "hello", to=LONG)
    ok = client.send(None, "fine", to="orders")
    net.pump()
    assert client.rejected(delivery) == "amqp:invalid-field"
    assert client.accepted(ok)
    net.stop("dc1")
    net.broker("dc1", persistence=True)
    net.start("dc1")
    assert LONG not in net.server("dc1").addresses
    assert net.depth("dc1", "orders") == 1
