"""The failover client through HTTP-upgrade connectors (`httpUpgradeEnabled=true`: Artemis's
activemq-remoting upgrade, then AMQP) across a shared-store pair failing over on kill -9.

Both servers' acceptors take upgraded connections only, so a client that did not upgrade, on its first
connection or on its reconnection to the backup, is refused and the traffic stops. Every message carries
its `_AMQ_DUPL_ID`; a send left in doubt is sent again, and one more send, stored and cut off in doubt by
the kill, finds its id on the backup: each message is received exactly once (tests/support/ha.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from connections.failover import FailoverConnection, ReceiveTimeout
from tests.support.broker import BrokerProcess
from tests.support.ha import failover_uri, shared_pair, traffic_through

UPGRADE = "httpUpgradeEnabled=true"


def upgrades_only(broker: BrokerProcess) -> None:
    """Its acceptor takes HTTP-upgraded connections only (plain AMQP is refused, AMQ951121)."""
    text = broker.config_path.read_text()
    assert "?protocols=AMQP<" in text
    broker.config_path.write_text(text.replace("?protocols=AMQP<", f"?protocols=AMQP;{UPGRADE}<"))


def drained(broker: BrokerProcess, address: str) -> list[int]:
    got: list[int] = []
    with FailoverConnection(failover_uri([broker.url], UPGRADE)) as conn:
        receiver = conn.receiver(address)
        with contextlib.suppress(ReceiveTimeout):
            while True:
                got.append(receiver.receive(timeout=1).body)
                receiver.accept()
    return got


def test_once_and_only_once_through_http_upgrade_connectors_across_a_kill_9(tmp_path: Path) -> None:
    primary, backup = shared_pair(tmp_path)
    for broker in (primary, backup):
        upgrades_only(broker)
    primary.start()
    backup.start()
    try:
        journal = [tmp_path / "shared" / "journal"]
        what = "kill -9 of a shared-store primary, clients through HTTP upgrades"
        traffic_through((primary, backup), primary.kill, what, journal, nested=UPGRADE)
        assert "AMQ221010" in backup.log()  # the backup took over
        assert drained(backup, "orders") == []  # each stored once: all received, none left
        for broker in (primary, backup):
            assert "AMQ951121" not in broker.log()  # no connection of the test's came without upgrading
    finally:
        primary.kill()
        backup.stop()
