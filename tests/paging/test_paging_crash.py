"""SIGKILL while an address pages and while its queue drains its pages: nothing Accepted is lost,
nothing acknowledged comes back, order holds (the cycle and its checks: tests/support/crash.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess
from tests.support.crash import Ledger, check_recovered, kill_cycle

PAGING = """<address-setting match="#">
  <max-delivery-attempts>-1</max-delivery-attempts>
  <max-size-bytes>30000</max-size-bytes>
  <page-size-bytes>20000</page-size-bytes>
  <max-read-page-messages>20</max-read-page-messages>
</address-setting>"""


@pytest.mark.slow
def test_sigkill_while_paging_and_draining_keeps_exactly_the_acknowledged_state(tmp_path: Path) -> None:
    rng = random.Random(20261125)
    broker = BrokerProcess(
        tmp_path / "b",
        xml_kwargs={
            "addresses": '<address name="work"><anycast><queue name="work"/></anycast></address>',
            "address_settings": PAGING,
        },
    )
    ledger = Ledger()
    paging = tmp_path / "b" / "data" / "paging"
    deepest, paged_cycles = 0, 0
    for cycle in range(6):
        # the first cycles mostly send (the queue pages), the last ones mostly consume (it drains)
        sends, takes = ((20, 60), (1, 5)) if cycle < 3 else ((1, 3), (5, 15))
        kill_cycle(broker, "work", ledger, rng, padding=300, batch=sends, take=takes)
        deepest = max(deepest, len(ledger.present))
        paged_cycles += any(paging.glob("page-*.page"))
    print(f"paging crash cycles: {ledger.sent} sent, {ledger.acked} acknowledged, deepest {deepest}")
    assert deepest > 200 and paged_cycles >= 3  # the queue really was deep enough to page
    broker.start()
    check_recovered(broker, "work", ledger)
    broker.stop()
