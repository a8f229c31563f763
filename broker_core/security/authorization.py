"""Who may do what on which address: Artemis ``<security-settings>`` semantics.

What Artemis does, and so what we do (read from ``SecurityStoreImpl.check`` and
``HierarchicalObjectRepository`` in apache/activemq-artemis):

- **The most specific matching ``security-setting`` decides alone.** The repository merges values
  only when they implement ``Mergeable``; address-settings do, but the role sets of security
  settings do not, so a more specific setting replaces every permission of a less specific one
  (a ``send``-only ``orders.#`` setting takes ``consume`` away from roles granted it by ``#``).
  Precedence is the wildcard precedence documented in :mod:`filters.wildcard`.
- **No matching setting denies everything** (the repository's default is an empty role set).
- **Fully qualified queue names** ``address::queue``: the check is made on the bare address,
  except when there is an *exact* (wildcard-free) security-setting for ``address::queue``; then
  that one decides instead. Wildcard settings never match an FQQN. This applies to every
  permission the caller checks with a queue (Artemis does it for send to an FQQN, consume, browse
  and queue creation).
- **A user is granted a permission when any of the user's roles is listed** for that permission.
- **Security disabled** (``security-enabled=false``) allows everything.

Results are cached per (user, address, queue, permission) and the cache is dropped whenever the
settings or the users change. The cache and the inputs it was computed from are swapped as one
snapshot, so a check that raced with an update can never store a stale answer in the new cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from broker_core.errors import Unauthorized
from broker_core.security.authentication import UserStore
from filters.wildcard import DEFAULT_SYNTAX, WildcardSyntax, matcher_for, most_specific

FQQN_SEPARATOR = "::"
# Addresses come from clients (temporary queues, ...): bound the cache rather than grow forever.
DEFAULT_CACHE_LIMIT = 10_000


class Permission(StrEnum):
    """The ``<permission type="...">`` values of broker.xml."""

    CREATE_ADDRESS = "createAddress"
    DELETE_ADDRESS = "deleteAddress"
    CREATE_DURABLE_QUEUE = "createDurableQueue"
    DELETE_DURABLE_QUEUE = "deleteDurableQueue"
    CREATE_NON_DURABLE_QUEUE = "createNonDurableQueue"
    DELETE_NON_DURABLE_QUEUE = "deleteNonDurableQueue"
    SEND = "send"
    CONSUME = "consume"
    MANAGE = "manage"
    BROWSE = "browse"
    VIEW = "view"
    EDIT = "edit"


def split_fqqn(name: str) -> tuple[str, str | None]:
    """``"a::q"`` -> ``("a", "q")``; a plain address -> ``(address, None)``."""
    address, separator, queue = name.partition(FQQN_SEPARATOR)
    return (address, queue) if separator else (name, None)


class SecuritySettings:
    """The ``<security-setting match>`` rules: match -> permission -> roles granted it."""

    __slots__ = ("_rules", "syntax")

    def __init__(
        self,
        rules: Mapping[str, Mapping[Permission, frozenset[str]]],
        syntax: WildcardSyntax = DEFAULT_SYNTAX,
    ) -> None:
        # Permission(...) also accepts another str enum with the same values (the config model's).
        self._rules = {
            match: {Permission(p): frozenset(roles) for p, roles in grants.items()}
            for match, grants in rules.items()
        }
        self.syntax = syntax

    def __repr__(self) -> str:
        return f"SecuritySettings({sorted(self._rules)!r})"

    @property
    def matches(self) -> frozenset[str]:
        return frozenset(self._rules)

    def deciding_match(self, address: str, queue: str | None = None) -> str | None:
        """The one setting that decides for ``address`` (or FQQN ``address::queue``), if any."""
        bare, queue_in_name = split_fqqn(address)
        queue = queue or queue_in_name
        if queue:
            fqqn = f"{bare}{FQQN_SEPARATOR}{queue}"
            if fqqn in self._rules and self._is_exact(fqqn):
                return fqqn
        return most_specific(self._rules, bare, self.syntax)

    def roles_for(self, address: str, permission: Permission, queue: str | None = None) -> frozenset[str]:
        match = self.deciding_match(address, queue)
        if match is None:
            return frozenset()
        return self._rules[match].get(permission, frozenset())

    def _is_exact(self, match: str) -> bool:
        matcher = matcher_for(match, self.syntax)
        return not (matcher.uses_any_words or matcher.uses_single_word)


_CacheKey = tuple[str | None, str, str | None, Permission]


@dataclass(frozen=True)
class _Snapshot:
    settings: SecuritySettings
    users: UserStore
    cache: dict[_CacheKey, bool] = field(default_factory=dict)


class Authorizer:
    """Answers "may this user do this on this address?" for one server."""

    def __init__(
        self,
        enabled: bool,
        settings: SecuritySettings,
        user_store: UserStore,
        *,
        anonymous_roles: frozenset[str] = frozenset(),
        cache_limit: int = DEFAULT_CACHE_LIMIT,
    ) -> None:
        self.enabled = enabled
        self.anonymous_roles = anonymous_roles
        self._cache_limit = cache_limit
        self._snapshot = _Snapshot(settings, user_store)

    @property
    def settings(self) -> SecuritySettings:
        return self._snapshot.settings

    @property
    def cache_size(self) -> int:
        return len(self._snapshot.cache)

    def update_settings(self, settings: SecuritySettings) -> None:
        self._snapshot = _Snapshot(settings, self._snapshot.users)

    def update_users(self, user_store: UserStore) -> None:
        self._snapshot = _Snapshot(self._snapshot.settings, user_store)

    def allowed(
        self, user: str | None, address: str, permission: Permission, queue: str | None = None
    ) -> bool:
        """``user`` None is an anonymous connection, which holds ``anonymous_roles``."""
        if not self.enabled:
            return True
        snapshot = self._snapshot
        key = (user, address, queue, permission)
        cached = snapshot.cache.get(key)
        if cached is None:
            cached = self._decide(snapshot, user, address, permission, queue)
            if len(snapshot.cache) >= self._cache_limit:
                snapshot.cache.clear()
            snapshot.cache[key] = cached
        return cached

    def check(self, user: str | None, address: str, permission: Permission, queue: str | None = None) -> None:
        """Raise :class:`Unauthorized` unless allowed."""
        if not self.allowed(user, address, permission, queue):
            raise Unauthorized(_denial(user, address, permission, queue))

    def _decide(
        self,
        snapshot: _Snapshot,
        user: str | None,
        address: str,
        permission: Permission,
        queue: str | None,
    ) -> bool:
        roles = snapshot.users.roles_of(user) if user is not None else self.anonymous_roles
        return not roles.isdisjoint(snapshot.settings.roles_for(address, permission, queue))


def _denial(user: str | None, address: str, permission: Permission, queue: str | None) -> str:
    bare, queue_in_name = split_fqqn(address)
    queue = queue or queue_in_name
    who = "anonymous user" if user is None else f"user {user!r}"
    where = f"queue {queue!r} on address {bare!r}" if queue else f"address {bare!r}"
    return f"{who} does not have permission {permission.value!r} on {where}"
