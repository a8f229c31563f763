"""Users, their passwords and roles, and the checks behind SASL PLAIN and SCRAM.

Passwords never leave this object: not in ``repr``, not in exceptions. It logs nothing: the acceptor
says a failed login once, with the peer (broker_core/inbound_sasl.py).
Password comparison is constant-time (digests of equal length compared with
``hmac.compare_digest``), and an unknown user costs the same comparison as a known one.

A user whose password is empty cannot log in, with PLAIN or SCRAM (Artemis's properties login module
would accept the empty password): an empty password in the users file is far more often a slip, such as
a line without ``=``, than a choice, and it would let anyone who knows the name in.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping

from broker_core.security.masked import masked, verify
from broker_core.security.scram import (
    DEFAULT_ITERATIONS,
    ScramMechanism,
    StoredCredentials,
    derive_credentials,
)

_SALT_BYTES = 16


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode()).digest()


class UserStore:
    """The broker's users (user -> plain password) and roles (user -> role names)."""

    def __init__(
        self,
        users: Mapping[str, str],
        roles: Mapping[str, frozenset[str]],
        *,
        scram_iterations: int = DEFAULT_ITERATIONS,
    ) -> None:
        self._passwords = dict(users)
        self._roles = {user: frozenset(names) for user, names in roles.items()}
        self._scram_iterations = scram_iterations
        self._scram_cache: dict[tuple[str, ScramMechanism], StoredCredentials] = {}
        # Compared against when the user is unknown, so that case takes as long as a wrong password.
        self._decoy = _digest(secrets.token_hex(16))
        # Users whose password is a one-way hash (ENC): SCRAM cannot check them, it needs the password
        self.hashed_users = frozenset(u for u, p in self._passwords.items() if masked(p) is not None)

    def __repr__(self) -> str:
        return f"UserStore(users={sorted(self._passwords)!r})"

    @property
    def users(self) -> frozenset[str]:
        return frozenset(self._passwords)

    def has_user(self, user: str) -> bool:
        return user in self._passwords

    def roles_of(self, user: str | None) -> frozenset[str]:
        """The user's roles; empty for an unknown or anonymous user."""
        return self._roles.get(user, frozenset()) if user is not None else frozenset()

    def check_plain(self, user: str, password: str) -> bool:
        stored = self._passwords.get(user) or None  # an empty password is none: nobody logs in with it
        if stored is not None:
            hashed = masked(stored)
            if hashed is not None:  # a one-way hash (users.py decodes two-way masks): only verifiable
                return verify(hashed, password)
        expected = _digest(stored) if stored is not None else self._decoy
        valid = hmac.compare_digest(_digest(password), expected)
        return valid and stored is not None

    def why_refused(self, user: str) -> str:
        """Why a login of `user` failed, for the log line: the name is unknown, its password is empty,
        or what was sent did not match."""
        if user not in self._passwords:
            return "unknown user"
        if not self._passwords[user]:
            return "the user's password is empty, and an empty password cannot log in"
        return "wrong password"

    def check_sasl_plain(self, response: bytes) -> str | None:
        """Check a SASL PLAIN initial response (RFC 4616); the authenticated user or None.

        ``authzid`` must be empty or equal to the user: acting as someone else is not supported.
        """
        try:
            authzid, user, password = response.decode("utf-8").split("\0")
        except (UnicodeDecodeError, ValueError):
            return None
        if authzid not in ("", user):
            return None
        return user if self.check_plain(user, password) else None

    def scram_credentials(self, user: str, mechanism: ScramMechanism | str) -> StoredCredentials | None:
        """SCRAM credentials derived from the plain password, with a random salt per store."""
        mech = ScramMechanism(mechanism)
        password = self._passwords.get(user)
        if not password or masked(password) is not None:
            return None  # an unknown user, an empty password, a hash: fails like a wrong password
        key = (user, mech)
        if key not in self._scram_cache:
            salt = secrets.token_bytes(_SALT_BYTES)
            self._scram_cache[key] = derive_credentials(password, salt, self._scram_iterations, mech)
        return self._scram_cache[key]

    def scram_lookup(self, mechanism: ScramMechanism | str) -> Callable[[str], StoredCredentials | None]:
        """The ``lookup`` callable a :class:`~broker_core.security.scram.ScramServer` takes."""
        mech = ScramMechanism(mechanism)
        return lambda user: self.scram_credentials(user, mech)
