"""Sender and receiver broker connections against real foreign AMQP endpoints, with exact counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send


def connection_xml(uri: str, *, children: str, name: str = "remote", extra_attrs: str = "") -> str:
    attrs = f'uri="{uri}" name="{name}" retry-interval="200" {extra_attrs}'
    return f"<broker-connections><amqp-connection {attrs}>{children}</amqp-connection></broker-connections>"


def anycast(*names: str) -> str:
    return "".join(f'<address name="{n}"><anycast><queue name="{n}"/></anycast></address>' for n in names)


def test_sender_and_receiver_with_the_proton_c_broker(tmp_path: Path, proton_c_broker: Any) -> None:
    remote = proton_c_broker
    ours = BrokerProcess(
        tmp_path / "ours",
        xml_kwargs={
            "addresses": anycast("out.orders", "in.orders"),
            "extra": connection_xml(
                f"tcp://{remote.host}:{remote.port}",
                children='<sender address-match="out.#"/><receiver address-match="in.#"/>',
            ),
        },
    )
    ours.start()
    try:
        wait_until(lambda: "AMQ111003" in ours.log(), 20, "the broker connection to come up")
        send(ours.url, "out.orders", [f"o{i}" for i in range(50)])
        got = receive(remote.url, "out.orders", 50, timeout=10)
        assert sorted(m.body for m in got) == sorted(f"o{i}" for i in range(50))
        send(remote.url, "in.orders", [f"i{i}" for i in range(30)])
        got = receive(ours.url, "in.orders", 30, timeout=10)
        assert [m.body for m in got] == [f"i{i}" for i in range(30)]
        assert receive(ours.url, "out.orders", 1, timeout=0.3) == [], (
            "forwarded messages must leave the local queue"
        )
    finally:
        assert ours.stop() == 0


def test_sender_and_receiver_with_rabbitmq(tmp_path: Path, rabbitmq: Any) -> None:
    out_addr = rabbitmq.declare_durable_queue("bridge_out")
    in_addr = rabbitmq.declare_durable_queue("bridge_in")
    ours = BrokerProcess(
        tmp_path / "ours",
        xml_kwargs={
            "addresses": f'<address name="{out_addr}"><anycast><queue name="bridge_out"/></anycast></address>'
            f'<address name="{in_addr}"><anycast><queue name="bridge_in"/></anycast></address>',
            "extra": connection_xml(
                f"tcp://{rabbitmq.host}:{rabbitmq.port}",
                extra_attrs='user="guest" password="guest"',
                children='<sender queue-name="bridge_out"/><receiver queue-name="bridge_in"/>',
            ),
        },
    )
    ours.start()
    try:
        wait_until(lambda: "AMQ111003" in ours.log(), 30, "the broker connection to RabbitMQ to come up")
        send(ours.url, out_addr, [f"o{i}" for i in range(40)])
        got = receive(rabbitmq.url, out_addr, 40, timeout=10)
        assert sorted(m.body for m in got) == sorted(f"o{i}" for i in range(40))
        send(rabbitmq.url, in_addr, [f"i{i}" for i in range(25)])
        got = receive(ours.url, in_addr, 25, timeout=10)
        assert [m.body for m in got] == [f"i{i}" for i in range(25)]
        assert rabbitmq.queue_depth("bridge_out") == 0 and rabbitmq.queue_depth("bridge_in") == 0
    finally:
        assert ours.stop() == 0
