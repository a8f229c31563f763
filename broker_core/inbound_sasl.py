"""The server side of SASL: PLAIN, SCRAM-SHA-512/256, and ANONYMOUS while security is off.

No secret is ever logged: a failed login names the user and the peer, never what was sent.
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


def mechanisms(secure: bool) -> tuple[str, ...]:
    """What the acceptor offers: ANONYMOUS only while security is off."""
    return SCRAM_MECHANISMS + (("PLAIN",) if secure else ("ANONYMOUS", "PLAIN"))


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
        if mechanism == "PLAIN":
            parts = (response or b"").split(b"\x00")
            if len(parts) == 3:
                user = parts[1].decode("utf-8", "replace")
                password = parts[2].decode("utf-8", "replace")
                if self._cluster_member(user, password):
                    self.cluster = True
                    conn.sasl_outcome(True, user)
                    log.debug("%s authenticated as the cluster user", self.peer)
                    return
                if self.server.authenticate_plain(user, password) or not secure:
                    conn.sasl_outcome(True, user)
                    log.debug("%s authenticated as %s", self.peer, user)
                    return
                log.warning("authentication failed for user %s from %s", user, self.peer)
            else:
                log.warning("malformed SASL PLAIN response from %s", self.peer)
        else:
            log.warning("SASL mechanism %s refused for %s", mechanism, self.peer)
        self.server.stats.acceptor(self.acceptor).auth_failures += 1
        conn.sasl_outcome(False, None)

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
        if step.ok or not self.server.config.security_enabled:
            conn.sasl_outcome(True, step.user, step.server_bytes)
        else:
            log.warning(
                "authentication failed for user %s from %s (%s)", step.user, self.peer, scram.mechanism
            )
            self.server.stats.acceptor(self.acceptor).auth_failures += 1
            conn.sasl_outcome(False, None, step.server_bytes)
