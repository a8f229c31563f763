"""Authentication (users, SASL PLAIN and SCRAM) and authorization (Artemis security-settings).

Everything here is pure: no sockets, no clock, no logging of secrets. The server maps a
:class:`SecurityError` onto an AMQP error with its ``condition``.
"""

from __future__ import annotations

UNAUTHORIZED_ACCESS = "amqp:unauthorized-access"


class SecurityError(Exception):
    """The client is not allowed to do this; the server answers with ``condition``."""

    def __init__(self, description: str, *, condition: str = UNAUTHORIZED_ACCESS) -> None:
        super().__init__(f"{condition}: {description}")
        self.condition = condition
        self.description = description


# Imported after SecurityError, which the submodules use.
from broker_core.security.authentication import UserStore  # noqa: E402
from broker_core.security.authorization import Authorizer, Permission, SecuritySettings  # noqa: E402
from broker_core.security.scram import (  # noqa: E402
    ScramClient,
    ScramError,
    ScramMechanism,
    ScramServer,
    ScramStep,
    StoredCredentials,
    derive_credentials,
)

__all__ = [
    "UNAUTHORIZED_ACCESS",
    "Authorizer",
    "Permission",
    "ScramClient",
    "ScramError",
    "ScramMechanism",
    "ScramServer",
    "ScramStep",
    "SecurityError",
    "SecuritySettings",
    "StoredCredentials",
    "UserStore",
    "derive_credentials",
]
