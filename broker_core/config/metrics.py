"""`<metrics>`: where Artemis configures metrics, read for the Prometheus endpoint (docs/operations.md).

Artemis takes one `<plugin class-name="...">` with `<property key value>` children; the JVM meters
(`<jvm-memory>`, `<jvm-gc>`, ...) have no effect here: a note each. A plugin is served if its class is ours
or Artemis's Prometheus plugin (so a file written for Artemis serves Prometheus here too); another class
(Artemis's logging or simple plugin) is not implemented yet: an error, as is a property not read here.
Its properties: `host` and `port` of the HTTP endpoint, `queues` (comma-separated address-match patterns
naming the queues whose depth and age are exported, none by default: queue labels must stay bounded),
`max-queues` (a cap on them whatever the patterns match), `addresses` and `max-addresses` (the same for
the per-address series: memory, paging, full-policy actions, unrouted messages), `mirror-rpo-seconds`
(the recovery point objective the alert rules hold each mirror to, exported with the metrics) and
`mirror-behind-seconds` (when a mirror is logged as falling behind).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker_core.config.model import PROMETHEUS_PLUGINS, MetricsSettings
from broker_core.config.schema import did_you_mean
from broker_core.config.values import BadValue, parse_float, parse_int
from broker_core.config.xmlread import Element, Reader, local_name

_PROPERTIES: dict[str, Callable[[str], Any]] = {
    "host": str,
    "port": lambda text: parse_int(text, minimum=0, maximum=65535),
    "queues": str,
    "max-queues": lambda text: parse_int(text, minimum=0),
    "addresses": str,
    "max-addresses": lambda text: parse_int(text, minimum=0),
    "mirror-rpo-seconds": lambda text: _seconds(text),
    "mirror-behind-seconds": lambda text: _seconds(text),
}
_EXPECTED_PLUGIN = "class-name " + " or ".join(sorted(PROMETHEUS_PLUGINS))


def _seconds(text: str) -> float:
    value = parse_float(text)
    if value <= 0:
        raise BadValue(f"{value} seconds", "a number of seconds above 0")
    return value


def parse_metrics(reader: Reader, section: Element) -> MetricsSettings:
    reader.check_attributes(section, set())
    values: dict[str, Any] = {}
    plugins = 0
    for child in reader.children(section):
        if local_name(child) != "plugin":
            reader.ignore(child)  # the JVM meters: no effect here; a name Artemis does not have: an error
            continue
        plugins += 1
        if plugins > 1:
            reader.error(child, "more than one metrics <plugin>", "one <plugin>")
            continue
        values = _plugin(reader, child)
    return MetricsSettings(**values)


def _plugin(reader: Reader, element: Element) -> dict[str, Any]:
    reader.check_attributes(element, {"class-name"})
    class_name = reader.attr(element, "class-name", required=True)
    if class_name is None:
        return {}
    properties: dict[str, Any] = {}
    for child in reader.children(element):
        if local_name(child) != "property":
            reader.ignore(child)
            continue
        reader.check_attributes(child, {"key", "value"})
        key = reader.attr(child, "key", required=True)
        raw = reader.attr(child, "value", required=True)
        if key is None or raw is None:
            continue
        convert = _PROPERTIES.get(key)
        if convert is None:
            hint = did_you_mean(key, list(_PROPERTIES), "", "")
            reader.error(child, f"unknown metrics property {key!r}{hint}", ", ".join(_PROPERTIES), "key")
            continue
        try:
            properties[key.replace("-", "_")] = convert(raw)
        except BadValue as exc:
            reader.error(child, f"{key}: {exc.message}", exc.expected, "value")
    if class_name not in PROMETHEUS_PLUGINS:
        reader.error(element, f"metrics plugin {class_name} is not implemented yet; refused",
                     _EXPECTED_PLUGIN, "class-name")  # fmt: skip
        return {}
    return {"enabled": True, "class_name": class_name, **properties}
