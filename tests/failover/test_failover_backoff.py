"""The reconnect schedule against the documented defaults: exact delays, orders, limits and warnings."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest

from connections.failover.backoff import (
    Attempt,
    connect_schedule,
    pass_order,
    priority_probes,
    reconnect_delays,
)
from connections.failover.uri import FailoverOptions, parse_failover_uri

A, B, C = (parse_failover_uri(f"amqp://{name}:1").uris[0] for name in "abc")


def first(iterator: Iterator[Attempt], n: int) -> list[tuple[str, int, int]]:
    return [(a.uri.host, a.delay_ms, a.pass_number) for a in itertools.islice(iterator, n)]


def options(query: str) -> FailoverOptions:
    return parse_failover_uri(f"failover:(amqp://a:1,amqp://b:1,amqp://c:1)?{query}").options


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # Defaults: 10 ms, doubling, capped at 30 000 ms.
        ("", [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240, 20480, 30000, 30000]),
        ("useExponentialBackOff=false", [10] * 5),
        ("initialReconnectDelay=100&backOffMultiplier=3&maxReconnectDelay=1000", [100, 300, 900, 1000, 1000]),
        ("initialReconnectDelay=100&backOffMultiplier=1.5", [100, 150, 225, 338, 506]),
        ("initialReconnectDelay=500&maxReconnectDelay=200", [200, 200, 200]),
        ("initialReconnectDelay=0", [0, 0, 0]),
        ("initialReconnectDelay=1000&maxReconnectDelay=2000&useExponentialBackOff=false", [1000] * 3),
    ],
)
def test_reconnect_delays(query: str, expected: list[int]) -> None:
    assert list(itertools.islice(reconnect_delays(options(query)), len(expected))) == expected


def test_delays_stay_capped_however_long_it_runs() -> None:
    delays = list(itertools.islice(reconnect_delays(options("")), 5000))
    assert delays[-1] == 30000 and max(delays) == 30000


def test_startup_left_to_right_initial_pass_has_no_delay() -> None:
    schedule = connect_schedule([A, B, C], options("randomize=false"), startup=True, rng=random.Random(1))
    assert first(schedule, 9) == [
        ("a", 0, 0),
        ("b", 0, 0),
        ("c", 0, 0),
        ("a", 10, 1),
        ("b", 0, 1),
        ("c", 0, 1),
        ("a", 20, 2),
        ("b", 0, 2),
        ("c", 0, 2),
    ]


def test_after_a_loss_the_first_pass_waits_initial_delay_and_the_lost_broker_goes_last() -> None:
    schedule = connect_schedule(
        [A, B, C], options("randomize=false"), startup=False, rng=random.Random(1), failed=A
    )
    assert first(schedule, 6) == [
        ("b", 10, 1),
        ("c", 0, 1),
        ("a", 0, 1),
        ("b", 20, 2),
        ("c", 0, 2),
        ("a", 0, 2),
    ]


@pytest.mark.parametrize(
    ("query", "startup", "passes"),
    [
        ("startupMaxReconnectAttempts=0", True, [0]),
        ("startupMaxReconnectAttempts=2", True, [0, 1, 2]),
        ("startupMaxReconnectAttempts=2&maxReconnectAttempts=0", True, [0, 1, 2]),
        ("maxReconnectAttempts=0", False, []),
        ("maxReconnectAttempts=3", False, [1, 2, 3]),
        ("maxReconnectAttempts=3&startupMaxReconnectAttempts=0", False, [1, 2, 3]),
    ],
)
def test_attempt_limits(query: str, startup: bool, passes: list[int]) -> None:
    schedule = list(connect_schedule([A, B], options(query), startup=startup, rng=random.Random(1)))
    assert [a.pass_number for a in schedule] == [p for p in passes for _ in (A, B)]


def test_unlimited_by_default() -> None:
    schedule = connect_schedule([A], options(""), startup=False, rng=random.Random(1))
    assert len(list(itertools.islice(schedule, 10_000))) == 10_000


def test_randomize_shuffles_every_pass_with_the_injected_random_source() -> None:
    uris = [A, B, C]
    orders = {
        tuple(
            a.uri.host
            for a in itertools.islice(connect_schedule(uris, options(""), startup=True, rng=rng), 3)
        )
        for rng in (random.Random(seed) for seed in range(40))
    }
    assert len(orders) == 6  # every order occurs: the choice is random, not fixed
    again = [
        a.uri.host
        for a in itertools.islice(connect_schedule(uris, options(""), startup=True, rng=random.Random(7)), 30)
    ]
    assert again == [
        a.uri.host
        for a in itertools.islice(connect_schedule(uris, options(""), startup=True, rng=random.Random(7)), 30)
    ]
    passes = {tuple(again[i : i + 3]) for i in range(0, 30, 3)}
    assert len(passes) > 1  # shuffled anew per pass
    assert all(sorted(p) == ["a", "b", "c"] for p in passes)  # each pass tries every URI once


def test_priority_backup_puts_the_first_uri_first_even_when_randomized() -> None:
    for seed in range(20):
        order = pass_order([A, B, C], options("priorityBackup=true"), random.Random(seed))
        assert order[0] == A and sorted(u.host for u in order) == ["a", "b", "c"]


def test_priority_uris_come_first_in_their_own_order() -> None:
    opts = options("randomize=false&priorityBackup=true&priorityURIs=amqp://c:1,amqp://b:1")
    assert pass_order([A, B, C], opts, random.Random(1)) == [C, B, A]


def test_priority_uris_are_ignored_without_priority_backup() -> None:
    opts = options("randomize=false&priorityURIs=amqp://c:1")
    assert pass_order([A, B, C], opts, random.Random(1)) == [A, B, C]


def test_a_lost_priority_broker_is_still_tried_but_last() -> None:
    opts = options("randomize=false&priorityBackup=true")
    assert pass_order([A, B, C], opts, random.Random(1), failed=A) == [B, C, A]


def test_priority_probes_return_to_the_priority_uri_with_back_off() -> None:
    opts = options("randomize=false&priorityBackup=true")
    assert first(priority_probes([A, B, C], opts, connected=B), 4) == [
        ("a", 10, 1),
        ("a", 20, 2),
        ("a", 40, 3),
        ("a", 80, 4),
    ]
    assert list(priority_probes([A, B, C], opts, connected=A)) == []
    assert list(priority_probes([A, B, C], options("randomize=false"), connected=B)) == []


def test_priority_probes_only_try_better_ranked_uris() -> None:
    opts = options("priorityBackup=true&priorityURIs=amqp://a:1,amqp://b:1")
    assert first(priority_probes([A, B, C], opts, connected=C), 4) == [
        ("a", 10, 1),
        ("b", 0, 1),
        ("a", 20, 2),
        ("b", 0, 2),
    ]
    assert first(priority_probes([A, B, C], opts, connected=B), 2) == [("a", 10, 1), ("a", 20, 2)]


@pytest.mark.parametrize(
    ("query", "startup", "warn_passes"),
    [
        ("", True, [10, 20, 30]),  # default 10: warn after 10, 20, 30 failed passes
        ("", False, [11, 21, 31]),  # after a loss pass k follows k-1 failures
        ("warnAfterReconnectAttempts=3", True, [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]),
        ("warnAfterReconnectAttempts=0", True, []),
        ("warnAfterReconnectAttempts=-1", True, []),
    ],
)
def test_warn_after_reconnect_attempts(query: str, startup: bool, warn_passes: list[int]) -> None:
    schedule = connect_schedule([A, B], options(query), startup=startup, rng=random.Random(1))
    attempts = list(itertools.islice(schedule, 62))
    warned = [a for a in attempts if a.warn]
    assert [a.pass_number for a in warned] == [p for p in warn_passes if p <= attempts[-1].pass_number]
    assert all(a.failures % (int(query.split("=")[1]) if query else 10) == 0 for a in warned)
    first_of_pass = [i for i, a in enumerate(attempts) if a.warn]
    assert all(i % 2 == 0 for i in first_of_pass)  # two URIs a pass: warnings only on a pass's first
