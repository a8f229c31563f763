"""Loaded at start-up (as `sitecustomize`) by the processes the tests run under libfaketime
(tests/support/faketime.py), and by no other: libfaketime 0.9.10 with CLOCK_MONOTONIC left true makes
Python 3.11's `time.sleep` fail with EINVAL (it shifts the deadline of clock_nanosleep on the monotonic
clock by the wall clock's offset). select() with no file sleeps for a relative time instead."""

import os
import select
import time

if "faketime" in os.environ.get("LD_PRELOAD", ""):

    def _sleep(seconds: float) -> None:
        select.select([], [], [], seconds)

    time.sleep = _sleep
