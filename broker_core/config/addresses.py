"""`<addresses>`: addresses with their routing types and configured queues.

Queue names are unique across the broker (as in Artemis), so a repeated name is an error even
under a different address.
"""

from __future__ import annotations

from typing import Any

from broker_core.config.model import AddressConfig, QueueConfig
from broker_core.config.support import QUEUE
from broker_core.config.values import parse_bool
from broker_core.config.xmlread import Element, Reader, converter_for, local_name
from broker_core.vocabulary import RoutingType
from filters.selector import SelectorError, parse

# Queue attributes are the QueueConfig fields, spelled with '-'.
_QUEUE_ATTRIBUTES = {
    name.replace("_", "-"): name
    for name in QueueConfig.model_fields
    if name not in ("name", "address", "routing_type", "durable", "filter")
}
_MINIMUMS = {"max_consumers": -1, "group_buckets": -1, "consumers_before_dispatch": 0, "ring_size": -1}


def parse_addresses(reader: Reader, section: Element) -> tuple[AddressConfig, ...]:
    reader.check_attributes(section, set())
    addresses: dict[str, AddressConfig] = {}
    queue_names: set[str] = set()
    for element in reader.children(section):
        if local_name(element) != "address":
            reader.ignore(element)
            continue
        address = _parse_address(reader, element, queue_names)
        if address is None:
            continue
        if address.name in addresses:
            reader.error(element, f"duplicate address {address.name!r}", "each address once", "name")
        else:
            addresses[address.name] = address
    return tuple(addresses.values())


def _parse_address(reader: Reader, element: Element, queue_names: set[str]) -> AddressConfig | None:
    reader.check_attributes(element, {"name"})
    name = reader.attr(element, "name", required=True)
    routing_types: set[RoutingType] = set()
    queues: list[QueueConfig] = []
    for child in reader.children(element):
        kind = local_name(child)
        if kind not in ("anycast", "multicast"):
            reader.ignore(child)
            continue
        reader.check_attributes(child, set())
        routing_type = RoutingType(kind.upper())
        routing_types.add(routing_type)
        for queue_element in reader.children(child):
            queue = _parse_queue(reader, queue_element, name or "", routing_type)
            if queue is None:
                continue
            if queue.name in queue_names:
                reader.error(
                    queue_element, f"duplicate queue name {queue.name!r}", "a broker-wide unique name", "name"
                )
            else:
                queue_names.add(queue.name)
                queues.append(queue)
    if name is None:
        return None
    return AddressConfig(name=name, routing_types=frozenset(routing_types), queues=tuple(queues))


def _parse_queue(
    reader: Reader, element: Element, address: str, routing_type: RoutingType
) -> QueueConfig | None:
    if local_name(element) != "queue":
        reader.ignore(element)
        return None
    reader.check_attributes(element, {"name", *_QUEUE_ATTRIBUTES})
    name = reader.attr(element, "name", required=True)
    values: dict[str, Any] = {}
    for attribute, field in _QUEUE_ATTRIBUTES.items():
        annotation = QueueConfig.model_fields[field].annotation
        convert = converter_for(annotation, minimum=_MINIMUMS.get(field))
        text = reader.attr(element, attribute)
        value = reader.convert(element, text, convert, attribute)
        if value is not None:
            reader.judge(element, QUEUE[f"@{attribute}"], text, attr=attribute)
            values[field] = value
    values.update(_queue_children(reader, element))
    if name is None:
        return None
    return QueueConfig(name=name, address=address, routing_type=routing_type, **values)


def _queue_children(reader: Reader, element: Element) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for child in reader.children(element):
        kind = local_name(child)
        if kind == "filter":
            reader.check_attributes(child, {"string"})
            text = reader.attr(child, "string", required=True)
            if text is not None:
                try:
                    parse(text)  # a filter this broker cannot apply stops the start, as on Artemis
                except SelectorError as exc:
                    reader.error(child, f"invalid filter {text!r}: {exc}", "a filter expression", "string")
                    text = None
            values["filter"] = text
        elif kind == "durable":
            reader.check_attributes(child, set())
            values["durable"] = reader.convert(child, reader.text(child), parse_bool)
        else:
            reader.ignore(child)  # <user>: no effect here
    return {key: value for key, value in values.items() if value is not None}
