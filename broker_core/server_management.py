"""The server's rows of the management table: its queues, addresses, messages, statistics and node id.

Names, parameters and answers are Artemis's (ActiveMQServerControl, QueueControl, AddressControl over AMQP
management), so Artemis's tools and scripts work against this broker too; where Artemis has several
overloads of one name, the number of parameters picks one, as Artemis does. Where an answer has to
differ (`browse`: Artemis's is a Java-serialized object), docs/management.md says how.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .errors import AlreadyExists, NotFound, PreconditionFailed
from .management import ADDRESS, BROKER, QUEUE, Management, json_text
from .management_lists import address_row, listing, queue_row
from .queue_operations import BROWSE_PAGE, QueueOperations
from .queues import Address, Queue, QueueStats
from .server import Server
from .vocabulary import ROUTING_TYPES

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
    "routingType": "routing-type",
}


def routing_types(text: object) -> set[str]:
    """`ANYCAST`, `MULTICAST` or both, comma-separated, as Artemis's createAddress takes them."""
    names = {t.strip().upper() for t in str(text or "").split(",") if t.strip()}
    unknown = names - ROUTING_TYPES
    if unknown or not names:
        raise ValueError(f"routing types {text!r}: expected ANYCAST, MULTICAST or ANYCAST,MULTICAST")
    return names


def _flag(params: list[Any], index: int, default: bool) -> bool:
    if len(params) <= index or params[index] is None:
        return default
    value = params[index]
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def _int(params: list[Any], index: int, default: int) -> int:
    return int(params[index]) if len(params) > index and params[index] is not None else default


def add_server_operations(management: Management, server: Server) -> QueueOperations:
    """Add the server's operations and attributes to `management`; returns the queue operations (whose
    `requester` the caller may point at who made the current request)."""
    messages = QueueOperations(server)
    messages.requester = lambda: management.requester

    # Artemis's error texts, ids included, where a script may look for them
    def queue(name: str) -> Queue:
        q = server.queues.get(name)
        if q is None:
            raise NotFound(f"AMQ229067: Cannot find resource with name queue.{name}")
        return q

    def address(name: str) -> Address:
        a = server.addresses.get(name)
        if a is None:
            raise NotFound(f"AMQ229067: Cannot find resource with name address.{name}")
        return a

    def who() -> str:
        return management.requester or "<anonymous>"

    # ---------------------------------------------------------------------------------- broker

    def destroy_queue(_: str, params: list[Any]) -> None:
        name = str(params[0])
        q = server.queues.get(name)
        if q is None:
            raise NotFound(f"AMQ229017: Queue {name} does not exist")
        if q.consumers and not _flag(params, 1, False):
            raise PreconditionFailed(
                f"queue {name} has {len(q.consumers)} consumers: destroyQueue with removeConsumers=true "
                "closes them"
            )
        server.delete_queue(name)
        if _flag(params, 2, False):  # autoDeleteAddress
            a = server.addresses.get(q.address)
            if a is not None and not a.queues:
                server.delete_address(a.name)
        server.log.info("AMQ951065: queue %s destroyed by management (user %s)", name, who())

    def delete_address(_: str, params: list[Any]) -> None:
        server.delete_address(str(params[0]), force=_flag(params, 1, False))

    def create_address(_: str, params: list[Any]) -> str:
        name, types = str(params[0]), routing_types(params[1] if len(params) > 1 else "MULTICAST")
        if name in server.addresses:
            raise AlreadyExists(f"AMQ229204: Address already exists: {name}")
        server.ensure_address(name, types, auto_created=False)
        server.log.info("AMQ951066: address %s (%s) created by management (user %s)", name,
                        ",".join(sorted(types)), who())  # fmt: skip
        shown = ",".join(t for t in ("MULTICAST", "ANYCAST") if t in types)
        return f"Address [name={name}, routingTypes={{{shown}}}, autoCreated=false]"

    def create_queue(_: str, params: list[Any]) -> Any:
        if len(params) <= 2:  # createQueue(queueConfiguration[, ignoreIfExists]): JSON in, JSON out
            return _create_from_json(str(params[0]), _flag(params, 1, False))
        if len(params) == 4:  # createQueue(address, name, durable, routingType)
            make(str(params[1]), str(params[0]), str(params[3]), durable=_flag(params, 2, True))
            return None
        # createQueue(address, routingType, name, filter, durable, maxConsumers, purgeOnNoConsumers,
        # autoCreateAddress)
        q = make(
            str(params[2]),
            str(params[0]),
            str(params[1]),
            filter_string=params[3] or None,
            durable=_flag(params, 4, True),
            max_consumers=_int(params, 5, -1),
            purge_on_no_consumers=_flag(params, 6, False),
            auto_create_address=_flag(params, 7, True),
        )
        return (
            f"Queue [name={q.name}, address={q.address}, routingType={q.routing_type}, durable="
            f"{str(q.durable).lower()}, purgeOnNoConsumers={str(q.purge_on_no_consumers).lower()}]"
        )

    def make(
        name: str,
        address_name: str,
        routing_type: str,
        *,
        filter_string: Any = None,
        durable: bool = True,
        max_consumers: int = -1,
        purge_on_no_consumers: bool = False,
        auto_create_address: bool = True,
    ) -> Queue:
        kinds = routing_types(routing_type)
        if len(kinds) != 1:
            raise ValueError(f"a queue has one routing type, not {routing_type!r}")
        (kind,) = kinds
        if not auto_create_address and address_name not in server.addresses:
            raise NotFound(f"address {address_name} does not exist (and auto-create-address is false)")
        messages.select(filter_string)  # a queue filter this broker cannot apply is refused now
        q = server.create_queue(
            name,
            address_name,
            kind,
            durable=durable,
            max_consumers=max_consumers,
            purge_on_no_consumers=purge_on_no_consumers,
        )
        server.log.info("AMQ951067: queue %s on address %s (%s) created by management (user %s)", name,
                        address_name, kind, who())  # fmt: skip
        return q

    def _create_from_json(text: str, ignore_if_exists: bool) -> str:
        cfg = json.loads(text)
        if not isinstance(cfg, dict) or not cfg.get("name"):
            raise ValueError('a queue configuration is a JSON object with at least a "name"')
        name = str(cfg["name"])
        if name in server.queues and ignore_if_exists:
            return json_text(_queue_json(queue(name)))
        if name in server.queues:
            q = queue(name)
            raise AlreadyExists(f"AMQ229019: Queue {name} already exists on address {q.address}")
        default_type = server.settings_for(str(cfg.get("address") or name)).default_queue_routing_type
        q = make(
            name,
            str(cfg.get("address") or name),
            str(cfg.get("routing-type") or default_type),
            filter_string=cfg.get("filter-string"),
            durable=bool(cfg.get("durable", True)),
            max_consumers=int(cfg.get("max-consumers", -1)),
            purge_on_no_consumers=bool(cfg.get("purge-on-no-consumers", False)),
            auto_create_address=bool(cfg.get("auto-create-address", True)),
        )
        return json_text(_queue_json(q))

    def list_queues(_: str, params: list[Any]) -> str:
        rows = [queue_row(q, q.paused) for q in server.queues.values()]
        return listing(rows, params[0] if params else "", _int(params, 1, 1), _int(params, 2, 100), "queue")

    def list_addresses(_: str, params: list[Any]) -> str:
        if len(params) == 1:  # listAddresses(separator): the names, joined
            return str(params[0]).join(sorted(server.addresses, key=str.lower))
        rows = [address_row(a) for a in server.addresses.values()]
        return listing(rows, params[0] if params else "", _int(params, 1, 1), _int(params, 2, 100), "address")

    def queue_names(_: str, params: list[Any]) -> list[str]:
        wanted = str(params[0]).upper() if params and params[0] else None
        return sorted(
            q.name
            for q in server.queues.values()
            if not q.temporary and (wanted is None or q.routing_type == wanted)
        )

    ops: dict[str, Callable[[str, list[Any]], Any]] = {
        "destroyQueue": destroy_queue,
        "deleteAddress": delete_address,
        "createAddress": create_address,
        "createQueue": create_queue,
        "listQueues": list_queues,
        "listAddresses": list_addresses,
        "getQueueNames": queue_names,
        "getAddressNames": lambda _, __: sorted(server.addresses),
        "getStatistics": lambda _, __: server.stats.snapshot(),
        "getNodeID": lambda _, __: server.node_id,
    }
    for name, op in ops.items():
        management.add_operation(BROKER, name, op)
    management.add_attribute(BROKER, "nodeID", lambda _: server.node_id)
    management.add_attribute(BROKER, "queueNames", lambda _: queue_names("", []))
    management.add_attribute(BROKER, "addressNames", lambda _: sorted(server.addresses))

    # ----------------------------------------------------------------------------------- queues

    def count_messages(name: str, params: list[Any]) -> Any:
        if len(params) >= 2 and params[1]:  # countMessages(filter, groupByProperty)
            return messages.count_by(name, params[0], str(params[1]))
        return messages.count(name, params[0] if params else None)

    def browse(name: str, params: list[Any]) -> list[dict[str, Any]]:
        if len(params) >= 2:  # browse(page, pageSize[, filter])
            return messages.browse(
                name, int(params[0]), int(params[1]), params[2] if len(params) > 2 else None
            )
        return messages.browse(name, 1, BROWSE_PAGE, params[0] if params else None)

    def remove_messages(name: str, params: list[Any]) -> int:
        if len(params) >= 2:  # removeMessages(flushLimit, filter): the flush limit is a batch size there
            return messages.remove(name, params[1])
        return messages.remove(name, params[0] if params else None)

    def move_messages(name: str, params: list[Any]) -> int:
        if len(params) == 2:  # moveMessages(filter, otherQueueName)
            return messages.move(name, str(params[1]), params[0])
        # moveMessages(flushLimit, filter, otherQueueName, rejectDuplicates[, messageCount])
        return messages.move(name, str(params[2]), params[1], _int(params, 4, -1))

    queue_ops: dict[str, Callable[[str, list[Any]], Any]] = {
        "getStatistics": lambda name, _: QueueStats.of(queue(name)),
        "countMessages": count_messages,
        "browse": browse,
        "listMessages": lambda name, p: messages.list_messages(name, p[0] if p else None),
        "listMessagesAsJSON": lambda name, p: json_text(messages.list_messages(name, p[0] if p else None)),
        "removeMessages": remove_messages,
        "removeAllMessages": lambda name, _: messages.remove(name),
        "moveMessages": move_messages,
        "removeMessage": lambda name, p: messages.remove_one(name, int(p[0])),
        "sendMessageToDeadLetterAddress": lambda name, p: messages.dead_letter_one(name, int(p[0])),
        "expireMessage": lambda name, p: messages.expire_one(name, int(p[0])),
        "retryMessages": lambda name, p: messages.retry(name, p[0] if p else None),
        "pause": lambda name, p: messages.pause(name, _flag(p, 0, False)),
        "resume": lambda name, _: messages.resume(name),
        "isPaused": lambda name, _: queue(name).paused,
        "getRoutingType": lambda name, _: queue(name).routing_type,
    }
    for name, op in queue_ops.items():
        management.add_operation(QUEUE, name, op)

    def queue_attribute(key: str) -> Callable[[str], Any]:
        return lambda name: QueueStats.of(queue(name))[key]

    for attribute, key in QUEUE_ATTRIBUTES.items():
        management.add_attribute(QUEUE, attribute, queue_attribute(key))
    management.add_attribute(QUEUE, "paused", lambda name: queue(name).paused)
    management.add_attribute(QUEUE, "name", lambda name: queue(name).name)
    management.add_attribute(QUEUE, "temporary", lambda name: queue(name).temporary)
    management.add_attribute(QUEUE, "filter", lambda name: queue(name).filter_string)

    def dead_letter_address(name: str) -> str | None:
        return server.topology.settings_for(queue(name).address).dead_letter_address

    management.add_attribute(QUEUE, "deadLetterAddress", dead_letter_address)

    # -------------------------------------------------------------------------------- addresses

    def types_of(name: str) -> list[str]:
        return [t for t in ("MULTICAST", "ANYCAST") if t in address(name).routing_types]

    def names_of(name: str) -> list[str]:
        return [q.name for q in address(name).queues]

    management.add_operation(ADDRESS, "getRoutingTypes", lambda name, _: types_of(name))
    management.add_operation(ADDRESS, "getRoutingTypesAsJSON", lambda name, _: json_text(types_of(name)))
    management.add_operation(ADDRESS, "getQueueNames", lambda name, _: names_of(name))
    management.add_attribute(ADDRESS, "routingTypes", types_of)
    management.add_attribute(ADDRESS, "queueNames", names_of)

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
    return messages


def _queue_json(q: Queue) -> dict[str, Any]:
    """A queue's configuration as Artemis's createQueue answers it (QueueConfiguration.toJSON)."""
    return {
        "id": q.id,
        "name": q.name,
        "address": q.address,
        "routing-type": q.routing_type,
        "durable": q.durable,
        "max-consumers": q.max_consumers,
        "exclusive": False,
        "group-rebalance": False,
        "group-rebalance-pause-dispatch": False,
        "group-buckets": -1,
        "last-value": False,
        "non-destructive": False,
        "purge-on-no-consumers": q.purge_on_no_consumers,
        "consumers-before-dispatch": 0,
        "delay-before-dispatch": -1,
        "auto-delete": False,
        "auto-delete-delay": 0,
        "auto-delete-message-count": 0,
        "ring-size": -1,
        "configuration-managed": False,
        "temporary": q.temporary,
        "auto-create-address": True,
        "internal": q.internal,
        "transient": False,
        "auto-created": q.auto_created,
        "fqqn": False,
    }
