"""AMQP 1.0: the type system, frames and performatives, and the connection engine."""

from ..compiled import overlay

__path__ = overlay(__name__, __path__)  # the compiled hot path, when built and current
