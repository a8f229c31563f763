"""An authenticated but hostile mirror peer against broker processes, over real sockets.

A scripted source (tests/support/peer, proton's codec) plays the hostile link; our brokers play the data
centres. What it tries, and what the target does:
- deleteQueue / deleteAddress (and the rest) of another mirror's store-and-forward queue: not applied,
  so a third data centre still receives every event, exactly (a chain DC1 -> DC2 -> DC3, DC3 down);
- to speak as a broker that mirrors here through another address, as another user, or beside its live
  link: refused at attach;
- two far ids (2^62, 2^62 + 1) as the real broker's own link, then a restart of the target: the real
  broker's later traffic is stored, every message of it;
- a broker id too long to key the target's records by: refused, at attach and per event, with no
  effect on anybody else's sends.
The rules one by one, on brokers joined in memory: test_target_refusals.py, test_dedup_floors.py.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.conformance.test_mirror_target_wire import (
    DELETE_ADDRESS,
    DELETE_QUEUE,
    attach_mirror,
    deliver,
    peek,
    post_ack,
    replicated,
    target_stats,
)
from tests.conformance.wire_helpers import (
    MIRROR_PREFIX,
    address_info_json,
    anycast,
    control_event,
    depth,
    source_status,
)
from tests.mirror.test_dual_mirror import mirror_xml
from tests.peers.ports import WaitTimeout, free_port, wait_until
from tests.support.broker import REPO, BrokerProcess
from tests.support.client import send
from tests.support.ops import Metered, metrics_xml
from tests.support.peer import AttachAnswer, ScriptedClient

DC1, DC2, DC3 = (str(uuid.UUID(int=n)) for n in (0xD1, 0xD2, 0xD3))
FAR = 2**62
SNF_DC3 = f"{MIRROR_PREFIX}_dc3"  # DC2's store-and-forward queue to DC3 (its connection is named dc3)


def data_centre(tmp: Path, name: str, node: str, port: int, **xml: object) -> BrokerProcess:
    xml_kwargs = {"addresses": anycast("orders") + anycast("other"), **xml}
    return BrokerProcess(tmp / name, name=name, port=port, xml_kwargs=xml_kwargs, node_id=node)


def refusal(answer: AttachAnswer) -> tuple[str, str]:
    assert answer.flow is None and answer.detach is not None, "the mirror link was accepted"
    condition, description = answer.detach["error"].value[:2]
    return str(condition), str(description)


def accepted(answer: AttachAnswer) -> None:
    assert answer.flow is not None and answer.detach is None, f"refused: {answer.detach}"


def stays(condition: Callable[[], bool], seconds: float, what: str) -> None:
    """Assert `condition()` holds throughout `seconds` (an absence has no event to wait for)."""
    try:
        wait_until(lambda: not condition(), seconds, what)
    except WaitTimeout:
        return
    raise AssertionError(f"{what}: no longer so")


def bodies(b: BrokerProcess, queue: str) -> list[str]:
    return sorted(str(x) for x in peek(b, queue, queue))


def test_a_hostile_link_cannot_delete_the_store_and_forward_queue_of_a_chain(tmp_path: Path) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    dc3 = data_centre(tmp_path, "dc3", DC3, p3, acceptor_params=f"mirrorTrustedOrigins={DC2}:{DC1}")
    dc3.start()  # DC2's mirror learns DC3's broker id (it forwards nothing to a broker it never met)
    metrics_port = free_port()
    extra = mirror_xml("dc3", p3) + metrics_xml(metrics_port)
    dc2 = data_centre(tmp_path, "dc2", DC2, p2, extra=extra).start()
    dc1 = data_centre(tmp_path, "dc1", DC1, p1, extra=mirror_xml("dc2", p2)).start()
    try:
        wait_until(lambda: source_status(dc2)["remoteBrokerId"] == DC3, 15, "DC2's mirror to reach DC3")
        dc3.stop()
        send(dc1.url, "orders", [f"dc1-{i}" for i in range(5)])
        send(dc2.url, "orders", [f"dc2-{i}" for i in range(3)])
        wait_until(lambda: depth(dc2, "orders") == 8, 15, "DC1's messages to reach DC2")
        pending = depth(dc2, SNF_DC3)
        assert pending >= 8, "DC2's store-and-forward queue does not hold the events for DC3"
        with ScriptedClient(dc2.port) as evil:
            accepted(attach_mirror(evil, "evil", name="evil"))
            deliver(
                evil,
                control_event(
                    DELETE_QUEUE, {"x-opt-amq-mr-adr": SNF_DC3, "x-opt-amq-mr-qu": SNF_DC3}, SNF_DC3
                ),
            )
            deliver(
                evil, control_event(DELETE_ADDRESS, {"x-opt-amq-mr-adr": SNF_DC3}, address_info_json(SNF_DC3))
            )
            deliver(evil, post_ack(SNF_DC3, SNF_DC3, 1))
            deliver(evil, replicated("forged into dc3's stream", 7, SNF_DC3))
            evil.close()
        assert depth(dc2, SNF_DC3) == pending
        assert target_stats(dc2)["refused"] == 4
        not_applied = Metered(dc2, metrics_port).value(
            "amqp_mirror_mirror_target_events_not_applied_total", reason="protected"
        )
        assert not_applied == 4
        log = dc2.log()
        assert (
            f"MIR102: mirror from evil: deleteQueue not applied: queue {SNF_DC3} is under the mirror prefix"
            in log
        )
        assert "MIR102: mirror from evil: deleteAddress not applied" in log
        send(dc1.url, "orders", [f"dc1-{i}" for i in range(5, 7)])  # captured for DC3 as before
        wait_until(lambda: depth(dc2, "orders") == 10, 15, "DC1's later messages to reach DC2")
        dc3.start()
        wait_until(lambda: source_status(dc2)["pendingEvents"] == 0, 30, "DC2's backlog to drain to DC3")
        expected = sorted([f"dc1-{i}" for i in range(7)] + [f"dc2-{i}" for i in range(3)])
        assert bodies(dc3, "orders") == expected
        stays(lambda: depth(dc3, "orders") == 10, 2, "DC3 holds each message once")
        assert depth(dc3, SNF_DC3) == -1 and target_stats(dc3)["refused"] == 0
    finally:
        for b in (dc1, dc2, dc3):
            b.stop()


MIRROR_USERS = """
      <security-setting match="#">
        <permission type="send" roles="amq,producers"/>
        <permission type="consume" roles="amq,consumers"/>
        <permission type="createAddress" roles="amq,producers"/>
        <permission type="createDurableQueue" roles="amq,producers"/>
        <permission type="createNonDurableQueue" roles="amq"/>
        <permission type="deleteNonDurableQueue" roles="amq"/>
        <permission type="manage" roles="amq"/>
      </security-setting>
      <security-setting match="$ACTIVEMQ_ARTEMIS_MIRROR_evil">
        <permission type="send" roles="amq,producers"/>
        <permission type="manage" roles="amq,producers"/>
      </security-setting>"""


def mirror_as(name: str, port: int, user: str, password: str) -> str:
    attrs = (
        f'uri="tcp://127.0.0.1:{port}" name="{name}" retry-interval="200" user="{user}" password="{password}"'
    )
    return f"<broker-connections><amqp-connection {attrs}><mirror/></amqp-connection></broker-connections>"


def forget_remote(b: BrokerProcess, remote: str) -> str:
    command = [sys.executable, "-m", "amqp_mirror", "connections", "forget-remote", remote, "--url", b.url]
    command += ["--user", "admin", "--password", "secret"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_broker_that_mirrors_here_cannot_be_claimed_another_way(tmp_path: Path) -> None:
    p1, p2 = free_port(), free_port()
    dc2 = data_centre(tmp_path, "dc2", DC2, p2, security=True, security_settings=MIRROR_USERS).start()
    dc1 = data_centre(tmp_path, "dc1", DC1, p1, extra=mirror_as("dc2", p2, "admin", "secret")).start()
    admin, alice = {"user": "admin", "password": "secret"}, {"user": "alice", "password": "wonderland"}
    try:
        send(dc1.url, "orders", ["before"])
        wait_until(lambda: depth_as_admin(dc2, "orders") == 1, 15, "DC1's message to reach DC2")
        attempts = [  # (user, address name, claimed broker) -> the refusal's condition
            (alice, "evil", DC1, "amqp:unauthorized-access"),  # another address, another user
            (admin, "evil", DC1, "amqp:unauthorized-access"),  # another address
            (admin, "dc2", DC1, "amqp:resource-locked"),  # DC1's own way, beside its live link
        ]
        for login, name, claimed, condition in attempts:
            with ScriptedClient(dc2.port, **login) as client:
                got, description = refusal(attach_mirror(client, claimed, name=name))
            assert got == condition, description
        assert "MIR104" in dc2.log() and "MIR105" in dc2.log()
        assert f"amqp-mirror connections forget-remote {DC1}" in dc2.log()
        with ScriptedClient(dc2.port, **alice) as client:  # alice may mirror as a broker of her own
            accepted(attach_mirror(client, "evil-dc", name="evil"))
            client.close()
        remotes = status_as_admin(dc2)["target"]["remotes"]
        assert remotes[DC1] == {"address": f"{MIRROR_PREFIX}_dc2", "user": "admin"}
        assert remotes["evil-dc"] == {"address": f"{MIRROR_PREFIX}_evil", "user": "alice"}
        dc2.kill()  # the binding is persisted
        dc2.start()
        with ScriptedClient(dc2.port, **admin) as client:
            got, _ = refusal(attach_mirror(client, DC1, name="evil"))
        assert got == "amqp:unauthorized-access"
        wait_until(lambda: source_status(dc1)["connected"], 15, "DC1's mirror to reconnect after the restart")
        send(dc1.url, "orders", ["after"])
        wait_until(lambda: depth_as_admin(dc2, "orders") == 2, 15, "DC1's traffic to flow again")
        dc1.stop()  # the operator moves DC1 to another connection name: forget its binding first
        assert forget_remote(dc2, DC1) == f"forget-remote {DC1}: forgotten"
        client = attach_when_free(dc2.port, DC1, "evil", **admin)
        client.close()
        client.__exit__(None, None, None)
        assert status_as_admin(dc2)["target"]["remotes"][DC1]["address"] == f"{MIRROR_PREFIX}_evil"
    finally:
        for b in (dc1, dc2):
            b.stop()


def depth_as_admin(b: BrokerProcess, queue: str) -> int:
    from connections.cli import request

    stats = request(b.url, "getStatistics", [], resource=f"queue.{queue}", user="admin", password="secret")
    return int(stats["message-count"])


def status_as_admin(b: BrokerProcess) -> dict:
    from connections.cli import request

    return dict(request(b.url, "getMirrorStatus", [], user="admin", password="secret"))


def attach_when_free(port: int, origin: str, name: str, timeout: float = 15, **login: str) -> ScriptedClient:
    """A mirror link of `origin`, retried until the broker has let its last link go (as a source does)."""
    deadline = time.monotonic() + timeout
    while True:
        client = ScriptedClient(port, **login).__enter__()
        answer = attach_mirror(client, origin, name=name)
        if answer.detach is None:
            accepted(answer)
            return client
        client.__exit__(None, None, None)
        assert time.monotonic() < deadline, f"the link of {origin} was never let go: {answer.detach}"
        time.sleep(0.2)


def test_two_far_ids_on_the_real_brokers_own_link_block_nothing_after_a_restart(tmp_path: Path) -> None:
    """The worst case for duplicate detection: the peer speaks as DC1, the way DC1 does, while DC1 is
    away (binding and one live link cannot tell them apart), and sends ids 2^62 and 2^62 + 1. After a
    kill -9 and restart of DC2, everything DC1 sends is stored."""
    p1, p2 = free_port(), free_port()
    dc2 = data_centre(tmp_path, "dc2", DC2, p2).start()
    dc1 = data_centre(tmp_path, "dc1", DC1, p1, extra=mirror_xml("dc2", p2)).start()
    try:
        send(dc1.url, "orders", [f"first-{i}" for i in range(10)])
        wait_until(lambda: depth(dc2, "orders") == 10, 15, "DC1's first messages to reach DC2")
        dc1.stop()
        evil = attach_when_free(dc2.port, DC1, "dc2")
        try:
            deliver(evil, replicated("poison", FAR, "orders"))
            deliver(evil, replicated("poison", FAR + 1, "orders"))
            evil.close()
        finally:
            evil.__exit__(None, None, None)
        assert depth(dc2, "orders") == 12
        dc2.kill()
        dc2.start()
        dc1.start()
        send(dc1.url, "orders", [f"later-{i}" for i in range(20)])
        wait_until(lambda: source_status(dc1)["pendingEvents"] == 0, 20, "DC1's mirror to drain")
        later = [b for b in bodies(dc2, "orders") if b.startswith("later-")]
        assert later == sorted(f"later-{i}" for i in range(20)), f"{20 - len(later)} of DC1's 20 were dropped"
        assert depth(dc2, "orders") == 32
        assert target_stats(dc2)["origins"][DC1]["duplicates"] == 0
    finally:
        for b in (dc1, dc2):
            b.stop()


def test_a_broker_id_too_long_for_the_targets_records_is_refused(tmp_path: Path) -> None:
    """65,530 bytes fit a name, not the target's `mirror.dedup.<origin>` record: refused at attach and
    per event, while another client's sends all go through (they were once refused as a full disk)."""
    b = data_centre(tmp_path, "t", DC2, free_port()).start()
    long_id = "o" * 65_530
    sent: list[int] = []
    producer = threading.Thread(
        target=lambda: sent.append(send(b.url, "other", [f"m{i}" for i in range(300)]))
    )
    producer.start()
    try:
        with ScriptedClient(b.port) as client:
            client.open(container_id="long")
            address = f"{MIRROR_PREFIX}_long"
            answer = client.attach_sender(
                f"{address}:1", address, source=address, desired_capabilities=["amq.mirror"],
                properties={"x-opt-amq-bkr-id": long_id},
            )  # fmt: skip
            condition, description = refusal(answer)
        assert condition == "amqp:invalid-field"
        assert description == "a mirror link with a broker id of 65,530 bytes: at most 256"
        with ScriptedClient(b.port) as client:
            accepted(attach_mirror(client, "dc9", name="dc9"))
            for mid in range(1, 21):
                deliver(client, replicated(f"long {mid}", mid, "orders", bkr_id=long_id))
                deliver(client, post_ack("orders", "orders", mid, **{"x-opt-amq-bkr-id": long_id}))
            deliver(client, replicated("dc9's own", 1, "orders"))
            client.close()
        producer.join(60)
        assert sent == [300] and depth(b, "other") == 300
        assert peek(b, "orders", "orders") == ["dc9's own"]
        stats = target_stats(b)
        assert stats["refused"] == 40 and stats["messages"] == 1
        log = b.log()
        assert "MIR106" in log and "AMQ224016" not in log and "disk is full" not in log
        assert max(len(line) for line in log.splitlines()) < 2000, "a log line carries the whole id"
    finally:
        b.stop()
