"""The server's rows of the management table: its queues, addresses, statistics and node id."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import NotFound
from .management import ADDRESS, BROKER, QUEUE, Management
from .queues import Address, Queue, QueueStats
from .server import Server

# Artemis's queue attribute names -> our statistics' keys
QUEUE_ATTRIBUTES = {
    "messageCount": "message-count",
    "deliveringCount": "delivering-count",
    "messagesAdded": "messages-added",
    "messagesAcknowledged": "messages-acknowledged",
    "messagesExpired": "messages-expired",
    "messagesKilled": "messages-killed",
    "consumerCount": "consumer-count",
    "address": "address",
    "durable": "durable",
}


def add_server_operations(management: Management, server: Server) -> None:
    def queue(name: str) -> Queue:
        q = server.queues.get(name)
        if q is None:
            raise NotFound(f"queue {name} does not exist")
        return q

    def destroy_queue(_: str, params: list[Any]) -> None:
        server.delete_queue(str(params[0]))

    def delete_address(_: str, params: list[Any]) -> None:
        server.delete_address(str(params[0]), force=bool(params[1]) if len(params) > 1 else False)

    ops = {
        "destroyQueue": destroy_queue,
        "deleteAddress": delete_address,
        "getQueueNames": lambda _, __: sorted(q.name for q in server.queues.values() if not q.temporary),
        "getAddressNames": lambda _, __: sorted(server.addresses),
        "getStatistics": lambda _, __: server.stats.snapshot(),
        "getNodeID": lambda _, __: server.node_id,
    }
    for name, op in ops.items():
        management.add_operation(BROKER, name, op)
    management.add_attribute(BROKER, "nodeID", lambda _: server.node_id)
    management.add_operation(QUEUE, "getStatistics", lambda name, _: QueueStats.of(queue(name)))

    def queue_attribute(key: str) -> Callable[[str], Any]:
        return lambda name: QueueStats.of(queue(name))[key]

    for attribute, key in QUEUE_ATTRIBUTES.items():
        management.add_attribute(QUEUE, attribute, queue_attribute(key))

    def address(name: str) -> Address:
        a = server.addresses.get(name)
        if a is None:
            raise NotFound(f"address {name} does not exist")
        return a

    # Artemis's AddressControl names, for the address's memory and pages
    address_attributes: dict[str, Callable[[Address], Any]] = {
        "addressSize": lambda a: a.usage.bytes,
        "numberOfMessages": lambda a: a.usage.messages + a.usage.paged,
        "paging": lambda a: a.usage.store is not None,
        "numberOfPages": lambda a: server.paging.pages_of(a.name),
        "maxSize": lambda a: a.usage.max_bytes,
        "addressFullPolicy": lambda a: a.usage.policy,
        "messagesDropped": lambda a: a.usage.dropped,
    }

    def address_attribute(read: Callable[[Address], Any]) -> Callable[[str], Any]:
        return lambda name: read(address(name))

    for attribute, read in address_attributes.items():
        management.add_attribute(ADDRESS, attribute, address_attribute(read))
