"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as pure state machines, no I/O.

Server exchange, one :meth:`ScramServer.step` per SASL response from the client::

    state        client sends                      server answers                done  ok
    initial      client-first  n,,n=user,r=c       r=c+s,s=salt,i=iterations     no    no
    challenged   client-final  c=biws,r=c+s,p=...  v=server-signature            yes   yes
    (any error)                                    e=<RFC 5802 error value>      yes   no

The server keeps only ``StoredKey`` and ``ServerKey`` (never the password). An unknown user gets
a challenge built from made-up credentials and fails at the proof like a wrong password, so the
exchange does not reveal which user names exist. Channel binding is not offered (no ``-PLUS``
mechanisms); a client asking for it (``p=``) is refused. Passwords are used as UTF-8 without
SASLprep normalisation, which only matters for non-ASCII passwords.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import NamedTuple

from broker_core.errors import Unauthorized

# RFC 7677 section 4: at least 4096 iterations for SCRAM-SHA-256.
DEFAULT_ITERATIONS = 4096
_NONCE_BYTES = 24
_GS2_HEADERS = ("n,", "y,")


class ScramMechanism(StrEnum):
    SHA_256 = "SCRAM-SHA-256"
    SHA_512 = "SCRAM-SHA-512"

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SHA_256 else "sha512"

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


class ScramError(Unauthorized):
    """A SCRAM exchange failed; ``error`` is the RFC 5802 ``server-error-value``."""

    def __init__(self, error: str) -> None:
        super().__init__(f"SCRAM authentication failed: {error}")
        self.error = error


@dataclass(frozen=True, slots=True)
class StoredCredentials:
    """What the server stores per user and mechanism (RFC 5802 section 3); no password."""

    mechanism: ScramMechanism
    salt: bytes
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)


class ScramStep(NamedTuple):
    """One server step: the bytes to send, whether the exchange ended, and its outcome."""

    server_bytes: bytes
    done: bool
    ok: bool
    user: str | None


def salted_password(password: str, salt: bytes, iterations: int, mechanism: ScramMechanism) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def derive_credentials(
    password: str, salt: bytes, iterations: int, mechanism: ScramMechanism | str
) -> StoredCredentials:
    """The server-side credentials for ``password``; store these instead of the password."""
    mech = ScramMechanism(mechanism)
    salted = salted_password(password, salt, iterations, mech)
    stored_key = mech.hash(mech.hmac(salted, b"Client Key"))
    server_key = mech.hmac(salted, b"Server Key")
    return StoredCredentials(mech, salt, iterations, stored_key, server_key)


def new_nonce() -> str:
    # URL-safe base64 never contains ',' which the SCRAM grammar forbids in a nonce.
    return secrets.token_urlsafe(_NONCE_BYTES)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ScramError("invalid-encoding") from None


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def escape_username(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_username(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise ScramError("invalid-username-encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> list[tuple[str, str]]:
    """Split ``a=1,b=2`` into pairs; every attribute is one letter, '=' and a value."""
    pairs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramError("invalid-encoding")
        pairs.append((part[0], part[2:]))
    return pairs


def _valid_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(ch) <= 0x7E and ch != "," for ch in nonce)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("invalid-encoding") from None


@dataclass(frozen=True, slots=True)
class _ClientFirst:
    gs2_header: str
    user: str
    nonce: str
    bare: str


def _parse_client_first(message: str) -> _ClientFirst:
    if message.startswith("p="):
        raise ScramError("channel-binding-not-supported")
    if not message.startswith(_GS2_HEADERS):
        raise ScramError("invalid-encoding")
    flag_end = message.index(",")
    authzid_end = message.find(",", flag_end + 1)
    if authzid_end < 0:
        raise ScramError("invalid-encoding")
    authzid, bare = message[flag_end + 1 : authzid_end], message[authzid_end + 1 :]
    if authzid and not authzid.startswith("a="):
        raise ScramError("invalid-encoding")
    attrs = _attributes(bare)
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not _valid_nonce(attrs[1][1]):
        raise ScramError("invalid-encoding")
    if any(key == "m" for key, _ in attrs[2:]):
        raise ScramError("extensions-not-supported")
    user = unescape_username(attrs[0][1])
    # Acting on behalf of another identity is not supported: authzid must be absent or the same user.
    if authzid and unescape_username(authzid.removeprefix("a=")) != user:
        raise ScramError("other-error")
    return _ClientFirst(message[: authzid_end + 1], user, attrs[1][1], bare)


class _State(Enum):
    INITIAL = "initial"
    CHALLENGED = "challenged"
    DONE = "done"


class ScramServer:
    """The server side of one SCRAM exchange; make a new one per authentication attempt."""

    def __init__(
        self,
        mechanism: ScramMechanism | str,
        lookup: Callable[[str], StoredCredentials | None],
        *,
        nonce_factory: Callable[[], str] = new_nonce,
        mock_secret: bytes | None = None,
    ) -> None:
        """``mock_secret`` seeds the fake salt for unknown users; share one per broker so the
        fake salt of a name stays the same between attempts, as a real one would."""
        self.mechanism = ScramMechanism(mechanism)
        self._lookup = lookup
        self._nonce_factory = nonce_factory
        self._mock_secret = mock_secret if mock_secret is not None else secrets.token_bytes(32)
        self._state = _State.INITIAL
        self._client_first: _ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""
        self._credentials: StoredCredentials | None = None
        self._user_known = False
        self._error: str | None = None

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    @property
    def claimed_user(self) -> str | None:
        """The user the client named (its ``n=``), once its first message was read; whether or not the
        exchange then succeeds. For log lines: a failed login is said with the name it tried."""
        return self._client_first.user if self._client_first is not None else None

    @property
    def error(self) -> str | None:
        """The RFC 5802 error the exchange ended with (``invalid-proof``, ...), if it failed."""
        return self._error

    def step(self, client_bytes: bytes) -> ScramStep:
        if self._state is _State.DONE:
            raise RuntimeError("the SCRAM exchange has already finished")
        try:
            if self._state is _State.INITIAL:
                return self._on_client_first(_decode(client_bytes))
            return self._on_client_final(_decode(client_bytes))
        except ScramError as exc:
            self._state = _State.DONE
            self._error = exc.error
            return ScramStep(f"e={exc.error}".encode(), True, False, None)

    def _on_client_first(self, message: str) -> ScramStep:
        first = _parse_client_first(message)
        credentials = self._lookup(first.user)
        self._user_known = credentials is not None and credentials.mechanism is self.mechanism
        if credentials is None or not self._user_known:
            credentials = self._mock_credentials(first.user)
        self._credentials = creds = credentials
        self._nonce = first.nonce + self._nonce_factory()
        self._server_first = f"r={self._nonce},s={_b64(creds.salt)},i={creds.iterations}"
        self._client_first = first
        self._state = _State.CHALLENGED
        return ScramStep(self._server_first.encode(), False, False, None)

    def _mock_credentials(self, user: str) -> StoredCredentials:
        salt = self.mechanism.hmac(self._mock_secret, user.encode())[:16]
        junk = self.mechanism.hmac(self._mock_secret, b"no such user")
        return StoredCredentials(self.mechanism, salt, DEFAULT_ITERATIONS, junk, junk)

    def _on_client_final(self, message: str) -> ScramStep:
        self._state = _State.DONE
        first, creds = self._client_first, self._credentials
        assert first is not None and creds is not None
        without_proof, sep, proof_text = message.rpartition(",p=")
        attrs = _attributes(without_proof) if sep else []
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise ScramError("invalid-encoding")
        if _unb64(attrs[0][1]) != first.gs2_header.encode():
            raise ScramError("channel-bindings-dont-match")
        if attrs[1][1] != self._nonce:
            raise ScramError("other-error")
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        if not self._proof_valid(creds, auth_message, _unb64(proof_text)):
            raise ScramError("invalid-proof")
        signature = self.mechanism.hmac(creds.server_key, auth_message)
        return ScramStep(f"v={_b64(signature)}".encode(), True, True, first.user)

    def _proof_valid(self, creds: StoredCredentials, auth_message: bytes, proof: bytes) -> bool:
        client_signature = self.mechanism.hmac(creds.stored_key, auth_message)
        if len(proof) != len(client_signature):
            return False
        client_key = _xor(proof, client_signature)
        valid = hmac.compare_digest(self.mechanism.hash(client_key), creds.stored_key)
        return valid and self._user_known


class ScramClient:
    """The client side of one exchange: :meth:`first`, :meth:`final`, then :meth:`verify`."""

    def __init__(
        self,
        mechanism: ScramMechanism | str,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
        min_iterations: int = DEFAULT_ITERATIONS,
    ) -> None:
        self.mechanism = ScramMechanism(mechanism)
        self.username = username
        self._password = password
        self._nonce = nonce or new_nonce()
        self._min_iterations = min_iterations
        self._bare = f"n={escape_username(username)},r={self._nonce}"
        self._expected_server_signature: bytes | None = None

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism.value!r}, username={self.username!r})"

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        message = _decode(server_first)
        attrs = dict(_attributes(message))
        if "e" in attrs:
            raise ScramError(attrs["e"])
        nonce, salt, iterations = attrs.get("r", ""), _unb64(attrs.get("s", "")), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or nonce == self._nonce or not salt or not iterations.isdigit():
            raise ScramError("invalid-encoding")
        if int(iterations) < self._min_iterations:
            raise ScramError(f"iteration count {iterations} is below the minimum {self._min_iterations}")
        salted = salted_password(self._password, salt, int(iterations), self.mechanism)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{message},{without_proof}".encode()
        client_key = self.mechanism.hmac(salted, b"Client Key")
        signature = self.mechanism.hmac(self.mechanism.hash(client_key), auth_message)
        server_key = self.mechanism.hmac(salted, b"Server Key")
        self._expected_server_signature = self.mechanism.hmac(server_key, auth_message)
        return f"{without_proof},p={_b64(_xor(client_key, signature))}".encode()

    def verify(self, server_final: bytes) -> None:
        """Raise :class:`ScramError` unless the server proved it knows the credentials."""
        attrs = dict(_attributes(_decode(server_final)))
        if "e" in attrs:
            raise ScramError(attrs["e"])
        expected = self._expected_server_signature
        if expected is None or not hmac.compare_digest(_unb64(attrs.get("v", "")), expected):
            raise ScramError("server signature does not match: the server does not know the password")
