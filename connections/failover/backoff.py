"""The reconnect schedule: which broker URI to try next and how long to wait first. Pure: no I/O, no clock;
randomness comes from an injected ``random.Random``.

Semantics (AMQ 6.3 client failover, Table 2.1 and Section 2.1.3), as implemented here:

* A *reconnect attempt* is one pass over the URI list: every URI is tried once, back to back, and the
  delay applies before the first URI of a pass.
* Start-up: pass 0 is the initial connection (no delay); then up to ``startupMaxReconnectAttempts``
  further passes (-1: unlimited, 0: no retry).
* After a loss: up to ``maxReconnectAttempts`` passes (-1: unlimited; 0: no attempt to fail over),
  the first one after ``initialReconnectDelay``.
* Delay before reconnect pass k (k >= 1): ``initialReconnectDelay * backOffMultiplier ** (k-1)`` with
  ``useExponentialBackOff``, else ``initialReconnectDelay``; never more than ``maxReconnectDelay``.
* Order inside a pass: priority URIs first, in their listed order (``priorityBackup``: ``priorityURIs``,
  or the first URI of the list when that is empty); then the others, shuffled anew for every pass when
  ``randomize`` is true, else left to right. After a loss the broker just lost goes last (the chapter:
  the client "will attempt to reconnect to a different broker in the list").
* ``warnAfterReconnectAttempts`` = N > 0: the first attempt of a pass carries ``warn`` when the number
  of failed passes so far is a positive multiple of N.
* Returning to priority (``priorityBackup``): while connected to a URI that is not the best-ranked
  priority URI, ``priority_probes`` yields the better-ranked priority URIs to probe, each probe pass after
  the same back-off delays; a successful probe means "switch over".
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from connections.failover.uri import INFINITE, BrokerUri, FailoverOptions


@dataclass(frozen=True)
class Attempt:
    """Try ``uri`` after waiting ``delay_ms``; ``failures`` passes have failed before this one."""

    uri: BrokerUri
    delay_ms: int
    pass_number: int
    failures: int
    warn: bool = False


def reconnect_delays(options: FailoverOptions) -> Iterator[int]:
    """Delays (ms) before reconnect passes 1, 2, 3, ... (endless)."""
    delay = float(min(options.initial_reconnect_delay, options.max_reconnect_delay))
    while True:
        yield round(delay)
        if options.use_exponential_back_off:
            delay = min(delay * options.back_off_multiplier, float(options.max_reconnect_delay))


def priority_list(uris: Sequence[BrokerUri], options: FailoverOptions) -> tuple[BrokerUri, ...]:
    """The priority URIs in rank order; empty unless ``priorityBackup``."""
    if not options.priority_backup or not uris:
        return ()
    return options.priority_uris or (uris[0],)


def pass_order(
    uris: Sequence[BrokerUri],
    options: FailoverOptions,
    rng: random.Random,
    failed: BrokerUri | None = None,
) -> list[BrokerUri]:
    """The order of one pass: priority URIs first, the rest shuffled or in order, ``failed`` last."""
    first = [uri for uri in priority_list(uris, options) if uri != failed]
    rest = [uri for uri in uris if uri not in first and uri != failed]
    if options.randomize:
        rng.shuffle(rest)
    tail = [uri for uri in uris if uri == failed][:1]
    return first + rest + tail


def connect_schedule(
    uris: Sequence[BrokerUri],
    options: FailoverOptions,
    *,
    startup: bool,
    rng: random.Random,
    failed: BrokerUri | None = None,
) -> Iterator[Attempt]:
    """Every attempt of one (re)connect, in order; it ends when the attempt limit is spent."""
    limit = options.startup_max_reconnect_attempts if startup else options.max_reconnect_attempts
    delays = reconnect_delays(options)
    pass_number = 0 if startup else 1
    while limit == INFINITE or pass_number <= limit:
        failures = pass_number if startup else pass_number - 1
        delay = 0 if pass_number == 0 else next(delays)
        for index, uri in enumerate(pass_order(uris, options, rng, failed)):
            first = index == 0
            yield Attempt(
                uri=uri,
                delay_ms=delay if first else 0,
                pass_number=pass_number,
                failures=failures,
                warn=first and _warn_due(options, failures),
            )
        pass_number += 1


def priority_probes(
    uris: Sequence[BrokerUri], options: FailoverOptions, connected: BrokerUri
) -> Iterator[Attempt]:
    """Endless probes of the priority URIs ranked above ``connected``; nothing if none ranks above it."""
    ranked = priority_list(uris, options)
    better = ranked[: ranked.index(connected)] if connected in ranked else ranked
    if not better:
        return
    delays = reconnect_delays(options)
    pass_number = 1
    while True:
        delay = next(delays)
        for index, uri in enumerate(better):
            yield Attempt(uri, delay if index == 0 else 0, pass_number, pass_number - 1)
        pass_number += 1


def _warn_due(options: FailoverOptions, failures: int) -> bool:
    every = options.warn_after_reconnect_attempts
    return every > 0 and failures > 0 and failures % every == 0
