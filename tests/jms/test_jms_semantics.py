"""A real Qpid JMS client (tests/jms/src/main/java/amqpmirror/jms/Semantics.java, built into the Qpid JMS
harness) using priority, selectors, queue browsers, durable subscriptions with selectors (and
unsubscribing them) and no-local against our broker, and the same program against a real Apache ActiveMQ
Artemis 2.40 from the same broker.xml: the same results. Ours is also checked against the answer JMS
gives, so both being wrong the same way would still fail.

The scenarios: persistent messages of mixed priorities, three received and never acknowledged, then all
received again (highest priority first, the three redelivered in their places); consumers with selectors
over properties and JMS headers sharing a queue, and an invalid selector; browsers with and without a
selector, which take nothing; a durable subscription with a selector kept while nobody listens, made anew
by another selector, deleted by unsubscribe (an unknown name refused); a no-local subscriber.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.artemis.support import artemis, config, ours
from tests.conftest import require
from tests.peers import artemis as artemis_peer
from tests.peers.artemis import java_command
from tests.peers.ports import free_port
from tests.support import jms

PRIORITIES = [4, 1, 9, 4, 0, 7, 9, 4, 5, 1, 9, 3, 8, 2, 6, 4, 0]  # as Semantics.java sends them
SIX = ["m5", "m4", "m3", "m2", "m1", "m0"]  # its six messages, priorities 3 to 8: delivered backwards


def run(url: str) -> dict[str, dict[str, Any]]:
    """Every scenario of Semantics.java against the broker at `url`, by name."""
    java = java_command()
    assert java is not None
    argv = [java, "-Xmx256m", "-cp", str(jms.harness_jar()), "amqpmirror.jms.Semantics", url, "jmsq"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Semantics.java failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["scenario"]: r for r in lines}


def run_on(kind: Any, home: Path) -> dict[str, dict[str, Any]]:
    port = free_port()
    broker = kind(home, port, config(port)).start()
    try:
        return run(broker.url)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def on_ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    require("the Qpid JMS harness", *jms.availability())
    yield run_on(ours, tmp_path_factory.mktemp("jms-semantics-ours"))


def test_jms_semantics_on_our_broker(on_ours: dict[str, dict[str, Any]]) -> None:
    assert not [r for r in on_ours.values() if "error" in r], on_ours
    ranked = sorted(range(len(PRIORITIES)), key=lambda i: (-PRIORITIES[i], i))
    priority = on_ours["priority"]
    assert priority["first"] == [f"p{i}" for i in ranked[:3]]
    assert priority["then"] == [[f"p{i}", PRIORITIES[i], n < 3] for n, i in enumerate(ranked)]
    assert on_ours["selectors"]["got"] == {
        "color = 'red'": ["m5", "m2", "m0"],
        "weight > 3 AND JMSPriority >= 5": ["m4", "m3"],
        "JMSType = 'order'": [],  # m0, m2, m4: taken above
        "JMSCorrelationID = 'c-1'": ["m1"],
        "color LIKE 'gr%'": [],  # m3: taken above
        "(the rest)": [],
    }
    assert on_ours["selectors"]["invalid"] == "InvalidSelectorException"
    browser = on_ours["browser"]
    assert browser["all"] == browser["again"] == browser["consumed"] == SIX
    assert browser["reds"] == ["m5", "m2", "m0"]
    durable = on_ours["durable-selector"]
    assert durable["kept"] == ["m5", "m2", "m0"]
    assert durable["changed"] == []  # made anew by another selector: what it held is gone
    assert durable["after_unsubscribe"] == []  # not the blues sent while it was subscribed
    assert durable["unknown"] == "InvalidDestinationException"
    no_local = on_ours["no-local"]
    assert no_local["no_local"] == ["theirs"] and no_local["plain"] == ["mine", "theirs"]


def test_the_same_program_against_artemis_gives_the_same_results(
    on_ours: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    require("Apache ActiveMQ Artemis", *artemis_peer.availability())
    assert run_on(artemis, tmp_path / "artemis") == on_ours
