"""AMQP error conditions and the exceptions that carry them.

Each exception says whose fault it is and maps onto exactly one AMQP error condition, so the edge that
catches it can close the right scope (link, session or connection) with the right condition.
"""

from __future__ import annotations

# Conditions (AMQP 1.0 part 2.8.15-2.8.18).
INTERNAL_ERROR = "amqp:internal-error"
NOT_FOUND = "amqp:not-found"
UNAUTHORIZED_ACCESS = "amqp:unauthorized-access"
DECODE_ERROR = "amqp:decode-error"
RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"
NOT_ALLOWED = "amqp:not-allowed"
INVALID_FIELD = "amqp:invalid-field"
NOT_IMPLEMENTED = "amqp:not-implemented"
RESOURCE_LOCKED = "amqp:resource-locked"
PRECONDITION_FAILED = "amqp:precondition-failed"
RESOURCE_DELETED = "amqp:resource-deleted"
ILLEGAL_STATE = "amqp:illegal-state"
FRAME_SIZE_TOO_SMALL = "amqp:frame-size-too-small"
CONNECTION_FORCED = "amqp:connection:forced"
FRAMING_ERROR = "amqp:connection:framing-error"
WINDOW_VIOLATION = "amqp:session:window-violation"
ERRANT_LINK = "amqp:session:errant-link"
HANDLE_IN_USE = "amqp:session:handle-in-use"
UNATTACHED_HANDLE = "amqp:session:unattached-handle"
DETACH_FORCED = "amqp:link:detach-forced"
TRANSFER_LIMIT_EXCEEDED = "amqp:link:transfer-limit-exceeded"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
TRANSACTION_UNKNOWN_ID = "amqp:transaction:unknown-id"  # part 4.5.8
TRANSACTION_ROLLBACK = "amqp:transaction:rollback"
TRANSACTION_TIMEOUT = "amqp:transaction:timeout"


class AmqpError(Exception):
    """The root of every error reported to a peer: it carries the AMQP condition to report.

    Subclasses say whose fault it is and which scope the edge that catches it closes: a
    `ProtocolError` closes the connection; a `broker_core.errors.BrokerError` refuses one attach or
    one delivery."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(f"{condition}: {description}")
        self.condition = condition
        self.description = description


class ProtocolError(AmqpError):
    """The peer broke the protocol: the connection is closed with the condition."""


class FrameTooLarge(ProtocolError):
    """A frame of ours would exceed the peer's max-frame-size, which AMQP forbids (part 2.7.1): it is not
    sent. Uncaught, the connection is closed with `amqp:frame-size-too-small`; the inbound endpoint
    catches it at an attach and refuses just that link."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            FRAME_SIZE_TOO_SMALL, f"{what} of {size} bytes exceeds the peer's max-frame-size {limit}"
        )
