"""A shared-store primary/backup pair of broker processes on one data directory (tests/ha/)."""

from __future__ import annotations

from pathlib import Path

from tests.peers.ports import free_port
from tests.support.broker import BrokerProcess
from tests.support.certs import CertFiles

ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


def ha_xml(role: str, other_port: int, options: str = "") -> str:
    return (
        f"<ha-policy><shared-store><{role}>{options}</{role}></shared-store></ha-policy>"
        f'<connectors><connector name="partner">tcp://127.0.0.1:{other_port}</connector></connectors>'
    )


def shared_pair(
    home: Path, primary_options: str = "", backup_options: str = "", extra: str = ""
) -> tuple[BrokerProcess, BrokerProcess]:
    """Two brokers whose data directories are one (`home/shared`), each with the other as its partner."""
    p1, p2 = free_port(), free_port()
    shared = home / "shared"
    brokers = []
    for name, port, role, other, options in (
        ("primary", p1, "primary", p2, primary_options),
        ("backup", p2, "backup", p1, backup_options),
    ):
        b = BrokerProcess(
            home / name,
            name=name,
            port=port,
            xml_kwargs={"addresses": ORDERS, "extra": ha_xml(role, other, options) + extra},
            ready_text="AMQ221007" if role == "primary" else "passive on",
        )
        b.write_config()
        text = b.config_path.read_text()
        for kind in ("journal", "bindings", "paging", "large-messages"):
            text = text.replace(f"<{kind}-directory>data/{kind}<", f"<{kind}-directory>{shared}/{kind}<")
        b.config_path.write_text(text)
        brokers.append(b)
    return brokers[0], brokers[1]


def replicated_pair(
    home: Path,
    connect_string: str,
    namespace: str,
    primary_options: str = "",
    backup_options: str = "",
    *,
    roles: tuple[str, str] = ("primary", "backup"),
    ttl: int = 60000,
    tls: CertFiles | None = None,
) -> tuple[BrokerProcess, BrokerProcess]:
    """Two brokers, each with its own data directories, replicating through the cluster user, with a
    ZooKeeper lock manager (a short session: failover takes about session-ms). Each finds the other as
    an Artemis pair does: a `<cluster-connection>` whose static connector is the partner; `ttl` is its
    connection-ttl (how soon a silent partner counts as gone). With `tls`, both acceptors serve TLS only
    and each connector trusts the certificate: replication runs over TLS."""
    p1, p2 = free_port(), free_port()
    manager = (
        "<manager><properties>"
        f'<property key="connect-string" value="{connect_string}"/>'
        f'<property key="namespace" value="{namespace}"/>'
        '<property key="session-ms" value="2000"/>'
        "</properties></manager>"
    )
    cluster = "<cluster-user>cluster</cluster-user><cluster-password>cluster-secret</cluster-password>"
    acceptor = f"sslEnabled=true;sslCertPath={tls.cert};sslKeyPath={tls.key}" if tls else ""
    trust = f"?sslEnabled=true;trustStorePath={tls.cert}" if tls else ""
    brokers = []
    for name, port, role, other, options in (
        ("primary", p1, roles[0], p2, primary_options),
        ("backup", p2, roles[1], p1, backup_options),
    ):
        policy = f"<ha-policy><replication><{role}>{manager}{options}</{role}></replication></ha-policy>"
        connectors = (
            f'<connectors><connector name="self">tcp://127.0.0.1:{port}{trust}</connector>'
            f'<connector name="partner">tcp://127.0.0.1:{other}{trust}</connector></connectors>'
            '<cluster-connections><cluster-connection name="pair"><connector-ref>self</connector-ref>'
            f"<connection-ttl>{ttl}</connection-ttl>"
            "<static-connectors><connector-ref>partner</connector-ref></static-connectors>"
            "</cluster-connection></cluster-connections>"
        )
        brokers.append(
            BrokerProcess(
                home / name,
                name=name,
                port=port,
                xml_kwargs={
                    "addresses": ORDERS,
                    "extra": policy + connectors + cluster,
                    "acceptor_params": acceptor,
                },
                ready_text="AMQ221007" if role == "primary" else "passive on",
            )
        )
    return brokers[0], brokers[1]
