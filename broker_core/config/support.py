"""What this broker does with each name of Artemis's configuration: the one table, flipped per feature.

Every element, attribute, URI parameter and property a broker.xml may hold is one of:

- implemented: read and acted on, silently;
- inert ("has no effect here"): Artemis has it, and here it changes nothing an operator relies on (a JVM,
  Netty or other-protocol tuning, a timer of a mechanism done another way here). Said once, with its
  line, as a note: an error under ``--strict``;
- refused ("not implemented yet"): the broker would behave differently from what the file says. An error
  until it is implemented. Some are refused only for some values: `harmless` lists the values that ask
  for what this broker does anyway (``<redelivery-delay>0</redelivery-delay>``), read silently.

A name Artemis does not have is an error with "did you mean": an element or attribute is judged against
Artemis's schema (`schema.py`), a URI parameter or property against the names of its table here. One of
the schema's that no table lists is refused. When a feature lands, its rows here turn `IMPLEMENTED` and
its parser reads it; nothing else decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Support(StrEnum):
    IMPLEMENTED = "implemented"
    INERT = "has no effect here"
    REFUSED = "not implemented yet"


@dataclass(frozen=True)
class Rule:
    support: Support
    why: str = ""  # inert: what happens here instead; refused: what would differ from the file
    harmless: tuple[str, ...] = ()  # refused: the values (as written) that ask for what we do anyway
    instead: str = ""  # refused: what to write instead, when there is something

    def acts_on(self, value: str | None) -> bool:
        """Whether a refused name is harmless with this value: it asks for what this broker does."""
        return value is not None and value.strip().lower() in {h.lower() for h in self.harmless}


IMPLEMENTED = Rule(Support.IMPLEMENTED)


def inert(why: str) -> Rule:
    return Rule(Support.INERT, why)


def refused(why: str, *harmless: str, instead: str = "") -> Rule:
    return Rule(Support.REFUSED, why, harmless, instead)


def judged(rule: Rule, value: str | None) -> Support:
    """The rule's answer for this value: a refused name with a harmless value is implemented."""
    if rule.support == Support.REFUSED and rule.acts_on(value):
        return Support.IMPLEMENTED
    return rule.support


# ------------------------------------------------------------------------------- shared reasons

_JOURNAL = "this broker's journal is its own (one append-only file set, batched and synced its own way)"
_SYNC = "a durable send is confirmed once its journal write is on disk, as <journal-sync-durable> says"
_NO_JVM = "no JVM runs this broker"
_NO_JMX = "there is no JMX: management is AMQP requests to the management address"
_NO_NOTIFICATIONS = "this broker sends no management notifications"
_NO_CLUSTER = "queues are not clustered across brokers"
_COMMIT = "a commit is written as one journal batch, synced as <journal-sync-durable> says"
_NO_TX_TIMEOUT = "an AMQP local transaction never times out (as on Artemis); it ends with its connection"
_NO_SECURITY_CACHE = "no security cache: every check reads the loaded users, roles and settings"
_THREADS = "one event loop, no thread pools"
_MIRROR_ACKS = "this broker's mirror target retries an acknowledgement its own way (docs/mirror.md)"
_NO_MQTT = "MQTT is not served"
_NETTY = "a Netty tuning (sockets are asyncio's)"
_NO_DISCOVERY = "a scale-down's members found by discovery"
_NO_JGROUPS = "JGroups is not run here"


# ------------------------------------------------------------------------------- <core>

CORE: dict[str, Rule] = {
    # read and acted on
    **{
        name: IMPLEMENTED
        for name in (
            "name",
            "persistence-enabled",
            "security-enabled",
            "management-address",
            "id-cache-size",
            "persist-id-cache",
            "journal-directory",
            "bindings-directory",
            "paging-directory",
            "large-messages-directory",
            "journal-sync-durable",  # ours
            "journal-file-size",
            "max-disk-usage",
            "min-disk-free",
            "disk-scan-period",
            "global-max-size",
            "global-max-messages",
            "message-expiry-scan-period",
            "journal-lock-acquisition-timeout",
            "node-manager-lock-directory",
            "cluster-user",
            "cluster-password",
            "connection-ttl-override",
            "acceptors",
            "addresses",
            "address-settings",
            "security-settings",
            "broker-connections",
            "ha-policy",
            "connectors",
            "cluster-connections",
            "metrics",
        )
    },
    # Artemis's journal tunings
    **{
        name: inert(_JOURNAL)
        for name in (
            "journal-type",
            "journal-min-files",
            "journal-pool-files",
            "journal-buffer-timeout",
            "journal-buffer-size",
            "journal-max-io",
            "journal-device-block-size",
            "journal-compact-percentage",
            "journal-compact-min-files",
            "journal-file-open-timeout",
            "log-journal-write-rate",
        )
    },
    **{
        name: inert(_SYNC)
        for name in ("journal-datasync", "journal-sync-non-transactional", "large-message-sync")
    },
    "journal-sync-transactional": inert(_COMMIT),
    "transaction-timeout": inert(_NO_TX_TIMEOUT),
    "transaction-timeout-scan-period": inert(_NO_TX_TIMEOUT),
    "create-journal-dir": refused("a missing journal directory is always created here", "true"),
    "create-bindings-dir": refused("a missing bindings directory is always created here", "true"),
    "journal-retention-directory": refused("no copy of the journal is retained here for replay"),
    "store": IMPLEMENTED,  # what it holds is judged: STORE
    "purge-page-folders": inert("a page file is deleted whole once every queue is done with it"),
    "page-sync-timeout": inert("a page is synced just before the journal batch that commits it"),
    "page-max-concurrent-io": inert(_JOURNAL),
    "read-whole-page": inert("a page is read with the page size and read limits of its address"),
    "max-redelivery-records": inert(_JOURNAL),
    "persist-delivery-count-before-delivery": inert(_JOURNAL),
    # the JVM's and the critical analyzer's
    **{
        name: inert(f"{_NO_JVM}: a stalled process is the systemd watchdog's to restart (deploy/)")
        for name in (
            "critical-analyzer",
            "critical-analyzer-timeout",
            "critical-analyzer-check-period",
            "critical-analyzer-policy",
        )
    },
    **{
        name: inert(_NO_JVM)
        for name in (
            "memory-measure-interval",
            "memory-warning-threshold",
            "log-delegate-factory-class-name",
            "server-dump-interval",
            "message-expiry-thread-priority",
        )
    },
    "global-max-size-percent-of-jvm-max-memory": refused(
        f"{_NO_JVM}: <global-max-size> sets the limit (by default half the machine's memory)"
    ),
    "thread-pool-max-size": inert(_THREADS),
    "scheduled-thread-pool-max-size": inert(_THREADS),
    "async-connection-execution-enabled": inert(_THREADS),
    "jmx-management-enabled": inert(_NO_JMX),
    "jmx-domain": inert(_NO_JMX),
    "jmx-use-broker-name": inert(_NO_JMX),
    "management-notification-address": inert(_NO_NOTIFICATIONS),
    "suppress-session-notifications": inert(_NO_NOTIFICATIONS),
    "message-counter-enabled": inert("no message counters: queue depths and rates are in the metrics"),
    "message-counter-max-day-history": inert("no message counters"),
    "message-counter-sample-period": inert("no message counters"),
    "authentication-cache-size": inert(_NO_SECURITY_CACHE),
    "authorization-cache-size": inert(_NO_SECURITY_CACHE),
    "security-invalidation-interval": inert(_NO_SECURITY_CACHE),
    "connection-ttl-check-interval": inert("each connection's idle timeout is checked on its own timer"),
    "address-queue-scan-period": inert("an auto-created address goes as soon as its last queue does"),
    "configuration-file-refresh-period": inert(
        "broker.xml is read again on SIGHUP (systemctl reload), not polled"
    ),
    "resolve-protocols": inert("AMQP is built in"),
    "internal-naming-prefix": inert(_NO_CLUSTER),
    "mirror-ack-manager-queue-attempts": inert(_MIRROR_ACKS),
    "mirror-ack-manager-page-attempts": inert(_MIRROR_ACKS),
    "mirror-ack-manager-retry-delay": inert(_MIRROR_ACKS),
    "mirror-ack-manager-warn-unacked": inert(_MIRROR_ACKS),
    "mirror-page-transaction": inert(_MIRROR_ACKS),
    "mqtt-session-scan-interval": inert(_NO_MQTT),
    "mqtt-session-state-persistence-timeout": inert(_NO_MQTT),
    # would change what the broker does
    "graceful-shutdown-enabled": refused("a stop does not wait for clients to leave", "false"),
    "graceful-shutdown-timeout": inert("only with <graceful-shutdown-enabled>, not implemented yet"),
    "wild-card-routing-enabled": refused(
        "wildcard routing (a consumer of news.# getting what is sent to news.eu): addresses are literal here",
        "false",
    ),
    "wildcard-addresses": refused("the wildcard syntax is Artemis's default here ('.', '*', '#')"),
    "literal-match-markers": refused("match expressions are always wildcard expressions here"),
    "amqp-use-core-subscription-naming": refused("subscription queues are named the AMQP way", "false"),
    "temporary-queue-namespace": refused("temporary queues take the address settings of their address"),
    "system-property-prefix": refused("no system properties override broker.xml here"),
    "mask-password": refused(
        "passwords in broker.xml are plain or ENC(...) (Artemis's default codec)", "false"
    ),
    "password-codec": refused("ENC(...) passwords are read with Artemis's default codec only"),
    "populate-validated-user": refused("messages do not carry the validated user", "false"),
    "reject-empty-validated-user": refused("messages do not carry the validated user", "false"),
    "management-message-rbac": refused("management is checked with the manage permission only", "false"),
    "management-rbac-prefix": inert("only with <management-message-rbac>, not implemented yet"),
    "view-permission-method-match-pattern": refused("management is checked with the manage permission"),
    "bridges": refused("core bridges do not forward messages here (a broker connection's <sender> does)"),
    "diverts": refused("messages are not diverted"),
    "federations": refused("core federation"),
    "broadcast-groups": IMPLEMENTED,  # UDP multicast, our datagram format (amqp_mirror/discovery.py)
    "discovery-groups": IMPLEMENTED,
    "grouping-handler": refused("message groups are not clustered"),
    "connector-services": refused("connector services are Java classes"),
    "connection-routers": refused("clients are not routed to other brokers"),
    "broker-plugins": refused("broker plugins are Java classes"),
    "metrics-plugin": refused("the older form of <metrics>: write <metrics><plugin class-name=...>"),
    "remoting-incoming-interceptors": refused("interceptors are Java classes"),
    "remoting-outgoing-interceptors": refused("interceptors are Java classes"),
    "resource-limit-settings": refused("per-user limits on connections and queues are not enforced"),
    "queues": refused("the older form of queues: write them inside <addresses>"),
    **{
        name: IMPLEMENTED  # the network isolation check (broker_core/ha/isolation.py)
        for name in (
            "network-check-NIC",
            "network-check-period",
            "network-check-timeout",
            "network-check-list",
            "network-check-URL-list",
            "network-check-ping-command",
            "network-check-ping6-command",
        )
    },
}

STORE = {
    "file-store": IMPLEMENTED,
    "database-store": refused("the broker would run on its local file journal, not the database"),
}

CONFIGURATION = {"core": IMPLEMENTED, "jms": refused("the JMS configuration's queues and topics")}


# ------------------------------------------------------------------------------- <address-setting>

ADDRESS_SETTING: dict[str, Rule] = {
    **{
        name: IMPLEMENTED
        for name in (
            "dead-letter-address",
            "expiry-address",
            "max-delivery-attempts",
            "max-size-bytes",
            "max-size-messages",
            "max-size-bytes-reject-threshold",
            "page-size-bytes",
            "max-read-page-messages",
            "max-read-page-bytes",
            "address-full-policy",
            "auto-create-queues",
            "auto-create-addresses",
            "auto-delete-addresses",
            "default-address-routing-type",
            "enable-metrics",
            "id-cache-size",
        )
    },
    "auto-create-dead-letter-resources": refused("no dead-letter queue is created on demand", "false"),
    "dead-letter-queue-prefix": inert("only with <auto-create-dead-letter-resources>"),
    "dead-letter-queue-suffix": inert("only with <auto-create-dead-letter-resources>"),
    "auto-create-expiry-resources": refused("no expiry queue is created on demand", "false"),
    "expiry-queue-prefix": inert("only with <auto-create-expiry-resources>"),
    "expiry-queue-suffix": inert("only with <auto-create-expiry-resources>"),
    "no-expiry": refused("a message expires as its own time-to-live says", "false"),
    "expiry-delay": refused("a message without a time-to-live never expires", "-1"),
    "min-expiry-delay": refused("a message's time-to-live is taken as it is", "-1"),
    "max-expiry-delay": refused("a message's time-to-live is taken as it is", "-1"),
    "redelivery-delay": refused("a released message is redelivered at once", "0"),
    "redelivery-delay-multiplier": inert("only with a <redelivery-delay>"),
    "redelivery-collision-avoidance-factor": inert("only with a <redelivery-delay>"),
    "max-redelivery-delay": inert("only with a <redelivery-delay>"),
    "page-limit-bytes": refused("an address pages without limit", "-1"),
    "page-limit-messages": refused("an address pages without limit", "-1"),
    "page-full-policy": inert("only with <page-limit-bytes> or <page-limit-messages>"),
    "page-max-cache-size": inert("page reads are bounded by <max-read-page-bytes> and -messages"),
    "prefetch-page-bytes": inert("page reads are bounded by <max-read-page-bytes> and -messages"),
    "prefetch-page-messages": inert("page reads are bounded by <max-read-page-bytes> and -messages"),
    "message-counter-history-day-limit": inert("no message counters"),
    "last-value-queue": refused("last-value queues", "false"),
    "default-last-value-queue": refused("last-value queues", "false"),
    "default-last-value-key": refused("last-value queues"),
    "default-non-destructive": refused("non-destructive queues", "false"),
    "default-exclusive-queue": refused("exclusive queues", "false"),
    "default-group-rebalance": refused("message groups", "false"),
    "default-group-rebalance-pause-dispatch": refused("message groups", "false"),
    "default-group-buckets": refused("message groups", "-1"),
    "default-group-first-key": refused("message groups"),
    "default-consumers-before-dispatch": refused("a queue dispatches to its first consumer", "0"),
    "default-delay-before-dispatch": refused("a queue dispatches to its first consumer", "-1"),
    "default-purge-on-no-consumers": refused("a queue keeps its messages with no consumer", "false"),
    "default-max-consumers": refused("an auto-created queue takes any number of consumers", "-1"),
    "default-ring-size": refused("ring queues", "-1"),
    "default-queue-routing-type": inert("an AMQP link's queue takes the routing type of the link"),
    "default-consumer-window-size": inert("an AMQP receiver grants its own credit"),
    "redistribution-delay": inert(_NO_CLUSTER),
    "send-to-dla-on-no-route": refused("a message no queue takes is dropped", "false"),
    "slow-consumer-threshold": refused("slow consumers are not detected", "-1"),
    "slow-consumer-threshold-measurement-unit": inert("only with <slow-consumer-threshold>"),
    "slow-consumer-policy": inert("only with <slow-consumer-threshold>"),
    "slow-consumer-check-period": inert("only with <slow-consumer-threshold>"),
    "auto-delete-queues": refused("an auto-created queue stays when it is empty and unused", "false"),
    "auto-delete-created-queues": refused("a queue stays when it is empty and unused", "false"),
    "auto-delete-queues-delay": inert("only with <auto-delete-queues>"),
    "auto-delete-queues-message-count": inert("only with <auto-delete-queues>"),
    "auto-delete-queues-skip-usage-check": inert("only with <auto-delete-queues>"),
    "auto-delete-addresses-delay": refused("an auto-created address goes with its last queue", "0"),
    "auto-delete-addresses-skip-usage-check": inert("an auto-created address goes with its last queue"),
    "config-delete-queues": refused("a queue taken out of broker.xml stays until deleted", "OFF"),
    "config-delete-addresses": refused("an address taken out of broker.xml stays until deleted", "OFF"),
    "config-delete-diverts": inert("diverts are not implemented"),
    "management-browse-page-size": inert("management browses with its own page size"),
    "management-message-attribute-size-limit": inert("management replies are not truncated"),
    "retroactive-message-count": refused("a new subscriber gets only what is sent after it", "0"),
    "enable-ingress-timestamp": refused("messages are not stamped on arrival", "false"),
    "initial-queue-buffer-size": inert("queues grow as they need"),
    "auto-create-jms-queues": inert("deprecated in Artemis: <auto-create-queues> decides"),
    "auto-create-jms-topics": inert("deprecated in Artemis: <auto-create-addresses> decides"),
    "auto-delete-jms-queues": inert("deprecated in Artemis: <auto-delete-queues> decides"),
    "auto-delete-jms-topics": inert("deprecated in Artemis: <auto-delete-addresses> decides"),
}


# ------------------------------------------------------------------------------- <queue>

QUEUE: dict[str, Rule] = {
    "@name": IMPLEMENTED,
    "@max-consumers": IMPLEMENTED,
    "@purge-on-no-consumers": IMPLEMENTED,
    "durable": IMPLEMENTED,
    "filter": IMPLEMENTED,
    "@enabled": refused("a queue is always enabled", "true"),
    "@exclusive": refused("exclusive queues", "false"),
    "@last-value": refused("last-value queues", "false"),
    "@last-value-key": refused("last-value queues"),
    "@non-destructive": refused("non-destructive queues", "false"),
    "@group-rebalance": refused("message groups", "false"),
    "@group-rebalance-pause-dispatch": refused("message groups", "false"),
    "@group-buckets": refused("message groups", "-1"),
    "@group-first-key": refused("message groups"),
    "@consumers-before-dispatch": refused("a queue dispatches to its first consumer", "0"),
    "@delay-before-dispatch": refused("a queue dispatches to its first consumer", "-1"),
    "@ring-size": refused("ring queues", "-1"),
    "user": inert("Artemis records it as the queue's creator; nothing reads it"),
    "address": refused("the older form of queues: write them inside <addresses>"),
}


# ------------------------------------------------------------------------------- <ha-policy>

QUORUM_PARAMETERS = (
    "vote-on-replication-failure",
    "quorum-size",
    "vote-retries",
    "vote-retry-wait",
    "quorum-vote-wait",
)
QUORUM_WITH_A_MANAGER = inert("quorum voting's: with a <manager>, the lock manager decides (as in Artemis)")
HA_PARAMETERS: dict[str, Rule] = {
    **{
        name: IMPLEMENTED
        for name in (
            "failover-on-shutdown",
            "allow-failback",
            "restart-backup",
            "group-name",
            "cluster-name",
            "coordination-id",
            "initial-replication-sync-timeout",
            "max-saved-replicated-journals-size",
            "retry-replication-wait",
            "manager",
            "wait-for-activation",
            "check-for-active-server",
        )
    },
    # quorum voting (replication without a <manager>); with a <manager>: QUORUM_WITH_A_MANAGER
    **{name: IMPLEMENTED for name in QUORUM_PARAMETERS},
    "failback-delay": inert("deprecated: Artemis ignores it too"),
    "scale-down": IMPLEMENTED,  # a backup's: it scales down instead of activating
}
PRIMARY_ONLY: dict[str, Rule] = {"scale-down": HA_PARAMETERS["scale-down"]}
SCALE_DOWN: dict[str, Rule] = {
    **{name: IMPLEMENTED for name in ("enabled", "group-name", "connectors")},
    "discovery-group-ref": refused(_NO_DISCOVERY, instead="<connectors> of <connector-ref>"),
    "commit-interval": inert("each message leaves this server once the target has it durable"),
}
HA_POLICY: dict[str, Rule] = {
    "primary-only": IMPLEMENTED,
    "live-only": IMPLEMENTED,
    "shared-store": IMPLEMENTED,
    "replication": IMPLEMENTED,
}
HA_ROLE: dict[str, Rule] = {
    "primary": IMPLEMENTED,
    "backup": IMPLEMENTED,
    "master": IMPLEMENTED,
    "slave": IMPLEMENTED,
    "colocated": IMPLEMENTED,  # a primary that hosts its cluster's backups (amqp_mirror/colocation.py)
}
# replication without a <manager> decides by quorum voting (amqp_mirror/ha_quorum.py)
QUORUM_VOTING = IMPLEMENTED


# ------------------------------------------------------------------------------- <cluster-connection>

CLUSTER_CONNECTION: dict[str, Rule] = {
    **{
        name: IMPLEMENTED
        for name in ("@name", "connector-ref", "static-connectors", "connection-ttl", "retry-interval")
    },
    "reconnect-attempts": IMPLEMENTED,
    "check-period": inert("each side sends keep-alives at half the other's connection-ttl"),
    "call-timeout": IMPLEMENTED,
    "discovery-group-ref": IMPLEMENTED,  # its members: the static connectors and the discovered
    "@uri": refused("a cluster connection is written with its elements here"),
    "message-load-balancing": refused(_NO_CLUSTER, "OFF"),
    "max-hops": refused(_NO_CLUSTER, "0"),
    **{
        name: inert(_NO_CLUSTER)
        for name in (
            "address",
            "forward-when-no-consumers",
            "use-duplicate-detection",
            "producer-window-size",
            "confirmation-window-size",
            "notification-attempts",
            "notification-interval",
            "client-id",
            "min-large-message-size",
            "call-failover-timeout",
            "initial-connect-attempts",
            "max-retry-interval",
            "retry-interval-multiplier",
            "scale-down-connector",
        )
    },
}
CLUSTER_CONNECTIONS = {
    "cluster-connection": IMPLEMENTED,
    "cluster-connection-uri": refused("a cluster connection is written with its elements here"),
}
SECURITY_SETTINGS = {
    "security-setting": IMPLEMENTED,
    "role-mapping": refused("a user's roles are those of the roles file, as written"),
    "security-setting-plugin": refused("security settings come from broker.xml"),
}
STATIC_CONNECTORS = {
    "connector-ref": IMPLEMENTED,
    "@allow-direct-connections-only": inert(_NO_CLUSTER),
}


# ------------------------------------------------------------------------------- broker connections

AMQP_CONNECTION: dict[str, Rule] = {
    **{
        name: IMPLEMENTED
        for name in (
            "@name",
            "@uri",
            "@user",
            "@password",
            "@retry-interval",
            "@reconnect-attempts",
            "@auto-start",
            "mirror",
            "sender",
            "receiver",
            "peer",
        )
    },
    "federation": refused("AMQP federation"),
}
MIRROR_PROPERTIES: dict[str, Rule] = {
    "initial-sync": IMPLEMENTED,  # ours: docs/mirror.md
    "max-in-flight-events": IMPLEMENTED,  # ours: events out on the link at once (docs/mirror.md)
    "tunnel-core-messages": inert("every message is AMQP: there are no Core messages to tunnel"),
}


# ------------------------------------------------------------------------------- <metrics>

METRICS: dict[str, Rule] = {
    "plugin": IMPLEMENTED,
    **{
        name: inert(f"{_NO_JVM}: the process's own metrics are always exported")
        for name in (
            "jvm-memory",
            "jvm-gc",
            "jvm-threads",
            "netty-pool",
            "file-descriptors",
            "processor",
            "uptime",
            "logging",
            "security-caches",
        )
    },
}


# ------------------------------------------------------------------------------- URI parameters
# Artemis's transport parameters (its TransportConstants: the acceptor and connector key sets), the AMQP
# protocol manager's, and the other protocols' (set on a shared acceptor). Ours are marked.


class UriKind(StrEnum):
    ACCEPTOR = "an acceptor"
    CONNECTION = "a broker connection"
    CONNECTOR = "a connector"


_PEM_ONLY = "Java key stores (JKS, PKCS12): this broker reads PEM files (sslCertPath, sslKeyPath, sslCaPath)"
_TLS_DEFAULTS = "TLS versions and ciphers are the ssl module's secure defaults here"
_CORE_ONLY = "a Core protocol setting (AMQP connections use amqpIdleTimeout)"
_HTTP = "AMQP in HTTP requests (httpEnabled): a connection is TCP here, upgraded from HTTP or not"
_STOMP = "STOMP is not served"
_OPENWIRE = "OpenWire is not served"

_TLS_CLIENT: dict[str, Rule] = {
    # what an outgoing TLS connection (a broker connection, the replication link to a connector) reads
    "sslEnabled": IMPLEMENTED,
    "trustStorePath": IMPLEMENTED,  # a PEM bundle of trusted certificates (a Java key store is refused)
    "sslCaPath": IMPLEMENTED,  # ours: the same, by its PEM name
    "verifyHost": IMPLEMENTED,
    "trustAll": IMPLEMENTED,
    "sslCertPath": IMPLEMENTED,  # ours: a client certificate, PEM
    "sslKeyPath": IMPLEMENTED,  # ours: its key, PEM
    "trustStoreType": refused(_PEM_ONLY, "PEM"),
    "trustStorePassword": inert("a PEM trust store has no password"),
    "keyStorePath": refused(f"a client certificate in a key store; {_PEM_ONLY}"),
    "keyStorePassword": refused("a password-protected client key"),
    "keyStoreType": refused(_PEM_ONLY, "PEM"),
    "keyStoreAlias": refused(_PEM_ONLY),
    "keyStoreProvider": refused(_PEM_ONLY),
    "trustStoreProvider": refused(_PEM_ONLY),
    "crlPath": refused("certificate revocation lists"),
    "sniHost": refused("the server name sent is the URI's host"),
    "enabledProtocols": refused(_TLS_DEFAULTS),
    "enabledCipherSuites": refused(_TLS_DEFAULTS),
    "sslProvider": refused(_TLS_DEFAULTS, "JDK"),
    "forceSSLParameters": refused(_TLS_DEFAULTS, "false"),
    "useDefaultSslContext": refused("the trust comes from the URI's parameters", "false"),
    "trustManagerFactoryPlugin": refused("trust managers are Java classes"),
}
_TRANSPORT_INERT: dict[str, Rule] = {
    name: inert(_NETTY)
    for name in (
        "tcpNoDelay",
        "tcpSendBufferSize",
        "tcpReceiveBufferSize",
        "writeBufferHighWaterMark",
        "writeBufferLowWaterMark",
        "useNio",
        "useEpoll",
        "useKQueue",
        "remotingThreads",
        "nioRemotingThreads",
        "batchDelay",
    )
}
_TRANSPORT_REFUSED: dict[str, Rule] = {
    "host": refused("the host is the URI's"),
    "port": refused("the port is the URI's"),
}
_CLIENT_TRANSPORT: dict[str, Rule] = {
    **_TRANSPORT_INERT,
    **_TRANSPORT_REFUSED,
    **_TLS_CLIENT,
    "handshake-timeout": inert(_NETTY),
    "useGlobalWorkerPool": inert(_NETTY),
    "useNioGlobalWorkerPool": inert(_NETTY),
    # the connection starts with Artemis's HTTP upgrade (activemq-remoting) to an acceptor that is an
    # HTTP upgrade endpoint; ws:// and wss:// URIs upgrade to WebSocket instead (docs/websocket.md)
    "httpUpgradeEnabled": IMPLEMENTED,
    "activemqServerName": IMPLEMENTED,  # the upgrade request names the server that is to take it
    "httpUpgradeEndpoint": IMPLEMENTED,  # the upgrade request names the acceptor that is to answer it
    "doNotOffset": IMPLEMENTED,  # a colocated backup's copy keeps this port (config/colocated.py)
    "httpEnabled": refused(_HTTP, "false"),
    "httpRequiresSessionId": refused(_HTTP, "false"),
    "httpClientIdleTime": inert("only with httpEnabled"),
    "httpClientIdleScanPeriod": inert("only with httpEnabled"),
    "useServlet": refused(_HTTP, "false"),
    "servletPath": refused(_HTTP),
    "connect-timeout-millis": inert("a connection attempt is bounded by the broker's own connect timeout"),
    "localAddress": refused("the outgoing address is the one the system picks"),
    "localPort": refused("the outgoing port is the one the system picks"),
    "socksEnabled": refused("SOCKS proxies", "false"),
    **{
        name: inert("only with socksEnabled")
        for name in (
            "socksHost",
            "socksPort",
            "socksVersion",
            "socksUsername",
            "socksPassword",
            "socksRemoteDNS",
        )
    },
}
_CONNECTION: dict[str, Rule] = {
    **_CLIENT_TRANSPORT,
    # client URL options of Artemis that a broker connection writes as attributes
    "reconnectAttempts": refused("a broker connection's retries are its reconnect-attempts attribute"),
    "retryInterval": refused("a broker connection's retry pace is its retry-interval attribute"),
}
_ACCEPTOR: dict[str, Rule] = {
    **_TRANSPORT_INERT,
    **_TRANSPORT_REFUSED,
    "useInvm": refused("there is no in-VM transport", "false"),
    "httpResponseTime": inert(f"only with httpEnabled, {_HTTP}"),
    "httpServerScanPeriod": inert(f"only with httpEnabled, {_HTTP}"),
    "activemqServerName": inert(
        "an upgrade request names the server to take it; an acceptor serves its "
        "server and the colocated backups of the process that name themselves"
    ),
    "webSocketEncoderType": refused("text frames: the AMQP WebSocket binding's frames are binary", "binary"),
    "webSocketCompressionSupported": refused("WebSocket compression (permessage-deflate)", "false"),
    **{
        name: IMPLEMENTED
        for name in (
            "protocols",
            "amqpCredits",
            "amqpLowCredits",
            "amqpIdleTimeout",
            "amqpDuplicateDetection",
            "amqpMinLargeMessageSize",  # past it, a delivery still arriving is spooled to disk
            "maxFrameSize",
            "anycastPrefix",
            "multicastPrefix",
            "connectionsAllowed",
            "handshake-timeout",  # seconds a new connection has to say what it speaks (0: no limit)
            "httpUpgradeEnabled",  # an HTTP upgrade endpoint: connections come by HTTP upgrade only
            "webSocketMaxFramePayloadLength",  # the largest WebSocket frame read
            "doNotOffset",  # a colocated backup's copy keeps this port (config/colocated.py)
            "mirrorTrustedOrigins",  # ours: docs/mirror.md
            "mirrorMaxHeldMessages",  # ours: docs/mirror.md, held messages
            "mirrorHoldTimeout",  # ours: docs/mirror.md, held messages
            "sslEnabled",
            "keyStorePath",  # a PEM certificate chain (a Java key store is refused)
            "keyStorePassword",  # the password of the PEM key
            "trustStorePath",  # a PEM bundle of the CAs client certificates are checked against
            "needClientAuth",
            "sslCertPath",  # ours
            "sslKeyPath",  # ours
            "sslCaPath",  # ours
            "consoleSessionTimeout",  # ours, on the console's acceptor (protocols=CONSOLE): docs/console.md
        )
    },
    "keyStoreType": refused(_PEM_ONLY, "PEM"),
    "trustStoreType": refused(_PEM_ONLY, "PEM"),
    "trustStorePassword": inert("a PEM trust store has no password"),
    "keyStoreAlias": refused(_PEM_ONLY),
    "keyStoreProvider": refused(_PEM_ONLY),
    "trustStoreProvider": refused(_PEM_ONLY),
    "crlPath": refused("certificate revocation lists"),
    "sniHost": refused("a client's server name is not checked"),
    "wantClientAuth": refused("a client certificate is asked for only with needClientAuth", "false"),
    "verifyHost": refused("a client certificate's host name is not checked", "false"),
    "enabledProtocols": refused(_TLS_DEFAULTS),
    "enabledCipherSuites": refused(_TLS_DEFAULTS),
    "sslProvider": refused(_TLS_DEFAULTS, "JDK"),
    "sslAutoReload": refused("a renewed certificate is read at the next start", "false"),
    "trustManagerFactoryPlugin": refused("trust managers are Java classes"),
    "protocol": refused("the older spelling: write protocols=AMQP"),
    "scheme": refused("the scheme is the URI's"),
    "autoStart": refused("an acceptor always starts with the broker", "true"),
    "router": refused("clients are not routed to other brokers"),
    "clusterConnection": refused("clients learn the HA partner of the pair, whatever cluster connection"),
    "securityDomain": refused("every acceptor authenticates against the users file"),
    "saslMechanisms": refused("the mechanisms offered are SCRAM and PLAIN (and ANONYMOUS without security)"),
    "saslLoginConfigScope": refused("every acceptor authenticates against the users file"),
    "amqpTreatRejectAsUnmodifiedDeliveryFailed": refused("a rejected delivery is dead-lettered", "false"),
    "amqpUseModifiedForTransientDeliveryErrors": refused("a refused send is rejected", "false"),
    "pubSubPrefix": refused("topic addresses are not prefixed"),
    "initialRemoteMaxFrameSize": inert("frames before the open are bounded by maxFrameSize"),
    "directDeliver": inert(_THREADS),
    "ackManagerFlushTimeout": inert(_MIRROR_ACKS),
    "mirrorMaxPendingAcks": inert(_MIRROR_ACKS),
    "backlog": inert(_NETTY),
    "quietPeriod": inert(_NETTY),
    "shutdownTimeout": inert(_NETTY),
    **{
        name: inert(_CORE_ONLY)
        for name in (
            "connectionTtl",
            "connectionTtlMax",
            "connectionTtlMin",
            "heartBeatToConnectionTtlModifier",
        )
    },
    **{
        name: inert(_STOMP)
        for name in (
            "stompConsumerCredits",
            "stompConsumerWindowSize",
            "stomp-min-large-message-size",
            "stompMinLargeMessageSize",
            "stomp-enable-message-id",
            "stompEnableMessageId",
            "stompMaxFramePayloadLength",
            "disableStompServerHeader",
        )
    },
    **{
        name: inert(_OPENWIRE)
        for name in (
            "supportAdvisory",
            "suppressInternalManagementObjects",
            "actorThresholdBytes",
            "maxInactivityDuration",
            "maxInactivityDurationInitalDelay",
            "openWireDestinationCacheSize",
            "openwireMaxPacketChunkSize",
            "openwireUseDuplicateDetectionOnFailover",
            "rebalanceClusterClients",
            "updateClusterClients",
            "updateClusterClientsOnRemove",
            "useKeepAlive",
            "virtualTopicConsumerLruCacheMax",
            "virtualTopicConsumerWildcards",
        )
    },
    **{
        name: inert(_NO_MQTT)
        for name in (
            "allowLinkStealing",
            "closeMqttConnectionOnPublishAuthorizationFailure",
            "defaultMqttSessionExpiryInterval",
            "maximumPacketSize",
            "receiveMaximum",
            "serverKeepAlive",
            "topicAliasMaximum",
        )
    },
}
URI_PARAMETERS: dict[UriKind, dict[str, Rule]] = {
    UriKind.ACCEPTOR: _ACCEPTOR,
    UriKind.CONNECTION: _CONNECTION,
    UriKind.CONNECTOR: _CLIENT_TRANSPORT,
}
_JAVA_KEY_STORES = (".jks", ".p12", ".pfx", ".jceks")
_STORE_PATHS = frozenset({"keyStorePath", "trustStorePath", "sslCertPath", "sslKeyPath", "sslCaPath"})
_KEY_STORE_FILE = refused(_PEM_ONLY)


def parameter_rule(kind: UriKind, key: str, value: str) -> Rule | None:
    """The rule for URI parameter `key` of `kind` with this value (None: not a parameter Artemis or we
    have there). A path to a Java key store is refused whatever the parameter that names it."""
    rule = URI_PARAMETERS[kind].get(key)
    if rule is not None and key in _STORE_PATHS and value.strip().lower().endswith(_JAVA_KEY_STORES):
        return _KEY_STORE_FILE
    return rule


# ------------------------------------------------------------------------------- discovery

BROADCAST_GROUPS = {"broadcast-group": IMPLEMENTED}
DISCOVERY_GROUPS = {"discovery-group": IMPLEMENTED}
_GROUP: dict[str, Rule] = {
    **{name: IMPLEMENTED for name in ("@name", "group-address", "group-port", "local-bind-address")},
    **{
        name: refused(_NO_JGROUPS, instead="<group-address> and <group-port> (UDP multicast)")
        for name in ("jgroups-file", "jgroups-channel")
    },
}
BROADCAST_GROUP: dict[str, Rule] = {
    **_GROUP,
    **{name: IMPLEMENTED for name in ("local-bind-port", "broadcast-period", "connector-ref")},
}
DISCOVERY_GROUP: dict[str, Rule] = {
    **_GROUP,
    "refresh-timeout": IMPLEMENTED,
    "local-bind-port": inert("a discovery group listens on its group-port"),
    "initial-wait-timeout": inert("nobody waits for discovery: a member joins the cluster when it is heard"),
}

# ------------------------------------------------------------------------------- elements, by parent

ELEMENTS: dict[str, dict[str, Rule]] = {
    "configuration": CONFIGURATION,
    "core": CORE,
    "store": STORE,
    "address-setting": ADDRESS_SETTING,
    "queue": QUEUE,
    "ha-policy": HA_POLICY,
    "shared-store": HA_ROLE,
    "replication": HA_ROLE,
    **{role: HA_PARAMETERS for role in ("primary", "backup", "master", "slave")},
    **{role: PRIMARY_ONLY for role in ("primary-only", "live-only")},
    "scale-down": SCALE_DOWN,
    "cluster-connections": CLUSTER_CONNECTIONS,
    "cluster-connection": CLUSTER_CONNECTION,
    "security-settings": SECURITY_SETTINGS,
    "static-connectors": STATIC_CONNECTORS,
    "amqp-connection": AMQP_CONNECTION,
    "metrics": METRICS,
    "broadcast-groups": BROADCAST_GROUPS,
    "broadcast-group": BROADCAST_GROUP,
    "discovery-groups": DISCOVERY_GROUPS,
    "discovery-group": DISCOVERY_GROUP,
}
REFUSED_BY_DEFAULT = refused("Artemis has it; this broker does not yet")


def rule_for(parent: str | None, name: str) -> Rule:
    """The rule for element `name` (or attribute ``@name``) inside `parent`; an Artemis name no table
    lists is refused: nothing the schema has passes unjudged."""
    return ELEMENTS.get(parent or "", {}).get(name, REFUSED_BY_DEFAULT)
