"""The broker core: addresses, queues, routing, journal, acceptors, security."""
