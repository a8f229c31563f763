"""The metrics endpoint of a live mirrored pair: valid for promtool, and every figure follows the traffic."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from connections.cli import request
from tests.conftest import require
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.ops import Metered, metered, mirrored_pair

SENT, CONSUMED = 60, 25


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Metered, Metered]]:
    dc1, dc2 = mirrored_pair(tmp_path_factory.mktemp("pair"), dc1_mirror='sync="true"')
    send(dc1.broker.url, "orders", [f"m{i}" for i in range(SENT)])
    wait_until(lambda: _depth(dc2.broker) == SENT, 20, "DC2 to hold every message")
    assert len(receive(dc2.broker.url, "orders", CONSUMED)) == CONSUMED
    wait_until(lambda: _depth(dc1.broker) == SENT - CONSUMED, 20, "DC2's acks to reach DC1")
    yield dc1, dc2
    dc1.broker.stop()
    dc2.broker.stop()


def _depth(b: BrokerProcess) -> int:
    return int(request(b.url, "getStatistics", [], resource="queue.orders")["message-count"])


def test_promtool_accepts_the_live_output(pair: tuple[Metered, Metered]) -> None:
    require("promtool", shutil.which("promtool") is not None, "install Debian's prometheus package")
    for side in pair:
        status, text = side.get("/metrics")
        assert status == 200
        checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr


def test_mirror_source_figures_follow_the_traffic(pair: tuple[Metered, Metered]) -> None:
    dc1, _ = pair
    v = dc1.samples()

    def at(name: str, **labels: str) -> float:
        return v[(name, tuple(sorted(labels.items())))]

    assert at("amqp_mirror_mirror_events_sent_total", mirror="DC2", type="message") == SENT
    assert at("amqp_mirror_mirror_events_queued_total", mirror="DC2", type="message") == SENT
    assert at("amqp_mirror_mirror_settlements_total", mirror="DC2", outcome="accepted") >= SENT
    assert at("amqp_mirror_mirror_replication_latency_seconds_count", mirror="DC2") >= SENT
    assert at("amqp_mirror_mirror_sync_wait_seconds_count", mirror="DC2") >= 1  # sync="true": sends waited
    assert at("amqp_mirror_mirror_pending_events", mirror="DC2") == 0
    assert at("amqp_mirror_mirror_connected", mirror="DC2") == 1
    assert at("amqp_mirror_broker_connection_up", connection="DC2") == 1
    assert at("amqp_mirror_broker_connection_attempts_total", connection="DC2", result="success") == 1
    assert (
        at(
            "amqp_mirror_link_messages_total",
            connection="DC2",
            link="mirror:$ACTIVEMQ_ARTEMIS_MIRROR_DC2",
            direction="out",
        )
        >= SENT
    )
    # the acks DC2's consumer made came back and were applied here
    origins = {
        dict(labels)["origin"]
        for name, labels in v
        if name == "amqp_mirror_mirror_target_events_applied_total"
    }
    assert len(origins) == 1
    assert at("amqp_mirror_mirror_target_events_applied_total", origin=origins.pop(), type="ack") == CONSUMED


def test_target_journal_queue_and_acceptor_figures(pair: tuple[Metered, Metered]) -> None:
    _, dc2 = pair
    v = dc2.samples()

    def at(name: str, **labels: str) -> float:
        return v[(name, tuple(sorted(labels.items())))]

    [origin] = {
        dict(labels)["origin"] for name, labels in v if name == "amqp_mirror_mirror_target_duplicates_total"
    }
    assert at("amqp_mirror_mirror_target_events_applied_total", origin=origin, type="message") == SENT
    assert at("amqp_mirror_mirror_target_duplicates_total", origin=origin) == 0
    assert at("amqp_mirror_mirror_target_acks_never_matched_total", origin=origin) == 0
    assert at("amqp_mirror_queue_messages", queue="orders") == SENT - CONSUMED
    assert at("amqp_mirror_queue_messages_added_total", queue="orders") == SENT
    assert at("amqp_mirror_queue_messages_acknowledged_total", queue="orders") == CONSUMED
    assert ("amqp_mirror_queue_messages", (("queue", "DLA"),)) not in v  # only the configured queues
    assert at("amqp_mirror_journal_fsync_seconds_count") > 0
    assert at("amqp_mirror_journal_batch_records_count") > 0
    assert at("amqp_mirror_journal_batch_records_sum") >= SENT  # every message, and DC1's acks, journalled
    assert at("amqp_mirror_acceptor_connections_accepted_total", acceptor="amqp") >= 2
    assert at("amqp_mirror_server_active") == 1
    assert at("amqp_mirror_ha_role_info", policy="primary-only", role="primary") == 1


def test_health_and_readiness(pair: tuple[Metered, Metered]) -> None:
    dc1, _ = pair
    assert dc1.get("/healthz") == (200, "alive\n")
    assert dc1.get("/readyz") == (200, "active\n")
    assert dc1.get("/nothing")[0] == 404


def test_failed_logins_are_counted_per_acceptor(tmp_path: Path) -> None:
    side = metered(tmp_path, "secure", security=True)
    side.broker.start()
    try:
        with pytest.raises(Exception):  # noqa: B017 - proton's own error types
            send(side.broker.url, "orders", ["x"], user="alice", password="wrong")
        assert side.value("amqp_mirror_acceptor_authentication_failures_total", acceptor="amqp") == 1
        send(side.broker.url, "orders", ["x"], user="alice", password="wonderland")
        assert side.value("amqp_mirror_acceptor_authentication_failures_total", acceptor="amqp") == 1
    finally:
        side.broker.stop()
