"""The cyclic garbage collector paused while a journal is replayed.

Replaying builds a table of every live message, and CPython's collector walks all tracked objects
again and again as that table grows: a third of a journal export's time and a quarter of a broker's
start on a journal with 300 000 live messages. Replay makes no reference cycles worth collecting
early, so the collector is simply off for the duration (the broker freezes what exists once started).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Collector off inside, and back on after only if it was on before (nesting and callers that
    turned it off themselves keep their choice)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
