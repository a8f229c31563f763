"""Artemis-parity of the management operations: the same client code against a real Artemis 2.40 and
our broker, both running the same broker.xml with the same messages, and the answers compared.

What is compared: the exact values where both brokers must agree (counts, names, routing types, what a
removal or a move did), and the shape of the rest (the keys of each JSON row, the type of each answer),
since ids and sizes differ between two implementations. `browse` is the one documented difference:
Artemis answers with Java-serialized `CompositeData` objects, which only a JVM can read; ours gives the
same items as JSON, so the test checks that each of our item names is one Artemis's objects carry.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message

from connections.cli import Management
from tests.artemis.support import Broker, artemis, config, depth, ours
from tests.conftest import require
from tests.peers import artemis as artemis_peer
from tests.peers.ports import free_port, wait_until
from tests.support.client import connect

ADDRESSES = (
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="events"><multicast><queue name="events.audit"/><queue name="events.mail"/></multicast>'
    "</address>"
)
COLORS = ["blue", "red", "blue", "red", "blue"]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Broker]]:
    require("Artemis", *artemis_peer.availability())
    home = tmp_path_factory.mktemp("parity")
    a_port, o_port = free_port(), free_port()
    both: dict[str, Broker] = {
        "artemis": artemis(home / "artemis", a_port, config(a_port, addresses=ADDRESSES)),
        "ours": ours(home / "ours", o_port, config(o_port, addresses=ADDRESSES)),
    }
    for b in both.values():
        b.start()
    try:
        yield both
    finally:
        for b in both.values():
            b.stop()


def fill(broker: Broker, queue: str) -> None:
    with connect(broker.url) as conn:
        sender = conn.create_sender(queue)
        for i, color in enumerate(COLORS):
            sender.send(
                Message(
                    body=f"m{i}", durable=True, id=f"id-{i}", subject="s", properties={"color": color, "n": i}
                )
            )


def ask(broker: Broker, queue: str | None = None) -> dict[str, Any]:
    """Every operation of the parity list, asked the same way of either broker."""
    q = f"queue.{queue}" if queue else "queue.orders"
    with Management(broker.url) as m:
        return {
            "listQueues": json.loads(
                m.call("listQueues", ['{"field":"name","operation":"EQUALS","value":"orders"}', 1, 10])
            ),
            "listQueuesPaged": json.loads(
                m.call(
                    "listQueues",
                    [
                        '{"field":"name","operation":"CONTAINS","value":"events",'
                        '"sortField":"name","sortOrder":"desc"}',
                        1,
                        1,
                    ],
                )
            ),
            "listAddresses": json.loads(
                m.call("listAddresses", ['{"field":"name","operation":"EQUALS","value":"events"}', 1, 10])
            ),
            "countMessages": m.call("countMessages", [], resource=q),
            "countGrouped": json.loads(m.call("countMessages", ["", "color"], resource=q)),
            "listMessagesAsJSON": json.loads(m.call("listMessagesAsJSON", [""], resource=q)),
            "getRoutingType": m.call("getRoutingType", [], resource=q),
            "routingType": m.get("routingType", resource=q),
            "addressRoutingTypes": m.call("getRoutingTypes", [], resource="address.events"),
            "addressQueueNames": sorted(m.call("getQueueNames", [], resource="address.events")),
            "browse": m.call("browse", [1, 2], resource=q),
        }


def shape(value: Any) -> Any:
    """The structure of an answer: dict keys and value types, a list by its first element."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def test_queries_answer_alike(brokers: dict[str, Broker]) -> None:
    for b in brokers.values():
        fill(b, "orders")
    a, o = ask(brokers["artemis"]), ask(brokers["ours"])

    for key in (
        "countMessages",
        "countGrouped",
        "getRoutingType",
        "routingType",
        "addressRoutingTypes",
        "addressQueueNames",
    ):
        assert o[key] == a[key], key
    assert o["countMessages"] == 5 and o["countGrouped"] == {"blue": 3, "red": 2}
    assert o["addressRoutingTypes"] == ["MULTICAST"] and o["addressQueueNames"] == [
        "events.audit",
        "events.mail",
    ]

    for key in ("listQueues", "listQueuesPaged", "listAddresses"):
        assert shape(o[key]) == shape(a[key]), key
        assert o[key]["count"] == a[key]["count"], key
        assert [r["name"] for r in o[key]["data"]] == [r["name"] for r in a[key]["data"]], key
    assert o["listQueuesPaged"]["count"] == 2 and o["listQueuesPaged"]["data"][0]["name"] == "events.mail"
    for field in ("messageCount", "routingType", "durable", "paused", "consumerCount", "address"):
        assert o["listQueues"]["data"][0][field] == a["listQueues"]["data"][0][field], field
    assert o["listAddresses"]["data"][0]["routingTypes"] == a["listAddresses"]["data"][0]["routingTypes"]

    listed_o, listed_a = o["listMessagesAsJSON"], a["listMessagesAsJSON"]
    assert len(listed_o) == len(listed_a) == 5
    assert set(listed_o[0]) == set(listed_a[0])
    same = ("color", "n", "subject", "userID", "durable", "priority", "address", "expiration")
    assert [{k: m[k] for k in same} for m in listed_o] == [{k: m[k] for k in same} for m in listed_a]

    # browse: Artemis's items are Java-serialized; ours carry the same item names, as JSON
    serialized = a["browse"]["javax.management.openmbean.CompositeData"]
    assert len(serialized) == len(o["browse"]) == 2
    raw = base64.b64decode(serialized[0])
    assert all(name.encode() in raw for name in o["browse"][0]), [
        n for n in o["browse"][0] if n.encode() not in raw
    ]
    assert [i["text"] for i in o["browse"]] == ["m0", "m1"] and o["browse"][0]["userID"] == "ID:id-0"
    # nothing was acquired by asking
    assert ask(brokers["ours"])["countMessages"] == 5


def test_changes_answer_alike(brokers: dict[str, Broker]) -> None:
    answers: dict[str, list[Any]] = {}
    for name, b in brokers.items():
        with Management(b.url) as m:
            got = [
                m.call("createAddress", ["parity.addr", "ANYCAST,MULTICAST"]),
                json.loads(
                    m.call(
                        "createQueue",
                        [
                            '{"name":"parity.q","address":"parity.addr",'
                            '"routing-type":"ANYCAST","durable":true}'
                        ],
                    )
                ),
                m.call("createQueue", ["parity.addr", "parity.q2", True, "ANYCAST"]),
                _failure(m, "createAddress", ["parity.addr", "ANYCAST"]),
                _failure(m, "createQueue", ['{"name":"parity.q","address":"parity.addr"}']),
            ]
        fill(b, "parity.addr::parity.q")
        with Management(b.url) as m:
            q = "queue.parity.q"
            got += [
                m.call("pause", [], resource=q),
                m.get("paused", resource=q),
                m.call("resume", [], resource=q),
                m.get("paused", resource=q),
                m.call("moveMessages", ["", "parity.q2"], resource=q),
                m.call("moveMessages", [100, "", "parity.q", False, 2], resource="queue.parity.q2"),
                m.call("removeAllMessages", [], resource=q),
                m.call("removeMessages", [""], resource="queue.parity.q2"),
                m.get("messageCount", resource=q),
                _failure(m, "moveMessages", ["", "no.such.queue"], q),
                _failure(m, "countMessages", [], "queue.no.such.queue"),
                m.call("destroyQueue", ["parity.q2"]),
                _failure(m, "destroyQueue", ["parity.q2"]),
            ]
        answers[name] = got
    a, o = answers["artemis"], answers["ours"]
    assert o[0] == a[0] == "Address [name=parity.addr, routingTypes={MULTICAST,ANYCAST}, autoCreated=false]"
    assert shape(o[1]) == shape(a[1]) and o[1]["name"] == a[1]["name"] == "parity.q"
    assert o[2] is a[2] is None  # void: no body
    assert (
        o[3:5]
        == a[3:5]
        == [
            "AMQ229204: Address already exists: parity.addr",
            "AMQ229019: Queue parity.q already exists on address parity.addr",
        ]
    )
    # pause, paused, resume, paused, moved 5, moved back 2, removed 2 + 3, then nothing left
    assert o[5:14] == a[5:14] == [None, True, None, False, 5, 2, 2, 3, 0]
    assert o[14] == a[14] == "AMQ229049: No queue found for no.such.queue"
    assert o[15] == a[15] == "AMQ229067: Cannot find resource with name queue.no.such.queue"
    assert o[16] is a[16] is None
    assert o[17] == a[17] == "AMQ229017: Queue parity.q2 does not exist"


def test_a_message_removed_by_id_and_a_dead_letter_retried_answer_alike(brokers: dict[str, Broker]) -> None:
    """removeMessage(id), and retryMessages on the dead-letter queue: a rejected message goes back to its
    queue by the breadcrumbs the dead-letter copy carries (Artemis's names for them, checked in its
    browse answer)."""
    answers: dict[str, list[Any]] = {}
    dead: dict[str, Any] = {}
    for name, b in brokers.items():
        with Management(b.url) as m:
            m.call("createQueue", ['{"name":"parity.retry","routing-type":"ANYCAST"}'])
            dla_before = int(m.get("messageCount", resource="queue.DLA"))
        fill(b, "parity.retry")
        with connect(b.url) as conn:
            receiver = conn.create_receiver("parity.retry", credit=1)
            receiver.receive(timeout=10)
            receiver.reject()
        wanted = dla_before + 1
        wait_until(lambda b=b, n=wanted: depth(b, "DLA") == n, 30, f"{name} to dead-letter the message")
        with Management(b.url) as m:
            q = "queue.parity.retry"
            first = json.loads(m.call("listMessagesAsJSON", [""], resource=q))[0]["messageID"]
            dead[name] = m.call("browse", [], resource="queue.DLA")
            answers[name] = [
                m.call("removeMessage", [first], resource=q),
                m.call("removeMessage", [first], resource=q),  # gone already
                m.get("messageCount", resource=q),
                m.call("retryMessages", [], resource="queue.DLA"),
                m.get("messageCount", resource=q),
                m.get("messageCount", resource="queue.DLA") == dla_before,
            ]
    assert answers["ours"] == answers["artemis"] == [True, False, 3, 1, 4, True]
    raw = b"".join(base64.b64decode(x) for x in dead["artemis"]["javax.management.openmbean.CompositeData"])
    ours_names = [k for item in dead["ours"] for k in item.get("StringProperties") or {} if "ORIG" in k]
    assert sorted(ours_names) == [
        "messageAnnotations.x-opt-ORIG-ADDRESS",
        "messageAnnotations.x-opt-ORIG-QUEUE",
    ]
    assert all(k.encode() in raw for k in ours_names), "Artemis names its breadcrumbs otherwise"


def _failure(m: Management, operation: str, params: list[Any], resource: str = "broker") -> str:
    with pytest.raises(RuntimeError) as failed:
        m.call(operation, params, resource=resource)
    return str(failed.value).split(" failed: ", 1)[1]


def test_users_answer_alike(brokers: dict[str, Broker], tmp_path: Path) -> None:
    answers: dict[str, list[Any]] = {}
    for name, b in brokers.items():
        with Management(b.url) as m:
            answers[name] = [
                m.call("addUser", ["parity-user", "pw-1", "amq,parity", False]),
                json.loads(m.call("listUser", ["parity-user"])),
                m.call("resetUser", ["parity-user", "pw-2", "amq"]),
                json.loads(m.call("listUser", ["parity-user"])),
                _failure(m, "addUser", ["parity-user", "x", "amq", True]),
                m.call("removeUser", ["parity-user"]),
                _failure(m, "removeUser", ["parity-user"]),
                m.call("reloadConfigurationFile", []),
            ]
    a, o = answers["artemis"], answers["ours"]
    assert o == a
    assert o[1] == [{"username": "parity-user", "roles": ["amq", "parity"]}]
    assert o[4] == "AMQ229223: User parity-user already exists"
