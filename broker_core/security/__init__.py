"""Authentication (users, SASL PLAIN and SCRAM) and authorization (Artemis security-settings).

Everything here is pure: no sockets, no clock, no logging of secrets. The server maps a
:class:`broker_core.errors.Unauthorized` onto ``amqp:unauthorized-access``.
"""

from __future__ import annotations

from broker_core.security.authentication import UserStore
from broker_core.security.authorization import Authorizer, Permission, SecuritySettings
from broker_core.security.scram import (
    ScramClient,
    ScramError,
    ScramMechanism,
    ScramServer,
    ScramStep,
    StoredCredentials,
    derive_credentials,
)

__all__ = [
    "Authorizer",
    "Permission",
    "ScramClient",
    "ScramError",
    "ScramMechanism",
    "ScramServer",
    "ScramStep",
    "SecuritySettings",
    "StoredCredentials",
    "UserStore",
    "derive_credentials",
]
