"""Shared fixtures (real foreign peers: RabbitMQ, the Proton C broker, rhea), and each test's tier.

A missing peer is a skip on a developer machine but a failure in CI (``CI=true``), so CI can never go
green by silently skipping the interoperability tests.

Tiers, like the architecture (`pytest -m pure` gives feedback in seconds):
- pure: no socket, no process: pure rules, the engine, the journal, brokers joined in memory;
- adapter: our broker process against a scripted AMQP peer that speaks frames byte by byte;
- integration: our brokers as processes, with real clients;
- peers: with Apache ActiveMQ Artemis (the reference), RabbitMQ, the Proton C broker or rhea;
- spark: the DR job on a real Spark;
- installed: the `amqp-mirror` command installed as a user installs it (fresh environments, pip), run
  as a process.
Every test file has its tier in TIERS below (a new file without one fails the collection).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Make ``tests.peers`` importable however pytest is launched (bare ``pytest`` does not add the cwd).
_REPO_ROOT = str(Path(__file__).resolve().parents[1])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from tests.peers import protonc as protonc_peer  # noqa: E402
from tests.peers import rabbitmq as rabbitmq_peer  # noqa: E402
from tests.peers import rhea as rhea_peer  # noqa: E402
from tests.peers import zookeeper as zookeeper_peer  # noqa: E402


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(peer_name: str, available: bool, why: str) -> None:
    """Skip (laptop) or fail (CI) the current test when ``peer_name`` is not available."""
    if available:
        return
    message = f"{peer_name} unavailable: {why}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rabbitmq_peer.RabbitMQ]:
    """A private RabbitMQ node with AMQP 1.0 (``.host``, ``.port``, ``.url``, ``.declare_durable_queue``)."""
    require("RabbitMQ", *rabbitmq_peer.availability())
    with rabbitmq_peer.running_rabbitmq(tmp_path_factory.mktemp("rabbitmq")) as node:
        yield node


@pytest.fixture(scope="session")
def proton_c_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[protonc_peer.ProtonBroker]:
    """The Proton C example broker (``.host``, ``.port``, ``.url``); in-memory queues made on first use."""
    require("Proton C broker", *protonc_peer.availability())
    with protonc_peer.running_proton_broker(tmp_path_factory.mktemp("proton-c")) as broker:
        yield broker


@pytest.fixture(scope="session")
def rhea() -> rhea_peer.Rhea:
    """Starts rhea send/receive clients against any URL (see ``tests.peers.rhea.Rhea``)."""
    require("rhea", *rhea_peer.availability())
    return rhea_peer.Rhea()


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zookeeper_peer.Ensemble]:
    """A three-node ZooKeeper ensemble on loopback (``.connect_string``, ``.nodes``: stop/pause/resume)."""
    require("ZooKeeper", *zookeeper_peer.availability())
    with zookeeper_peer.running_ensemble(tmp_path_factory.mktemp("zookeeper")) as ensemble:
        yield ensemble


@pytest.fixture(autouse=True)
def _no_broker_left_running() -> Iterator[None]:
    """Kill any broker process this test started and did not stop (a failed assertion skips its cleanup).

    Brokers of module- or session-scoped fixtures were started before this fixture ran and are left alone.
    """
    from tests.support.broker import RUNNING

    before = set(RUNNING)
    yield
    for broker in list(RUNNING - before):
        broker.kill()


TIERS = {  # a path under tests/ (a folder ends with /) -> its tier; the longest match wins
    "test_priority.py": "pure",
    "test_selective_consumers.py": "pure",
    "test_queue_filters.py": "pure",
    "artemis/test_jms_semantics_with_artemis.py": "peers",
    "config/": "pure",
    "config/test_config_colocated.py": "pure",
    "config/test_config_discovery.py": "pure",
    "filters/": "pure",
    "security/": "pure",
    "security/test_management_replies.py": "integration",
    "security/test_cluster_login.py": "integration",
    "journal/": "pure",
    "journal/test_journal_crash.py": "integration",
    "connections/test_reconnect_table.py": "pure",
    "connections/test_retry_log.py": "pure",
    "connections/test_redacted_uri.py": "pure",
    "connections/test_reconnect_live.py": "integration",
    "connections/test_bridge_foreign.py": "peers",
    "failover/": "pure",
    "failover/test_failover_integration.py": "integration",
    "failover/test_failover_transactions.py": "integration",
    "mirror/test_wire.py": "pure",
    "mirror/test_fast_paths.py": "pure",
    "mirror/test_rules.py": "pure",
    "mirror/test_origin_trust.py": "pure",
    "mirror/test_dedup_floors.py": "pure",
    "mirror/test_target_refusals.py": "pure",
    "mirror/test_hostile_peer.py": "adapter",
    "mirror/test_repeated_acks.py": "pure",
    "mirror/test_ack_lookup.py": "pure",
    "mirror/test_source_recovery.py": "pure",
    "mirror/test_held_messages.py": "pure",
    "mirror/test_hardening_wire.py": "adapter",
    "mirror/test_scripted_peer.py": "adapter",
    "mirror/": "integration",
    "conformance/": "adapter",
    "paging/": "integration",
    "ha/": "integration",
    "ha/test_ha_states.py": "pure",
    "ha/test_shared_store_files.py": "pure",
    "ha/test_lock_managers.py": "integration",
    "ha/test_replication_confirmations.py": "adapter",
    "ha/test_replication_barrier.py": "pure",
    "ha/test_ha_tables.py": "pure",
    "ha/test_quorum_rules.py": "pure",
    "ha/test_isolation_rules.py": "pure",
    "ha/test_history.py": "pure",
    "ha/test_colocated.py": "integration",
    "ha/test_scale_down.py": "integration",
    "ha/test_discovery.py": "integration",
    "ha/test_discovery_format.py": "pure",
    "ha/test_scale_down_forms.py": "integration",
    "ha/test_scale_down_rules.py": "pure",
    "ha/test_storage_safety.py": "pure",
    "paging/test_paging_rules.py": "pure",
    "paging/test_page_replay.py": "pure",
    "paging/test_disk_estimate.py": "pure",
    "paging/test_spool.py": "pure",
    "paging/test_block_relay.py": "integration",
    "paging/test_large_deliveries.py": "integration",
    "paging/test_page_torn_tail.py": "pure",
    "ops/": "integration",
    "console/": "integration",
    "console/test_console_config.py": "pure",
    "console/test_console_markup.py": "pure",
    "ops/test_log_lines.py": "pure",
    "ops/test_management_parity.py": "peers",
    "artemis/": "peers",
    "jms/": "peers",
    "spark_dr/": "spark",
    "spark_dr/test_artemis_export.py": "pure",
    "spark_dr/test_survivor_operations.py": "pure",
    "spark_dr/test_journal_history.py": "pure",
    "spark_dr/test_repair_payloads.py": "pure",
    "installed/": "installed",
    "ws/": "integration",
    "ws/test_frames.py": "pure",
    "ws/test_handshake.py": "pure",
    "ws/test_transport_config.py": "pure",
    "ws/test_ws_rhea.py": "peers",
    "test_layers.py": "pure",
    "test_engine.py": "pure",
    "test_queues.py": "pure",
    "test_batching.py": "pure",
    "test_connection_loss_journal.py": "pure",
    "test_persistence.py": "pure",
    "test_unencodable_records.py": "pure",
    "test_journal_limits.py": "pure",
    "test_duplicate_detection.py": "pure",
    "test_transactions.py": "pure",
    "test_transaction_crash.py": "pure",
    "test_confirmation_wiring.py": "pure",
    "test_defaults.py": "pure",
    "test_data_lock.py": "pure",
    "test_bad_input.py": "adapter",
    "test_security.py": "adapter",
    "test_tls.py": "adapter",
    "test_review_regressions.py": "adapter",
    "test_peer_frame_size.py": "adapter",
    "test_broker_semantics.py": "integration",
    "test_cli.py": "integration",
    "test_compiled.py": "integration",
    "test_crash_recovery.py": "integration",
    "test_demo.py": "integration",
    "test_fuzz_frames.py": "integration",
    "test_two_servers_one_process.py": "integration",
    "test_interop_rhea.py": "peers",
    "test_artemis_parity.py": "integration",
    "test_peers_smoke.py": "peers",
}


def tier_of(relative: str) -> str | None:
    best = max(
        (p for p in TIERS if relative == p or (p.endswith("/") and relative.startswith(p))),
        key=len,
        default=None,
    )
    return TIERS[best] if best is not None else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        relative = item.path.resolve().relative_to(tests_dir).as_posix()
        tier = tier_of(relative)
        if tier is None:
            raise pytest.UsageError(f"tests/{relative} has no tier: add it to TIERS in tests/conftest.py")
        item.add_marker(getattr(pytest.mark, tier))
