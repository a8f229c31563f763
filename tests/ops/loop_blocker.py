"""`amqp-mirror` with a way to stall its event loop from outside, for the watchdog test.

SIGUSR1 makes the loop run `time.sleep(BLOCK_SECONDS)`: a loop stuck in a blocking call, as a bug
would leave it. Everything else is the command as installed.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from amqp_mirror import runtime
from amqp_mirror.cli import main

_new_loop = runtime.new_loop


def _blockable_loop():  # type: ignore[no-untyped-def]
    loop = _new_loop()
    seconds = float(os.environ.get("BLOCK_SECONDS", "1.5"))
    loop.add_signal_handler(signal.SIGUSR1, lambda: time.sleep(seconds))
    return loop


runtime.new_loop = _blockable_loop

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
