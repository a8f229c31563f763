"""Outbound AMQP broker connections (sender, receiver, peer) and the failover client."""
