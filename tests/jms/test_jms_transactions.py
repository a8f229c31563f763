"""A real Qpid JMS client (tests/jms/Harness.java) in transacted sessions against our broker, and the same
program against a real Apache ActiveMQ Artemis 2.40 from the same broker.xml: the same results.

The scenarios: sends committed (nothing visible before), sends rolled back, messages received and rolled
back twice (redelivered in order, JMSXDeliveryCount 2 then 3), a consume-and-produce step with a rollback
in the middle, one transaction over two queues, a topic and an acknowledgement, a retried transaction
refused whole as a duplicate, a session closed with work in its transaction."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.artemis.support import artemis, config, ours
from tests.conftest import require
from tests.peers import artemis as artemis_peer
from tests.peers.ports import free_port
from tests.support import jms

# What Qpid JMS 2.10 makes of a refused commit: the spec's amqp:transaction:rollback (ours) becomes
# JmsTransactionInDoubtException, Artemis's condition "failed" a TransactionRolledBackException. Either
# way the transaction was not committed; only the exception's class differs.
REFUSED_COMMIT = {"ours": "JmsTransactionInDoubtException", "artemis": "TransactionRolledBackException"}


@pytest.fixture(scope="module")
def harness() -> None:
    require("the Qpid JMS harness", *jms.availability())


@pytest.fixture(scope="module")
def on_ours(harness: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("jms-ours")
    port = free_port()
    broker = ours(home, port, config(port)).start()
    try:
        yield {r["scenario"]: r for r in jms.run(broker.url, "scenarios", "tx")}
    finally:
        broker.stop()


def test_transacted_sessions_on_our_broker(on_ours: dict[str, Any]) -> None:
    assert on_ours["commit"] == {"scenario": "commit", "before_commit": [], "after_commit": ["a", "b", "c"]}
    assert on_ours["rollback"]["stored"] == ["kept"] and on_ours["rollback"]["then"] == []
    assert on_ours["redelivery"]["rounds"] == [
        [["r1", False, 1], ["r2", False, 1]],
        [["r1", True, 2], ["r2", True, 2]],
        [["r1", True, 3], ["r2", True, 3]],
    ]
    assert on_ours["consume-produce"]["steps"] == [
        ["j1", False, "commit"],
        ["j2", False, "rollback"],
        ["j2", True, "commit"],  # the rolled-back message comes first again
        ["j3", False, "commit"],
    ]
    assert on_ours["consume-produce"]["out"] == ["done-j1", "done-j2", "done-j3"]
    assert on_ours["spanning"]["before"] == [[], [], []]
    assert on_ours["spanning"]["after"] == [["to-a"], ["to-b"], ["to-topic"]]
    assert on_ours["spanning"]["work_left"] == []
    duplicate = on_ours["duplicate"]
    assert duplicate["retry_commit"] == "refused" and duplicate["stored"] == ["x", "y"]
    assert on_ours["closed-with-work"]["back"] == [["held", True, 2]]
    assert on_ours["closed-with-work"]["sent"] == []
    assert not [r for r in on_ours.values() if "error" in r]


def test_the_same_program_against_artemis_gives_the_same_results(
    on_ours: dict[str, Any], tmp_path: Path
) -> None:
    require("Apache ActiveMQ Artemis", *artemis_peer.availability())
    port = free_port()
    reference = artemis(tmp_path / "artemis", port, config(port)).start()
    try:
        on_artemis = {r["scenario"]: r for r in jms.run(reference.url, "scenarios", "tx")}
    finally:
        reference.stop()
    assert on_ours["duplicate"].pop("retry_commit_exception") == REFUSED_COMMIT["ours"]
    assert on_artemis["duplicate"].pop("retry_commit_exception") == REFUSED_COMMIT["artemis"]
    assert on_ours == on_artemis
