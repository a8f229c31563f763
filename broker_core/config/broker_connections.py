"""`<broker-connections>`: outbound AMQP connections and their mirror / sender / receiver / peer links.

Every parameter of a connection's URI (and of each alternate's) is judged by the support table, as an
acceptor's are: a misspelt `sslEnabled` must not connect in plaintext. So are a mirror's properties.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from broker_core.config.model import AmqpConnection, Endpoint, LinkKind, LinkSettings, MirrorSettings
from broker_core.config.parameters import check_client_tls, judge_parameters
from broker_core.config.schema import did_you_mean
from broker_core.config.support import MIRROR_PROPERTIES, UriKind
from broker_core.config.uri import ParsedUri, parse_connection_uri
from broker_core.config.values import BadValue, parse_bool, parse_int, parse_sent_password
from broker_core.config.xmlread import Element, Reader, local_name
from filters.address_filter import AddressFilter

_CONNECTION_ATTRIBUTES = {
    "uri",
    "name",
    "user",
    "password",
    "retry-interval",
    "reconnect-attempts",
    "auto-start",
}
_MIRROR_FLAGS = ("message-acknowledgements", "queue-creation", "queue-removal", "durable", "sync")
# In Artemis's address-filter a space is part of the prefix: "eu, !eu.uk" allows the prefix " !eu.uk",
# and "! eu.uk" denies " eu.uk".
_SPACE_AFTER_BANG = re.compile(r"!\s")
_FILTER_EXPECTED = "no spaces around ',' or after '!', e.g. 'eu,!eu.uk'"
# <mirror><property key="max-in-flight-events" value="1000"/></mirror> (mirror/source.py)
MIRROR_MAX_IN_FLIGHT = "max-in-flight-events"


def _retry_interval(text: str) -> int:
    return parse_int(text, minimum=1)


def _reconnect_attempts(text: str) -> int:
    value = parse_int(text, minimum=-1)
    if value == 0:
        raise BadValue("reconnect-attempts 0", "-1 (forever) or a positive integer")
    return value


def parse_broker_connections(reader: Reader, section: Element) -> tuple[AmqpConnection, ...]:
    reader.check_attributes(section, set())
    connections: dict[str, AmqpConnection] = {}
    for element in reader.children(section):
        if local_name(element) != "amqp-connection":
            reader.ignore(element)
            continue
        connection = _parse_connection(reader, element)
        if connection is None:
            continue
        if connection.name in connections:
            reader.error(element, f"duplicate broker connection {connection.name!r}", "a unique name", "name")
        else:
            connections[connection.name] = connection
    return tuple(connections.values())


def _parse_connection(reader: Reader, element: Element) -> AmqpConnection | None:
    reader.check_attributes(element, _CONNECTION_ATTRIBUTES)
    name = reader.attr(element, "name", required=True)
    uri = reader.attr(element, "uri", required=True)
    endpoints = reader.convert(element, uri, parse_connection_uri, "uri")
    values: dict[str, Any] = {
        "user": reader.attr(element, "user"),
        "password": reader.convert(
            element, reader.attr(element, "password"), parse_sent_password, "password"
        ),
        "retry_interval": reader.convert(
            element, reader.attr(element, "retry-interval"), _retry_interval, "retry-interval"
        ),
        "reconnect_attempts": reader.convert(
            element, reader.attr(element, "reconnect-attempts"), _reconnect_attempts, "reconnect-attempts"
        ),
        "auto_start": reader.convert(element, reader.attr(element, "auto-start"), parse_bool, "auto-start"),
    }
    mirrors, links = _parse_children(reader, element)
    if name is None or uri is None or endpoints is None:
        return None
    return AmqpConnection(
        name=name,
        uri=uri,
        endpoints=_endpoints(reader, element, endpoints),
        mirrors=tuple(mirrors),
        links=tuple(links),
        **{key: value for key, value in values.items() if value is not None},
    )


def _endpoints(reader: Reader, element: Element, endpoints: list[ParsedUri]) -> tuple[Endpoint, ...]:
    """The primary and each alternate, with the parameters acted on; each parameter list judged once (an
    alternate without its own shares the primary's)."""
    acted: dict[int, dict[str, str]] = {}
    for endpoint in endpoints:
        if id(endpoint.params) not in acted:
            params = judge_parameters(reader, element, endpoint.params, UriKind.CONNECTION, "uri")
            check_client_tls(reader, element, params, "uri")
            acted[id(endpoint.params)] = params
        if endpoint.scheme == "wss" and endpoint.params.get("sslEnabled", "true").strip().lower() == "false":
            reader.error(element, "wss:// with sslEnabled=false", "wss:// (TLS), or ws:// without TLS", "uri")
    return tuple(
        Endpoint(host=e.host, port=e.port, params=acted[id(e.params)], scheme=e.scheme, path=e.path)
        for e in endpoints
    )


def _parse_children(reader: Reader, element: Element) -> tuple[list[MirrorSettings], list[LinkSettings]]:
    mirrors: list[MirrorSettings] = []
    links: list[LinkSettings] = []
    for child in reader.children(element):
        kind = local_name(child)
        if kind == "mirror":
            mirrors.append(_parse_mirror(reader, child))
        elif kind in ("sender", "receiver", "peer"):
            link = _parse_link(reader, child, LinkKind(kind))
            if link is not None:
                links.append(link)
        else:
            reader.ignore(child)  # <federation>: not implemented yet
    if len(mirrors) > 1:
        reader.warning(element, f"{len(mirrors)} <mirror> elements on one connection", "at most one mirror")
    return mirrors, links


def _parse_mirror(reader: Reader, element: Element) -> MirrorSettings:
    reader.check_attributes(element, {*_MIRROR_FLAGS, "address-filter"})
    values: dict[str, Any] = {}
    for flag in _MIRROR_FLAGS:
        value = reader.convert(element, reader.attr(element, flag), parse_bool, flag)
        if value is not None:
            values[flag.replace("-", "_")] = value
    address_filter = reader.attr(element, "address-filter")
    if address_filter is not None:
        _check_filter_spacing(reader, element, address_filter)
        values["address_filter"] = address_filter
    properties: dict[str, str] = {}
    for child in reader.children(element):
        if local_name(child) == "property":
            prop = _mirror_property(reader, child)
            if MIRROR_MAX_IN_FLIGHT in prop:  # the source reads it as a whole number: say so here
                reader.convert(child, prop[MIRROR_MAX_IN_FLIGHT], partial(parse_int, minimum=1), "value")
            properties.update(prop)
        else:
            reader.ignore(child)
    return MirrorSettings(properties=properties, **values)


def _mirror_property(reader: Reader, element: Element) -> dict[str, str]:
    pair = _parse_property(reader, element)
    for key, value in pair.items():
        rule = MIRROR_PROPERTIES.get(key)
        if rule is None:
            reader.error(
                element,
                f"unknown mirror property {key!r}{did_you_mean(key, list(MIRROR_PROPERTIES), '', '')}",
                "one of " + ", ".join(MIRROR_PROPERTIES),
                "key",
            )
            return {}
        reader.judge(element, rule, value, name=f"mirror property {key}", attr="key")
    return pair


def _check_filter_spacing(reader: Reader, element: Element, address_filter: str) -> None:
    findings = AddressFilter.parse(address_filter).suspicious()
    if _SPACE_AFTER_BANG.search(address_filter) and not findings:
        findings.append(f"whitespace after '!' in {address_filter!r} is part of the denied prefix")
    for finding in findings:
        reader.warning(element, finding, _FILTER_EXPECTED, "address-filter")


def _parse_link(reader: Reader, element: Element, kind: LinkKind) -> LinkSettings | None:
    reader.check_attributes(element, {"address-match", "queue-name"})
    reader.check_no_children(element)
    address_match = reader.attr(element, "address-match")
    queue_name = reader.attr(element, "queue-name")
    if not address_match and not queue_name:
        reader.error(
            element, "missing address-match or queue-name", 'an address-match="..." or queue-name="..."'
        )
        return None
    return LinkSettings(kind=kind, address_match=address_match or None, queue_name=queue_name or None)


def _parse_property(reader: Reader, element: Element) -> dict[str, str]:
    reader.check_attributes(element, {"key", "value"})
    key = reader.attr(element, "key", required=True)
    value = reader.attr(element, "value", required=True)
    return {key: value} if key is not None and value is not None else {}
