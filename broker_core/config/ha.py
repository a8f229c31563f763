"""`<ha-policy>`, `<connectors>` and `<cluster-connections>`: high availability as the seeds define it.

`<ha-policy>` holds one of `<primary-only>`, `<shared-store>` or `<replication>`; the last two hold one
`<primary>` or `<backup>`. Each parameter is allowed only where the seed allows it (a `coordination-id`
in a shared-store backup is an error naming where it belongs). The older names (`<live-only>`,
`<master>`, `<slave>`, `check-for-live-server`) are read with a deprecation warning. What each parameter
does here (implemented, or no effect) is the support table's (support.py); `<colocated>` holds a
`<primary>`, a `<backup>` and the colocation parameters (a primary that asks its cluster for a backup and
hosts theirs); `<scale-down>` names the `<connector>`s of the members it may move messages to (a
`<discovery-group-ref>` is refused: there is no discovery here); `<replication>` without a `<manager>`
decides by quorum voting, and the voting parameters with a `<manager>` have no effect (noted, as Artemis
ignores them there). A `<cluster-connection>` is read for what a pair needs of it (its static
connectors: where the partner is; connection-ttl: how soon a silent partner counts as gone); its other
elements are judged by the table.
A `<manager>` must name a lock manager this broker has, with the properties it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker_core.config.discovery import parse_discovery_group_ref
from broker_core.config.model import (
    LOCK_MANAGERS,
    ClusterConnection,
    Colocated,
    Connector,
    HaKind,
    HaPolicy,
    HaRole,
    LockManager,
    ScaleDown,
)
from broker_core.config.parameters import check_client_tls, judge_parameters
from broker_core.config.schema import did_you_mean
from broker_core.config.support import (
    CLUSTER_CONNECTION,
    HA_PARAMETERS,
    QUORUM_PARAMETERS,
    QUORUM_VOTING,
    QUORUM_WITH_A_MANAGER,
    Support,
    UriKind,
)
from broker_core.config.uri import parse_acceptor_uri
from broker_core.config.values import parse_bool, parse_int
from broker_core.config.xmlread import Element, Reader, local_name

_DEPRECATED = {"live-only": "primary-only", "master": "primary", "slave": "backup"}
_DEPRECATED_PARAMETERS = {"check-for-live-server": "check-for-active-server"}

_REPLICATION_COMMON = {
    "group-name",
    "cluster-name",
    "initial-replication-sync-timeout",
    "max-saved-replicated-journals-size",
    "retry-replication-wait",
    "vote-on-replication-failure",
    "quorum-size",
    "vote-retries",
    "vote-retry-wait",
    "quorum-vote-wait",
    "manager",
    "failback-delay",
}
# (policy, role) -> the parameters the seed lists for it
_ALLOWED: dict[tuple[HaKind, HaRole | None], set[str]] = {
    (HaKind.PRIMARY_ONLY, None): {"scale-down"},
    (HaKind.SHARED_STORE, HaRole.PRIMARY): {"failover-on-shutdown", "wait-for-activation", "failback-delay"},
    (HaKind.SHARED_STORE, HaRole.BACKUP): {
        "allow-failback",
        "failover-on-shutdown",
        "restart-backup",
        "scale-down",
        "failback-delay",
    },
    (HaKind.REPLICATION, HaRole.PRIMARY): _REPLICATION_COMMON
    | {"check-for-active-server", "coordination-id"},
    (HaKind.REPLICATION, HaRole.BACKUP): _REPLICATION_COMMON
    | {"allow-failback", "restart-backup", "scale-down"},
}
_MS = {"minimum": 0}
_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "failover-on-shutdown": parse_bool,
    "wait-for-activation": parse_bool,
    "allow-failback": parse_bool,
    "restart-backup": parse_bool,
    "check-for-active-server": parse_bool,
    "vote-on-replication-failure": parse_bool,
    "group-name": str,
    "cluster-name": str,
    "coordination-id": str,
    "initial-replication-sync-timeout": lambda t: parse_int(t, **_MS),
    "max-saved-replicated-journals-size": lambda t: parse_int(t, minimum=-1),
    "retry-replication-wait": lambda t: parse_int(t, **_MS),
    "quorum-size": lambda t: parse_int(t, minimum=-1),
    "vote-retries": lambda t: parse_int(t, **_MS),
    "vote-retry-wait": lambda t: parse_int(t, **_MS),
    "quorum-vote-wait": lambda t: parse_int(t, minimum=1),
    "failback-delay": lambda t: parse_int(t, **_MS),
}
_FIELDS = frozenset(name for name in _CONVERTERS if name.replace("-", "_") in HaPolicy.model_fields)


def parse_ha_policy(reader: Reader, section: Element) -> HaPolicy:
    reader.check_attributes(section, set())
    policies = list(reader.children(section))
    if len(policies) > 1:
        reader.error(
            policies[1], "more than one HA policy", "one of <primary-only>, <shared-store>, <replication>"
        )
    if not policies:
        return HaPolicy()
    element = policies[0]
    name = _current_name(reader, element)
    if name == "primary-only":
        values = _parameters(reader, element, HaKind.PRIMARY_ONLY, None)
        return HaPolicy(kind=HaKind.PRIMARY_ONLY, **values)
    if name not in ("shared-store", "replication"):
        reader.ignore(element)  # a name Artemis does not have here: an error with "did you mean"
        return HaPolicy()
    kind = HaKind(name)
    reader.check_attributes(element, set())
    roles = list(reader.children(element))
    if len(roles) != 1:
        at = roles[1] if roles else element
        reader.error(at, f"<{name}> needs exactly one role", "one <primary> or <backup>")
        if not roles:
            return HaPolicy(kind=kind)
    role_element = roles[0]
    role_name = _current_name(reader, role_element)
    if role_name == "colocated":
        return _colocated(reader, role_element, kind)
    if role_name not in ("primary", "backup"):
        reader.ignore(role_element)  # a name Artemis does not have here: "did you mean"
        return HaPolicy(kind=kind)
    return _role(reader, role_element, kind, HaRole(role_name))


def _role(reader: Reader, element: Element, kind: HaKind, role: HaRole, *, hosted: bool = False) -> HaPolicy:
    voting: list[tuple[Element, str]] = []
    policy = HaPolicy(kind=kind, role=role, **_parameters(reader, element, kind, role, voting, hosted=hosted))
    if kind == HaKind.REPLICATION and policy.manager is None:
        reader.judge(element, QUORUM_VOTING)
    for child, text in voting:  # quorum voting's parameters act only where it decides
        rule = HA_PARAMETERS[local_name(child)] if policy.manager is None else QUORUM_WITH_A_MANAGER
        reader.judge(child, rule, text)
    return policy


_COLOCATED: dict[str, Callable[[str], Any]] = {
    "request-backup": parse_bool,
    "max-backups": lambda t: parse_int(t, minimum=0),
    "backup-request-retries": lambda t: parse_int(t, minimum=-1),
    "backup-request-retry-interval": lambda t: parse_int(t, minimum=1),
    # 0 would put a backup's acceptors on its host's ports
    "backup-port-offset": lambda t: parse_int(t, minimum=1),
}


def _colocated(reader: Reader, element: Element, kind: HaKind) -> HaPolicy:
    """`<colocated>`: a primary (the nested `<primary>`'s parameters) that asks the other primaries of its
    cluster to host a backup for it and hosts theirs, each with the nested `<backup>`'s parameters (the
    seed's defaults: an empty `<primary/>` or `<backup/>`, or none, is the role's defaults)."""
    reader.check_attributes(element, set())
    values: dict[str, Any] = {}
    roles: dict[str, HaPolicy] = {}
    for child in reader.children(element):
        name = _current_name(reader, child)
        if name in _COLOCATED:
            reader.check_attributes(child, set())
            reader.check_no_children(child)
            value = reader.convert(child, reader.text(child), _COLOCATED[name])
            if value is not None:
                values[name.replace("-", "_")] = value
        elif name == "excludes":
            reader.check_attributes(child, set())
            refs: list[str] = []
            for ref in reader.children(child):
                if local_name(ref) != "connector-ref":
                    reader.ignore(ref)
                elif text := reader.text(ref):
                    refs.append(text)
            values["excludes"] = tuple(refs)
        elif name in ("primary", "backup"):
            if name in roles:
                reader.error(child, f"more than one <{name}> in <colocated>", f"one <{name}>")
                continue
            roles[name] = _role(reader, child, kind, HaRole(name), hosted=name == "backup")
        else:
            reader.ignore(child)  # a name Artemis does not have here: "did you mean"
    backup = roles.get("backup", HaPolicy(kind=kind, role=HaRole.BACKUP))
    primary = roles.get("primary", HaPolicy(kind=kind, role=HaRole.PRIMARY))
    # a hosted backup never restarts as a backup after failing back: it stops, and its primary asks again
    colocated = Colocated(backup=backup.model_copy(update={"restart_backup": False}), **values)
    return primary.model_copy(update={"colocated": colocated})


def _current_name(reader: Reader, element: Element) -> str:
    name = local_name(element)
    newer = _DEPRECATED.get(name)
    if newer is None:
        return name
    reader.warning(element, f"<{name}> is deprecated; read as <{newer}>", f"<{newer}>")
    return newer


def _parameters(
    reader: Reader,
    element: Element,
    kind: HaKind,
    role: HaRole | None,
    voting: list[tuple[Element, str]] | None = None,
    *,
    hosted: bool = False,
) -> dict[str, Any]:
    """The parameters of one policy element; quorum voting's are judged by the caller (into `voting`),
    once it knows whether a `<manager>` decides instead. `hosted`: a colocated `<backup>`, whose
    `<scale-down>` without members scales down into its host."""
    reader.check_attributes(element, set())
    allowed = _ALLOWED[(kind, role)]
    where = f"<{kind.value}>" + (f"<{role.value}>" if role else "")
    values: dict[str, Any] = {}
    for child in reader.children(element):
        name = local_name(child)
        if name in _DEPRECATED_PARAMETERS:
            newer = _DEPRECATED_PARAMETERS[name]
            reader.warning(child, f"<{name}> is deprecated; read as <{newer}>", f"<{newer}>")
            name = newer
        if name not in allowed:
            if name in _CONVERTERS or name in ("manager", "scale-down"):
                reader.error(
                    child, f"<{name}> does not apply to {where}", "one of " + ", ".join(sorted(allowed))
                )
            else:
                reader.ignore(child)  # not Artemis's at all: "did you mean"
            continue
        if name == "manager":
            values["manager"] = _manager(reader, child)
        elif name == "scale-down":
            implemented = reader.judge(child, HA_PARAMETERS[name]) == Support.IMPLEMENTED
            values["scale_down"] = _scale_down(reader, child, implemented and not hosted)
        elif name in _CONVERTERS:
            reader.check_attributes(child, set())
            reader.check_no_children(child)
            text = reader.text(child)
            value = reader.convert(child, text, _CONVERTERS[name])
            if value is not None:
                if name in QUORUM_PARAMETERS and voting is not None:
                    voting.append((child, text or ""))
                else:
                    reader.judge(child, HA_PARAMETERS[name], text)
                if name in _FIELDS:
                    values[name.replace("-", "_")] = value
        else:
            reader.ignore(child)
    return values


def _scale_down(reader: Reader, element: Element, needs_members: bool) -> ScaleDown:
    """`<scale-down>`: `<enabled>`, `<group-name>`, `<connectors>` of `<connector-ref>` (each a
    `<connector>`, checked with the others); `<discovery-group-ref>` is refused by the support table.
    Without `needs_members` (a colocated backup's: it goes to its host) no connector is needed."""
    reader.check_attributes(element, set())
    values: dict[str, Any] = {}
    discovery = False
    for child in reader.children(element):
        name = local_name(child)
        discovery = discovery or name == "discovery-group-ref"
        if name in ("enabled", "group-name"):
            reader.check_attributes(child, set())
            reader.check_no_children(child)
            value = reader.convert(child, reader.text(child), parse_bool if name == "enabled" else str)
            if value is not None:
                values[name.replace("-", "_")] = value
        elif name == "connectors":
            reader.check_attributes(child, set())
            refs: list[str] = []
            for ref in reader.children(child):
                if local_name(ref) != "connector-ref":
                    reader.ignore(ref)
                elif text := reader.text(ref):
                    refs.append(text)
            values["connectors"] = tuple(refs)
        else:
            reader.ignore(child)  # <discovery-group-ref>: refused (no discovery); <commit-interval>: a note
    scale_down = ScaleDown(**values)
    if needs_members and scale_down.enabled and not scale_down.connectors and not discovery:
        reader.error(
            element, "<scale-down> needs the members it may move messages to", "<connectors><connector-ref>"
        )
    return scale_down


def _manager(reader: Reader, element: Element) -> LockManager:
    """`<manager>`: a lock manager this broker has (an unknown class would only fail at start), with the
    properties it reads (a misspelt one would silently take its default)."""
    reader.check_attributes(element, set())
    values: dict[str, Any] = {}
    properties: dict[str, tuple[str, Element]] = {}
    for child in reader.children(element):
        name = local_name(child)
        if name == "class-name":
            reader.check_attributes(child, set())
            text = reader.text(child)
            if text:
                values["class_name"] = text
        elif name == "properties":
            reader.check_attributes(child, set())
            properties.update(_manager_properties(reader, child))
        else:
            reader.ignore(child)
    manager = LockManager(**values, properties={key: value for key, (value, _) in properties.items()})
    known = LOCK_MANAGERS.get(manager.class_name)
    if known is None:
        reader.error(
            element,
            f"lock manager class {manager.class_name!r} is not one this broker has",
            "class-name " + " or ".join(sorted(LOCK_MANAGERS)),
        )
        return manager
    for key, (value, at) in properties.items():
        if key not in known:
            hint = did_you_mean(key, list(known), "", "")
            reader.error(at, f"unknown property {key!r} of this lock manager{hint}", ", ".join(known), "key")
        elif key.endswith("-ms") or key in ("session-percent", "retries"):
            reader.convert(at, value, lambda text: parse_int(text, minimum=0), "value")
    if known[0] not in properties:
        reader.error(element, f"missing lock manager property {known[0]}", f'<property key="{known[0]}" ...>')
    return manager


def _manager_properties(reader: Reader, element: Element) -> dict[str, tuple[str, Element]]:
    properties: dict[str, tuple[str, Element]] = {}
    for prop in reader.children(element):
        if local_name(prop) != "property":
            reader.ignore(prop)
            continue
        reader.check_attributes(prop, {"key", "value"})
        key, value = reader.attr(prop, "key", required=True), reader.attr(prop, "value", required=True)
        if key is not None and value is not None:
            properties[key] = (value, prop)
    return properties


def parse_connectors(reader: Reader, section: Element) -> tuple[Connector, ...]:
    reader.check_attributes(section, set())
    connectors: dict[str, Connector] = {}
    for element in reader.children(section):
        if local_name(element) != "connector":
            reader.ignore(element)
            continue
        reader.check_attributes(element, {"name"})
        reader.check_no_children(element)
        name, uri = reader.attr(element, "name", required=True), reader.text(element)
        parsed = reader.convert(element, uri, parse_acceptor_uri) if uri else None
        if uri is not None and not uri:
            reader.error(element, "empty connector URI", "tcp://host:port?key=value;key=value")
        if parsed is not None:  # the replication link to a partner connects with them
            check_client_tls(
                reader, element, judge_parameters(reader, element, parsed.params, UriKind.CONNECTOR), None
            )
        if name is None or parsed is None or uri is None:
            continue
        if name in connectors:
            reader.error(element, f"duplicate connector name {name!r}", "a unique name", "name")
            continue
        connectors[name] = Connector(name=name, uri=uri, host=parsed.host, port=parsed.port)
    return tuple(connectors.values())


# the children of a <cluster-connection> read here; the others are judged by the support table
_CLUSTER_TIMES: dict[str, Callable[[str], int]] = {
    "connection-ttl": lambda t: parse_int(t, minimum=1),
    "check-period": lambda t: parse_int(t, minimum=1),
    "retry-interval": lambda t: parse_int(t, minimum=1),
    "reconnect-attempts": lambda t: parse_int(t, minimum=-1),
    "call-timeout": lambda t: parse_int(t, minimum=1),
}


def parse_cluster_connections(reader: Reader, section: Element) -> tuple[ClusterConnection, ...]:
    reader.check_attributes(section, set())
    clusters: dict[str, ClusterConnection] = {}
    for element in reader.children(section):
        if local_name(element) != "cluster-connection":
            reader.ignore(element)  # <cluster-connection-uri>: not read here
            continue
        reader.check_attributes(element, {"name"})
        name = reader.attr(element, "name", required=True)
        values: dict[str, Any] = {}
        for child in reader.children(element):
            child_name = local_name(child)
            if child_name == "connector-ref":
                reader.check_attributes(child, set())
                values["connector_ref"] = reader.text(child)
            elif child_name == "static-connectors":
                reader.check_attributes(child, set())
                refs = []
                for ref in reader.children(child):
                    if local_name(ref) != "connector-ref":
                        reader.ignore(ref)
                    elif text := reader.text(ref):
                        refs.append(text)
                values["static_connectors"] = tuple(refs)
            elif child_name == "discovery-group-ref":
                values["discovery_group"] = parse_discovery_group_ref(reader, child)
            elif child_name in _CLUSTER_TIMES:
                reader.check_attributes(child, set())
                text = reader.text(child)
                value = reader.convert(child, text, _CLUSTER_TIMES[child_name])
                if value is not None:
                    reader.judge(child, CLUSTER_CONNECTION[child_name], text)
                    values[child_name.replace("-", "_")] = value
            else:
                reader.ignore(child)  # clustering: judged by the support table
        if name is None:
            continue
        if name in clusters:
            reader.error(element, f"duplicate cluster-connection name {name!r}", "a unique name", "name")
            continue
        clusters[name] = ClusterConnection(name=name, **values)
    return tuple(clusters.values())


def check_connector_refs(reader: Reader, core: Element, connectors: tuple[Connector, ...]) -> None:
    """Every connector a cluster connection or a `<scale-down>` names must be a `<connector>`."""
    known = {connector.name for connector in connectors}
    for section in reader.children(core):
        if local_name(section) not in ("cluster-connections", "ha-policy", "broadcast-groups"):
            continue
        for ref in section.iter():
            if not isinstance(ref.tag, str) or local_name(ref) != "connector-ref":
                continue
            text = (ref.text or "").strip()
            if text and text not in known:
                reader.error(
                    ref,
                    f"no <connector> named {text!r}",
                    f"one of the <connectors>: {', '.join(sorted(known)) or 'none defined'}",
                )
