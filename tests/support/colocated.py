"""Colocated backups as real processes (tests/ha/test_colocated.py, bench/colocated_bench.py): nodes
each a primary with `<colocated>` that asks the others, in turn, to host its backup, and hosts up to
max-backups of theirs; each with a plain acceptor (offset for its backups) and an HTTP upgrade endpoint
(its backups': the host hands them their connections)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.peers.ports import LOOPBACK, free_port
from tests.support.broker import BrokerProcess
from tests.support.ha import CLUSTER, FILE_LOCKS, PAIR_ADDRESSES, lock_manager
from tests.support.ops import metrics_xml

OFFSET = 100
BACKUP = "colocated_backup_01"


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def offset_port() -> int:
    """A free port whose colocated copy (port + OFFSET) is free too."""
    while True:
        port = free_port()
        if port + OFFSET < 65536 and _free(port + OFFSET):
            return port


def node(
    home: Path,
    name: str,
    port: int,
    http: int,
    others: list[int],
    locks: Path,
    *,
    max_backups: int = 1,
    retries: int = -1,
    kind: str = "replication",
    metrics: int | None = None,
    backup_options: str = "",
) -> BrokerProcess:
    """A primary with `<colocated>` asking the servers at `others` (in turn) to host its backup, and
    hosting up to `max_backups` of theirs; a plain acceptor (offset for its backups) and an HTTP upgrade
    endpoint (its backups': the host hands them their connections); `backup_options`: more of the
    hosted backups' `<backup>` (a `<scale-down>`)."""
    # replication: a lock manager decides; shared store: the lock files in the primary's own journal
    # directory, which its backup uses (and, stopped cleanly, it lets its backup take over)
    if kind == "replication":
        primary = backup = lock_manager(FILE_LOCKS, locks_folder=str(locks))
    else:
        primary, backup = "<failover-on-shutdown>true</failover-on-shutdown>", ""
    connectors = "".join(
        f'<connector name="other-{i}">tcp://{LOOPBACK}:{other}</connector>' for i, other in enumerate(others)
    )
    static = "".join(f"<connector-ref>other-{i}</connector-ref>" for i in range(len(others)))
    extra = (metrics_xml(metrics) if metrics is not None else "") + (
        f"""{CLUSTER}
    <connectors><connector name="self">tcp://{LOOPBACK}:{port}</connector>{connectors}</connectors>
    <cluster-connections><cluster-connection name="c">
      <connector-ref>self</connector-ref><connection-ttl>5000</connection-ttl><retry-interval>200</retry-interval>
      <static-connectors>{static}</static-connectors>
    </cluster-connection></cluster-connections>
    <ha-policy><{kind}><colocated>
      <request-backup>true</request-backup><max-backups>{max_backups}</max-backups>
      <backup-request-retries>{retries}</backup-request-retries>
      <backup-request-retry-interval>300</backup-request-retry-interval>
      <backup-port-offset>{OFFSET}</backup-port-offset>
      <primary>{primary}</primary><backup>{backup}{backup_options}</backup>
    </colocated></{kind}></ha-policy>"""
    )
    acceptor = f'\n      <acceptor name="http">tcp://{LOOPBACK}:{http}?httpUpgradeEnabled=true</acceptor>'
    return BrokerProcess(
        home,
        name=name,
        port=port,
        xml_kwargs={"addresses": PAIR_ADDRESSES, "extra": extra, "extra_acceptors": acceptor},
        ready_text="AMQ221007",
    )


def _unused(taken: dict[str, int], pick: Callable[[], int]) -> int:
    """A port from `pick` that is none of `taken`, nor the copy of one of them at + OFFSET: a port the
    OS called free a moment ago can be handed out again before anyone binds it."""
    busy = set(taken.values()) | {port + OFFSET for port in taken.values()}
    while True:
        port = pick()
        if port not in busy and port + OFFSET not in busy:
            return port


def nodes(
    tmp_path: Path, asks: dict[str, list[str]], **options: Any
) -> tuple[list[BrokerProcess], dict[str, int]]:
    """The nodes named in `asks`, each asking the others it lists, metrics on; their ports by name."""
    ports: dict[str, int] = {}
    for name in asks:  # every port distinct, and none another's colocated copy (port + OFFSET)
        ports[name] = _unused(ports, offset_port)
    for name in asks:
        for what in ("http", "metrics"):
            ports[f"{name}-{what}"] = _unused(ports, free_port)
    locks = tmp_path / "locks"
    locks.mkdir()
    made = [
        node(
            tmp_path / name,
            f"node-{name}",
            ports[name],
            ports[f"{name}-http"],
            [ports[other] for other in others],
            locks,
            metrics=ports[f"{name}-metrics"],
            **options,
        )
        for name, others in asks.items()
    ]
    return made, ports
