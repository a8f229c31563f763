"""Per-address metrics: memory, paging and page-file bytes, full-policy actions, unrouted messages, only for
the addresses the metrics plugin's `addresses` patterns name (at most `max-addresses`); the process's
series under their standard names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from proton import Message
from proton.utils import SendException

from tests.peers.ports import free_port
from tests.support.broker import BrokerProcess
from tests.support.client import connect, send
from tests.support.ops import Metered, metrics_xml

SETTINGS = """
      <address-setting match="#">
        <auto-create-queues>true</auto-create-queues>
        <auto-create-addresses>true</auto-create-addresses>
      </address-setting>
      <address-setting match="paged">
        <max-size-bytes>20000</max-size-bytes>
        <page-size-bytes>10000</page-size-bytes>
        <address-full-policy>PAGE</address-full-policy>
      </address-setting>
      <address-setting match="dropping">
        <max-size-bytes>3000</max-size-bytes>
        <address-full-policy>DROP</address-full-policy>
      </address-setting>
      <address-setting match="failing">
        <max-size-bytes>3000</max-size-bytes>
        <address-full-policy>FAIL</address-full-policy>
      </address-setting>"""
ADDRESSES = (
    "".join(
        f'<address name="{n}"><anycast><queue name="{n}"/></anycast></address>'
        for n in ("paged", "dropping", "failing", "unwatched", "zz.last")
    )
    + '<address name="nowhere"><multicast/></address>'
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Metered]:
    """Five addresses match the patterns, four are kept (max-addresses, by name), `unwatched` never."""
    port = free_port()
    metrics = metrics_xml(port, queues="", addresses="paged,dropping,failing,nowhere,zz.#", max_addresses="4")
    home = tmp_path_factory.mktemp("addresses")
    b = BrokerProcess(
        home, xml_kwargs={"addresses": ADDRESSES, "address_settings": SETTINGS, "extra": metrics}
    )
    yield Metered(b.start(), port)
    b.stop()


def test_address_series_follow_paging_and_the_full_policies(broker: Metered) -> None:
    url = broker.broker.url
    body = "x" * 500
    assert send(url, "paged", [f"{i}{body}" for i in range(100)]) == 100
    send(url, "dropping", [body] * 20)  # accepted and dropped past 3000 bytes
    refused = 0
    with connect(url) as conn:
        sender = conn.create_sender("failing")
        for _ in range(20):
            try:
                sender.send(Message(body=body))
            except SendException:
                refused += 1
    send(url, "nowhere", ["lost"] * 4)  # a multicast address with no queue: unrouted
    v = broker.samples()

    def at(name: str, **labels: str) -> float:
        return v[(name, tuple(sorted(labels.items())))]

    assert at("amqp_mirror_address_paging", address="paged") == 1
    assert at("amqp_mirror_address_paging", address="dropping") == 0
    paged = at("amqp_mirror_address_paged_messages", address="paged")
    in_memory = at("amqp_mirror_address_messages", address="paged")
    assert paged > 0 and paged + in_memory == 100
    assert at("amqp_mirror_address_paged_bytes", address="paged") > paged * 500  # the page files hold them
    assert 0 < at("amqp_mirror_address_size_bytes", address="paged") <= 20000 + 1000
    assert at("amqp_mirror_address_max_size_bytes", address="paged") == 20000
    assert at("amqp_mirror_address_full_policy_info", address="dropping", policy="DROP") == 1
    dropped = at("amqp_mirror_address_full_policy_actions_total", address="dropping", action="dropped")
    assert dropped > 0 and dropped + at("amqp_mirror_address_messages", address="dropping") == 20
    assert refused > 0
    assert at("amqp_mirror_address_full_policy_actions_total", address="failing", action="refused") == refused
    assert at("amqp_mirror_address_full_policy_actions_total", address="paged", action="refused") == 0
    assert at("amqp_mirror_address_unrouted_messages_total", address="nowhere") == 4
    # bounded: the first four by name of the five the patterns match, none other
    addresses = {dict(labels)["address"] for name, labels in v if name == "amqp_mirror_address_messages"}
    assert addresses == {"dropping", "failing", "nowhere", "paged"}


def test_the_process_series_have_the_standard_names(broker: Metered) -> None:
    v = broker.samples()
    names = {name for name, _ in v}
    assert {
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_info",
    } <= names
    assert not any(n.startswith("amqp_mirror_process_") for n in names)
    assert not any(n.startswith("amqp_mirror_ha_role") and not n.endswith("_info") for n in names)
