"""The broker's metrics for Prometheus, read from its parts' own counters when scraped.

A collector (prometheus_client's custom-collector protocol): each scrape walks the node's broker
connections, mirrors, mirror target, acceptors, journal and the configured queues, on the event loop's
thread, between two turns, so every figure is consistent with the others and nothing is counted twice
on the message path. One prefix (`amqp_mirror_`, as the DR job's `amqp_mirror_dr_`), base units
(seconds, bytes), counters end in `_total`, an info gauge (always 1, its facts in labels) in `_info`;
labels are bounded by configuration: a broker connection, a mirror, an acceptor, an origin broker, a link
of a broker connection, one of the configured queues or addresses. The process's own series keep the
standard names generic dashboards read (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
`python_info`, ...).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from broker_core import compiled
from broker_core.ha.quorum import Outcome, Question
from broker_core.histogram import Histogram
from broker_core.management import BROKER
from connections.queue_links import QueueLinks
from filters.wildcard import matcher_for
from mirror import holding as held_messages
from mirror.source import MirrorSource

from .node import Node

if TYPE_CHECKING:
    from broker_core.queues import Address, Queue

    from ..broker import Broker

PREFIX = "amqp_mirror_"
# mirror_target_events_not_applied: reason label -> the target's counter
NOT_APPLIED = {
    "protected": "refused",
    "undecodable": "undecodable",
    "untrusted": "untrusted",
    "unknown": "unknown_events",
    "error": "errors",
}
# how a held message was settled: the metric's label, the holding's counter
HOLD_OUTCOMES = (
    ("stored", held_messages.STORED),
    ("consumed_at_source", held_messages.CONSUMED),
    ("dead_lettered", held_messages.DEAD_LETTERED),
    ("link_lost", held_messages.LINK_LOST),
)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("amqp-mirror")
    except metadata.PackageNotFoundError:
        return "unknown"


class Failovers:
    """HA transitions worth counting, by reason (fed by the HA controller's transition hook)."""

    def __init__(self) -> None:
        self.by_reason: dict[str, int] = {"primary_lost": 0, "failback": 0}  # known ones shown at 0

    def count(self, reason: str) -> None:
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1


class BrokerCollector(Collector):
    def __init__(self, node: Node, failovers: Failovers | None = None) -> None:
        self.node = node
        self.failovers = failovers or Failovers()
        self.rpo_seconds = node.config.metrics.mirror_rpo_seconds
        settings = node.config.metrics
        self._queue_matchers = _matchers(settings.queues)
        self._address_matchers = _matchers(settings.addresses)
        self._version = _version()

    def collect(self) -> Iterator[Metric]:
        yield from self._build()
        yield from self._ha()
        broker = self.node.broker
        if not broker.server.started:  # a passive backup: alive, nothing assembled to read
            return
        for part in (
            self._server,
            self._connections,
            self._mirrors,
            self._target,
            self._links,
            self._acceptors,
            self._journal,
            self._disk,
            self._addresses,
            self._queues,
        ):
            yield from part(broker)

    # ----------------------------------------------------------------------------- the process

    def _build(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            PREFIX + "build_info",
            "The running broker: version, Python, whether the compiled hot path runs, node name (always 1).",
            labels=["version", "python", "compiled", "broker"],
        )
        python = ".".join(map(str, sys.version_info[:3]))
        info.add_metric([self._version, python, str(compiled.IN_USE).lower(), self.node.name], 1)
        yield info

    def _ha(self) -> Iterator[Metric]:
        node = self.node
        role = GaugeMetricFamily(
            PREFIX + "ha_role_info", "This server's HA policy and role (always 1).", labels=["policy", "role"]
        )
        role.add_metric([str(node.config.ha_policy.kind), node.role()], 1)
        yield role
        yield _gauge(
            "server_active", "1 while this server serves clients (a passive backup: 0).", node.active()
        )
        yield _gauge(
            "ha_replica_synced",
            "1 while a replicating backup is in sync with this server (management's isReplicaSync).",
            _replica_synced(node),
        )
        if node.ha is not None and node.active():  # only an active server of a pair has a backup or not
            yield _gauge(
                "ha_backup_present",
                "1 while a backup is ready to take over from this active server (0: the pair has none).",
                node.ha.backup_present(),
            )
        if node.ha is not None:
            yield _counter(
                "ha_replicas_dropped_lagging",
                "Replicas this server dropped (and fenced off) for not confirming within call-timeout.",
                node.ha.coordinator.counters().get("replicas_dropped_lagging", 0),
            )
            yield from _votes(node.ha.coordinator.counters())
        hosting = node.ha.hosting if node.ha is not None else None
        if hosting is not None:  # <colocated>: the backups this primary's process runs for its cluster
            backups = GaugeMetricFamily(
                PREFIX + "ha_colocated_backups",
                "The colocated backups this server's process runs, each by name, role, state and the "
                "primary it backs up (always 1).",
                labels=["backup", "role", "state", "backs_up"],
            )
            for backup in hosting.status():
                labels = [str(backup[key]) for key in ("name", "role", "state", "backsUp")]
                backups.add_metric(labels, 1)
            yield backups
            yield _counter(
                "ha_colocated_backup_refusals",
                "Requests to host a colocated backup this server refused (max-backups reached, or passive).",
                hosting.refused,
            )
        failovers = CounterMetricFamily(
            PREFIX + "ha_failovers", "HA transitions of this server, by reason.", labels=["reason"]
        )
        for reason, n in sorted(self.failovers.by_reason.items()):
            failovers.add_metric([reason], n)
        yield failovers

    # ------------------------------------------------------------------------------ the server

    def _server(self, broker: Broker) -> Iterator[Metric]:
        stats = broker.server.stats
        for name, help_ in (
            ("routed", "Messages routed to at least one queue."),
            ("unrouted", "Messages that matched no queue."),
            ("dropped", "Messages dropped by an address's DROP policy."),
            ("acked", "Messages acknowledged."),
            ("expired", "Messages expired."),
            ("killed", "Messages sent to a dead-letter address."),
            ("scaled_down", "Messages this server's scale-down moved to another server (settled there)."),
            ("scaled_in", "Messages another server's scale-down stored here."),
        ):
            yield _counter(f"messages_{name}", help_, getattr(stats, f"messages_{name}"))
        for name, help_ in (
            ("declared", "Local transactions declared."),
            ("committed", "Local transactions committed."),
            ("rolled_back", "Local transactions rolled back (asked for, refused at commit, or left open)."),
        ):
            yield _counter(f"transactions_{name}", help_, getattr(stats, f"transactions_{name}"))
        budget = broker.server.budget
        yield _gauge(
            "memory_bytes", "Message memory held by every address (global-max-size counts it).", budget.bytes
        )

    def _connections(self, broker: Broker) -> Iterator[Metric]:
        up = _family(
            GaugeMetricFamily,
            "broker_connection_up",
            "1 while the broker connection is connected.",
            ["connection"],
        )
        remote = _family(
            GaugeMetricFamily,
            "broker_connection_remote_info",
            "The endpoint a broker connection uses or tries next (always 1).",
            ["connection", "remote"],
        )
        attempts = _family(
            CounterMetricFamily,
            "broker_connection_attempts",
            "Connection attempts by result.",
            ["connection", "result"],
        )
        last = _family(
            GaugeMetricFamily,
            "broker_connection_last_connected_timestamp_seconds",
            "When the broker connection last came up (epoch seconds; 0: never).",
            ["connection"],
        )
        manager = broker.connections
        for c in manager.connections.values() if manager is not None else ():
            up.add_metric([c.name], int(c.connected))
            remote.add_metric([c.name, c.remote()], 1)
            attempts.add_metric([c.name, "success"], c.stats["connects"])
            attempts.add_metric([c.name, "failure"], c.stats["failures"])
            last.add_metric([c.name], c.last_connected)
        yield from (up, remote, attempts, last)

    # ------------------------------------------------------------------------------ mirroring

    def _mirrors(self, broker: Broker) -> Iterator[Metric]:
        m = ["mirror"]
        pending = _family(
            GaugeMetricFamily,
            "mirror_pending_events",
            "Events on the store-and-forward queue, not yet accepted by the target.",
            m,
        )
        pending_bytes = _family(GaugeMetricFamily, "mirror_pending_bytes", "Bytes of the pending events.", m)
        oldest = _family(
            GaugeMetricFamily,
            "mirror_oldest_pending_age_seconds",
            "Age of the oldest event not yet accepted (0: none pending).",
            m,
        )
        rpo = _family(
            GaugeMetricFamily,
            "mirror_rpo_seconds",
            "The recovery point objective the alerts hold the mirror to (metrics property "
            "mirror-rpo-seconds).",
            m,
        )
        connected = _family(GaugeMetricFamily, "mirror_connected", "1 while the mirror's link is up.", m)
        queued = _family(
            CounterMetricFamily,
            "mirror_events_queued",
            "Events queued for the target, by type.",
            ["mirror", "type"],
        )
        sent = _family(
            CounterMetricFamily,
            "mirror_events_sent",
            "Events sent to the target, by type (sent again after a reconnect: counted again).",
            ["mirror", "type"],
        )
        settled = _family(
            CounterMetricFamily,
            "mirror_settlements",
            "Events settled by the target, by outcome.",
            ["mirror", "outcome"],
        )
        filtered = _family(
            CounterMetricFamily,
            "mirror_events_filtered",
            "Events not mirrored: their address is outside the mirror's address-filter.",
            m,
        )
        last = _family(
            GaugeMetricFamily,
            "mirror_last_accepted_timestamp_seconds",
            "When the target last accepted an event (epoch seconds; 0: never).",
            m,
        )
        latency = _family(
            HistogramMetricFamily,
            "mirror_replication_latency_seconds",
            "From an event's making to the target's Accepted.",
            m,
        )
        sync_wait = _family(
            HistogramMetricFamily,
            "mirror_sync_wait_seconds",
            "How long a sync mirror held a client's confirmation back.",
            m,
        )
        for source, up in broker.mirror_sources():
            name, s, status = [source.name], source.stats, source.status()
            pending.add_metric(name, status["pendingEvents"])
            pending_bytes.add_metric(name, status["pendingBytes"])
            oldest.add_metric(name, status["oldestPendingAgeMs"] / 1000)
            rpo.add_metric(name, self.rpo_seconds)
            connected.add_metric(name, int(up))
            for kind in ("messages", "acks", "topology"):
                queued.add_metric([source.name, kind.rstrip("s")], s[f"{kind}_queued"])
            topology_sent = s["events_sent"] - s["messages_sent"] - s["acks_sent"]
            for kind, n in (
                ("message", s["messages_sent"]),
                ("ack", s["acks_sent"]),
                ("topology", topology_sent),
            ):
                sent.add_metric([source.name, kind], n)
            for outcome in ("accepted", "rejected", "released"):
                settled.add_metric([source.name, outcome], s[f"events_{outcome}"])
            filtered.add_metric(name, s["events_filtered"])
            last.add_metric(name, source.last_accepted)
            _observe(latency, name, source.latency)
            _observe(sync_wait, name, source.sync_wait)
        yield from (pending, pending_bytes, oldest, rpo, connected, queued, sent, settled, filtered, last)
        yield from (latency, sync_wait)

    def _target(self, broker: Broker) -> Iterator[Metric]:
        target = broker.mirror_target
        if target is None:
            return
        o = ["origin"]
        applied = _family(
            CounterMetricFamily,
            "mirror_target_events_applied",
            "Events of an origin broker applied here, by type.",
            ["origin", "type"],
        )
        duplicates = _family(
            CounterMetricFamily,
            "mirror_target_duplicates",
            "Messages of an origin dropped as applied before (re-sent after a reconnect).",
            o,
        )
        retries = _family(
            CounterMetricFamily,
            "mirror_target_ack_retries",
            "Acknowledgements that came before their message, kept and retried.",
            o,
        )
        never = _family(
            CounterMetricFamily,
            "mirror_target_acks_never_matched",
            "Acknowledgements given up on: their message never came.",
            o,
        )
        never_by_origin = target.retries.never_matched
        for origin in sorted(set(target.origins) | set(never_by_origin)):
            counts = target.origins.get(origin)
            if counts is not None:
                applied.add_metric([origin, "message"], counts.messages)
                applied.add_metric([origin, "ack"], counts.acks)
                duplicates.add_metric([origin], counts.duplicates)
                retries.add_metric([origin], counts.ack_retries)
            never.add_metric([origin], never_by_origin.get(origin, 0))
        yield from (applied, duplicates, retries, never)
        not_applied = _family(
            CounterMetricFamily,
            "mirror_target_events_not_applied",
            "Deliveries of incoming mirror links dropped or refused, by reason: protected (naming an "
            "internal, mirror or management address or queue, or an invalid id), undecodable, untrusted "
            "(an origin its link may not speak for: the link is closed), unknown (event type), error.",
            ["reason"],
        )
        stats = target.stats
        for reason, key in NOT_APPLIED.items():
            not_applied.add_metric([reason], stats[key])
        yield not_applied
        yield _gauge(
            "mirror_target_pending_ack_retries",
            "Acknowledgements waiting to be retried.",
            len(target.retries.tries),
        )
        yield _counter(
            "mirror_target_unrouted",
            "Messages applied that no queue here took (an address whose policy drops them).",
            target.stats["unrouted"],
        )
        holding = target.holding
        if holding is None:
            return
        held = _family(
            CounterMetricFamily,
            "mirror_target_held",
            "Messages of an origin held: no queue here took them yet (mirror/holding.py).",
            o,
        )
        for origin, n in sorted(holding.held_by_origin.items()):
            held.add_metric([origin], n)
        ended = _family(
            CounterMetricFamily,
            "mirror_target_holds_ended",
            "Held messages settled, by how: stored (their queue came), consumed_at_source (acknowledged "
            "on their only queue, absent here), dead_lettered (stored on the dead-letter address: no "
            "queue here in time), link_lost.",
            ["outcome"],
        )
        for outcome, key in HOLD_OUTCOMES:
            ended.add_metric([outcome], holding.stats[key])
        yield from (held, ended)
        yield _gauge("mirror_target_held_messages", "Messages held now, on every mirror link.", holding.count)
        yield _gauge(
            "mirror_target_links_without_credit",
            "Mirror links whose credit is withheld: mirrorMaxHeldMessages messages held on each.",
            holding.status()["linksWithoutCredit"],
        )

    def _links(self, broker: Broker) -> Iterator[Metric]:
        labels = ["connection", "link"]
        messages = _family(
            CounterMetricFamily,
            "link_messages",
            "Messages over a broker connection's links, by direction.",
            [*labels, "direction"],
        )
        credit = _family(
            GaugeMetricFamily, "link_credit", "Credit of a live link (ours to send, or granted).", labels
        )
        manager = broker.connections
        for c in manager.connections.values() if manager is not None else ():
            for policy in c.policies:
                if isinstance(policy, MirrorSource):
                    link = f"mirror:{policy.snf}"
                    messages.add_metric([c.name, link, "out"], policy.stats["events_sent"])
                    if policy.consumer is not None:
                        credit.add_metric([c.name, link], policy.consumer.link.credit)
                elif isinstance(policy, QueueLinks):
                    _queue_links(c.name, policy, messages, credit)
        yield from (messages, credit)

    def _acceptors(self, broker: Broker) -> Iterator[Metric]:
        a = ["acceptor"]
        current = _family(GaugeMetricFamily, "acceptor_connections", "Connections open on the acceptor.", a)
        accepted = _family(CounterMetricFamily, "acceptor_connections_accepted", "Connections accepted.", a)
        refused = _family(
            CounterMetricFamily,
            "acceptor_connections_refused",
            "Connections refused at the acceptor's connectionsAllowed.",
            a,
        )
        auth = _family(
            CounterMetricFamily,
            "acceptor_authentication_failures",
            "SASL logins refused (wrong password, unknown user, refused mechanism).",
            a,
        )
        open_by: dict[str, int] = {}
        if broker.listener is not None:
            for sock in list(broker.listener.sockets):
                open_by[sock.acceptor.name] = open_by.get(sock.acceptor.name, 0) + 1
        stats = broker.server.stats
        for acceptor in broker.config.acceptors:
            counts = stats.acceptor(acceptor.name)
            current.add_metric([acceptor.name], open_by.get(acceptor.name, 0))
            accepted.add_metric([acceptor.name], counts.accepted)
            refused.add_metric([acceptor.name], counts.refused)
            auth.add_metric([acceptor.name], counts.auth_failures)
        yield from (current, accepted, refused, auth)

    # ------------------------------------------------------------------------- journal and disk

    def _journal(self, broker: Broker) -> Iterator[Metric]:
        journal = broker.server.journal
        if journal is None:
            return
        stats = journal.stats()
        yield _gauge("journal_bytes", "Bytes of the journal's segments on disk.", stats["bytes"])
        yield _gauge("journal_live_bytes", "Bytes of the records still live in them.", stats["live_bytes"])
        yield _gauge("journal_segments", "Journal segment files.", stats["segments"])
        yield _counter("journal_written_bytes", "Bytes written to the journal.", stats["bytes_written"])
        yield _counter("journal_records_written", "Records written to the journal.", stats["records_written"])
        yield _counter("journal_fsyncs", "fdatasync calls of the journal.", stats["fsyncs"])
        yield _counter("journal_compactions", "Journal compactions.", stats["compactions"])
        fsync = journal.fsync_seconds
        if fsync is not None:
            family = HistogramMetricFamily(PREFIX + "journal_fsync_seconds", "How long each fdatasync took.")
            _observe(family, [], fsync)
            yield family
        batches = HistogramMetricFamily(PREFIX + "journal_batch_records", "Records per group commit.")
        _observe(batches, [], journal.batch_records)
        yield batches

    def _disk(self, broker: Broker) -> Iterator[Metric]:
        d = ["directory"]
        free = _family(
            GaugeMetricFamily, "disk_free_bytes", "Free bytes on the file system of a data directory.", d
        )
        total = _family(GaugeMetricFamily, "disk_total_bytes", "Size of that file system.", d)
        config = broker.config
        for kind, path in (("journal", config.journal_directory), ("paging", config.paging_directory)):
            try:
                st = os.statvfs(_existing(Path(path)))
            except OSError:
                continue
            free.add_metric([kind], st.f_bavail * st.f_frsize)
            total.add_metric([kind], st.f_blocks * st.f_frsize)
        yield from (free, total)
        yield _gauge(
            "disk_blocked",
            "1 while producers are blocked because the disk is too full.",
            broker.server.budget.disk_full,
        )

    # --------------------------------------------------------------------------------- queues

    def _queues(self, broker: Broker) -> Iterator[Metric]:
        q = ["queue"]
        depth = _family(
            GaugeMetricFamily, "queue_messages", "Messages held: waiting, paged and in flight.", q
        )
        consumers = _family(GaugeMetricFamily, "queue_consumers", "Consumers of the queue.", q)
        oldest = _family(
            GaugeMetricFamily,
            "queue_oldest_message_age_seconds",
            "Age of the message at the head of the queue (0: none waiting).",
            q,
        )
        added = _family(CounterMetricFamily, "queue_messages_added", "Messages added to the queue.", q)
        acked = _family(CounterMetricFamily, "queue_messages_acknowledged", "Messages acknowledged.", q)
        expired = _family(CounterMetricFamily, "queue_messages_expired", "Messages expired.", q)
        killed = _family(CounterMetricFamily, "queue_messages_killed", "Messages sent to dead letters.", q)
        now_ms = time.time() * 1000
        for queue in self.selected_queues(broker):
            name = [queue.name]
            depth.add_metric(name, queue.depth)
            consumers.add_metric(name, len(queue.consumers))
            first = queue.head()
            head = first.message.timestamp_ms if first is not None else None
            oldest.add_metric(name, max(0.0, (now_ms - head) / 1000) if head else 0.0)
            added.add_metric(name, queue.added)
            acked.add_metric(name, queue.acked)
            expired.add_metric(name, queue.expired)
            killed.add_metric(name, queue.killed)
        yield from (depth, consumers, oldest, added, acked, expired, killed)

    def _addresses(self, broker: Broker) -> Iterator[Metric]:
        a = ["address"]
        size = _family(GaugeMetricFamily, "address_size_bytes", "Message memory the address holds.", a)
        messages = _family(GaugeMetricFamily, "address_messages", "Messages in memory for the address.", a)
        paging = _family(GaugeMetricFamily, "address_paging", "1 while the address pages to page files.", a)
        paged = _family(
            GaugeMetricFamily, "address_paged_messages", "References waiting in the address's page files.", a
        )
        paged_bytes = _family(
            GaugeMetricFamily, "address_paged_bytes", "Bytes of the address's page files.", a
        )
        limit = _family(
            GaugeMetricFamily, "address_max_size_bytes", "The address's max-size-bytes (-1: no limit).", a
        )
        policy = _family(
            GaugeMetricFamily,
            "address_full_policy_info",
            "The address's address-full-policy (always 1).",
            ["address", "policy"],
        )
        actions = _family(
            CounterMetricFamily,
            "address_full_policy_actions",
            "What the full policy did: messages dropped (DROP), sends refused (FAIL, or BLOCK past its "
            "reject threshold), times producers were blocked (BLOCK).",
            ["address", "action"],
        )
        unrouted = _family(
            CounterMetricFamily,
            "address_unrouted_messages",
            "Messages sent to the address that matched no queue.",
            a,
        )
        paging_files = broker.server.paging
        for address in self.selected_addresses(broker):
            name, usage = [address.name], address.usage
            size.add_metric(name, usage.bytes)
            messages.add_metric(name, usage.messages)
            paging.add_metric(name, int(usage.store is not None))
            paged.add_metric(name, usage.paged)
            paged_bytes.add_metric(name, paging_files.bytes_of(address.name))
            limit.add_metric(name, usage.max_bytes)
            policy.add_metric([address.name, usage.policy], 1)
            for action, n in (
                ("dropped", usage.dropped),
                ("refused", usage.refused),
                ("blocked", usage.blocks),
            ):
                actions.add_metric([address.name, action], n)
            unrouted.add_metric(name, address.unrouted)
        yield from (size, messages, paging, paged, paged_bytes, limit, policy, actions, unrouted)

    def selected_addresses(self, broker: Broker) -> list[Address]:
        """The addresses named by the metrics plugin's `addresses` patterns (none by default), at most
        `max-addresses`, skipping temporary ones and those whose settings say `enable-metrics` false."""
        if not self._address_matchers:
            return []
        server, limit = broker.server, self.node.config.metrics.max_addresses
        chosen = []
        for address in sorted(server.addresses.values(), key=lambda a: a.name):
            if address.temporary or not any(m.matches(address.name) for m in self._address_matchers):
                continue
            if not server.settings_for(address.name).enable_metrics:
                continue
            chosen.append(address)
            if len(chosen) >= limit:
                break
        return chosen

    def selected_queues(self, broker: Broker) -> list[Queue]:
        """The queues named by the metrics plugin's `queues` patterns (none by default), at most
        `max-queues`, skipping those whose address settings say `enable-metrics` false."""
        if not self._queue_matchers:
            return []
        server, limit = broker.server, self.node.config.metrics.max_queues
        chosen = []
        for queue in sorted(server.queues.values(), key=lambda q: q.name):
            if queue.temporary or not any(m.matches(queue.name) for m in self._queue_matchers):
                continue
            if not server.settings_for(queue.address).enable_metrics:
                continue
            chosen.append(queue)
            if len(chosen) >= limit:
                break
        return chosen


def _matchers(patterns: str) -> list[Any]:
    """Address-match patterns, comma-separated (the metrics plugin's `queues` and `addresses`)."""
    return [matcher_for(p.strip()) for p in patterns.split(",") if p.strip()]


def _queue_links(connection: str, policy: QueueLinks, messages: Any, credit: Any) -> None:
    kind = str(policy.kind.value)
    for name, n in sorted(policy.sent().items()):
        messages.add_metric([connection, f"{kind}:{name}", "out"], n)
    for name, n in sorted(policy.received.items()):
        messages.add_metric([connection, f"{kind}:{name}", "in"], n)
    for (name, _sender), link in sorted(policy.links.items()):
        if not link.closed_locally:
            credit.add_metric([connection, f"{kind}:{name}"], link.credit)


def _replica_synced(node: Node) -> bool:
    """What management answers today (no replication yet: false); wired to whatever it learns to say."""
    try:
        return bool(node.broker.management.invoke(BROKER, "isReplicaSync", []))
    except Exception:  # a passive backup's table is not filled yet
        return False


def _family(kind: Any, name: str, help_: str, labels: Iterable[str]) -> Any:
    return kind(PREFIX + name, help_, labels=list(labels))


def _votes(counters: dict[str, int]) -> Iterator[Metric]:
    """Quorum voting: the votes this server asked, by question and outcome, and those it cast, by
    question and answer (every combination, zero until it happens; a server with a lock manager has none)."""
    asked = CounterMetricFamily(
        PREFIX + "ha_votes_asked",
        "Quorum votes this server asked (AMQ951100/AMQ951102), by question and outcome (lost: too few yes "
        "within quorum-vote-wait, or isolated by the network check).",
        labels=["question", "outcome"],
    )
    cast = CounterMetricFamily(
        PREFIX + "ha_votes_cast",
        "Quorum votes this server cast for another member (AMQ951101), by question and answer.",
        labels=["question", "vote"],
    )
    for question in (q.value for q in Question):
        for outcome in (Outcome.WON.value, Outcome.LOST.value):
            asked.add_metric([question, outcome], counters.get(f"votes asked {question} {outcome}", 0))
        for vote in ("yes", "no"):
            cast.add_metric([question, vote], counters.get(f"votes cast {question} {vote}", 0))
    yield asked
    yield cast


def _gauge(name: str, help_: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, help_, value=float(value))


def _counter(name: str, help_: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, help_, value=float(value))


def _observe(family: HistogramMetricFamily, labels: list[str], histogram: Histogram) -> None:
    buckets, _count, total = histogram.cumulative()
    family.add_metric(labels, [(_le(bound), n) for bound, n in buckets], total)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def _existing(directory: Path) -> Path:
    while not directory.exists() and directory.parent != directory:
        directory = directory.parent
    return directory
