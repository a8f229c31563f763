"""The broker core: addresses, queues, routing, journal, acceptors, security."""

from .compiled import overlay

__path__ = overlay(__name__, __path__)  # the compiled hot path, when built and current (compiled.py)
