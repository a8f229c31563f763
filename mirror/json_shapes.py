"""The JSON bodies of Artemis mirror control events: AddressInfo and QueueConfiguration.

Builders emit what Artemis's `AddressInfo.toJSON()` / `QueueConfiguration.toJSON()` emit (compact JSON,
the same keys, the keys Artemis always writes written here too). Parsers are tolerant the way a mirror
target has to be: unknown keys are ignored (a newer Artemis may add some), `id` is ignored (it is the
sender's local ID and means nothing here), and values Artemis itself would accept as strings
(`"true"`, `"5"`) are accepted too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any


class JsonShapeError(ValueError):
    """A control event body that is not the JSON shape its event needs (the sender's fault)."""


class RoutingType(IntEnum):
    """Artemis `RoutingType` byte values as they appear in AddressInfo JSON."""

    MULTICAST = 0
    ANYCAST = 1


@dataclass(frozen=True, slots=True)
class AddressInfo:
    name: str
    routing_types: tuple[RoutingType, ...] = ()
    first_seen: RoutingType | None = None
    auto_created: bool = False
    temporary: bool = False
    internal: bool = False
    created_timestamp: int = 0
    id: int = 0  # the sender's local ID: written (Artemis does), never read back

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "auto-created": self.auto_created,
            "temporary": self.temporary,
            "internal": self.internal,
        }
        if self.first_seen is not None:
            doc["firstSeen"] = int(self.first_seen)
        # Artemis keeps routing types in an EnumSet, so they come out in enum order (MULTICAST first).
        doc["routingTypes"] = sorted({int(rt) for rt in self.routing_types})
        doc["created-timestamp"] = self.created_timestamp
        return _dumps(doc)

    @classmethod
    def from_json(cls, text: str) -> AddressInfo:
        doc = _loads(text)
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            raise JsonShapeError("AddressInfo JSON has no name")
        raw_types = doc.get("routingTypes") or []
        if not isinstance(raw_types, list):
            raise JsonShapeError("AddressInfo routingTypes is not an array")
        first_seen = doc.get("firstSeen")
        return cls(
            name=name,
            routing_types=tuple(_routing_type(v) for v in raw_types),
            first_seen=None if first_seen is None else _routing_type(first_seen),
            auto_created=_bool(doc.get("auto-created"), False),
            temporary=_bool(doc.get("temporary"), False),
            internal=_bool(doc.get("internal"), False),
            created_timestamp=_int(doc.get("created-timestamp"), 0),
        )


@dataclass(frozen=True, slots=True)
class QueueConfiguration:
    """Queue attributes in Artemis field order; `None` means "not set" and is not written.

    `address`, `durable` and the flags from `configuration_managed` on are never null in Artemis's
    output (its getters default them), so they carry those defaults here.
    """

    name: str
    id: int | None = None
    address: str | None = None  # None: same as name (Artemis's default)
    routing_type: RoutingType | None = None
    filter_string: str | None = None
    durable: bool = True
    user: str | None = None
    max_consumers: int | None = None
    exclusive: bool | None = None
    group_rebalance: bool | None = None
    group_rebalance_pause_dispatch: bool | None = None
    group_buckets: int | None = None
    group_first_key: str | None = None
    last_value: bool | None = None
    last_value_key: str | None = None
    non_destructive: bool | None = None
    purge_on_no_consumers: bool | None = None
    enabled: bool | None = None
    consumers_before_dispatch: int | None = None
    delay_before_dispatch: int | None = None
    consumer_priority: int | None = None
    auto_delete: bool | None = None
    auto_delete_delay: int | None = None
    auto_delete_message_count: int | None = None
    ring_size: int | None = None
    configuration_managed: bool = False
    temporary: bool = False
    auto_create_address: bool | None = None
    internal: bool = False
    transient: bool = False
    auto_created: bool = False
    fqqn: bool = False

    @property
    def effective_address(self) -> str:
        return self.address if self.address is not None else self.name

    def to_json(self) -> str:
        doc: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "address":
                value = self.effective_address
            if value is None:
                continue
            if f.name == "routing_type":
                value = RoutingType(value).name
            doc[_dash(f.name)] = value
        return _dumps(doc)

    @classmethod
    def from_json(cls, text: str) -> QueueConfiguration:
        doc = _loads(text)
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            raise JsonShapeError("QueueConfiguration JSON has no name")  # Artemis returns null here
        kwargs: dict[str, Any] = {"name": name}
        for f in fields(cls):
            key = _dash(f.name)
            if f.name in ("name", "id") or key not in doc or doc[key] is None:
                continue
            kwargs[f.name] = _convert(f.name, f.type, doc[key])
        return cls(**kwargs)


def _convert(name: str, annotation: Any, value: Any) -> Any:
    kind = str(annotation)
    if name == "routing_type":
        return _routing_type(value)
    if kind.startswith("bool"):
        return _bool(value, None)
    if kind.startswith("int"):
        return _int(value, None)
    return value if isinstance(value, str) else str(value)


def _dash(field_name: str) -> str:
    return field_name.replace("_", "-")


def _dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _loads(text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise JsonShapeError(f"control event body is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise JsonShapeError("control event body is not a JSON object")
    return doc


def _routing_type(value: Any) -> RoutingType:
    try:
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            return RoutingType[value.upper()]
        return RoutingType(int(value))
    except (KeyError, ValueError, TypeError) as exc:  # TypeError: a list, an object, null
        raise JsonShapeError(f"unknown routing type {value!r}") from exc


def _bool(value: Any, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    # Java's Boolean.valueOf(String): only "true" (any case) is true.
    return str(value).strip().lower() == "true"


def _int(value: Any, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, bool):
        raise JsonShapeError(f"expected a number, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise JsonShapeError(f"expected a number, got {value!r}") from exc
