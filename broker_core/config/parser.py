"""Load broker.xml into a `BrokerConfig`, collecting every problem on the way.

Accepted layouts: ``<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">`` (current
Artemis), a bare ``<core>`` root, and the older ``<configuration xmlns="urn:activemq:core">`` holding the
core elements directly. Elements are matched by local name, so namespace spelling does not matter.

Relative directories resolve against `base_dir`, by default the parent of the file's directory: Artemis
resolves them against the instance directory and keeps broker.xml in ``<instance>/etc``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lxml import etree
from pydantic import ValidationError

from broker_core.config.acceptors import parse_acceptors
from broker_core.config.addresses import parse_addresses
from broker_core.config.broker_connections import parse_broker_connections
from broker_core.config.discovery import (
    check_discovery_refs,
    check_discovery_use,
    parse_broadcast_groups,
    parse_discovery_groups,
)
from broker_core.config.errors import ConfigError, ConfigProblem, ProblemLog
from broker_core.config.ha import (
    check_connector_refs,
    parse_cluster_connections,
    parse_connectors,
    parse_ha_policy,
)
from broker_core.config.metrics import parse_metrics
from broker_core.config.model import BrokerConfig
from broker_core.config.settings import parse_address_settings, parse_security_settings
from broker_core.config.support import CORE
from broker_core.config.users import ROLES_FILE, USERS_FILE, load_roles, load_users
from broker_core.config.values import parse_sent_password
from broker_core.config.xmlread import Element, Reader, converter_for, line_of, local_name

_SECTIONS: dict[str, tuple[str, Callable[[Reader, Element], Any]]] = {
    "addresses": ("addresses", parse_addresses),
    "address-settings": ("address_settings", parse_address_settings),
    "security-settings": ("security_settings", parse_security_settings),
    "broker-connections": ("broker_connections", parse_broker_connections),
    "ha-policy": ("ha_policy", parse_ha_policy),
    "connectors": ("connectors", parse_connectors),
    "cluster-connections": ("cluster_connections", parse_cluster_connections),
    "metrics": ("metrics", parse_metrics),
    "broadcast-groups": ("broadcast_groups", parse_broadcast_groups),
    "discovery-groups": ("discovery_groups", parse_discovery_groups),
}
_NOT_SCALARS = frozenset(
    {
        "source",
        "base_dir",
        "users",
        "roles",
        "acceptors",
        "console",
        *(field for field, _ in _SECTIONS.values()),
    }
)
_SIZES = frozenset({"journal_file_size", "journal_buffer_size", "global_max_size", "min_disk_free"})
_MINIMUMS = {
    "journal_file_size": 1024,
    "journal_buffer_size": 1,
    "journal_min_files": 2,
    "journal_pool_files": -1,
    "journal_buffer_timeout": 0,
    "journal_device_block_size": 512,
    "id_cache_size": 0,
    "max_disk_usage": -1,
    "disk_scan_period": 1,
    "connection_ttl_override": -1,
    "network_check_period": 1,
    "network_check_timeout": 1,
}
_DIRECTORIES = {
    "journal_directory": "data/journal",
    "bindings_directory": "data/bindings",
    "paging_directory": "data/paging",
    "large_messages_directory": "data/large-messages",
}


def load_config(
    path: str | os.PathLike[str],
    strict: bool = False,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    users_file: str | os.PathLike[str] | None = None,
    roles_file: str | os.PathLike[str] | None = None,
    properties: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[BrokerConfig, list[ConfigProblem]]:
    """Parse and validate; return the config and its warnings, or raise `ConfigError` with every problem.

    `properties` supplies ``${name}`` placeholders (Artemis's -D system properties); the process
    environment (or `environ`) is consulted next. `users_file` / `roles_file` override the
    ``artemis-users.properties`` / ``artemis-roles.properties`` found next to the file.
    """
    config_path = Path(path)
    log = ProblemLog(os.path.basename(os.fspath(path)))
    reader = Reader(log, properties or {}, environ)
    values = _read_document(reader, config_path)
    base = Path(base_dir) if base_dir is not None else config_path.absolute().parent.parent
    problems = log.problems
    if values is not None:
        _resolve_directories(values, base)
        problems += _load_security_files(config_path, values, users_file, roles_file)
    if strict:  # what has no effect here, or runs otherwise than Artemis would, is refused too
        problems = [_as_error(problem) for problem in problems]
    if values is None or any(problem.severity == "error" for problem in problems):
        raise ConfigError(problems)
    try:
        config = BrokerConfig(source=config_path.absolute(), base_dir=base.absolute(), **values)
    except ValidationError as exc:  # a bug in a converter above, reported rather than crashing
        raise ConfigError([*problems, ConfigProblem(log.file, None, "", None, f"internal: {exc}")]) from exc
    return config, problems


def _as_error(problem: ConfigProblem) -> ConfigProblem:
    if problem.severity == "error":
        return problem
    message = problem.message.removesuffix("; ignored") + "; refused (--strict)"
    return ConfigProblem(
        problem.file, problem.line, problem.element_path, problem.attribute, message, problem.expected
    )


def _read_document(reader: Reader, path: Path) -> dict[str, Any] | None:
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        tree = etree.parse(str(path), parser)
    except OSError as exc:
        reader.log.error(None, "", f"cannot read the file: {exc}", "a readable broker.xml")
        return None
    except etree.XMLSyntaxError as exc:
        entries: list[Any] = list(getattr(exc, "error_log", None) or []) or [exc]
        for entry in entries:
            line = getattr(entry, "line", None) or getattr(entry, "lineno", None)
            reader.log.error(
                line, "", f"XML syntax error: {getattr(entry, 'message', exc.msg)}", "well-formed XML"
            )
        return None
    core = _find_core(reader, tree.getroot())
    return _parse_core(reader, core) if core is not None else None


def _find_core(reader: Reader, root: Element) -> Element | None:
    qname = etree.QName(root)
    if qname.localname == "core":
        return root
    if qname.localname != "configuration":
        reader.error(root, f"unexpected root element <{qname.localname}>", "<configuration> or <core>")
        return None
    cores = [child for child in reader.children(root) if local_name(child) == "core"]
    if not cores and qname.namespace == "urn:activemq:core":
        return root  # older layout: core elements directly under <configuration>
    for child in reader.children(root):
        if local_name(child) != "core":
            reader.ignore(child)
    if not cores:
        reader.error(root, "missing <core> element", '<core xmlns="urn:activemq:core">')
        return None
    for extra in cores[1:]:
        reader.error(extra, "more than one <core> element", "exactly one <core>")
    return cores[0]


def _parse_core(reader: Reader, core: Element) -> dict[str, Any]:
    values: dict[str, Any] = {}
    seen: dict[str, int | None] = {}
    for element in reader.children(core):
        name = local_name(element)
        if name in seen:
            reader.error(
                element, f"<{name}> appears more than once (first at line {seen[name]})", "at most once"
            )
            continue
        seen[name] = line_of(element)
        _parse_core_element(reader, element, name, values)
    check_connector_refs(reader, core, values.get("connectors", ()))
    check_discovery_refs(
        reader, core, values.get("cluster_connections", ()), values.get("discovery_groups", ())
    )
    check_discovery_use(reader, core, values.get("ha_policy"))
    _override_connection_ttl(values)
    return values


def _parse_core_element(reader: Reader, element: Element, name: str, values: dict[str, Any]) -> None:
    if name == "acceptors":  # the AMQP acceptors, and the console's
        values.update(parse_acceptors(reader, element))
        return
    if name in _SECTIONS:
        field, parse = _SECTIONS[name]
        values[field] = parse(reader, element)
        return
    if name == "store":  # <file-store/> is what runs here; a <database-store> is refused
        reader.check_attributes(element, set())
        reader.check_no_children(element)
        return
    field = name.replace("-", "_")
    if field in _NOT_SCALARS or field not in BrokerConfig.model_fields:
        reader.ignore(element)
        return
    reader.check_attributes(element, set())
    reader.check_no_children(element)
    annotation = BrokerConfig.model_fields[field].annotation
    convert: Callable[[str], Any] = (
        parse_sent_password
        if field == "cluster_password"
        else converter_for(annotation, size=field in _SIZES, minimum=_MINIMUMS.get(field))
    )
    text = reader.text(element)
    value = reader.convert(element, text, convert)
    if value is not None:
        reader.judge(element, CORE[name], text)
    if field == "max_disk_usage" and value is not None and value > 100:
        reader.error(element, f"max-disk-usage {value} is over 100", "a percentage 0-100, or -1 to disable")
    elif value is not None:
        values[field] = value


def _override_connection_ttl(values: dict[str, Any]) -> None:
    """Artemis's <connection-ttl-override> is the idle timeout of every AMQP connection, in and out, whose
    acceptor does not set its own amqpIdleTimeout."""
    ttl = values.get("connection_ttl_override", -1)
    if ttl == -1:
        return
    values["acceptors"] = tuple(
        a if "amqp_idle_timeout" in a.model_fields_set else a.model_copy(update={"amqp_idle_timeout": ttl})
        for a in values.get("acceptors", ())
    )
    values["broker_connections"] = tuple(
        c.model_copy(update={"idle_timeout": ttl}) for c in values.get("broker_connections", ())
    )


def _resolve_directories(values: dict[str, Any], base: Path) -> None:
    for field, default in _DIRECTORIES.items():
        values[field] = (base / Path(values.get(field, default))).absolute()
    lock_directory = values.get("node_manager_lock_directory")
    if lock_directory is not None:
        values["node_manager_lock_directory"] = (base / Path(lock_directory)).absolute()


def _load_security_files(
    config_path: Path,
    values: dict[str, Any],
    users_file: str | os.PathLike[str] | None,
    roles_file: str | os.PathLike[str] | None,
) -> list[ConfigProblem]:
    """Users and roles come from Artemis's properties files beside broker.xml unless paths are given."""
    users_path = Path(users_file) if users_file is not None else config_path.parent / USERS_FILE
    roles_path = Path(roles_file) if roles_file is not None else config_path.parent / ROLES_FILE
    users_log, roles_log = ProblemLog(users_path.name), ProblemLog(roles_path.name)
    if users_file is not None or users_path.exists():
        values["users"] = load_users(users_path, users_log)
    if roles_file is not None or roles_path.exists():
        known = {user.name for user in values.get("users", ())}
        values["roles"] = load_roles(roles_path, roles_log, known)
    if values.get("security_enabled", True):
        beside = f"beside {config_path.name} (or <security-enabled>false</security-enabled>)"
        if "users" not in values:
            users_log.warning(
                None,
                "",
                "security is enabled but there is no users file: nobody can log in",
                f"{users_path.name} {beside}",
            )
        if "roles" not in values:
            roles_log.warning(
                None,
                "",
                "security is enabled but there is no roles file: every user is denied every permission",
                f"{roles_path.name} {beside}",
            )
    return users_log.problems + roles_log.problems
