"""A colocated backup's copy of its host's transports: which ports it offsets, which it shares by name.

A backup that runs in the process of another server (colocated) takes that server's acceptors and
connectors with their ports moved by an offset, so that both can listen on one machine. An HTTP
upgrade endpoint (``httpUpgradeEnabled=true``) is not moved: the host's acceptor on that port takes the
backup's connections too, handing over each whose upgrade request names the backup
(``activemqServerName``; broker_core/upgrade.py `Routes`). So the backup's connectors of that kind keep
the port and carry its name, filled in here: an operator configures only the acceptor and the connector.
``doNotOffset=true`` keeps any other transport's port as well (its acceptor, too, is then the host's).
"""

from __future__ import annotations

from broker_core.config.model import Acceptor, Connector
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
