"""Artemis-compatible mirroring: source (events -> store-and-forward queue) and target."""
