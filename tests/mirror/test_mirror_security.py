"""Authentication and permissions apply to mirror links: SCRAM between our brokers, SEND on the SNF."""

from __future__ import annotations

import json
from pathlib import Path

from connections.cli import request
from tests.mirror.test_dual_mirror import QUEUES
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import send


def mirror_with_user(port: int, user: str, password: str) -> str:
    attrs = (
        f'uri="tcp://127.0.0.1:{port}" name="DC2" retry-interval="200" user="{user}" password="{password}"'
    )
    return f"<broker-connections><amqp-connection {attrs}><mirror/></amqp-connection></broker-connections>"


def admin_depth(b: BrokerProcess) -> int:
    stats = request(b.url, "getStatistics", [], resource="queue.orders", user="admin", password="secret")
    return int(stats["message-count"])


def retries(b: BrokerProcess) -> int:
    """Attempts the broker's one broker connection has made since it last connected."""
    [connection] = json.loads(request(b.url, "listBrokerConnections", [], user="admin", password="secret"))
    return int(connection["retries"])


def pair(tmp: Path, user: str, password: str) -> tuple[BrokerProcess, BrokerProcess]:
    p1, p2 = free_port(), free_port()
    dc2 = BrokerProcess(tmp / "dc2", name="dc2", port=p2, xml_kwargs={"addresses": QUEUES, "security": True})
    dc1 = BrokerProcess(
        tmp / "dc1",
        name="dc1",
        port=p1,
        xml_kwargs={"addresses": QUEUES, "extra": mirror_with_user(p2, user, password)},
    )
    return dc1, dc2


def test_mirror_authenticates_with_scram_and_never_logs_the_password(tmp_path: Path) -> None:
    dc1, dc2 = pair(tmp_path, "admin", "secret")
    dc2.start()
    dc1.start()
    try:
        wait_until(lambda: "AMQ111003" in dc1.log(), 20, "the mirror to authenticate and connect")
        send(dc1.url, "orders", ["a", "b"])
        wait_until(lambda: admin_depth(dc2) == 2, 10, "the messages to reach the secured target")
        assert "authenticating as admin with SCRAM-SHA-512" in dc1.log()
        assert "secret" not in dc1.log() and "secret" not in dc2.log()
    finally:
        dc1.stop()
        dc2.stop()


def test_mirror_user_without_send_on_the_mirror_address_is_refused_with_log_lines(tmp_path: Path) -> None:
    dc1, dc2 = pair(tmp_path, "bob", "builder")  # bob may consume, not send
    dc2.start()
    dc1.start()
    try:
        wait_until(lambda: "AMQ111002" in dc1.log(), 20, "the source to log the refusal and retry")
        assert "AMQ119023" in dc1.log() and "unauthorized-access" in dc1.log()
        assert "mirror link" in dc2.log() and "bob" in dc2.log()
        assert "builder" not in dc1.log() and "builder" not in dc2.log()
    finally:
        dc1.stop()
        dc2.stop()


def test_wrong_mirror_password_fails_authentication_and_retries(tmp_path: Path) -> None:
    dc1, dc2 = pair(tmp_path, "admin", "wrong-password")
    dc2.start()
    dc1.start()
    try:
        wait_until(lambda: retries(dc1) >= 3, 20, "retries after failed authentication")
        # the same failure again is not news: said once (and once a minute), with its first retry
        assert dc1.log().count("authentication failed") == 1 and dc1.log().count("AMQ111002") == 1
        assert "wrong-password" not in dc1.log() and "wrong-password" not in dc2.log()
    finally:
        dc1.stop()
        dc2.stop()


def test_mirror_user_with_send_but_not_manage_is_refused(tmp_path: Path) -> None:
    """A mirror link acts with the broker's own authority: send permission alone does not open one."""
    dc1, dc2 = pair(tmp_path, "alice", "wonderland")  # alice may send, not manage
    dc2.start()
    dc1.start()
    try:
        wait_until(lambda: "AMQ111002" in dc1.log(), 20, "the source to log the refusal and retry")
        assert "AMQ119023" in dc1.log() and "unauthorized-access" in dc1.log()
        assert "needs the manage permission as well as send" in dc2.log() and "alice" in dc2.log()
        send(dc1.url, "orders", ["kept home"])
        assert admin_depth(dc2) == 0  # nothing crossed
    finally:
        dc1.stop()
        dc2.stop()
