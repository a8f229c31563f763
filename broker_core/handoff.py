"""Journal callbacks, handed from the writer thread to the event loop.

The loop runs them at its next turn, as `call_soon_threadsafe` would. The socket handlers also run
them between reads (`Flusher.after_read`): libuv reads a busy socket up to 32 times in one loop turn,
and a confirmation that is ready must not wait for the end of such a burst (a mirror target's
Accepted, a client's, the store-and-forward queue's dispatch).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class DurableCallbacks:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ready: deque[Callable[[], None]] = deque()  # appended by the writer thread, run by the loop

    def dispatch(self, callback: Callable[[], None]) -> None:
        """The journal's `dispatch` (writer thread): one call per batch of callbacks."""
        self.ready.append(callback)
        self.loop.call_soon_threadsafe(self.run)

    def run(self) -> None:
        """Run what is ready, in order (loop thread)."""
        ready = self.ready
        while ready:
            ready.popleft()()
