"""Priority, selectors, browsers, durable subscriptions with selectors (and unsubscribing), no-local, queue
filters and management's filters: the same program against our broker and a real Artemis 2.40, the same
answers.

Each broker runs alone from the same broker.xml (tests/artemis/support.py); every test runs one
function against both and compares what it saw, then checks the answer on its own terms too (so that
both being wrong the same way would still fail where the expected answer is known). The clients are
python-qpid-proton's, with its `Selector`, `Copy` (distribution-mode copy: a browser), `Filter` and
durable subscriptions.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from proton import Array, Described, Message, Terminus, Timeout, symbol
from proton.reactor import Container, Copy, DurableSubscription, Filter, LinkOption, Selector
from proton.utils import BlockingConnection, LinkDetached

from tests.artemis.support import artemis, call, config, depth, ours
from tests.peers.artemis import ArtemisProcess
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import Capabilities, connect

pytestmark = pytest.mark.usefixtures("artemis_available")

Broker = BrokerProcess | ArtemisProcess

ADDRESSES = """
  <address name="priorities"><anycast><queue name="priorities"/></anycast></address>
  <address name="selected"><anycast><queue name="selected"/></anycast></address>
  <address name="shared"><anycast><queue name="shared"/></anycast></address>
  <address name="browsed"><anycast><queue name="browsed"/></anycast></address>
  <address name="managed"><anycast><queue name="managed"/></anycast></address>
  <address name="news"><multicast/></address>
  <address name="chat"><multicast/></address>
  <address name="sorted">
    <multicast>
      <queue name="sorted.red"><filter string="color = 'red'"/></queue>
      <queue name="sorted.heavy"><filter string="weight &gt;= 5 AND AMQPriority &gt; 3"/></queue>
      <queue name="sorted.all"/>
    </multicast>
  </address>"""

# Messages with every kind of field a selector reads: (header priority, durable, properties section,
# application properties, message annotations).
MESSAGES: list[dict[str, Any]] = [
    {"priority": 9, "durable": True, "id": "ID:m0", "subject": "order", "correlation_id": "c-1",
     "props": {"color": "red", "weight": 5, "price": 2.5, "flag": True}, "annotations": {"x-opt-tag": "a"}},
    {"priority": 4, "durable": False, "id": "m1", "subject": "invoice", "correlation_id": "ID:c-2",
     "props": {"color": "blue", "weight": 7, "price": 10.0, "flag": False}, "annotations": {}},
    {"priority": 0, "durable": True, "id": 42, "subject": None, "correlation_id": None,
     "props": {"color": "green", "weight": 1, "text": "21", "pct": "100%"}, "annotations": {}},
    {"priority": 7, "durable": True, "id": "ID:m3", "subject": "order", "correlation_id": None,
     "props": {"color": "red", "weight": 9, "price": 99.5, "quote": "it's"},
     "annotations": {"x-opt-tag": "b"}},
    {"priority": 200, "durable": False, "id": "ID:m4", "subject": "order", "correlation_id": "c-1",
     "props": {"color": "Red", "big": 10**12}, "annotations": {}},
    {"priority": 4, "durable": True, "id": None, "subject": None, "correlation_id": None,
     "props": {}, "annotations": {}},
]  # fmt: skip

SELECTORS = [
    "color = 'red'",
    "color <> 'red'",
    "'red' <> color",
    "color IN ('red', 'blue')",
    "color NOT IN ('red')",
    "color LIKE 'R%'",
    "color LIKE '_ed'",
    "weight > 4",
    "weight BETWEEN 2 AND 8",
    "weight NOT BETWEEN 2 AND 8",
    "price * 2 > 10",
    "weight / 2 = 2.5",
    "flag",
    "NOT flag",
    "text > 18",
    "convert_string_expressions:text > 18",
    "quote = 'it''s'",
    "pct LIKE '100!%' ESCAPE '!'",
    "big > 999999999999",
    "missing IS NULL",
    "color IS NOT NULL AND weight IS NULL",
    "JMSPriority > 4",
    "JMSPriority = 9",
    "AMQPriority < 4",
    "JMSDeliveryMode = 'PERSISTENT'",
    "JMSDeliveryMode = 'NON_PERSISTENT'",
    "JMSMessageID = 'ID:m0'",
    "JMSMessageID = 'ID:m1'",
    "JMSMessageID IS NULL",
    "JMSCorrelationID = 'c-1'",
    "JMSCorrelationID = 'ID:c-2'",
    "JMSType = 'order'",
    "JMSType IS NULL",
    "JMSTimestamp > 0",
    "JMSExpiration = 0",
    "\"m.x-opt-tag\" = 'a'",
    "color = 'red' OR weight = 7",
    "(color = 'red' OR color = 'blue') AND NOT weight = 9",
]
INVALID = ["color =", "color = NULL", "'a' > 'b'", "color IN (1)"]


def _message(i: int, spec: dict[str, Any]) -> Message:
    msg = Message(
        body=f"m{i}",
        durable=spec["durable"],
        priority=spec["priority"],
        subject=spec["subject"],
        correlation_id=spec["correlation_id"],
        properties=dict(spec["props"]),
        annotations={symbol(k): v for k, v in spec["annotations"].items()} or None,
        creation_time=1_700_000_000.0 + i,
    )
    if spec["id"] is not None:
        msg.id = spec["id"]
    return msg


def _send(broker: Broker, address: str, messages: list[Message], caps: str = "queue") -> None:
    with connect(broker.url) as conn:
        sender = conn.create_sender(address, options=Capabilities(caps))
        for msg in messages:
            sender.send(msg)


def _drain(receiver: Any, timeout: float = 1.0, accept: bool = True) -> list[str]:
    got: list[str] = []
    while True:
        try:
            msg = receiver.receive(timeout=timeout)
        except Timeout:
            return got
        got.append(msg.body)
        if accept:
            receiver.accept()


_names = itertools.count()


def _container(container_id: str) -> Container:
    container = Container()
    container.container_id = container_id
    return container


def _receiver(conn: BlockingConnection, address: str, **kwargs: Any) -> Any:
    """A receiver with a link name of its own (proton names links by address; Artemis takes a name twice
    on one connection, ours refuses it as the specification says)."""
    return conn.create_receiver(address, name=f"r{next(_names)}-{address}", **kwargs)


def _browse(conn: BlockingConnection, queue: str, selector: str | None = None) -> list[str]:
    options: list[Any] = [Copy()] + ([Selector(selector)] if selector is not None else [])
    receiver = _receiver(conn, queue, credit=100, options=options)
    try:
        return _drain(receiver, timeout=0.5)
    finally:
        receiver.close()


def _refused(what: Callable[[], Any]) -> str:
    """The condition an attach was refused with ("attached" if it was not)."""
    try:
        what()
    except LinkDetached as exc:
        text = str(exc)
        return text[text.index("amqp:") :].split()[0].rstrip(",:)'") if "amqp:" in text else text
    return "attached"


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory, artemis_available: None) -> Iterator[list[Broker]]:
    root = tmp_path_factory.mktemp("jms-semantics")
    a_port, o_port = free_port(), free_port()
    theirs = artemis(root / "artemis", a_port, config(a_port, addresses=ADDRESSES)).start()
    mine = ours(root / "ours", o_port, config(o_port, addresses=ADDRESSES)).start()
    try:
        yield [mine, theirs]
    finally:
        mine.stop()
        theirs.stop()


def both(brokers: list[Broker], program: Callable[[Broker], Any]) -> Any:
    """Run `program` on both brokers; their answers must be equal; returns ours."""
    mine, theirs = (program(b) for b in brokers)
    assert mine == theirs, f"ours: {mine}\nArtemis: {theirs}"
    return mine


def _expected_order(priorities: list[int]) -> list[str]:
    ranked = sorted(range(len(priorities)), key=lambda i: (-min(priorities[i], 9), i))
    return [f"p{i}" for i in ranked]


PRIORITIES = [4, 1, 9, 4, 0, 7, 9, 4, 5, 1, 9, 3, 255, 8, 2, 6, 4, 0]


def test_priority_order_and_redelivery(brokers: list[Broker]) -> None:
    def program(broker: Broker) -> tuple[list[str], list[str]]:
        _send(
            broker,
            "priorities",
            [Message(body=f"p{i}", durable=True, priority=p) for i, p in enumerate(PRIORITIES)],
        )
        with connect(broker.url) as conn:  # take five, give them back by closing without settling
            receiver = _receiver(conn, "priorities", credit=5)
            first = [receiver.receive(timeout=5).body for _ in range(5)]
        with connect(broker.url) as conn:
            again = _drain(_receiver(conn, "priorities", credit=100))
        return first, again

    first, again = both(brokers, program)
    expected = _expected_order(PRIORITIES)
    assert first == expected[:5] and again == expected


def test_selectors_select_the_same_messages(brokers: list[Broker]) -> None:
    def program(broker: Broker) -> dict[str, list[str]]:
        _send(broker, "selected", [_message(i, spec) for i, spec in enumerate(MESSAGES)])
        with connect(broker.url) as conn:
            seen = {text: _browse(conn, "selected", text) for text in SELECTORS}
            seen["(all, browsed twice)"] = _browse(conn, "selected") + _browse(conn, "selected")
            for text in INVALID:
                seen[f"invalid {text}"] = [
                    _refused(lambda t=text: _receiver(conn, "selected", options=Selector(t)))
                ]
        return seen

    seen = both(brokers, program)
    assert seen["color = 'red'"] == ["m0", "m3"]  # browsed in delivery order: priority 9, then 7
    assert seen["'red' <> color"] == ["m4", "m1", "m5", "m2"]  # Artemis: an absent color is not equal
    assert seen["JMSPriority > 4"] == ["m0", "m4", "m3"]
    assert seen["JMSMessageID = 'ID:m1'"] == ["m1"]  # an id without ID: gets it in front
    assert seen["(all, browsed twice)"] == ["m0", "m4", "m3", "m1", "m5", "m2"] * 2
    assert all(seen[f"invalid {t}"] == ["amqp:invalid-field"] for t in INVALID)
    assert depth(brokers[0], "selected") == len(MESSAGES)  # nothing was acquired


def test_xpath_selectors_are_refused_here(brokers: list[Broker]) -> None:
    """Artemis evaluates XPATH '...' on XML bodies; we refuse such a selector, saying so."""
    with connect(brokers[0].url) as conn:
        refused = _refused(lambda: _receiver(conn, "selected", options=Selector("XPATH '//a'")))
    assert refused == "amqp:not-implemented"


def test_consumers_with_selectors_share_a_queue(brokers: list[Broker]) -> None:
    def program(broker: Broker) -> tuple[list[str], list[str], list[str], int]:
        with connect(broker.url) as conn:
            red = _receiver(conn, "shared", credit=50, options=Selector("color = 'red'"))
            blue = _receiver(conn, "shared", credit=50, options=Selector("color = 'blue'"))
            colors = ["red", "blue", "green", "red", "blue", "red"]
            _send(
                broker,
                "shared",
                [Message(body=f"s{i}", properties={"color": c}) for i, c in enumerate(colors)],
            )
            got_red, got_blue = _drain(red), _drain(blue)
            plain = _receiver(conn, "shared", credit=50)
            rest = _drain(plain)
        return got_red, got_blue, rest, depth(broker, "shared")

    red, blue, rest, left = both(brokers, program)
    assert (red, blue, rest, left) == (["s0", "s3", "s5"], ["s1", "s4"], ["s2"], 0)


def test_a_browser_never_acquires_and_sees_new_messages_when_it_gives_credit(brokers: list[Broker]) -> None:
    """A browser reads the queue once through; what comes later it reads when it gives credit again (in
    Artemis a browser is no consumer of the queue: its iterator is only run on its own flow)."""

    def program(broker: Broker) -> tuple[list[str], list[str], list[str], list[str]]:
        _send(broker, "browsed", [Message(body=f"b{i}", priority=i % 10) for i in range(4)])
        with connect(broker.url) as conn:
            browser = _receiver(conn, "browsed", credit=100, options=Copy())
            first = _drain(browser, timeout=0.5)
            _send(broker, "browsed", [Message(body="late", priority=9), Message(body="later", priority=0)])
            unasked = _drain(browser, timeout=0.5)
            browser.flow(10)
            asked = _drain(browser, timeout=0.5)
            browser.close()
            consumed = _drain(_receiver(conn, "browsed", credit=100))
        return first, unasked, asked, consumed

    first, unasked, asked, consumed = both(brokers, program)
    assert (first, unasked, asked) == (["b3", "b2", "b1", "b0"], [], ["late", "later"])
    assert consumed == ["late", "b3", "b2", "b1", "b0", "later"]


def test_durable_subscriptions_with_selectors(brokers: list[Broker]) -> None:
    def program(broker: Broker) -> tuple[list[str], list[str], list[str], str]:
        client_id = f"sub-client-{type(broker).__name__}"

        def subscribe(name: str, selector: str, conn: BlockingConnection | None = None) -> Any:
            options = [DurableSubscription(), Capabilities("topic"), Selector(selector)]
            return (conn or session()).create_receiver("news", name=name, options=options)

        def session() -> BlockingConnection:
            return BlockingConnection(broker.url, container=_container(client_id), allowed_mechs="ANONYMOUS")

        first = session()  # subscribed, then the connection goes: the subscriptions stay
        subscribe("reds", "color = 'red'", first)
        subscribe("prio", "JMSPriority > 4", first)
        first.close()
        colors = ["red", "blue", "red", "green"]
        messages = [
            Message(body=f"n{i}", properties={"color": c}, priority=2 * i + 3) for i, c in enumerate(colors)
        ]
        _send(broker, "news", messages, caps="topic")
        conn = session()
        try:
            got = _drain(subscribe("reds", "color = 'red'", conn))
            got_prio = _drain(subscribe("prio", "JMSPriority > 4", conn))
            # attached again with another selector: made anew, empty (JMS); while it has a consumer: refused
            blues = session()
            subscribe("reds2", "color = 'blue'", blues)
            _send(broker, "news", [Message(body="blue", properties={"color": "blue"})], caps="topic")
            blues.close()
            changed = subscribe("reds2", "color = 'red'", conn)
            other = session()
            try:
                busy = _refused(lambda: subscribe("reds2", "color = 'x'", other))
            finally:
                other.close()
            renewed = _drain(changed)
        finally:
            conn.close()
        return got, got_prio, renewed, busy

    got, got_prio, renewed, busy = both(brokers, program)
    assert got == ["n2", "n0"]  # priorities 7 and 3
    # Artemis keeps a subscription's selector as its queue's filter, without rewriting JMS names: a
    # JMSPriority there is an application property, which these messages do not have
    assert got_prio == []
    assert renewed == [] and busy == "amqp:illegal-state"


NO_LOCAL = Filter(
    {
        symbol("apache.org:no-local-filter:list"): Described(
            symbol("apache.org:no-local-filter:list"), ["NoLocalFilter{}"]
        )
    }
)


def test_no_local_subscribers_do_not_get_their_own_connections_messages(brokers: list[Broker]) -> None:
    no_local = NO_LOCAL

    def program(broker: Broker) -> tuple[list[str], list[str]]:
        with connect(broker.url) as conn:
            quiet = _receiver(conn, "chat", credit=50, options=[no_local, Capabilities("topic")])
            loud = _receiver(conn, "chat", credit=50, options=Capabilities("topic"))
            sender = conn.create_sender("chat", options=Capabilities("topic"))
            sender.send(Message(body="mine"))
            _send(broker, "chat", [Message(body="theirs")], caps="topic")
            return _drain(quiet), _drain(loud)

    quiet, loud = both(brokers, program)
    assert quiet == ["theirs"] and loud == ["mine", "theirs"]


def _symbols(data: Any) -> list[str]:
    data.rewind()
    found = data.next()
    if found is None:
        return []
    value = data.get_object()  # one symbol, or an array of them (both are the same field)
    return [str(v) for v in value.elements] if isinstance(value, Array) else [str(value)]


class _NoSource(LinkOption):
    """A consumer attach without a source: how Qpid JMS names a durable subscription to unsubscribe."""

    def apply(self, link: Any) -> None:
        link.source.type = Terminus.UNSPECIFIED


def test_a_durable_subscription_found_by_its_link_name_is_unsubscribed_by_closing_it(
    brokers: list[Broker],
) -> None:
    """Qpid JMS's unsubscribe: an attach without a source, by the subscription's name, answered with the
    subscription queue and the filters it was made with; closing that link deletes the subscription."""

    def program(broker: Broker) -> tuple[Any, list[str], str, str]:
        client_id = "unsub-client"  # the same on both: the answers name it

        def session() -> BlockingConnection:
            return BlockingConnection(broker.url, container=_container(client_id), allowed_mechs="ANONYMOUS")

        first = session()
        selector = Described(symbol("apache.org:selector-filter:string"), "color = 'red'")
        filters = Filter({symbol("selector"): selector, **NO_LOCAL.filter_set})  # one map: proton puts each
        options = [DurableSubscription(), Capabilities("topic"), filters]
        first.create_receiver("news", name="gone", options=options)
        first.close()
        _send(
            broker,
            "news",
            [Message(body=c, properties={"color": c[:-1]}) for c in ("red1", "blue1", "red2")],
            caps="topic",
        )
        conn = session()
        try:
            found = conn.create_receiver(None, name="gone", credit=10, options=_NoSource())
            remote = found.link.remote_source
            remote.filter.rewind()
            remote.filter.next()
            answered = remote.filter.get_object() or {}
            answer = (
                remote.address,
                remote.durability,
                remote.expiry_policy,
                remote.distribution_mode,
                _symbols(remote.capabilities),
                sorted((str(k), int(v.descriptor), v.value) for k, v in answered.items()),
            )
            got = _drain(found)
            found.close()  # a detach with closed: the subscription goes
            again = _refused(lambda: conn.create_receiver(None, name="gone", options=_NoSource()))
            unknown = _refused(lambda: conn.create_receiver(None, name="never", options=_NoSource()))
        finally:
            conn.close()
        return answer, got, again, unknown

    answer, got, again, unknown = both(brokers, program)
    assert answer[:5] == (
        "unsub-client.gone",
        Terminus.DELIVERIES,  # unsettled-state
        Terminus.EXPIRE_NEVER,
        Terminus.DIST_MODE_COPY,
        ["topic"],
    )
    assert answer[5] == [
        ("apache.org:no-local-filter:list", 0x0000468C00000003, "NoLocalFilter{}"),
        ("apache.org:selector-filter:string", 0x0000468C00000004, "color = 'red'"),
    ]
    assert got == ["red1", "red2"]
    assert again == unknown == "amqp:not-found"


def test_configured_queue_filters(brokers: list[Broker]) -> None:
    def program(broker: Broker) -> dict[str, int]:
        specs = [("red", 5, 4), ("blue", 9, 9), ("red", 1, 9), ("green", 6, 1), ("blue", 5, 4)]
        _send(broker, "sorted", [Message(body=f"f{i}", properties={"color": c, "weight": w}, priority=p)
                                 for i, (c, w, p) in enumerate(specs)], caps="topic")  # fmt: skip
        return {q: depth(broker, q) for q in ("sorted.red", "sorted.heavy", "sorted.all")}

    assert both(brokers, program) == {"sorted.red": 2, "sorted.heavy": 3, "sorted.all": 5}


def test_management_filters(brokers: list[Broker]) -> None:
    def program(broker: Broker) -> list[Any]:
        kinds = ["odd" if i % 2 else "even" for i in range(12)]
        messages = [
            Message(body=f"g{i}", properties={"n": i, "kind": k}, priority=i % 10)
            for i, k in enumerate(kinds)
        ]
        _send(broker, "managed", messages)
        q = "queue.managed"
        out = [
            call(broker, "countMessages", "kind = 'odd'", resource=q),
            call(broker, "countMessages", "n >= 3 AND AMQPriority < 8", resource=q),
            call(broker, "removeMessages", "n < 4", resource=q),
            call(broker, "countMessages", "", resource=q),
            len(_listed(call(broker, "listMessages", "kind = 'even'", resource=q))),
        ]
        wait_until(lambda: depth(broker, "managed") == 8, 10, "the removal")
        return out

    out = both(brokers, program)
    assert out == [6, 7, 4, 8, 4]


def _listed(result: Any) -> list[Any]:
    return list(json.loads(result) if isinstance(result, str) else result)
