"""The server side of SASL: PLAIN, SCRAM-SHA-512/256, and ANONYMOUS while security is off.

No secret is ever logged. A failed login is one WARNING line, `AMQ951040`, naming the user the client
claimed (PLAIN's user, SCRAM's `n=`), the peer, the mechanism and why it failed. Repeats of one user from
one host are summarised: a client retrying a wrong password every second, or a backup with the wrong
cluster password, is one line, then at most one a minute with the count since (failed_logins.py).
"""

from __future__ import annotations

import hmac
import logging
from typing import TYPE_CHECKING

from .security.scram import ScramServer

if TYPE_CHECKING:
    from .amqp.connection import Connection
    from .server import Server

log = logging.getLogger("broker.inbound")

SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")


def mechanisms(secure: bool, scram: bool = True) -> tuple[str, ...]:
    """What the acceptor offers: ANONYMOUS only while security is off; SCRAM unless a user's password is
    a one-way hash (Artemis's ENC), which only PLAIN can check (a client takes the strongest offered, and
    would fail with SCRAM), as Artemis offers PLAIN to the users a properties file hashes."""
    return (SCRAM_MECHANISMS if scram else ()) + (("PLAIN",) if secure else ("ANONYMOUS", "PLAIN"))


class ServerSasl:
    """One connection's SASL exchange, as the accepting side."""

    def __init__(self, server: Server, peer: str, acceptor: str = "") -> None:
        self.server = server
        self.peer = peer
        self.acceptor = acceptor  # whose failed logins are counted
        self.scram: ScramServer | None = None
        self.cluster = False  # authenticated with the cluster user and password (HA replication)

    def init(self, conn: Connection, mechanism: str, response: bytes | None) -> None:
        secure = self.server.config.security_enabled
        if mechanism in SCRAM_MECHANISMS:
            self.scram = ScramServer(
                mechanism,
                self.server.user_store.scram_lookup(mechanism),
                mock_secret=self.server.scram_secret,
            )
            self.response(conn, response or b"")
            return
        if mechanism == "ANONYMOUS" and "ANONYMOUS" in conn.sasl.mechanisms:
            conn.sasl_outcome(True, None)
            return
        if mechanism != "PLAIN":
            self._refused(conn, None, mechanism, "mechanism not offered")
            return
        parts = (response or b"").split(b"\x00")
        if len(parts) != 3:
            self._refused(conn, None, mechanism, "malformed response")
            return
        user = parts[1].decode("utf-8", "replace")
        password = parts[2].decode("utf-8", "replace")
        if self._cluster_member(user, password):
            self.cluster = True
            conn.sasl_outcome(True, user)
            log.debug("%s authenticated as the cluster user", self.peer)
        elif self.server.authenticate_plain(user, password) or (not secure and not self._is_cluster(user)):
            conn.sasl_outcome(True, user)
            log.debug("%s authenticated as %s", self.peer, user)
        else:
            self._refused(conn, user, mechanism, self._why(user))

    def _is_cluster(self, user: str | None) -> bool:
        """Whether `user` names the cluster user, which logs in only with the cluster password, whatever
        security-enabled says (with security off, any other name is let in)."""
        cluster_user = self.server.config.cluster_user
        return bool(cluster_user) and user == cluster_user

    def _cluster_member(self, user: str, password: str) -> bool:
        """The cluster user and password of broker.xml (another server of an HA pair), checked whatever
        security-enabled says: replication carries every message."""
        config = self.server.config
        if not config.cluster_user or not config.cluster_password:
            return False  # an empty password logs nobody in
        same_user = hmac.compare_digest(user.encode(), config.cluster_user.encode())
        return same_user and hmac.compare_digest(password.encode(), config.cluster_password.encode())

    def response(self, conn: Connection, response: bytes) -> None:
        scram = self.scram
        if scram is None:
            conn.sasl_outcome(False, None)
            return
        step = scram.step(response)
        if not step.done:
            conn.sasl_challenge(step.server_bytes)
            return
        self.scram = None
        if step.ok and step.user == self.server.config.cluster_user:
            self.cluster = True  # a verified proof of the cluster password
        user = scram.claimed_user
        if step.ok or (not self.server.config.security_enabled and not self._is_cluster(user)):
            conn.sasl_outcome(True, step.user, step.server_bytes)
            return
        if user is not None and scram.error == "invalid-proof":
            why = self._why(user)  # an unknown user fails at the proof too, like a wrong password
        else:
            why = f"SCRAM error {scram.error}"
        self._refused(conn, user, scram.mechanism, why, step.server_bytes)

    def _why(self, user: str) -> str:
        if self._is_cluster(user):
            return "wrong password for the cluster user: check <cluster-password> on both servers"
        return self.server.user_store.why_refused(user)

    def _refused(
        self, conn: Connection, user: str | None, mechanism: str, why: str, additional: bytes | None = None
    ) -> None:
        """Refuse the login: count it, say it (unless it repeats: summarised), answer the outcome."""
        self.server.stats.acceptor(self.acceptor).auth_failures += 1
        unsaid = self.server.failed_logins.due(user, self.peer.rpartition(":")[0] or self.peer)
        if unsaid is not None:
            log.warning(
                "AMQ951040: authentication failed%s from %s (%s: %s)%s",
                f" for user {user}" if user is not None else "",
                self.peer,
                mechanism,
                why,
                f"; {unsaid} more from that host since the last such line" if unsaid else "",
            )
        conn.sasl_outcome(False, None, additional)
