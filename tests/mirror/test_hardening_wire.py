"""Origin trust and duplicate-detection floors on broker processes, over real sockets.

A scripted source (tests/support/peer, proton's codec) plays a remote broker, or three of our brokers form
a chain. The same rules on brokers joined in memory: test_origin_trust.py, test_dedup_floors.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.conformance.test_mirror_target_wire import (
    attach_mirror,
    create_queue,
    deliver,
    peek,
    post_ack,
    replicated,
    target_stats,
)
from tests.conformance.wire_helpers import anycast, broker, depth, node_id
from tests.mirror.test_dual_mirror import mirror_xml
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.peer import Frame, ScriptedClient

FAR = 2**62
ACK_OF_1 = "an acknowledgement of message 1"
DC1, DC2, DC3 = (str(uuid.UUID(int=n)) for n in (1, 2, 3))


def refused(client: ScriptedClient, payload: bytes) -> str:
    """Send one delivery that must close the link; the detach's condition and description."""
    start = len(client.frames)
    client.send_nowait(payload)
    detach = client.wait_frame(lambda f: f.name == "detach", "the target to close the link", start)
    assert detach["closed"] is True
    condition, description = detach["error"].value[:2]
    assert not any(f.name == "disposition" for f in client.frames[start:]), "the refused event was settled"
    return f"{condition}: {description}"


def condition_of(detach: Frame) -> str:
    return str(detach["error"].value[0])


def test_a_link_cannot_speak_for_another_broker(tmp_path: Path) -> None:
    b = broker(tmp_path / "t", addresses=anycast("t.addr", "t.q"))
    try:
        with ScriptedClient(b.port) as client:
            attach_mirror(client, "dc1")
            deliver(client, replicated("dc1's own", 1, "t.addr"))
            why = refused(client, replicated("forged", FAR, "t.addr", bkr_id="dc9"))
        assert why == f"amqp:unauthorized-access: broker dc1 may not send message {FAR} of origin dc9"
        assert "MIR101" in b.log() and "mirrorTrustedOrigins=dc1:dc9" in b.log()
        ours = node_id(b)
        with ScriptedClient(b.port) as client:  # the source comes back: its own traffic flows again
            attach_mirror(client, "dc1")
            deliver(client, replicated("dc1's next", 2, "t.addr"))
            # it acknowledges one of our messages, but we do not mirror to it: it has none of them
            why = refused(client, post_ack("t.q", "t.addr", 1, **{"x-opt-amq-bkr-id": ours}))
        assert why == f"amqp:unauthorized-access: broker dc1 may not send {ACK_OF_1} of origin {ours}"
        with ScriptedClient(b.port) as client:  # a source claiming to be this very broker
            answer = attach_mirror(client, ours)
            assert answer.detach is not None and answer.flow is None
            assert condition_of(answer.detach) == "amqp:unauthorized-access"
        assert peek(b, "t.addr", "t.q") == ["dc1's own", "dc1's next"]
        assert target_stats(b)["untrusted"] == 2
    finally:
        b.stop()


def test_the_acceptor_parameter_lets_a_remote_forward_an_origin(tmp_path: Path) -> None:
    b = broker(
        tmp_path / "t", addresses=anycast("t.addr", "t.q"), acceptor_params="mirrorTrustedOrigins=dc1:dc9"
    )
    try:
        with ScriptedClient(b.port) as client:
            attach_mirror(client, "dc1")
            deliver(client, replicated("forwarded", 5, "t.addr", bkr_id="dc9"))
            deliver(client, post_ack("t.q", "t.addr", 5, **{"x-opt-amq-bkr-id": "dc9"}))
            deliver(client, replicated("still dc9's", 6, "t.addr", bkr_id="dc9"))
        assert peek(b, "t.addr", "t.q") == ["still dc9's"]
        assert target_stats(b)["untrusted"] == 0
    finally:
        b.stop()


def chain_broker(tmp: Path, name: str, node: str, port: int, **xml: str) -> BrokerProcess:
    xml_kwargs = {"addresses": anycast("orders"), **xml}
    return BrokerProcess(tmp / name, name=name, port=port, xml_kwargs=xml_kwargs, node_id=node)


def test_a_chain_of_three_brokers_forwards_where_configured(tmp_path: Path) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    dc3 = chain_broker(tmp_path, "dc3", DC3, p3).start()
    dc2 = chain_broker(tmp_path, "dc2", DC2, p2, extra=mirror_xml("DC3", p3)).start()
    dc1 = chain_broker(tmp_path, "dc1", DC1, p1, extra=mirror_xml("DC2", p2)).start()
    try:
        send(dc2.url, "orders", ["from dc2"])
        wait_until(lambda: depth(dc3, "orders") == 1, 10, "DC2's own message to reach DC3")
        send(dc1.url, "orders", ["from dc1"])
        wait_until(lambda: "MIR101" in dc3.log(), 10, "DC3 to refuse DC1's message from DC2")
        assert depth(dc2, "orders") == 2 and depth(dc3, "orders") == 1
        dc3.stop()  # the operator allows DC2 to forward DC1's events
        dc3.xml_kwargs["acceptor_params"] = f"mirrorTrustedOrigins={DC2}:{DC1}"
        dc3.write_config()
        dc3.start()
        wait_until(lambda: depth(dc3, "orders") == 2, 15, "DC1's message, kept by DC2, to reach DC3")
        assert [m.body for m in receive(dc1.url, "orders", 1)] == ["from dc1"]
        wait_until(lambda: depth(dc3, "orders") == 1, 10, "DC1's acknowledgement to travel DC2 -> DC3")
        assert peek(dc3, "orders", "orders") == ["from dc2"]
    finally:
        for b in (dc1, dc2, dc3):
            b.stop()


def test_one_id_far_ahead_blocks_nothing_across_a_target_restart(tmp_path: Path) -> None:
    b = broker(tmp_path / "t")
    try:
        with ScriptedClient(b.port) as client:
            attach_mirror(client, "dc1")
            create_queue(client, "f.q", "f.addr")
            for mid in [*range(1, 6), FAR, *range(6, 11)]:
                deliver(client, replicated(f"m{mid}", mid, "f.addr"))
        assert len(receive(b.url, "f.addr::f.q", 11)) == 11  # consumed: nothing live to recognise them by
        assert depth(b, "f.q") == 0
        assert b.stop() == 0  # (a SIGTERM waits for the last journal write: the acks are on disk)
        b.start()
        with ScriptedClient(b.port) as client:
            attach_mirror(client, "dc1")
            for mid in range(6, 11):  # re-sent: their Accepted was lost with the crash
                deliver(client, replicated(f"m{mid}", mid, "f.addr"))
            for mid in range(11, 16):
                deliver(client, replicated(f"m{mid}", mid, "f.addr"))
        assert peek(b, "f.addr", "f.q") == [f"m{mid}" for mid in range(11, 16)]
        assert target_stats(b)["duplicates"] == 5
    finally:
        b.stop()
