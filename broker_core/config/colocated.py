"""A colocated backup's copy of its host's transports: which ports it offsets, which it shares by name.

A backup that runs in the process of another server (colocated) takes that server's acceptors and
connectors with their ports moved by an offset, so that both can listen on one machine. An HTTP
upgrade endpoint (``httpUpgradeEnabled=true``) is not moved: the host's acceptor on that port takes the
backup's connections too, handing over each whose upgrade request names the backup
(``activemqServerName``; broker_core/upgrade.py `Routes`). So the backup's connectors of that kind keep
the port and carry its name, filled in here: an operator configures only the acceptor and the connector.
``doNotOffset=true`` keeps any other transport's port as well (its acceptor, too, is then the host's).

`backup_config` makes the whole configuration of a hosted backup from its host's and the request of the
primary it backs up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_core.config.model import Acceptor, BrokerConfig, ClusterConnection, Connector, HaKind
from broker_core.config.uri import ParsedUri, format_uri, parse_acceptor_uri

SERVER_NAME = "activemqServerName"


def _is_true(params: dict[str, str], key: str) -> bool:
    return params.get(key, "false").strip().lower() == "true"


def keeps_port(params: dict[str, str]) -> bool:
    """Whether a colocated backup's copy of a transport with these parameters keeps its port."""
    return _is_true(params, "httpUpgradeEnabled") or _is_true(params, "doNotOffset")


def backup_connector_uri(uri: str, backup: str, offset: int) -> str:
    """The URI a colocated backup named `backup` uses where its host has `uri`: an HTTP upgrade names
    the backup (unless the URI names a server already) and keeps the port, as does doNotOffset; any
    other port moves by `offset`."""
    parsed = parse_acceptor_uri(uri)
    params = dict(parsed.params)
    if _is_true(params, "httpUpgradeEnabled"):
        params.setdefault(SERVER_NAME, backup)
    port = parsed.port if keeps_port(params) else parsed.port + offset
    return format_uri(ParsedUri(parsed.host, port, params, parsed.scheme, parsed.path))


def backup_connector(connector: Connector, backup: str, offset: int) -> Connector:
    uri = backup_connector_uri(connector.uri, backup, offset)
    return Connector(name=connector.name, uri=uri, host=connector.host, port=parse_acceptor_uri(uri).port)


def backup_acceptor(acceptor: Acceptor, offset: int) -> Acceptor:
    """A colocated backup's copy of its host's `acceptor`: its port moved by `offset`, unless it keeps
    the host's port (`shared_with_host`)."""
    if shared_with_host(acceptor):
        return acceptor
    port = acceptor.port + offset
    uri = format_uri(ParsedUri(acceptor.host, port, parse_acceptor_uri(acceptor.uri).params))
    return acceptor.model_copy(update={"port": port, "uri": uri})


def shared_with_host(acceptor: Acceptor) -> bool:
    """Whether a colocated backup's copy of `acceptor` is served by the host's acceptor on the same port
    (the backup does not listen on it; the host hands over the upgrades that name the backup)."""
    return acceptor.http_upgrade or acceptor.do_not_offset


# ------------------------------------------------------------------------- a hosted backup's configuration

PRIMARY_CONNECTOR = "colocated-primary"  # the backup's connector to the primary it backs up
HOST_CONNECTOR = "colocated-host"  # a scale-down naming no member: its host's own server
DIRECTORIES = ("journal_directory", "bindings_directory", "paging_directory", "large_messages_directory")


@dataclass(frozen=True)
class BackupRequest:
    """What a primary asking for a backup says of itself: its name and node id, the connector it is
    reached at, and (shared store) the directories its backup must use: its own."""

    name: str
    node_id: str
    connector: str  # a connector URI
    directories: dict[str, str] | None = None  # shared store: field name -> path


def backup_name(number: int) -> str:
    """The name of the `number`th backup a process hosts (1, 2, ...): colocated_backup_01, ..._02, as the
    reference's documentation numbers them (two digits)."""
    return f"colocated_backup_{number:02d}"


def own_connector_uri(config: BrokerConfig) -> str:
    """The URI the other members reach `config`'s server at: its cluster connection's connector-ref,
    else its first acceptor."""
    cluster = config.cluster_connection()
    for connector in config.connectors:
        if cluster is not None and connector.name == cluster.connector_ref:
            return connector.uri
    if not config.acceptors:
        raise ValueError(f"{config.name} has neither a cluster connector-ref nor an acceptor")
    first = config.acceptors[0]
    return f"tcp://{first.host}:{first.port}"


def backup_request(config: BrokerConfig, node_id: str) -> BackupRequest:
    shared = config.ha_policy.kind == HaKind.SHARED_STORE
    directories = None
    if shared:
        lock = config.node_manager_lock_directory or config.journal_directory
        directories = {name: str(getattr(config, name)) for name in DIRECTORIES}
        directories["node_manager_lock_directory"] = str(lock)
    return BackupRequest(config.name, node_id, own_connector_uri(config), directories)


def backup_config(host: BrokerConfig, number: int, request: BackupRequest) -> BrokerConfig:
    """The configuration of the `number`th backup `host`'s process runs, for the primary of `request`:
    the host's, but for its name, HA policy (`<colocated><backup>`), directories (replication: the
    host's with the backup's name appended; shared store: the requester's), transports (ports moved by
    `number` x backup-port-offset, but for excluded connectors and those kept by `keeps_port`; the
    acceptors the host serves for it left out) and its cluster connection, which names the requester.
    A `<scale-down>` that names no member scales down into the host, as the reference's does (its first
    in-VM connector: the host's server): to the host's own connector, as the cluster user."""
    colocated = host.ha_policy.colocated
    if colocated is None:
        raise ValueError(f"{host.name} has no <colocated> policy")
    name = backup_name(number)
    offset = number * colocated.backup_port_offset
    excluded = set(colocated.excludes)
    connectors = [
        c if c.name in excluded else backup_connector(c, name, offset)
        for c in host.connectors
        if c.name not in (PRIMARY_CONNECTOR, HOST_CONNECTOR)
    ]
    primary = parse_acceptor_uri(request.connector)
    connectors.append(
        Connector(name=PRIMARY_CONNECTOR, uri=request.connector, host=primary.host, port=primary.port)
    )
    cluster = host.cluster_connection() or ClusterConnection(name="colocated")
    cluster = cluster.model_copy(
        update={
            "name": colocated.backup.cluster_name or cluster.name,
            "static_connectors": (PRIMARY_CONNECTOR,),
        }
    )
    policy = colocated.backup
    scale_down = policy.scale_down
    if scale_down is not None and scale_down.enabled and not scale_down.connectors:
        to_host = own_connector_uri(host)
        at = parse_acceptor_uri(to_host)
        connectors.append(Connector(name=HOST_CONNECTOR, uri=to_host, host=at.host, port=at.port))
        scale_down = scale_down.model_copy(update={"connectors": (HOST_CONNECTOR,)})
        policy = policy.model_copy(update={"scale_down": scale_down})
    update: dict[str, Any] = {
        "name": name,
        "ha_policy": policy,
        "acceptors": tuple(backup_acceptor(a, offset) for a in host.acceptors if not shared_with_host(a)),
        "connectors": tuple(connectors),
        "cluster_connections": (cluster,),
        "console": None,  # the host's
    }
    if request.directories is not None:  # shared store: the primary's own
        update.update({key: Path(path) for key, path in request.directories.items()})
    else:
        update.update({key: Path(f"{getattr(host, key)}_{name}") for key in DIRECTORIES})
        lock = host.node_manager_lock_directory
        update["node_manager_lock_directory"] = Path(f"{lock}_{name}") if lock is not None else None
    return host.model_copy(update=update)
