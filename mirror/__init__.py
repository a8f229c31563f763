"""Artemis-compatible mirroring: source (events -> store-and-forward queue) and target."""

from broker_core.compiled import overlay

__path__ = overlay(__name__, __path__)  # the compiled hot path, when built and current
