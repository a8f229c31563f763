"""SIGKILL at random points: no Accepted message is lost, no acknowledged one comes back
(tests/support/crash.py says how the client knows)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess
from tests.support.crash import Ledger, kill_cycle

CYCLES = 5


@pytest.mark.slow
def test_random_sigkill_cycles_keep_exactly_the_acknowledged_state(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    # Unlimited delivery attempts: looking at the queue after each restart is a consumer loss, and
    # dead-lettering after a few of those would hide the state under test.
    broker = BrokerProcess(
        tmp_path / "b",
        xml_kwargs={
            "addresses": '<address name="work"><anycast><queue name="work"/></anycast></address>',
            "address_settings": '<address-setting match="#"><max-delivery-attempts>-1</max-delivery-attempts>'
            "</address-setting>",
        },
    )
    ledger = Ledger()
    for _cycle in range(CYCLES):
        kill_cycle(broker, "work", ledger, rng)
    assert ledger.next_id > 0
