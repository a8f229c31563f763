"""The paging soak, short enough for CI (bench/paging_bench.py --soak runs the long one):

- memory stays bounded however deep the backlog: a broker's RSS grows by a few megabytes, not by the
  backlog, while an address pages tens of thousands of messages;
- a mirror holds an outage's events in pages: DC1 takes traffic (sends and acknowledgements) while DC2
  is down, with SIGKILLs while it pages, then DC2 comes back and DC1 is SIGKILLed while it drains;
  DC2 ends with exactly DC1's messages, in DC1's order, and DC1 with exactly what its clients were
  told it holds.
"""

from __future__ import annotations

import random
from pathlib import Path

from connections.cli import Management
from tests.peers.ports import free_port, wait_until
from tests.peers.rhea import Rhea
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.crash import Ledger, check_recovered, kill_cycle

ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


def paging(max_size: int, page_size: int) -> str:
    return f"""<address-setting match="#">
  <max-delivery-attempts>-1</max-delivery-attempts>
  <max-size-bytes>{max_size}</max-size-bytes>
  <page-size-bytes>{page_size}</page-size-bytes>
  <max-read-page-messages>50</max-read-page-messages>
</address-setting>"""


def rss_kib(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    for line in Path(f"/proc/{broker.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_memory_stays_bounded_while_an_address_pages(tmp_path: Path, rhea: Rhea) -> None:
    broker = BrokerProcess(
        tmp_path / "b", xml_kwargs={"addresses": ORDERS, "address_settings": paging(1 << 20, 1 << 20)}
    ).start()
    assert rhea.send(broker.url, "orders", 10_000, size=1024, durable=True)["accepted"] == 10_000
    early = rss_kib(broker)
    assert rhea.send(broker.url, "orders", 40_000, size=1024, durable=True)["accepted"] == 40_000
    late = rss_kib(broker)
    print(f"RSS with 10,000 pending: {early / 1024:.1f} MiB; with 50,000: {late / 1024:.1f} MiB")
    # In memory, 40,000 more messages of 1 KiB would hold about 80 MiB more (usage.py's estimate).
    assert late - early < 12 * 1024
    pages = list((tmp_path / "b" / "data" / "paging").glob("page-*.page"))
    assert len(pages) >= 40  # page-size-bytes 1 MiB: the backlog is on disk
    with Management(broker.url) as management:  # what an operator sees (Artemis's AddressControl names)
        seen = {a: management.get(a, resource="address.orders") for a in ("paging", "numberOfPages")}
        seen["numberOfMessages"] = management.get("numberOfMessages", resource="address.orders")
        seen["addressSize"] = management.get("addressSize", resource="address.orders")
    assert seen["paging"] is True and seen["numberOfPages"] == len(pages)
    assert seen["numberOfMessages"] == 50_000 and seen["addressSize"] <= 1 << 20
    broker.stop()


def test_a_mirror_holds_an_outage_in_pages_through_sigkills_and_catches_up_exactly(tmp_path: Path) -> None:
    rng = random.Random(20261125)
    p1, p2 = free_port(), free_port()
    link = f'uri="tcp://127.0.0.1:{p2}" name="DC2" retry-interval="100"'
    mirror = f"<broker-connections><amqp-connection {link}><mirror/></amqp-connection></broker-connections>"
    settings = paging(20_000, 16_000)
    dc1 = BrokerProcess(
        tmp_path / "dc1",
        name="dc1",
        port=p1,
        xml_kwargs={
            "addresses": ORDERS,
            "address_settings": settings,
            "extra": mirror,
        },
    )
    dc2 = BrokerProcess(
        tmp_path / "dc2", name="dc2", port=p2, xml_kwargs={"addresses": ORDERS, "address_settings": settings}
    )
    ledger = Ledger()
    for _ in range(3):  # DC2 is down: sends and acknowledgements pile up on DC1, in pages
        kill_cycle(dc1, "orders", ledger, rng, padding=200, batch=(20, 60), take=(1, 5))
    snf = tmp_path / "dc1" / "data" / "paging"
    assert any(snf.glob("page-*.page"))
    dc1.start()
    backlog = _pending(dc1)
    assert backlog > 100
    dc2.start()
    wait_until(lambda: _pending(dc1) < backlog, 60, "the drain to begin")
    dc1.kill()  # in the middle of the drain
    dc1.start()
    wait_until(lambda: _pending(dc1) == 0, 120, "DC1's store-and-forward queue to drain")
    check_recovered(dc1, "orders", ledger)
    on_dc1 = [m.body for m in receive(dc1.url, "orders", 1_000_000, timeout=1.0, accept=None)]
    on_dc2 = [m.body for m in receive(dc2.url, "orders", 1_000_000, timeout=1.0, accept=None)]
    print(f"mirror soak: {ledger.sent} sent, {ledger.acked} acknowledged, {len(on_dc2)} on both sides")
    assert on_dc2 == on_dc1
    assert len(on_dc1) > 50
    dc1.stop()
    dc2.stop()


def _pending(broker: BrokerProcess) -> int:
    """Events DC1's mirror still holds for DC2 (management's getMirrorStatus)."""
    client = Management(broker.url)
    try:
        status = client.call("getMirrorStatus", [])
    finally:
        client.close()
    return sum(int(s["pendingEvents"]) for s in status["sources"])
