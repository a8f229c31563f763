"""Helpers to run our own broker as a separate process and talk to it with real clients."""
