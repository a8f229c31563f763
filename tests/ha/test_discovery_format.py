"""The discovery datagram (amqp_mirror/discovery.py) and what a discovery group keeps of it, without
sockets: our versioned JSON, nothing but a node id, whether it is active and host:port per connector;
anything else ignored; a connector kept until refresh-timeout passes without it, the server's own never."""

from __future__ import annotations

import asyncio
import json

from amqp_mirror.discovery import Discovery, decode, encode
from broker_core.config.model import Connector, DiscoveryGroup


def test_the_datagram_says_only_the_node_id_activity_and_where() -> None:
    data = encode("node-1", True, ["10.0.0.1:5672"])
    assert json.loads(data) == {
        "format": "amqp-mirror-discovery",
        "version": 1,
        "nodeId": "node-1",
        "active": True,
        "connectors": ["10.0.0.1:5672"],
    }
    assert decode(data) == ("node-1", ["10.0.0.1:5672"])


def test_anything_else_is_ignored() -> None:
    other_version = json.dumps(
        {"format": "amqp-mirror-discovery", "version": 2, "nodeId": "n", "connectors": []}
    )
    for data in (b"\x00\x01artemis", b"[]", other_version.encode(), b'{"format": "x", "version": 1}'):
        assert decode(data) is None
    mixed = encode("n", False, ["10.0.0.1:5672", "no-port", "10.0.0.2:99999", "[::1]:5672"])
    assert decode(mixed) == ("n", ["10.0.0.1:5672", "[::1]:5672"])


def test_a_member_is_kept_until_refresh_timeout_passes_without_it() -> None:
    found: list[tuple[Connector, str]] = []
    gone: list[Connector] = []
    group = DiscoveryGroup(name="dg", group_address="231.7.7.7", group_port=9876, refresh_timeout=1000)
    loop = asyncio.new_event_loop()
    try:
        discovery = Discovery(
            "s", group, loop, "10.0.0.9:5672", lambda c, n: found.append((c, n)), gone.append
        )
        discovery.received(encode("own", True, ["10.0.0.9:5672"]))  # its own: never a member
        discovery.received(encode("node-1", True, ["10.0.0.1:5672"]))
        discovery.received(encode("node-1", True, ["10.0.0.1:5672"]))  # heard again: found once
        assert [(c.host, c.port, n) for c, n in found] == [("10.0.0.1", 5672, "node-1")]
        _, heard_at = discovery.heard["10.0.0.1:5672"]
        discovery.expire(heard_at + 0.999)
        assert gone == []
        discovery.expire(heard_at + 1.001)
        assert [(c.host, c.port) for c in gone] == [("10.0.0.1", 5672)]
        assert discovery.heard == {}
    finally:
        loop.close()
