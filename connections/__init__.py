"""Outbound AMQP broker connections (sender, receiver, peer) and the failover client."""

from broker_core.compiled import overlay

__path__ = overlay(__name__, __path__)  # the compiled hot path, when built and current
