"""Where a real Artemis 2.40.0 showed our broker wrong outside mirroring (tests/artemis found them):
each is checked here on our broker alone, so it stays covered where Artemis cannot run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from proton.reactor import Copy

from connections.cli import request
from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive, send

KEEP_ADDRESSES = """
      <address-setting match="#">
        <auto-delete-queues>false</auto-delete-queues>
        <auto-delete-addresses>false</auto-delete-addresses>
      </address-setting>"""
ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "b", xml_kwargs={"addresses": ORDERS, "address_settings": KEEP_ADDRESSES})
    yield b.start()
    b.stop()


def test_a_temporary_address_goes_with_its_queue_even_when_addresses_are_kept(broker: BrokerProcess) -> None:
    """A dynamic receiver's queue and address go when it closes, whatever auto-delete-addresses says (so on
    Artemis). Every management request made one, and kept it for good."""
    with connect(broker.url) as conn:
        receiver = conn.create_receiver(None, dynamic=True)
        temporary = receiver.link.remote_source.address
        assert temporary in request(broker.url, "getAddressNames", [])
        receiver.close()
    names = request(broker.url, "getAddressNames", [])
    assert temporary not in names


def test_a_browser_never_removes_what_it_reads(broker: BrokerProcess) -> None:
    """A receiver with distribution-mode copy browses, as on Artemis: its accepts remove nothing (it was
    once served as a consumer, whose accepts removed the messages; then refused until browsing came)."""
    send(broker.url, "orders", ["kept"])
    with connect(broker.url) as conn:
        browser = conn.create_receiver("orders", options=Copy())
        assert browser.receive(timeout=5).body == "kept"
        browser.accept()
        browser.close()
    assert [m.body for m in receive(broker.url, "orders", 1)] == ["kept"]
