"""Client-side failover: ``failover:(uri1,...,uriN)?options`` URIs, the reconnect schedule, and a blocking
AMQP client that fails over between brokers and reports in-doubt operations instead of hiding them."""

from connections.failover.backoff import Attempt, connect_schedule, priority_probes, reconnect_delays
from connections.failover.client import (
    ClosedError,
    DeliveryRefusedError,
    FailoverConnection,
    FailoverError,
    FailoverReceiver,
    FailoverSender,
    FailoverTimeoutError,
    InDoubtError,
    LinkError,
    ReceiveTimeout,
    ReconnectExhaustedError,
)
from connections.failover.transaction import (
    FailoverTransaction,
    TransactionInDoubtError,
    TransactionRolledBackError,
)
from connections.failover.uri import BrokerUri, FailoverOptions, FailoverUri, parse_failover_uri

__all__ = [
    "Attempt",
    "BrokerUri",
    "ClosedError",
    "DeliveryRefusedError",
    "FailoverConnection",
    "FailoverError",
    "FailoverOptions",
    "FailoverReceiver",
    "FailoverSender",
    "FailoverTimeoutError",
    "FailoverTransaction",
    "FailoverUri",
    "InDoubtError",
    "LinkError",
    "ReceiveTimeout",
    "ReconnectExhaustedError",
    "TransactionInDoubtError",
    "TransactionRolledBackError",
    "connect_schedule",
    "parse_failover_uri",
    "priority_probes",
    "reconnect_delays",
]
