"""Errors of broker operations, each with the AMQP condition to report to the client."""

from __future__ import annotations


class BrokerError(Exception):
    """An operation refused by the broker, with the AMQP condition to report."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description
