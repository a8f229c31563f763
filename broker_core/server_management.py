"""The server's rows of the management table: its queues, addresses, statistics and node id."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import NotFound
from .management import ADDRESS, BROKER, QUEUE, Management
from .queues import Address, MessageRef, Queue, QueueStats
from .server import Server
from .vocabulary import AckReason

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

    def dead_letter_address(name: str) -> str | None:
        return server.topology.settings_for(queue(name).address).dead_letter_address

    management.add_attribute(QUEUE, "deadLetterAddress", dead_letter_address)

    def waiting(q: Queue, message_id: int) -> MessageRef | None:
        """The reference to the message with that id (its own, as a journal names it) taken out of the
        queue, when it waits there: in memory, or in a page not read back yet. Not one out to a
        consumer."""
        ref = q.waiting.get(message_id)
        if ref is not None:
            q.remove(ref)
            return ref
        identity = server.paging.identity_of_unread(q, message_id)
        return None if identity is None else server.paging.take_unread(q, *identity)

    # Artemis's QueueControl: one message by its id, deleted (acknowledged as killed, no copy kept),
    # moved to the queue's dead-letter address (dropped, with a warning, when that has no queue), or
    # expired (to the expiry address, as when its time to live is over)
    def remove_message(name: str, params: list[Any]) -> bool:
        ref = waiting(queue(name), int(params[0]))
        if ref is not None:
            server.outcomes.acknowledge(ref, AckReason.KILLED)
        return ref is not None

    def send_to_dead_letter_address(name: str, params: list[Any]) -> bool:
        ref = waiting(queue(name), int(params[0]))
        if ref is not None:
            server.outcomes.dead_letter(ref)
        return ref is not None

    def expire_message(name: str, params: list[Any]) -> bool:
        ref = waiting(queue(name), int(params[0]))
        if ref is not None:
            server.outcomes.expire(ref)
        return ref is not None

    management.add_operation(QUEUE, "removeMessage", remove_message)
    management.add_operation(QUEUE, "sendMessageToDeadLetterAddress", send_to_dead_letter_address)
    management.add_operation(QUEUE, "expireMessage", expire_message)

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
        "queueNames": lambda a: [q.name for q in a.queues],
    }

    def address_attribute(read: Callable[[Address], Any]) -> Callable[[str], Any]:
        return lambda name: read(address(name))

    for attribute, read in address_attributes.items():
        management.add_attribute(ADDRESS, attribute, address_attribute(read))
