"""Artemis's `listQueues` and `listAddresses`: rows filtered, sorted and paged as its console asks.

`options` is Artemis's JSON: `{"field": "name", "operation": "CONTAINS", "value": "ord", "sortOrder": "asc",
"sortField": "name"}` (`sortColumn` is the older name of `sortField`), every key optional, an empty string
for none. The answer is the JSON text `{"data": [row, ...], "count": N}`, `count` the rows that matched
before paging, every value in a row a string, as Artemis writes them. Pages count from 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .management import json_text
from .queues import Address, Queue

Row = dict[str, str]


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def queue_row(q: Queue, paused: bool) -> Row:
    """A queue as Artemis's `listQueues` shows it (what this broker has no notion of: Artemis's default)."""
    fields: dict[str, object] = {
        "id": q.id,
        "name": q.name,
        "address": q.address,
        "filter": q.filter_string or "",
        "durable": q.durable,
        "paused": paused,
        "temporary": q.temporary,
        "purgeOnNoConsumers": q.purge_on_no_consumers,
        "consumerCount": len(q.consumers),
        "maxConsumers": q.max_consumers,
        "autoCreated": q.auto_created,
        "user": "",
        "routingType": q.routing_type,
        "messagesAdded": q.added,
        "messageCount": q.depth,
        "messagesAcked": q.acked,
        "messagesExpired": q.expired,
        "deliveringCount": q.in_flight,
        "messagesKilled": q.killed,
        "directDeliver": False,
        "exclusive": False,
        "lastValue": False,
        "lastValueKey": "",
        "scheduledCount": 0,
        "groupRebalance": False,
        "groupRebalancePauseDispatch": False,
        "groupBuckets": -1,
        "groupFirstKey": "",
        "enabled": True,
        "ringSize": -1,
        "consumersBeforeDispatch": 0,
        "delayBeforeDispatch": -1,
        "autoDelete": False,
        "internalQueue": q.internal,
    }
    return {k: _text(v) for k, v in fields.items()}


def routing_types_text(types: set[str]) -> str:
    """As Java prints Artemis's EnumSet<RoutingType>: declaration order, MULTICAST before ANYCAST."""
    return "[" + ", ".join(t for t in ("MULTICAST", "ANYCAST") if t in types) + "]"


def address_row(a: Address) -> Row:
    return {
        "id": str(a.id),
        "name": a.name,
        "internal": _text(a.internal),
        "routingTypes": routing_types_text(a.routing_types),
        "queueCount": str(len(a.queues)),
    }


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _compare(operation: str, value: str) -> Callable[[str], bool]:
    """Artemis's filter operations on one field's text (numbers compared as numbers)."""
    op = operation.upper()
    if op == "EQUALS":
        return lambda x: x == value
    if op == "NOT_EQUALS":
        return lambda x: x != value
    if op == "CONTAINS":
        return lambda x: value in x
    if op == "NOT_CONTAINS":
        return lambda x: value not in x
    if op in ("GREATER_THAN", "LESS_THAN"):
        limit = _number(value)
        if limit is None:
            raise ValueError(f"{op} needs a number, not {value!r}")
        above = op == "GREATER_THAN"

        def compare(x: str) -> bool:
            n = _number(x)
            return n is not None and (n > limit if above else n < limit)

        return compare
    raise ValueError(
        f"unknown filter operation {operation!r} (EQUALS, NOT_EQUALS, CONTAINS, NOT_CONTAINS, GREATER_THAN, "
        "LESS_THAN)"
    )


def listing(rows: list[Row], options: str | None, page: int, page_size: int, what: str) -> str:
    """The JSON text of Artemis's answer: `rows` filtered by `options`, sorted, then the page asked."""
    opts: dict[str, Any] = json.loads(options) if options and options.strip() else {}
    if not isinstance(opts, dict):
        raise ValueError("options must be a JSON object")
    columns = set(rows[0]) if rows else set()
    field = str(opts.get("field") or "")
    if field:
        if rows and field not in columns:
            raise ValueError(f"no {what} field {field!r} (one of {', '.join(sorted(columns))})")
        keep = _compare(str(opts.get("operation") or "EQUALS"), str(opts.get("value") or ""))
        rows = [r for r in rows if keep(r.get(field, ""))]
    sort = str(opts.get("sortField") or opts.get("sortColumn") or "name")
    if rows and sort not in columns:
        raise ValueError(f"no {what} field {sort!r} to sort by")
    descending = str(opts.get("sortOrder") or "asc").lower() == "desc"

    def key(row: Row) -> tuple[int, float, str]:
        n = _number(row[sort])
        return (0, n, "") if n is not None else (1, 0.0, row[sort])

    rows = sorted(rows, key=key, reverse=descending)
    if page < 1 or page_size < 1:
        raise ValueError(f"page {page} of {page_size} rows: pages count from 1, with at least one row")
    start = (page - 1) * page_size
    return json_text({"data": rows[start : start + page_size], "count": len(rows)})
