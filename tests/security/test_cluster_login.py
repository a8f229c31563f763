"""A backup with the wrong cluster password, against a real replicated pair (two broker processes, the
file lock manager on one host): it never replicates, and neither log floods.

The backup retries its login every 200 ms. Over at least eight refused logins (the primary's own counter,
read from its metrics endpoint), the primary says one line naming the cluster user and what to check, and
the backup one WARNING saying why, once; neither log holds a password.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import send
from tests.support.ops import Metered, metrics_xml

FILE_LOCK_MANAGER = "org.apache.activemq.artemis.lockmanager.file.FileBasedLockManager"
ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
RIGHT, WRONG = "cluster-secret-9", "not-the-cluster-secret-7"
RETRIES = 8


def pair(home: Path, backup_password: str, security: bool) -> tuple[Metered, BrokerProcess]:
    """A replicated primary (metrics on) and its backup, locked by files under `home/locks`."""
    p1, p2, metrics = free_port(), free_port(), free_port()
    locks = home / "locks"
    locks.mkdir(parents=True)
    manager = (
        f"<manager><class-name>{FILE_LOCK_MANAGER}</class-name><properties>"
        f'<property key="locks-folder" value="{locks}"/></properties></manager>'
    )
    brokers = []
    for name, port, role, other, password, options in (
        ("primary", p1, "primary", p2, RIGHT, ""),
        ("backup", p2, "backup", p1, backup_password, "<retry-replication-wait>200</retry-replication-wait>"),
    ):
        extra = (
            f"<ha-policy><replication><{role}>{manager}{options}</{role}></replication></ha-policy>"
            f'<connectors><connector name="self">tcp://127.0.0.1:{port}</connector>'
            f'<connector name="partner">tcp://127.0.0.1:{other}</connector></connectors>'
            '<cluster-connections><cluster-connection name="pair"><connector-ref>self</connector-ref>'
            "<static-connectors><connector-ref>partner</connector-ref></static-connectors>"
            "</cluster-connection></cluster-connections>"
            f"<cluster-user>cluster</cluster-user><cluster-password>{password}</cluster-password>"
        )
        if role == "primary":
            extra += metrics_xml(metrics)
        brokers.append(
            BrokerProcess(
                home / name,
                name=name,
                port=port,
                xml_kwargs={"addresses": ORDERS, "extra": extra, "security": security},
                ready_text="AMQ221007" if role == "primary" else "passive on",
            )
        )
    return Metered(brokers[0], metrics), brokers[1]


def refused_logins(primary: Metered) -> float:
    value = primary.value("amqp_mirror_acceptor_authentication_failures_total", acceptor="amqp")
    return value or 0.0


def lines(log: str, *words: str) -> list[str]:
    return [line for line in log.splitlines() if all(w in line for w in words)]


@pytest.mark.parametrize("security", [True, False], ids=["security-on", "security-off"])
def test_a_wrong_cluster_password_is_said_once_on_each_side_over_many_retries(
    tmp_path: Path, security: bool
) -> None:
    primary, backup = pair(tmp_path, WRONG, security)
    primary.broker.start()
    backup.start()
    try:
        wait_until(lambda: refused_logins(primary) >= RETRIES, 60, f"{RETRIES} refused logins of the backup")
        plog, blog = primary.broker.log(), backup.log()
        [said] = lines(plog, "AMQ951040")  # one line over all of them, naming the user it claimed
        assert "WARNING" in said and "for user cluster from 127.0.0.1:" in said, said
        assert "wrong password for the cluster user: check <cluster-password> on both servers" in said
        assert lines(plog, "None") == []
        start = plog.index(said)
        assert lines(plog[start:], "cluster") == [said], plog[start:]  # nothing per retry after it
        [why] = lines(blog, "AMQ951041")
        assert "WARNING" in why, why
        assert "the primary refused the cluster user's password (user cluster): check " in why
        assert "<cluster-user>/<cluster-password>" in why
        assert len(lines(blog, "authenticating as cluster")) == 1, blog
        assert len(lines(blog, "AMQ111002")) == 1, blog  # its retries: summarised too
        assert "AMQ221024" not in blog  # never synchronized
        for secret in (RIGHT, WRONG):
            assert secret not in plog and secret not in blog
        assert send(primary.broker.url, "orders", ["still served"], user="admin", password="secret") == 1
    finally:
        backup.stop()
        primary.broker.stop()
