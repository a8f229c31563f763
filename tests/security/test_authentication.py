"""UserStore: password checks, SASL PLAIN, SCRAM credentials, and no password leaks."""

import logging

import pytest

from broker_core.security import ScramClient, ScramMechanism, ScramServer, UserStore

USERS = {"alice": "wonder land", "bob": "b0b", "empty": ""}
ROLES = {"alice": frozenset({"admin", "amq"}), "bob": frozenset({"amq"})}


@pytest.fixture
def users() -> UserStore:
    return UserStore(USERS, ROLES)


@pytest.mark.parametrize(
    ("user", "password", "expected"),
    [
        ("alice", "wonder land", True),
        ("alice", "wonder land ", False),
        ("alice", "Wonder land", False),
        ("alice", "b0b", False),
        ("bob", "b0b", True),
        ("empty", "", False),  # an empty password cannot log in (a slip in the users file, not a choice)
        ("empty", "x", False),
        ("nobody", "", False),
        ("nobody", "b0b", False),
        ("Alice", "wonder land", False),
    ],
)
def test_check_plain(users: UserStore, user: str, password: str, expected: bool) -> None:
    assert users.check_plain(user, password) is expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (b"\0alice\0wonder land", "alice"),
        (b"alice\0alice\0wonder land", "alice"),
        (b"bob\0alice\0wonder land", None),
        (b"\0alice\0wrong", None),
        (b"\0alice", None),
        (b"\0alice\0wonder land\0extra", None),
        (b"\0\xff\0x", None),
        (b"", None),
    ],
)
def test_check_sasl_plain(users: UserStore, response: bytes, expected: str | None) -> None:
    assert users.check_sasl_plain(response) == expected


@pytest.mark.parametrize(
    ("user", "roles"),
    [("alice", {"admin", "amq"}), ("bob", {"amq"}), ("empty", set()), ("nobody", set()), (None, set())],
)
def test_roles_of(users: UserStore, user: str | None, roles: set[str]) -> None:
    assert users.roles_of(user) == roles


def test_passwords_are_not_in_repr_and_the_store_logs_nothing(
    users: UserStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    users.check_plain("alice", "my-typo-secret")
    users.check_sasl_plain(b"\0bob\0another-secret")
    assert "wonder" not in repr(users) and "b0b" not in repr(users)
    assert "alice" in repr(users)
    assert caplog.text == ""  # a failed login is said once, by the acceptor, with the peer


@pytest.mark.parametrize(
    ("user", "why"),
    [
        ("alice", "wrong password"),
        ("nobody", "unknown user"),
        ("empty", "the user's password is empty, and an empty password cannot log in"),
    ],
)
def test_why_a_login_was_refused(users: UserStore, user: str, why: str) -> None:
    assert users.why_refused(user) == why


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_scram_lookup_authenticates_store_users(users: UserStore, mechanism: ScramMechanism) -> None:
    server = ScramServer(mechanism, users.scram_lookup(mechanism))
    client = ScramClient(mechanism, "alice", "wonder land")
    first = server.step(client.first())
    final = server.step(client.final(first.server_bytes))
    assert (final.ok, final.user) == (True, "alice")


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_an_empty_password_cannot_log_in_with_scram(users: UserStore, mechanism: ScramMechanism) -> None:
    assert users.scram_credentials("empty", mechanism) is None
    server = ScramServer(mechanism, users.scram_lookup(mechanism))
    client = ScramClient(mechanism, "empty", "")
    first = server.step(client.first())
    final = server.step(client.final(first.server_bytes))
    assert (final.done, final.ok) == (True, False)


def test_scram_credentials_are_stable_per_store(users: UserStore) -> None:
    first = users.scram_credentials("bob", ScramMechanism.SHA_256)
    assert first is not None
    assert users.scram_credentials("bob", "SCRAM-SHA-256") is first
    assert users.scram_credentials("nobody", ScramMechanism.SHA_256) is None
    other_store = UserStore(USERS, ROLES).scram_credentials("bob", ScramMechanism.SHA_256)
    assert other_store is not None and other_store.salt != first.salt
