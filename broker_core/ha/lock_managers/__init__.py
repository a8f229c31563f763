"""Pluggable lock managers (`<manager>`): who of a replicated pair may be active, decided outside the pair.

Seed 001 §2.2.3 and spec A4: a lock per node id (`<nodeId>/locks`) that only the active server holds, and
a coordinated *activation sequence* (`<nodeId>/activation-sequence`) that says how up to date a journal
must be to activate. Two implementations:

- ZooKeeper, through kazoo (the class name of Artemis's Curator manager selects it), with the seed's
  properties: `connect-string`, `session-ms` (18000), `session-percent` (33), `connection-ms` (8000),
  `retries` (1), `retries-ms` (1000), `namespace`. A holder that has heard nothing from ZooKeeper for
  `session-percent` of `session-ms` gives the lock up (the lock is then `lost`), before its session can
  expire and another server take it: never two actives. Only a lock held is ever lost: a passive server
  that merely tried one has nothing to give up.
- A file lock for one host (tests, laptops): `locks-folder` holds `<nodeId>.lock` (an OFD lock) and
  `<nodeId>.sequence`.
- PostgreSQL, for sites that run a database and no ZooKeeper (ours: `PostgreSQLLockManager`): a lease
  row per node id, taken when free or expired, renewed by its holder, each taking fenced by a monotonic
  epoch; the activation sequence is a row too. Same properties and the same holder's grace as ZooKeeper.

Every call may block on the network: the HA controller calls them from a worker thread, one at a time,
and says so when one is slow to answer (kazoo's own waits are not bounded while a connection is
suspended, spec B5). A manager's failures, whatever their cause, reach it as LockManagerError.
"""

from __future__ import annotations

from broker_core.config.model import FILE_LOCK_MANAGERS as FILE_CLASSES
from broker_core.config.model import POSTGRESQL_LOCK_MANAGERS as POSTGRESQL_CLASSES
from broker_core.config.model import ZOOKEEPER_LOCK_MANAGERS as ZOOKEEPER_CLASSES
from broker_core.config.model import LockManager as LockManagerConfig

from .base import LockManager, LockManagerError
from .file import FileLockManager
from .postgresql import PostgreSQLLockManager
from .zookeeper import ZooKeeperLockManager

__all__ = [
    "FileLockManager",
    "LockManager",
    "LockManagerError",
    "PostgreSQLLockManager",
    "ZooKeeperLockManager",
    "lock_manager_for",
]


def lock_manager_for(config: LockManagerConfig) -> LockManager:
    if config.class_name in ZOOKEEPER_CLASSES:
        return ZooKeeperLockManager(config.properties)
    if config.class_name in FILE_CLASSES:
        return FileLockManager(config.properties)
    if config.class_name in POSTGRESQL_CLASSES:
        return PostgreSQLLockManager(config.properties)
    raise LockManagerError(
        f"lock manager class {config.class_name!r} is not one this broker has; use "
        f"{sorted(ZOOKEEPER_CLASSES)[0]} (ZooKeeper) or {sorted(FILE_CLASSES)[0]} (one host)"
    )
