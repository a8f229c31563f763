"""The network check's rules (broker_core/ha/isolation.py), without a socket."""

from __future__ import annotations

import itertools

import pytest

from broker_core.ha.isolation import (
    DEFAULT_PING,
    DEFAULT_PING6,
    NetworkAction,
    NetworkEvent,
    NetworkStep,
    Serving,
    Targets,
    healthy,
    network_step,
    ping_argv,
    split_list,
)


def test_lists_are_comma_separated_as_written() -> None:
    assert split_list(" 10.0.0.1, 10.0.0.2 ,,host") == ("10.0.0.1", "10.0.0.2", "host")
    assert split_list(None) == () and split_list("") == ()
    assert not Targets().enabled and Targets(urls=("http://x/",)).enabled


def test_the_network_is_there_if_any_one_target_answers_or_none_is_checked() -> None:
    for answers in itertools.chain.from_iterable(
        itertools.product((True, False), repeat=n) for n in range(4)
    ):
        assert healthy(list(answers)) == (not answers or any(answers))


def test_ping_commands_are_formatted_as_java_formats_them() -> None:
    assert ping_argv(DEFAULT_PING, 1000, "10.0.0.1") == ["ping", "-c", "1", "-t", "1", "10.0.0.1"]
    assert ping_argv(DEFAULT_PING, 2500, "10.0.0.1")[4] == "3"  # whole seconds, rounded up
    assert ping_argv(DEFAULT_PING, 10, "h")[4] == "1"  # at least one
    assert ping_argv(DEFAULT_PING6, 1000, "::1") == ["ping6", "-c", "1", "::1"]
    assert ping_argv("check %2$s within %1$d%%", 3000, "h") == ["check", "h", "within", "3%"]


TABLE = {
    (Serving.SERVING, NetworkEvent.GONE): NetworkStep(Serving.ISOLATED, NetworkAction.STOP_SERVING),
    (Serving.ISOLATED, NetworkEvent.THERE): NetworkStep(Serving.SERVING, NetworkAction.SERVE_AGAIN),
}


@pytest.mark.parametrize(("state", "event"), list(itertools.product(Serving, NetworkEvent)))
def test_every_network_step(state: Serving, event: NetworkEvent) -> None:
    assert network_step(state, event) == TABLE.get((state, event), NetworkStep(state, NetworkAction.NONE))
