"""SIGHUP: read broker.xml (and the users and roles files) again, apply what can change while running.

As the reference does at run time: address settings (limits and full policy of existing addresses
too), users and roles, security settings, and broker connections other than mirrors (added, removed,
or restarted with their new settings). Everything else that changed (acceptors, the journal, HA, a
mirror, metrics, ...) is named in a log line as needing a restart, and keeps its running value. A file
with errors changes nothing: its problems are logged, and the broker goes on as it was.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker_core.config import ConfigError, load_config
from broker_core.config.model import AmqpConnection, BrokerConfig
from broker_core.security.authentication import UserStore
from broker_core.security.authorization import SecuritySettings

if TYPE_CHECKING:
    from broker_core.server import Server

    from ..broker import Broker

log = logging.getLogger("amqp_mirror.ops")

RELOADED_AT_RUN_TIME = frozenset(
    {"address_settings", "users", "roles", "security_settings", "broker_connections"}
)
# set when the broker starts, never a reason for a restart
_NOT_COMPARED = frozenset({"source", "base_dir"})
_DIRECTORIES = ("journal_directory", "bindings_directory", "paging_directory", "large_messages_directory")


@dataclass
class ReloadReport:
    reloaded: list[str] = field(default_factory=list)
    needs_restart: list[str] = field(default_factory=list)
    failed: str | None = None


def reload_broker(broker: Broker) -> ReloadReport:
    """Apply the running broker's broker.xml as it is now; log and return what was done."""
    old = broker.config
    name = old.name
    report = ReloadReport()
    if old.source is None:
        report.failed = "no broker.xml to read again"
        return report
    try:
        new, warnings = load_config(old.source)
    except ConfigError as exc:
        n = len(exc.problems)
        report.failed = f"{old.source.name}: {n} {'problem' if n == 1 else 'problems'}; nothing changed"
        for problem in exc.problems:
            log.error("%s: reload: %s", name, problem)
        return report
    for warning in warnings:
        log.warning("%s: reload: %s", name, warning)
    new = new.model_copy(update={d: getattr(old, d) for d in _DIRECTORIES})  # --data-dir stays
    updates = _apply(broker, old, new, report)
    report.needs_restart[:0] = _restart_needed(old, new)
    merged = old.model_copy(update=updates)
    broker.config = broker.server.config = broker.server.topology.config = merged
    return report


def _apply(broker: Broker, old: BrokerConfig, new: BrokerConfig, report: ReloadReport) -> dict[str, Any]:
    server = broker.server
    updates: dict[str, Any] = {}
    if new.address_settings != old.address_settings:
        updates["address_settings"] = new.address_settings
        _apply_address_settings(server, old.model_copy(update={"address_settings": new.address_settings}))
        report.reloaded.append("address-settings")
    if new.users != old.users or new.roles != old.roles:
        updates.update(users=new.users, roles=new.roles)
        store = UserStore(
            {u.name: u.password for u in new.users}, {u.name: new.roles_of(u.name) for u in new.users}
        )
        server.user_store = store
        server.authorizer.update_users(store)
        report.reloaded.append("users and roles")
    if new.security_settings != old.security_settings:
        updates["security_settings"] = new.security_settings
        rules = {s.match: dict(s.permissions) for s in new.security_settings}
        server.authorizer.update_settings(SecuritySettings(rules))
        report.reloaded.append("security-settings")
    connections = _apply_connections(broker, old, new, report)
    if connections != old.broker_connections:
        updates["broker_connections"] = connections
    return updates


def _apply_address_settings(server: Server, config: BrokerConfig) -> None:
    """New settings for every address, the ones that exist included: their limits and full policy."""
    topology = server.topology
    topology.config = config
    topology._settings.clear()  # the per-address cache of merged settings
    for address in list(server.addresses.values()):
        fresh = topology.usage_for(address.name, address.internal)
        usage = address.usage
        usage.max_bytes, usage.max_messages = fresh.max_bytes, fresh.max_messages
        usage.policy, usage.reject_threshold = fresh.policy, fresh.reject_threshold
        usage.read_bytes, usage.read_messages = fresh.read_bytes, fresh.read_messages
        if usage.waiters and usage.may_send():  # a raised limit lets blocked producers go on
            usage.wake()


def _apply_connections(
    broker: Broker, old: BrokerConfig, new: BrokerConfig, report: ReloadReport
) -> tuple[AmqpConnection, ...]:
    """Broker connections without a mirror follow the file; one with a mirror (before or now) keeps
    running as it is until a restart. Returns the connections as they now run."""
    manager = broker.connections
    before = {c.name: c for c in old.broker_connections}
    after = {c.name: c for c in new.broker_connections}
    running = dict(before)
    changed: list[str] = []
    for name in sorted(set(before) | set(after)):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        if (was is not None and was.mirrors) or (now is not None and now.mirrors):
            report.needs_restart.append(f"broker connection {name} (it has a mirror)")
            continue
        if manager is not None:
            manager.replace(now, name)
        if now is None:
            running.pop(name)
            changed.append(f"{name} removed")
        else:
            running[name] = now
            changed.append(f"{name} {'added' if was is None else 'restarted'}")
    if changed:
        report.reloaded.append("broker connections (" + ", ".join(changed) + ")")
    order = [c.name for c in new.broker_connections] + [n for n in before if n not in after]
    return tuple(running[n] for n in order if n in running)


def _restart_needed(old: BrokerConfig, new: BrokerConfig) -> list[str]:
    fields = BrokerConfig.model_fields
    return [
        name.replace("_", "-")
        for name in fields
        if name not in RELOADED_AT_RUN_TIME
        and name not in _NOT_COMPARED
        and getattr(old, name) != getattr(new, name)
    ]


def log_report(name: str, report: ReloadReport) -> None:
    if report.failed:
        log.error("AMQ951013: %s: reload failed: %s", name, report.failed)
        return
    log.info("AMQ951011: %s: reloaded: %s", name, ", ".join(report.reloaded) or "nothing had changed")
    if report.needs_restart:
        log.warning(
            "AMQ951012: %s: changed in the file, applied only at the next restart: %s",
            name,
            ", ".join(report.needs_restart),
        )
