"""Operations the broker refuses, each class with the AMQP condition the peer is told.

One root for all of them (`BrokerError`, itself an `AmqpError`), so an edge that refuses an attach or a
delivery catches one class and reads the condition off the exception.
"""

from __future__ import annotations

from typing import ClassVar

from .amqp import errors
from .amqp.errors import AmqpError


class BrokerError(AmqpError):
    """An operation refused by the broker: the attach or the delivery is refused with `condition`."""


class _Refusal(BrokerError):
    """A refusal whose condition is fixed by its class: raise it with the description only."""

    CONDITION: ClassVar[str] = errors.INTERNAL_ERROR

    def __init__(self, description: str) -> None:
        super().__init__(self.CONDITION, description)


class NotFound(_Refusal):
    CONDITION = errors.NOT_FOUND


class AlreadyExists(_Refusal):
    CONDITION = errors.RESOURCE_LOCKED


class PreconditionFailed(_Refusal):
    CONDITION = errors.PRECONDITION_FAILED


class IllegalState(_Refusal):
    CONDITION = errors.ILLEGAL_STATE


class NotImplementedHere(_Refusal):
    """Something AMQP allows that this broker does not do (transactions, selectors, ...)."""

    CONDITION = errors.NOT_IMPLEMENTED


class InvalidField(_Refusal):
    CONDITION = errors.INVALID_FIELD


class ResourceLimitExceeded(_Refusal):
    CONDITION = errors.RESOURCE_LIMIT_EXCEEDED


class ResourceLocked(_Refusal):
    CONDITION = errors.RESOURCE_LOCKED


class NotAllowed(_Refusal):
    """Nobody may do this, whatever their permissions (the broker's internal queues)."""

    CONDITION = errors.NOT_ALLOWED


class Unauthorized(_Refusal):
    """The client is not allowed to do this."""

    CONDITION = errors.UNAUTHORIZED_ACCESS
