"""Authorizer: Artemis security-setting semantics, FQQNs, anonymous users and the cache."""

from enum import StrEnum

import pytest

from broker_core.errors import Unauthorized
from broker_core.security import Authorizer, Permission, SecuritySettings, UserStore
from broker_core.security.authorization import split_fqqn

P = Permission

RULES = {
    "#": {P.SEND: frozenset({"amq"}), P.CONSUME: frozenset({"amq"}), P.BROWSE: frozenset({"amq"})},
    "orders.#": {P.SEND: frozenset({"writer"})},
    "orders.eu": {P.CONSUME: frozenset({"reader"}), P.SEND: frozenset({"writer", "amq"})},
    "orders.*.vip": {P.CONSUME: frozenset({"vip"})},
    "orders::audit": {P.CONSUME: frozenset({"auditor"})},
    "orders.eu::special": {P.CONSUME: frozenset({"special"})},
    "orders.*::q": {P.CONSUME: frozenset({"wild"})},
    "billing.*": {},
}
ROLES = {
    "alice": frozenset({"amq"}),
    "wally": frozenset({"writer"}),
    "rita": frozenset({"reader"}),
    "vic": frozenset({"vip"}),
    "aud": frozenset({"auditor"}),
    "spec": frozenset({"special"}),
    "wild": frozenset({"wild"}),
    "bob": frozenset(),
}
USERS = UserStore({name: "pw" for name in ROLES}, ROLES)

# (user, address, permission, queue, expected, why)
CASES = [
    ("alice", "misc", P.SEND, None, True, "'#' grants amq send"),
    ("alice", "misc", P.MANAGE, None, False, "permission not listed anywhere"),
    ("alice", "orders.us", P.SEND, None, False, "orders.# decides alone: writer only"),
    ("wally", "orders.us", P.SEND, None, True, "orders.# grants writer send"),
    ("alice", "orders.us", P.CONSUME, None, False, "not merged with '#': consume is gone"),
    ("alice", "orders", P.CONSUME, None, False, "orders.# also matches 'orders' itself"),
    ("alice", "orders.eu", P.SEND, None, True, "exact match beats orders.#"),
    ("rita", "orders.eu", P.CONSUME, None, True, "exact match grants reader"),
    ("wally", "orders.eu", P.CONSUME, None, False, "exact match has no writer consume"),
    ("vic", "orders.eu.vip", P.CONSUME, None, True, "orders.*.vip beats orders.#"),
    ("wally", "orders.eu.vip", P.SEND, None, False, "orders.*.vip decides: no send"),
    ("aud", "orders::audit", P.CONSUME, None, True, "exact FQQN setting decides"),
    ("alice", "orders::audit", P.CONSUME, None, False, "FQQN setting replaces the address's"),
    ("aud", "orders", P.CONSUME, "audit", True, "queue given separately"),
    ("aud", "orders::other", P.CONSUME, None, False, "no FQQN setting: address 'orders' decides"),
    ("wally", "orders::other", P.SEND, None, True, "no FQQN setting: orders.# grants send"),
    ("wild", "orders.x::q", P.CONSUME, None, False, "wildcard FQQN settings never apply"),
    ("spec", "orders.eu::special", P.CONSUME, None, True, "exact FQQN setting"),
    ("rita", "orders.eu::special", P.CONSUME, None, False, "FQQN setting lacks reader"),
    ("rita", "orders.eu::x", P.CONSUME, None, True, "falls back to address orders.eu"),
    ("alice", "billing.x", P.SEND, None, False, "empty setting denies everything"),
    ("alice", "billing.x.y", P.SEND, None, True, "billing.* needs exactly one word; '#' decides"),
    ("bob", "misc", P.SEND, None, False, "user without roles"),
    ("nobody", "misc", P.SEND, None, False, "unknown user"),
    (None, "misc", P.SEND, None, False, "anonymous without anonymous roles"),
]


@pytest.mark.parametrize(("user", "address", "permission", "queue", "expected", "why"), CASES)
def test_allowed(
    user: str | None, address: str, permission: Permission, queue: str | None, expected: bool, why: str
) -> None:
    authorizer = Authorizer(True, SecuritySettings(RULES), USERS)
    assert authorizer.allowed(user, address, permission, queue) is expected, why
    # The cached answer is the same answer.
    assert authorizer.allowed(user, address, permission, queue) is expected, why


def test_deciding_match() -> None:
    settings = SecuritySettings(RULES)
    assert settings.deciding_match("orders.eu.vip") == "orders.*.vip"
    assert settings.deciding_match("orders::audit") == "orders::audit"
    assert settings.deciding_match("orders.eu", queue="special") == "orders.eu::special"
    assert SecuritySettings({}).deciding_match("x") is None


def test_no_settings_deny_everything() -> None:
    authorizer = Authorizer(True, SecuritySettings({}), USERS)
    assert not any(authorizer.allowed("alice", "misc", p) for p in Permission)


def test_disabled_security_allows_everything() -> None:
    authorizer = Authorizer(False, SecuritySettings({}), UserStore({}, {}))
    assert all(authorizer.allowed(user, "x", p) for p in Permission for user in (None, "ghost"))


def test_anonymous_roles() -> None:
    authorizer = Authorizer(True, SecuritySettings(RULES), USERS, anonymous_roles=frozenset({"amq"}))
    assert authorizer.allowed(None, "misc", P.SEND)
    assert not authorizer.allowed(None, "orders.us", P.SEND)


def test_cache_is_invalidated_when_settings_change() -> None:
    authorizer = Authorizer(True, SecuritySettings(RULES), USERS)
    assert not authorizer.allowed("alice", "orders.us", P.CONSUME)
    assert authorizer.cache_size == 1
    relaxed = dict(RULES, **{"orders.#": {P.CONSUME: frozenset({"amq"})}})
    authorizer.update_settings(SecuritySettings(relaxed))
    assert authorizer.cache_size == 0
    assert authorizer.allowed("alice", "orders.us", P.CONSUME)


def test_cache_is_invalidated_when_users_change() -> None:
    authorizer = Authorizer(True, SecuritySettings(RULES), USERS)
    assert authorizer.allowed("alice", "misc", P.SEND)
    authorizer.update_users(UserStore({"alice": "pw"}, {"alice": frozenset({"nothing"})}))
    assert not authorizer.allowed("alice", "misc", P.SEND)


def test_cache_is_keyed_on_every_input() -> None:
    authorizer = Authorizer(True, SecuritySettings(RULES), USERS)
    assert authorizer.allowed("alice", "misc", P.SEND)
    assert not authorizer.allowed("alice", "misc", P.MANAGE)
    assert not authorizer.allowed("bob", "misc", P.SEND)
    assert not authorizer.allowed("alice", "orders.us", P.SEND)
    assert authorizer.allowed("aud", "orders", P.CONSUME, "audit")
    assert not authorizer.allowed("aud", "orders", P.CONSUME)
    assert authorizer.cache_size == 6


def test_cache_stays_bounded() -> None:
    authorizer = Authorizer(True, SecuritySettings(RULES), USERS, cache_limit=3)
    for index in range(10):
        assert authorizer.allowed("alice", f"tmp.{index}", P.SEND)
        # a full cache is cleared before the next entry: 1, 2, 3, 1, 2, 3, ...
        assert authorizer.cache_size == index % 3 + 1


def test_check_raises_security_error() -> None:
    authorizer = Authorizer(True, SecuritySettings(RULES), USERS)
    authorizer.check("alice", "misc", P.SEND)
    with pytest.raises(Unauthorized) as raised:
        authorizer.check("rita", "orders.eu::special", P.CONSUME)
    assert raised.value.condition == "amqp:unauthorized-access"
    assert "'rita'" in raised.value.description
    assert "'consume'" in raised.value.description
    assert "queue 'special' on address 'orders.eu'" in raised.value.description
    with pytest.raises(Unauthorized, match=r"anonymous user .* address 'misc'"):
        authorizer.check(None, "misc", P.MANAGE)


def test_permission_values_are_the_broker_xml_types() -> None:
    assert {p.value for p in Permission} == {
        "createAddress",
        "deleteAddress",
        "createDurableQueue",
        "deleteDurableQueue",
        "createNonDurableQueue",
        "deleteNonDurableQueue",
        "send",
        "consume",
        "manage",
        "browse",
        "view",
        "edit",
    }


def test_settings_accept_keys_from_another_str_enum() -> None:
    class ConfigPermission(StrEnum):
        SEND = "send"

    settings = SecuritySettings({"#": {ConfigPermission.SEND: frozenset({"amq"})}})  # type: ignore[dict-item]
    assert settings.roles_for("x", P.SEND) == {"amq"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a", ("a", None)),
        ("a::q", ("a", "q")),
        ("a::", ("a", "")),
        ("::q", ("", "q")),
        ("a::b::c", ("a", "b::c")),
    ],
)
def test_split_fqqn(name: str, expected: tuple[str, str | None]) -> None:
    assert split_fqqn(name) == expected
