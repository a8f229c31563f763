"""Validated, immutable configuration models (what `load_config` returns).

Defaults are Artemis's unless a field's comment says otherwise. Fields that Artemis has but this
broker does not act on yet are still stored, so nothing in a loaded file is silently dropped.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from broker_core.security.authorization import Permission
from broker_core.vocabulary import RoutingType
from filters.wildcard import best_matches


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class JournalType(StrEnum):
    ASYNCIO = "ASYNCIO"
    NIO = "NIO"
    MAPPED = "MAPPED"


class CriticalAnalyzerPolicy(StrEnum):
    HALT = "HALT"
    SHUTDOWN = "SHUTDOWN"
    LOG = "LOG"


class AddressFullPolicy(StrEnum):
    PAGE = "PAGE"
    BLOCK = "BLOCK"
    DROP = "DROP"
    FAIL = "FAIL"


class PageFullPolicy(StrEnum):
    DROP = "DROP"
    FAIL = "FAIL"


class SlowConsumerPolicy(StrEnum):
    KILL = "KILL"
    NOTIFY = "NOTIFY"


class SlowConsumerUnit(StrEnum):
    MESSAGES_PER_SECOND = "MESSAGES_PER_SECOND"
    MESSAGES_PER_MINUTE = "MESSAGES_PER_MINUTE"
    MESSAGES_PER_HOUR = "MESSAGES_PER_HOUR"
    MESSAGES_PER_DAY = "MESSAGES_PER_DAY"


class DeletionPolicy(StrEnum):
    OFF = "OFF"
    FORCE = "FORCE"


class LinkKind(StrEnum):
    SENDER = "sender"
    RECEIVER = "receiver"
    PEER = "peer"


# ---------------------------------------------------------------- acceptors and URIs


class TlsSettings(Frozen):
    """An acceptor's TLS: PEM files (a Java key store is refused); keyStorePath is the certificate chain,
    keyStorePassword the key's password, trustStorePath the CAs client certificates are checked against."""

    enabled: bool = False
    key_store_path: str | None = None
    key_store_password: str | None = None
    trust_store_path: str | None = None
    need_client_auth: bool = False
    # Our extension for Python's ssl module, which reads PEM files rather than Java key stores.
    cert_path: str | None = None
    key_path: str | None = None
    ca_path: str | None = None


class Acceptor(Frozen):
    name: str
    uri: str
    host: str
    port: int
    protocols: tuple[str, ...] = ("AMQP",)
    tls: TlsSettings = TlsSettings()
    amqp_credits: int = 1000
    amqp_low_credits: int = 300
    amqp_idle_timeout: int = 60000  # ms; Artemis derives it from the 60 s connection TTL
    amqp_duplicate_detection: bool = True
    # a delivery still arriving goes to the large-messages directory past this size (0: every multi-frame
    # one; -1: never), as Artemis streams large AMQP messages (spool.py)
    amqp_min_large_message_size: int = 102400
    max_frame_size: int = 131072  # our AMQP default; Artemis's is larger
    anycast_prefix: str | None = None
    multicast_prefix: str | None = None
    connections_allowed: int = -1  # -1: unlimited
    handshake_timeout: int = 10  # seconds a connection has to say what it speaks (Artemis's default; 0: none)
    http_upgrade: bool = False  # httpUpgradeEnabled: connections come by HTTP upgrade only (websocket.md)
    websocket_max_payload: int | None = None  # the largest WebSocket frame read (None: see websocket.md)
    do_not_offset: bool = False  # a colocated backup's copy of this acceptor keeps its port
    # ours, beyond Artemis: the (remote, origin) broker ids a mirror link may forward ("*": any)
    mirror_trusted_origins: tuple[tuple[str, str], ...] = ()
    # ours: a mirror link's messages no queue here takes yet are held, up to so many (then its credit is
    # withheld) and so long (ms; then stored on its dead-letter address, or held on without one)
    mirror_max_held_messages: int = 10000
    mirror_hold_timeout: int = 60000


CONSOLE_PROTOCOL = "CONSOLE"  # ours: an acceptor with protocols=CONSOLE serves the web console


class ConsoleSettings(Frozen):
    """The web console (docs/console.md): an acceptor with ``protocols=CONSOLE`` gives its host, port and
    TLS; off unless one is configured."""

    acceptor: Acceptor
    session_timeout: int = 1_800_000  # ms a login lasts without a request (consoleSessionTimeout)


class Endpoint(Frozen):
    host: str
    port: int
    params: dict[str, str] = {}
    scheme: str = "tcp"  # tcp, or ws / wss: AMQP over WebSocket (wss: over TLS)
    path: str = "/"  # what a WebSocket upgrade asks for


# ---------------------------------------------------------------- addresses and queues


class QueueConfig(Frozen):
    name: str
    address: str
    routing_type: RoutingType
    durable: bool = True
    filter: str | None = None
    max_consumers: int = -1
    purge_on_no_consumers: bool = False
    exclusive: bool = False
    group_rebalance: bool = False
    group_rebalance_pause_dispatch: bool = False
    group_buckets: int = -1
    group_first_key: str | None = None
    last_value: bool = False
    last_value_key: str | None = None
    non_destructive: bool = False
    consumers_before_dispatch: int = 0
    delay_before_dispatch: int = -1
    ring_size: int = -1
    enabled: bool = True


class AddressConfig(Frozen):
    name: str
    routing_types: frozenset[RoutingType]
    queues: tuple[QueueConfig, ...] = ()


# ---------------------------------------------------------------- address settings


class AddressSettings(Frozen):
    """One `<address-setting>`'s values; element names are the field names with ``-`` for ``_``.

    `model_fields_set` tells which fields the file set; `BrokerConfig.address_settings_for` merges
    entries field by field, most specific match first.
    """

    dead_letter_address: str | None = None
    auto_create_dead_letter_resources: bool = False
    dead_letter_queue_prefix: str = "DLQ."
    dead_letter_queue_suffix: str = ""
    expiry_address: str | None = None
    auto_create_expiry_resources: bool = False
    expiry_queue_prefix: str = "EXP."
    expiry_queue_suffix: str = ""
    no_expiry: bool = False
    expiry_delay: int = -1
    min_expiry_delay: int = -1
    max_expiry_delay: int = -1
    redelivery_delay: int = 0
    redelivery_delay_multiplier: float = 1.0
    redelivery_collision_avoidance_factor: float = 0.0
    max_redelivery_delay: int | None = None  # Artemis: 10 x redelivery-delay when unset
    max_delivery_attempts: int = 10
    max_size_bytes: int = -1
    max_size_messages: int = -1
    max_size_bytes_reject_threshold: int = -1
    page_size_bytes: int = 10485760
    page_limit_bytes: int = -1
    page_limit_messages: int = -1
    page_full_policy: PageFullPolicy | None = None
    page_max_cache_size: int = 5
    max_read_page_messages: int = -1
    max_read_page_bytes: int = 20971520
    prefetch_page_messages: int = -1
    prefetch_page_bytes: int = -1
    address_full_policy: AddressFullPolicy = AddressFullPolicy.PAGE
    message_counter_history_day_limit: int = 0
    last_value_queue: bool = False
    default_last_value_queue: bool = False
    default_last_value_key: str | None = None
    default_non_destructive: bool = False
    default_exclusive_queue: bool = False
    default_group_rebalance: bool = False
    default_group_rebalance_pause_dispatch: bool = False
    default_group_buckets: int = -1
    default_group_first_key: str | None = None
    default_consumers_before_dispatch: int = 0
    default_delay_before_dispatch: int = -1
    redistribution_delay: int = -1
    send_to_dla_on_no_route: bool = False
    slow_consumer_threshold: int = -1
    slow_consumer_threshold_measurement_unit: SlowConsumerUnit = SlowConsumerUnit.MESSAGES_PER_SECOND
    slow_consumer_policy: SlowConsumerPolicy = SlowConsumerPolicy.NOTIFY
    slow_consumer_check_period: int = 5
    auto_create_queues: bool = True
    auto_delete_queues: bool = True
    auto_delete_created_queues: bool = False
    auto_delete_queues_delay: int = 0
    auto_delete_queues_message_count: int = 0
    auto_delete_queues_skip_usage_check: bool = False
    config_delete_queues: DeletionPolicy = DeletionPolicy.OFF
    auto_create_addresses: bool = True
    auto_delete_addresses: bool = True
    auto_delete_addresses_delay: int = 0
    auto_delete_addresses_skip_usage_check: bool = False
    config_delete_addresses: DeletionPolicy = DeletionPolicy.OFF
    config_delete_diverts: DeletionPolicy = DeletionPolicy.OFF
    management_browse_page_size: int = 200
    management_message_attribute_size_limit: int = 256
    default_purge_on_no_consumers: bool = False
    default_max_consumers: int = -1
    default_queue_routing_type: RoutingType = RoutingType.MULTICAST
    default_address_routing_type: RoutingType = RoutingType.MULTICAST
    default_consumer_window_size: int = -1
    default_ring_size: int = -1
    retroactive_message_count: int = 0
    enable_metrics: bool = True
    enable_ingress_timestamp: bool = False
    id_cache_size: int | None = None  # falls back to the broker-wide <id-cache-size>
    initial_queue_buffer_size: int = 8192


# Elements holding byte sizes (accept 10M etc.); every other int field takes a plain integer.
ADDRESS_SETTING_SIZES = frozenset(
    {
        "max_size_bytes",
        "page_size_bytes",
        "page_limit_bytes",
        "max_read_page_bytes",
        "prefetch_page_bytes",
        "max_size_bytes_reject_threshold",
    }
)


class AddressSettingEntry(Frozen):
    match: str
    settings: AddressSettings


# ---------------------------------------------------------------- security


class SecuritySetting(Frozen):
    match: str
    permissions: dict[Permission, frozenset[str]]  # permission -> roles granted it


class User(Frozen):
    name: str
    password: str


# ---------------------------------------------------------------- broker connections


class MirrorSettings(Frozen):
    message_acknowledgements: bool = True
    queue_creation: bool = True
    queue_removal: bool = True
    address_filter: str | None = None
    durable: bool = True
    sync: bool = False
    properties: dict[str, str] = {}


class LinkSettings(Frozen):
    kind: LinkKind
    address_match: str | None = None
    queue_name: str | None = None


class AmqpConnection(Frozen):
    name: str
    uri: str
    endpoints: tuple[Endpoint, ...]  # the primary first, then the alternates written after '#'
    user: str | None = None
    password: str | None = None
    retry_interval: int = 5000
    reconnect_attempts: int = -1  # -1: retry forever
    idle_timeout: int = 60000  # ms without a frame from the peer before the connection counts as dead
    auto_start: bool = True
    mirrors: tuple[MirrorSettings, ...] = ()
    links: tuple[LinkSettings, ...] = ()


# ---------------------------------------------------------------- high availability

ZOOKEEPER_LOCK_MANAGER = "org.apache.activemq.artemis.lockmanager.zookeeper.CuratorDistributedLockManager"
# the lock managers this broker has, by Artemis's class names (current and older), with the properties each
# reads (the first one required)
ZOOKEEPER_LOCK_MANAGERS = frozenset(
    {
        ZOOKEEPER_LOCK_MANAGER,
        "org.apache.activemq.artemis.quorum.zookeeper.CuratorDistributedPrimitiveManager",
    }
)
FILE_LOCK_MANAGERS = frozenset(
    {
        "org.apache.activemq.artemis.lockmanager.file.FileBasedLockManager",
        "org.apache.activemq.artemis.quorum.file.FileBasedPrimitiveManager",
    }
)
ZOOKEEPER_PROPERTIES = (
    "connect-string",
    "session-ms",
    "session-percent",
    "connection-ms",
    "retries",
    "retries-ms",
    "namespace",
)
FILE_PROPERTIES = ("locks-folder",)
# ours, for sites that run PostgreSQL and no ZooKeeper: a lease row per node id (lock_managers/postgresql.py)
POSTGRESQL_LOCK_MANAGER = "org.amqp_mirror.lockmanager.postgresql.PostgreSQLLockManager"
POSTGRESQL_LOCK_MANAGERS = frozenset({POSTGRESQL_LOCK_MANAGER})
POSTGRESQL_PROPERTIES = ("connect-string", "session-ms", "session-percent", "connection-ms", "namespace")
LOCK_MANAGERS: dict[str, tuple[str, ...]] = {
    **{name: ZOOKEEPER_PROPERTIES for name in ZOOKEEPER_LOCK_MANAGERS},
    **{name: FILE_PROPERTIES for name in FILE_LOCK_MANAGERS},
    **{name: POSTGRESQL_PROPERTIES for name in POSTGRESQL_LOCK_MANAGERS},
}


class HaKind(StrEnum):
    PRIMARY_ONLY = "primary-only"
    SHARED_STORE = "shared-store"
    REPLICATION = "replication"


class HaRole(StrEnum):
    PRIMARY = "primary"
    BACKUP = "backup"


class LockManager(Frozen):
    """`<manager>`: a pluggable lock manager (ZooKeeper unless `class-name` says otherwise)."""

    class_name: str = ZOOKEEPER_LOCK_MANAGER
    properties: dict[str, str] = {}


class ScaleDown(Frozen):
    """`<scale-down>`: on a clean stop, this server's messages move to an active member of its group
    (a primary-only server; a backup scales down instead of activating). `connectors`: the
    `<connector>` names of the members to try, in order; `group_name`: only a member announcing the same
    group is chosen (without one, any member); a server's group is what it announces to others too."""

    enabled: bool = True
    group_name: str | None = None
    connectors: tuple[str, ...] = ()


class HaPolicy(Frozen):
    """`<ha-policy>`: the seed's parameters with their documented defaults (docs/ha.md)."""

    kind: HaKind = HaKind.PRIMARY_ONLY
    role: HaRole = HaRole.PRIMARY
    # shared store (and replication where the seed says so)
    failover_on_shutdown: bool = False
    wait_for_activation: bool = True
    allow_failback: bool = True
    restart_backup: bool = False  # the documentation's default (Artemis's code has true)
    scale_down: ScaleDown | None = None
    # replication
    group_name: str | None = None
    cluster_name: str | None = None
    check_for_active_server: bool = False
    initial_replication_sync_timeout: int = 30000
    max_saved_replicated_journals_size: int = 2
    retry_replication_wait: int = 2000
    vote_on_replication_failure: bool = False
    quorum_size: int = -1
    vote_retries: int = 12
    vote_retry_wait: int = 5000
    quorum_vote_wait: int = 30
    manager: LockManager | None = None
    coordination_id: str | None = None
    # `<colocated>`: this primary asks for, and hosts, backups in the processes of its cluster
    colocated: Colocated | None = None


class Colocated(Frozen):
    """`<colocated>`, with the reference's defaults: whether this primary asks the other primaries of its
    cluster to host a backup for it, how often, and how many backups it hosts for them; each hosted
    backup runs with `backup` (the nested `<backup>`'s parameters) as its HA policy."""

    request_backup: bool = False
    max_backups: int = 1
    backup_request_retries: int = -1  # -1: for ever
    backup_request_retry_interval: int = 5000  # ms
    backup_port_offset: int = 100
    excludes: tuple[str, ...] = ()  # connectors a hosted backup's copy keeps as they are
    backup: HaPolicy  # the nested <backup>'s parameters, role backup


HaPolicy.model_rebuild()  # its `colocated` field names Colocated, defined after it


class Connector(Frozen):
    """`<connector name="...">tcp://host:port?...</connector>`: how to reach a server (a cluster member)."""

    name: str
    uri: str
    host: str
    port: int


class ClusterConnection(Frozen):
    """`<cluster-connection>`: how the servers of a replicated pair find each other (its static
    connectors) and how long a silent connection between them lives. Clustering queues across brokers
    (message load balancing, max hops) is not implemented; those elements are read and ignored."""

    name: str
    connector_ref: str | None = None  # our own connector, as the others reach us
    static_connectors: tuple[str, ...] = ()
    connection_ttl: int = 60000  # ms without a frame before the connection counts as dead
    check_period: int = 30000  # read; over AMQP each side sends keep-alives at half the other's TTL
    retry_interval: int = 500
    reconnect_attempts: int = -1
    call_timeout: int = 30000  # ms a server waits for its partner's answer (a replica's confirmations)
    discovery_group: str | None = None  # `<discovery-group-ref>`: its members found by UDP as well


class BroadcastGroup(Frozen):
    """`<broadcast-group>`: every `broadcast_period` ms, one UDP datagram to the multicast group naming
    this server's node id and its connectors (amqp_mirror/discovery.py; our format, not Artemis's)."""

    name: str
    local_bind_address: str | None = None
    local_bind_port: int = -1  # -1: any free port
    group_address: str
    group_port: int
    broadcast_period: int = 2000
    connectors: tuple[str, ...] = ()  # `<connector-ref>`s


class DiscoveryGroup(Frozen):
    """`<discovery-group>`: listens on the multicast group; an entry not heard for `refresh_timeout` ms
    is dropped."""

    name: str
    local_bind_address: str | None = None  # the interface the group is joined on
    group_address: str
    group_port: int
    refresh_timeout: int = 10000


# ---------------------------------------------------------------- metrics

# `<metrics><plugin class-name=...>` classes served as a Prometheus endpoint: ours, and Artemis's own
# Prometheus plugin (a broker.xml written for Artemis keeps its metrics here)
PROMETHEUS_PLUGIN = "org.amqp_mirror.metrics.PrometheusMetricsPlugin"
PROMETHEUS_PLUGINS = frozenset(
    {
        PROMETHEUS_PLUGIN,
        "com.redhat.amq.broker.core.server.metrics.plugins.ArtemisPrometheusMetricsPlugin",
        "org.apache.activemq.artemis.core.server.metrics.plugins.ArtemisPrometheusMetricsPlugin",
    }
)


class MetricsSettings(Frozen):
    """`<metrics>`: the Prometheus endpoint (served only with a Prometheus plugin, see config/metrics.py)."""

    enabled: bool = False
    class_name: str = PROMETHEUS_PLUGIN
    host: str = "127.0.0.1"  # as Artemis's web console: loopback unless the operator opens it
    port: int = 9404
    queues: str = ""  # comma-separated address-match patterns of queue names; none by default
    max_queues: int = 100
    addresses: str = ""  # the same, for per-address series (memory, paging, full-policy actions)
    max_addresses: int = 100
    mirror_rpo_seconds: float = 60.0  # what the alerts hold a mirror's oldest pending event to
    mirror_behind_seconds: float = 10.0  # a mirror whose oldest pending event is older: logged as behind


# ---------------------------------------------------------------- the broker


class BrokerConfig(Frozen):
    """The whole broker.xml. Scalar element `<x-y>` is field `x_y`; directories are absolute."""

    source: Path | None = None
    base_dir: Path
    name: str = "localhost"
    persistence_enabled: bool = True
    security_enabled: bool = True
    management_address: str = "activemq.management"
    management_notification_address: str = "activemq.notifications"
    id_cache_size: int = 20000
    persist_id_cache: bool = True
    journal_directory: Path
    bindings_directory: Path
    paging_directory: Path
    large_messages_directory: Path
    journal_type: JournalType = JournalType.ASYNCIO
    journal_datasync: bool = True
    journal_sync_durable: bool = True  # ours: fsync before a durable send is Accepted
    journal_sync_transactional: bool = True
    journal_sync_non_transactional: bool = True
    journal_file_size: int = 10485760
    journal_min_files: int = 2
    journal_pool_files: int = -1
    journal_buffer_timeout: int | None = None  # ns; Artemis picks by journal type when unset
    journal_buffer_size: int = 501760
    journal_max_io: int | None = None
    journal_device_block_size: int = 4096
    journal_compact_percentage: int = 30
    journal_compact_min_files: int = 10
    create_journal_dir: bool = True
    create_bindings_dir: bool = True
    purge_page_folders: bool = False
    page_sync_timeout: int | None = None
    max_redelivery_records: int = 10
    max_disk_usage: int = 90
    min_disk_free: int = -1
    disk_scan_period: int = 5000
    global_max_size: int = -1  # -1: 512 MiB or half the machine's memory, the smaller (server.py)
    global_max_messages: int = -1
    critical_analyzer: bool = True
    critical_analyzer_timeout: int = 120000
    critical_analyzer_check_period: int = 0
    critical_analyzer_policy: CriticalAnalyzerPolicy = CriticalAnalyzerPolicy.LOG
    wild_card_routing_enabled: bool = True
    graceful_shutdown_enabled: bool = False
    graceful_shutdown_timeout: int = -1
    transaction_timeout: int = 300000
    transaction_timeout_scan_period: int = 1000
    message_expiry_scan_period: int = 30000
    address_queue_scan_period: int = 30000
    connection_ttl_override: int = -1
    configuration_file_refresh_period: int = 5000
    journal_lock_acquisition_timeout: int = -1  # ms; -1: wait for the lock for ever
    node_manager_lock_directory: Path | None = None  # None: the journal directory
    cluster_user: str | None = None
    cluster_password: str | None = None
    # the network isolation check (broker_core/ha/isolation.py): lists are comma-separated, as written
    network_check_list: str | None = None
    network_check_URL_list: str | None = None  # Artemis spells these two with capitals
    network_check_NIC: str | None = None
    network_check_period: int = 5000
    network_check_timeout: int = 1000
    network_check_ping_command: str | None = None
    network_check_ping6_command: str | None = None
    ha_policy: HaPolicy = HaPolicy()
    connectors: tuple[Connector, ...] = ()
    cluster_connections: tuple[ClusterConnection, ...] = ()
    broadcast_groups: tuple[BroadcastGroup, ...] = ()
    discovery_groups: tuple[DiscoveryGroup, ...] = ()

    metrics: MetricsSettings = MetricsSettings()
    acceptors: tuple[Acceptor, ...] = ()  # the AMQP ones
    console: ConsoleSettings | None = None
    addresses: tuple[AddressConfig, ...] = ()
    address_settings: tuple[AddressSettingEntry, ...] = ()
    security_settings: tuple[SecuritySetting, ...] = ()
    broker_connections: tuple[AmqpConnection, ...] = ()
    users: tuple[User, ...] = ()
    roles: dict[str, frozenset[str]] = {}  # role -> user names

    def ha_partners(self) -> tuple[Connector, ...]:
        """Under an HA policy, the other servers of the pair (clients are told of them, a passive server
        sends clients there, a backup replicates from them): the static connectors of the cluster
        connection (the one `cluster-name` names, or the first), else every `<connector>` that is not
        one of our own acceptors."""
        if self.ha_policy.kind == HaKind.PRIMARY_ONLY:
            return ()
        own = {(a.host, a.port) for a in self.acceptors}
        cluster = self.cluster_connection()
        if cluster is not None and cluster.static_connectors:
            by_name = {c.name: c for c in self.connectors}
            named = (by_name[name] for name in cluster.static_connectors if name in by_name)
            return tuple(c for c in named if (c.host, c.port) not in own)
        if cluster is not None and cluster.discovery_group is not None:
            return ()  # its members are the discovered ones (amqp_mirror/discovery.py)
        return tuple(c for c in self.connectors if (c.host, c.port) not in own)

    def ha_partner(self) -> Connector | None:
        """The other server of the pair, when the configuration names exactly one."""
        others = self.ha_partners()
        return others[0] if len(others) == 1 else None

    def cluster_connection(self) -> ClusterConnection | None:
        wanted = self.ha_policy.cluster_name
        for cluster in self.cluster_connections:
            if wanted is None or cluster.name == wanted:
                return cluster
        return None

    def address_settings_for(self, address: str) -> AddressSettings:
        """Merge every matching `<address-setting>`: per field, the most specific entry that sets it wins.

        Precedence is Artemis's (see `filters.wildcard`): literal > ``*`` > ``#``, longer ``#`` first.
        """
        entries = {entry.match: entry.settings for entry in self.address_settings}
        merged: dict[str, Any] = {}
        for match in best_matches(entries, address):  # least specific first, so later ones override
            settings = entries[match]
            merged.update({name: getattr(settings, name) for name in settings.model_fields_set})
        return AddressSettings.model_validate(merged)

    def security_setting_for(self, address: str) -> SecuritySetting | None:
        """Artemis does not merge security settings: the most specific match applies whole."""
        by_match = {setting.match: setting for setting in self.security_settings}
        ranked = best_matches(by_match, address)
        return by_match[ranked[-1]] if ranked else None

    def roles_of(self, user: str) -> frozenset[str]:
        return frozenset(role for role, users in self.roles.items() if user in users)
