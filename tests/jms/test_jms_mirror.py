"""Transacted JMS traffic and mirroring, against a real Apache ActiveMQ Artemis 2.40 on the other side.

The traffic (tests/jms/Harness.java `traffic`): ten transactions of five sends, every other one rolled
back; a transacted consumer commits three, rolls two back; four consume-and-produce steps; a retried
transaction refused as a duplicate. Artemis mirrors what a transaction did once it commits, as the
ordinary events of its sends and acknowledgements; nothing of a rolled-back one.
- Artemis is the source, the JMS client works on it: ours, its mirror target, holds exactly what it holds.
- Ours is the source: Artemis, our target, holds exactly what ours holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.artemis.support import (
    artemis,
    bodies,
    call,
    config,
    depth,
    mirror_complaints,
    mirror_connection,
    ours,
    reaches,
)
from tests.conftest import require
from tests.peers import artemis as artemis_peer
from tests.peers.artemis import CONNECTED
from tests.peers.ports import free_port, wait_until
from tests.support import jms

ORDERS, DONE = 18, 4  # what the traffic leaves on PREFIX.orders and PREFIX.done


@pytest.fixture(autouse=True)
def peers() -> None:
    require("the Qpid JMS harness", *jms.availability())
    require("Apache ActiveMQ Artemis", *artemis_peer.availability())


def check_traffic(result: dict[str, object]) -> None:
    assert result["retry_commit"] == "refused"
    consumed = result["consumed"]
    assert isinstance(consumed, list) and len(consumed) == 7


def test_artemis_mirrors_a_transacted_jms_session_to_us_exactly(tmp_path: Path) -> None:
    a_port, o_port = free_port(), free_port()
    target = ours(tmp_path / "ours", o_port, config(o_port)).start()
    source = artemis(tmp_path / "artemis", a_port, config(a_port, mirror_connection("ours", o_port)))
    source.start()
    try:
        source.wait_for(CONNECTED, 30, "to connect its mirror to ours")
        [result] = jms.run(source.url, "traffic", "mt")
        check_traffic(result)
        assert (depth(source, "mt.orders"), depth(source, "mt.done")) == (ORDERS, DONE)
        reaches(source, target, "mt.orders", ORDERS, "the orders left on Artemis, here too")
        reaches(source, target, "mt.done", DONE, "the results, here too")
        assert bodies(target, "mt.orders") == bodies(source, "mt.orders")
        assert bodies(target, "mt.done") == bodies(source, "mt.done")
    finally:
        source.stop()
        target.stop()


def test_we_mirror_a_transacted_jms_session_to_artemis_exactly(tmp_path: Path) -> None:
    o_port, a_port = free_port(), free_port()
    target = artemis(tmp_path / "artemis", a_port, config(a_port)).start()
    source = ours(tmp_path / "ours", o_port, config(o_port, mirror_connection("artemis", a_port))).start()
    try:
        wait_until(lambda: CONNECTED in source.log(), 30, "our mirror to connect to Artemis")
        [result] = jms.run(source.url, "traffic", "mo")
        check_traffic(result)
        assert (depth(source, "mo.orders"), depth(source, "mo.done")) == (ORDERS, DONE)
        wait_until(
            lambda: all(s["pendingEvents"] == 0 for s in call(source, "getMirrorStatus")["sources"]),
            60,
            "our mirror to have sent every event",
        )
        assert (depth(target, "mo.orders"), depth(target, "mo.done")) == (ORDERS, DONE)
        assert bodies(target, "mo.orders") == bodies(source, "mo.orders")
        assert bodies(target, "mo.done") == bodies(source, "mo.done")
        assert mirror_complaints(target) == []
    finally:
        source.stop()
        target.stop()
