"""`<broadcast-groups>` and `<discovery-groups>`: UDP multicast discovery of a cluster's members
(amqp_mirror/discovery.py runs them). Each group is an element per value, with Artemis's defaults; a
`<connector-ref>` must name a `<connector>` (checked with the others), a `<discovery-group-ref>` a
`<discovery-group>` (checked here, once both sections are read)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from broker_core.config.model import (
    BroadcastGroup,
    ClusterConnection,
    DiscoveryGroup,
    HaKind,
    HaPolicy,
    HaRole,
)
from broker_core.config.values import BadValue, parse_int
from broker_core.config.xmlread import Element, Reader, local_name


def _multicast(text: str) -> str:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        raise BadValue(f"bad group address {text!r}", "a multicast IP address, e.g. 231.7.7.7") from None
    if address.version != 4:  # the groups' sockets are IPv4 ones
        raise BadValue(f"{text.strip()} is not an IPv4 address", "an IPv4 multicast address, in 224.0.0.0/4")
    if not address.is_multicast:
        raise BadValue(f"{text.strip()} is not a multicast address", "an address in 224.0.0.0/4")
    return str(address)


def _address(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text.strip()))
    except ValueError:
        raise BadValue(f"bad local bind address {text!r}", "an IPv4 address of this host") from None


_PORT: Callable[[str], int] = lambda t: parse_int(t, minimum=1, maximum=65535)  # noqa: E731
_COMMON: dict[str, Callable[[str], Any]] = {
    "group-address": _multicast,
    "group-port": _PORT,
    "local-bind-address": _address,
}
_BROADCAST: dict[str, Callable[[str], Any]] = {
    **_COMMON,
    "local-bind-port": lambda t: parse_int(t, minimum=-1, maximum=65535),
    "broadcast-period": lambda t: parse_int(t, minimum=1),
}
_DISCOVERY: dict[str, Callable[[str], Any]] = {
    **_COMMON,
    "refresh-timeout": lambda t: parse_int(t, minimum=1),
}


def _groups(
    reader: Reader, section: Element, element_name: str, converters: dict[str, Callable[[str], Any]]
) -> list[tuple[Element, str, dict[str, Any]]]:
    reader.check_attributes(section, set())
    groups: list[tuple[Element, str, dict[str, Any]]] = []
    names: set[str] = set()
    for element in reader.children(section):
        if local_name(element) != element_name:
            reader.ignore(element)
            continue
        reader.check_attributes(element, {"name"})
        name = reader.attr(element, "name", required=True)
        values: dict[str, Any] = {}
        refs: list[str] = []
        for child in reader.children(element):
            child_name = local_name(child)
            if child_name in converters:
                reader.check_attributes(child, set())
                value = reader.convert(child, reader.text(child), converters[child_name])
                if value is not None:
                    values[child_name.replace("-", "_")] = value
            elif child_name == "connector-ref" and element_name == "broadcast-group":
                reader.check_attributes(child, set())
                if text := reader.text(child):
                    refs.append(text)
            else:
                reader.ignore(child)  # jgroups-*: refused; initial-wait-timeout: a note
        if name is None:
            continue
        if name in names:
            reader.error(element, f"duplicate {element_name} name {name!r}", "a unique name", "name")
            continue
        names.add(name)
        missing = [key for key in ("group-address", "group-port") if key.replace("-", "_") not in values]
        if missing:
            needs = f"<{element_name}> {name!r} needs {' and '.join(missing)}"
            reader.error(element, needs, "<group-address> (a multicast address) and <group-port>")
            continue
        if refs:
            values["connectors"] = tuple(refs)
        groups.append((element, name, values))
    return groups


def parse_broadcast_groups(reader: Reader, section: Element) -> tuple[BroadcastGroup, ...]:
    groups = _groups(reader, section, "broadcast-group", _BROADCAST)
    for element, name, values in groups:
        if not values.get("connectors"):
            reader.error(
                element, f"<broadcast-group> {name!r} names no connector to broadcast", "<connector-ref>"
            )
    return tuple(BroadcastGroup(name=name, **values) for _, name, values in groups)


def parse_discovery_groups(reader: Reader, section: Element) -> tuple[DiscoveryGroup, ...]:
    groups = _groups(reader, section, "discovery-group", _DISCOVERY)
    return tuple(DiscoveryGroup(name=name, **values) for _, name, values in groups)


def parse_discovery_group_ref(reader: Reader, element: Element) -> str | None:
    """`<discovery-group-ref discovery-group-name="...">` of a cluster connection."""
    reader.check_attributes(element, {"discovery-group-name"})
    reader.check_no_children(element)
    return reader.attr(element, "discovery-group-name", required=True)


def check_discovery_refs(
    reader: Reader, core: Element, clusters: tuple[ClusterConnection, ...], groups: tuple[DiscoveryGroup, ...]
) -> None:
    """Every `<discovery-group-ref>` of a cluster connection must name a `<discovery-group>`."""
    known = {group.name for group in groups}
    wanted = {cluster.discovery_group for cluster in clusters} - {None}
    for section in reader.children(core):
        if local_name(section) != "cluster-connections":
            continue
        for ref in section.iter():
            if not isinstance(ref.tag, str) or local_name(ref) != "discovery-group-ref":
                continue
            name = ref.get("discovery-group-name")
            if name in wanted and name not in known:
                reader.error(
                    ref,
                    f"no <discovery-group> named {name!r}",
                    f"one of the <discovery-groups>: {', '.join(sorted(known)) or 'none defined'}",
                    "discovery-group-name",
                )


def check_discovery_use(reader: Reader, core: Element, policy: HaPolicy | None) -> None:
    """Discovery feeds a cluster membership, which a replicated server with quorum voting keeps (and no
    other here): anywhere else a group would silently do nothing, so it is an error."""
    quorum = policy is not None and policy.kind == HaKind.REPLICATION and policy.manager is None
    if quorum and policy is not None and policy.colocated is None:
        if policy.role == HaRole.BACKUP or policy.check_for_active_server:
            _check_replicates_from_static(reader, core, policy.cluster_name)
        return
    for section in reader.children(core):
        name = local_name(section)
        if name in ("broadcast-groups", "discovery-groups"):
            reader.error(
                section,
                f"<{name}> runs here only on a replicated server with quorum voting",
                "<replication> without a <manager> (not <colocated>), or <static-connectors> instead",
            )


def _check_replicates_from_static(reader: Reader, core: Element, cluster_name: str | None) -> None:
    """A backup (or a primary with check-for-active-server) replicates from its cluster connection's
    static connectors only: with discovery alone it would have nobody to copy from."""
    for section in reader.children(core):
        if local_name(section) != "cluster-connections":
            continue
        for cluster in reader.children(section):
            if local_name(cluster) != "cluster-connection":
                continue
            if cluster_name is not None and cluster.get("name") != cluster_name:
                continue
            names = {local_name(child) for child in reader.children(cluster)}
            if "discovery-group-ref" in names and "static-connectors" not in names:
                reader.error(
                    cluster,
                    "a backup (or a primary with check-for-active-server) replicates from static connectors "
                    "only, not from discovered members",
                    "<static-connectors> naming its primary's connector, beside the <discovery-group-ref>",
                )
            return  # the first one is the cluster connection used when no cluster-name names one
