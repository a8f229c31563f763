"""Paging: the messages of an address over its memory limit live in page files until their queues read
them back (paging.py explains the model; store.py the pages; pagefile.py and reader.py the files)."""

from ..compiled import overlay

__path__ = overlay(__name__, __path__)  # the compiled hot path, when built and current
