"""Shared pieces of the wire conformance tests: broker configs, proton-built sections, waits, look-ups.

Every section here is encoded with python-qpid-proton's `Data`, never with our codec, so the bytes
are what an independent AMQP implementation (and so an Artemis broker) would put on the wire.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proton import Described, Message, symbol, ulong
from proton.utils import BlockingConnection

from connections.cli import request
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import Capabilities
from tests.support.peer import TransferRecord, encode_value

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = 0x70, 0x71, 0x72, 0x73
APPLICATION_PROPERTIES, DATA, AMQP_VALUE, FOOTER = 0x74, 0x75, 0x77, 0x78

MIRROR_PREFIX = "$ACTIVEMQ_ARTEMIS_MIRROR"
EV_TYPE = symbol("x-opt-amq-mr-ev-type")
ADR = symbol("x-opt-amq-mr-adr")
QU = symbol("x-opt-amq-mr-qu")
BKR_ID = symbol("x-opt-amq-bkr-id")
ACK_REASON = symbol("x-opt-amq-mr-ack-reason")
MR_ID = symbol("x-opt-amq-mr-id")
MR_DST = symbol("x-opt-amq-mr-dst")


# ------------------------------------------------------------------------------------ broker side


def connection_xml(port: int, body: str, *, name: str = "DC2", attrs: str = "") -> str:
    """One `<amqp-connection>` to a loopback port, retrying fast, with `body` as its children."""
    uri = f"tcp://127.0.0.1:{port}"
    return (
        f'<broker-connections><amqp-connection uri="{uri}" name="{name}" retry-interval="200" {attrs}>'
        f"{body}</amqp-connection></broker-connections>"
    )


def broker(home: Path, *, addresses: str = "", extra: str = "", **xml: Any) -> BrokerProcess:
    """A started broker process under `home` (the caller stops it)."""
    return BrokerProcess(home, xml_kwargs={"addresses": addresses, "extra": extra, **xml}).start()


def anycast(address: str, queue: str | None = None) -> str:
    return f'<address name="{address}"><anycast><queue name="{queue or address}"/></anycast></address>'


def multicast(address: str, queue: str) -> str:
    return f'<address name="{address}"><multicast><queue name="{queue}"/></multicast></address>'


def send_to_queue(url: str, address: str, bodies: list[Any]) -> None:
    """Send durable messages on a link whose target asks for a queue (auto-creates an anycast one)."""
    conn = BlockingConnection(url, allowed_mechs="ANONYMOUS", timeout=10)
    try:
        sender = conn.create_sender(address, options=Capabilities("queue"))
        for body in bodies:
            sender.send(Message(body=body, durable=True))
    finally:
        conn.close()


def mirror_status(b: BrokerProcess) -> dict[str, Any]:
    result: dict[str, Any] = request(b.url, "getMirrorStatus", [])
    return result


def source_status(b: BrokerProcess) -> dict[str, Any]:
    [source] = mirror_status(b)["sources"]
    return dict(source)


def depth(b: BrokerProcess, queue: str) -> int:
    """Messages in `queue`, or -1 when it does not exist."""
    try:
        return int(request(b.url, "getStatistics", [], resource=f"queue.{queue}")["message-count"])
    except RuntimeError:
        return -1


def queue_names(b: BrokerProcess) -> list[str]:
    return list(request(b.url, "getQueueNames", []))


def node_id(b: BrokerProcess) -> str:
    return str(request(b.url, "getNodeID", []))


def wait_for_log(b: BrokerProcess, text: str, timeout: float = 10.0) -> None:
    wait_until(lambda: text in b.log(), timeout, f"{text!r} in the broker log")


# ------------------------------------------------------------------------------ proton-built bytes


def section(code: int, value: Any) -> bytes:
    """One message section (described value) encoded by proton."""
    return encode_value(Described(ulong(code), value))


def durable_header() -> bytes:
    return section(HEADER, [True])


def control_event(event: Any, annotations: dict[Any, Any], body: Any = None) -> bytes:
    """A control event exactly as Artemis sends it: durable header, annotations, optional amqp-value.

    `event` is passed through with its type (a `symbol` normally; a `str` to test the wrong type).
    """
    ma = {EV_TYPE: event, **{symbol(k) if isinstance(k, str) else k: v for k, v in annotations.items()}}
    out = durable_header() + section(MESSAGE_ANNOTATIONS, ma)
    return out if body is None else out + section(AMQP_VALUE, body)


def address_info_json(name: str, routing_type: int = 1) -> str:
    """AddressInfo JSON with the keys Artemis writes (routing types: 0 multicast, 1 anycast)."""
    return json.dumps(
        {
            "id": 1234,
            "name": name,
            "auto-created": False,
            "temporary": False,
            "internal": False,
            "firstSeen": routing_type,
            "routingTypes": [routing_type],
            "created-timestamp": 1700000000000,
        }
    )


def queue_configuration_json(name: str, address: str, routing_type: str = "ANYCAST") -> str:
    """QueueConfiguration JSON as Artemis writes it, including keys our broker does not know."""
    return json.dumps(
        {
            "id": 98765,
            "name": name,
            "address": address,
            "routing-type": routing_type,
            "durable": True,
            "max-consumers": -1,
            "exclusive": False,
            "group-rebalance": False,
            "group-rebalance-pause-dispatch": False,
            "group-buckets": -1,
            "last-value": False,
            "non-destructive": False,
            "purge-on-no-consumers": False,
            "enabled": True,
            "consumers-before-dispatch": 0,
            "delay-before-dispatch": -1,
            "consumer-priority": 0,
            "auto-delete": False,
            "auto-delete-delay": 0,
            "auto-delete-message-count": 0,
            "ring-size": -1,
            "configuration-managed": False,
            "temporary": False,
            "auto-create-address": True,
            "internal": False,
            "transient": False,
            "auto-created": False,
            "fqqn": False,
        }
    )


# ------------------------------------------------------------------------------- what was received


def event_type(t: TransferRecord) -> Any:
    ma = t.message_annotations
    return ma.get(EV_TYPE) if isinstance(ma, dict) else None


def events(transfers: list[TransferRecord], kind: str) -> list[TransferRecord]:
    return [t for t in transfers if event_type(t) == kind]


def messages(transfers: list[TransferRecord]) -> list[TransferRecord]:
    """Replicated messages: transfers that are not control events."""
    return [t for t in transfers if event_type(t) is None]


def section_codes(t: TransferRecord) -> list[int]:
    return [s.code for s in t.sections]


def raw_section(t: TransferRecord, code: int) -> bytes | None:
    return next((s.raw for s in t.sections if s.code == code), None)


def is_long(value: Any) -> bool:
    """AMQP long: proton decodes it to a plain int (int/ulong/... have their own classes)."""
    return type(value) is int


def symbols_of(value: Any) -> list[Any]:
    """A `multiple` symbol field as a list (a single symbol and an array of symbols are both legal)."""
    if value is None:
        return []
    if isinstance(value, symbol):
        return [value]
    elements = getattr(value, "elements", value)
    return list(elements)
