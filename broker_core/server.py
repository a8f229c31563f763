"""One broker server: the facade over its parts, and its lifecycle.

A server is plain objects driven by the protocol layer on one event loop; it never touches a socket.
Several servers live side by side in one process (two data centres in a test, a primary and its
colocated backups), so nothing here is module-level state.

Its parts, each owning its state, used in one direction (routing and outcomes use topology, all of them
persistence):
- `persistence`: the journal batch being built, confirmations (persistence.py);
- `topology`: addresses and queues (topology.py);
- `router`: messages to queues (routing.py); `outcomes`: acknowledgements, redelivery, dead letters
  and expiry (outcomes.py);
- `index`: messages by identity (identity.py); `observers`: who hears the events (events.py).
The methods below are the server's operations for code outside the core; the hot paths call the parts.

Durability contract: a durable message routed to a durable queue is journalled in the current batch;
`persistence.confirm(cb)` runs `cb` once it is on disk and every confirmation condition holds. The
protocol layer Accepts a durable send only from such a callback. Acks are journalled the same way.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config.model import AddressSettings, BrokerConfig
from .data_lock import DataLock
from .disk import DiskMonitor
from .duplicates import DuplicateIds
from .errors import Unauthorized
from .events import Cause, Observer, Observers
from .failed_logins import FailedLogins
from .identity import MessageIndex
from .journal.collector import collector_paused
from .journal.journal import Journal
from .journal.node_id import load_or_create_node_id
from .message import MessageView
from .outcomes import Outcomes
from .paging.paging import LAST_PAGE, Paging
from .persistence import Callback, Persistence
from .queues import Address, MessageRef, Queue, StoredMessage
from .recovery import restore
from .routing import Router
from .security.authentication import UserStore
from .security.authorization import Authorizer, Permission, SecuritySettings
from .spool import Spool
from .stats import BrokerStats
from .topology import Topology
from .upgrade import Routes
from .usage import Budget
from .vocabulary import AckReason

# `global-max-size` -1: Artemis takes half the JVM's heap, 1 GiB with the 2 GiB heap `artemis create`
# writes. A message held here costs about twice its counted bytes in the process (Python objects), so the
# same memory footprint is 512 MiB counted; never more than half the machine's memory. A mirror to a dead
# data centre pages its backlog past this instead of growing to gigabytes of memory.
DEFAULT_GLOBAL_MAX_SIZE = 512 * 1024 * 1024


def global_max_size(configured: int) -> int:
    """`global-max-size`; -1 means the smaller of 512 MiB and half the machine's memory."""
    if configured >= 0:
        return configured
    try:
        half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError):
        return DEFAULT_GLOBAL_MAX_SIZE
    return min(DEFAULT_GLOBAL_MAX_SIZE, half)


class Server:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.name = config.name
        self.log = log or logging.getLogger(f"broker.{config.name}")
        self.clock = clock
        self.node_id = ""
        # the active members of its cluster (quorum voting), told to clients instead of the static partners
        self.failover_servers: list[tuple[str, int]] | None = None
        self.started = False
        self.data_lock = DataLock(Path(config.node_manager_lock_directory or config.journal_directory))

        def clock_ms() -> int:
            return int(clock() * 1000)

        self.persistence = Persistence(config.persistence_enabled, self.log)
        self.observers = Observers()
        self.index = MessageIndex()
        self.stats = BrokerStats()
        self.budget = Budget(global_max_size(config.global_max_size), config.global_max_messages)
        self.topology = Topology(config, self.persistence, self.observers, self.index, self.log, self.budget)
        self.paging = Paging(
            Path(config.paging_directory),
            self.persistence,
            self.index,
            lambda address: self.topology.settings_for(address).page_size_bytes,
            self.log,
        )
        self.router = Router(
            self.topology,
            self.persistence,
            self.observers,
            self.index,
            self.stats,
            clock_ms,
            self.log,
            self.paging,
        )
        self.outcomes = Outcomes(
            self.topology,
            self.router,
            self.persistence,
            self.observers,
            self.index,
            self.stats,
            clock_ms,
            self.log,
        )
        self.space_listeners: list[Callable[[bool], None]] = []  # the runtime retries writes meanwhile
        # the servers its acceptors hand connections to by name: itself, and colocated backups (upgrade.py)
        self.routes = Routes(config.name)
        self.disk = DiskMonitor(
            [
                Path(config.journal_directory),
                Path(config.paging_directory),
                Path(config.large_messages_directory),
            ],
            config.max_disk_usage,
            config.min_disk_free,
            self.budget,
            self.log,
        )
        self.disk.confirm = self.persistence.after_durable  # a scan that sees the journal's bytes too
        self.paging.wrote = self.disk.meter(Path(config.paging_directory))
        large = Path(config.large_messages_directory)
        self.spool = Spool(large, self.budget, self.disk.meter(large), self.log)  # deliveries arriving
        self.duplicates = DuplicateIds(config.id_cache_size, config.persist_id_cache, self.persistence)
        self.paging.on_visible = lambda queue: queue.dispatch(self.outcomes.is_expired)
        self.persistence.on_space = self._space_changed
        self.observers.add(self.paging)
        # The parts' own dicts, shared (never rebound), for readers outside the core.
        self.addresses: dict[str, Address] = self.topology.addresses
        self.queues: dict[str, Queue] = self.topology.queues
        self.meta: dict[str, bytes] = self.persistence.meta

        passwords = {u.name: u.password for u in config.users}
        if config.cluster_user and config.cluster_password is not None:
            # the other server of an HA pair logs in as the cluster user (SCRAM or PLAIN), with no role
            passwords.setdefault(config.cluster_user, config.cluster_password)
        self.user_store = UserStore(passwords, {u.name: config.roles_of(u.name) for u in config.users})
        rules = {s.match: dict(s.permissions) for s in config.security_settings}
        self.authorizer = Authorizer(config.security_enabled, SecuritySettings(rules), self.user_store)
        self.scram_secret = secrets.token_bytes(32)  # fake SCRAM salts for unknown users stay stable
        self.failed_logins = FailedLogins()  # which failed logins to log: repeats are summarised

    # ------------------------------------------------------------------------------------ lifecycle

    @property
    def journal(self) -> Journal | None:
        return self.persistence.journal

    def start(self, dispatch: Callable[[Callback], None] | None = None) -> None:
        """Lock the data directory, open the journal, recover, create configured addresses and queues.

        Raises `DataDirectoryInUse` while another broker holds the data directory. Under a shared-store
        HA policy the node manager has taken the lock already (it decides who is active)."""
        took = not self.data_lock.held
        if took:
            self.data_lock.acquire()
        try:
            self._start(dispatch)
        except BaseException:
            if took:
                self.data_lock.release()
            raise

    def _start(self, dispatch: Callable[[Callback], None] | None) -> None:
        data_dir = Path(self.config.journal_directory)
        self.node_id = self.index.node_id = load_or_create_node_id(data_dir)
        self.spool.clear_leftovers()
        self.persistence.closed = False
        journal = self.persistence.journal = Journal(
            data_dir,
            segment_size=self.config.journal_file_size,
            fsync=self.config.persistence_enabled and self.config.journal_sync_durable,
            dispatch=dispatch,
            logger=self.log,
        )
        journal.on_queued = self.disk.meter(data_dir)
        if self.config.persistence_enabled:
            with collector_paused():
                state = journal.open()
                restore(state, self.topology, self.index, self.persistence)
                self.duplicates.restore(state.duplicates)
            last_page = int(self.persistence.meta.get(LAST_PAGE, b"0"))
            self.paging.recover(state.pages, last_page, self.topology.queues_by_id, journal.fsync)
        else:
            journal.open()
            self.paging.recover({}, 0, {}, False)  # page files of an earlier run without persistence go
        for acfg in self.config.addresses:
            types = {rt.value for rt in acfg.routing_types}
            addr = self.topology.ensure_address(acfg.name, types, auto_created=False)
            addr.routing_types |= types
            for qcfg in acfg.queues:
                if qcfg.name not in self.queues:
                    self.topology.create_queue(
                        qcfg.name,
                        acfg.name,
                        qcfg.routing_type.value,
                        durable=qcfg.durable,
                        filter_string=qcfg.filter,
                        max_consumers=qcfg.max_consumers,
                        purge_on_no_consumers=qcfg.purge_on_no_consumers,
                    )
        self.started = True
        self.log.info(
            "server %s started: node id %s, %d addresses, %d queues, %d messages",
            self.name,
            self.node_id,
            len(self.addresses),
            len(self.queues),
            sum(q.depth for q in self.queues.values()),
        )
        hashed = self.user_store.hashed_users
        if hashed and self.config.security_enabled:
            self.log.info(
                "SASL: PLAIN offered, SCRAM not: %d user(s) have a one-way hashed password (ENC: %s), "
                "which only PLAIN can check; clients send it over TLS, or give those users plain passwords",
                len(hashed),
                ", ".join(sorted(hashed)[:5]) + (", ..." if len(hashed) > 5 else ""),
            )

    def stop(self) -> None:
        try:
            self.persistence.flush()
            if self.persistence.full:
                self.log.error(
                    "AMQ222212: stopping with the disk full: %d journal records could not be written "
                    "(acknowledgements come back as redeliveries; mirror events not yet written are lost "
                    "for the other side)",
                    self.persistence.held_records(),
                )
            if self.persistence.journal is not None:
                self.persistence.journal.close()
            self.persistence.close()
        finally:
            self.data_lock.release()
        self.started = False
        self.log.info("server %s stopped", self.name)

    def _space_changed(self, full: bool) -> None:
        """The journal met a full disk (no producer gets credit), or writes again."""
        budget = self.budget
        budget.write_failed = full
        if not full and not budget.no_room:
            budget.wake()
        for listener in self.space_listeners:
            listener(full)

    def add_observer(self, observer: Observer) -> None:
        self.observers.add(observer)

    # ---------------------------------------------------------------------------------- operations

    def settings_for(self, address: str) -> AddressSettings:
        return self.topology.settings_for(address)

    def ensure_address(
        self, name: str, routing_types: set[str], *, auto_created: bool = True, cause: Cause | None = None
    ) -> Address:
        return self.topology.ensure_address(name, routing_types, auto_created=auto_created, cause=cause)

    def create_queue(self, name: str, address: str, routing_type: str, **options: Any) -> Queue:
        """A new queue (`Topology.create_queue`'s options: durable, filter_string, internal, cause, ...)."""
        return self.topology.create_queue(name, address, routing_type, **options)

    def delete_queue(self, name: str, cause: Cause | None = None) -> None:
        self.topology.delete_queue(name, cause)

    def delete_address(self, name: str, force: bool = False, cause: Cause | None = None) -> None:
        self.topology.delete_address(name, force, cause)

    def route(
        self, address: str, payload: bytes, view: MessageView | None = None, **options: Any
    ) -> StoredMessage | None:
        """Route one message (`Router.route`'s options: origin, only_queues, cause, ...)."""
        return self.router.route(address, payload, view or MessageView(payload), **options)

    def acknowledge(
        self, ref: MessageRef, reason: int = AckReason.NORMAL, cause: Cause | None = None
    ) -> None:
        self.outcomes.acknowledge(ref, reason, cause=cause)

    def persist(self, record: Any) -> None:
        self.persistence.persist(record)

    def after_durable(self, callback: Callback) -> None:
        self.persistence.after_durable(callback)

    def confirm(self, callback: Callback) -> None:
        self.persistence.confirm(callback)

    def set_meta(self, key: str, value: bytes, coalesce: bool = False) -> None:
        self.persistence.set_meta(key, value, coalesce)

    def identity_of(self, msg: StoredMessage) -> tuple[str, int]:
        return self.index.identity_of(msg)

    # ------------------------------------------------------------------------------------ security

    def check(self, user: str | None, address: str, permission: str) -> None:
        if not self.authorizer.allowed(user, address, Permission(permission)):
            raise Unauthorized(
                f"user {user or '<anonymous>'} does not have permission '{permission}' on address {address}"
            )

    def authenticate_plain(self, user: str, password: str) -> bool:
        return self.user_store.check_plain(user, password)
