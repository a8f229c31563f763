"""A sender broker connection to another of our brokers: remote killed mid-stream, alternates, management."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from proton import Message

from broker_core.journal import iter_records
from broker_core.journal.records import MessageAdded
from connections.cli import request
from tests.connections.test_bridge_foreign import anycast, connection_xml
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send


def depth(b: BrokerProcess, queue: str) -> int:
    return int(request(b.url, "getStatistics", [], resource=f"queue.{queue}")["message-count"])


def stored_bodies(b: BrokerProcess, address: str) -> list[Any]:
    """Bodies of the messages for `address` in the journal of a broker that is not running."""
    assert b.proc is not None and b.proc.poll() is not None, "read the journal of a stopped broker only"
    out = []
    for _, record in iter_records(b.home / "data" / "journal"):
        if isinstance(record, MessageAdded) and record.address == address:
            message = Message()
            message.decode(record.body)
            out.append(message.body)
    return out


def remote(tmp: Path, name: str, port: int | None = None) -> BrokerProcess:
    b = BrokerProcess(tmp / name, name=name, xml_kwargs={"addresses": anycast("out.q")})
    if port is not None:
        b.port = port
    return b


def test_remote_killed_mid_stream_nothing_lost_and_reconnects(tmp_path: Path) -> None:
    far = remote(tmp_path, "far").start()
    near = BrokerProcess(
        tmp_path / "near",
        name="near",
        xml_kwargs={
            "addresses": anycast("out.q"),
            "extra": connection_xml(
                f"tcp://127.0.0.1:{far.port}", children='<sender address-match="out.#"/>'
            ),
        },
    )
    near.start()
    try:
        wait_until(lambda: "AMQ111003" in near.log(), 20, "the connection to come up")
        a_bodies = {f"a{i}" for i in range(1000)}
        failed: list[BaseException] = []

        def load() -> None:
            try:
                send(near.url, "out.q", [f"a{i}" for i in range(1000)])
            except BaseException as exc:
                failed.append(exc)

        loader = threading.Thread(target=load)
        loader.start()
        wait_until(lambda: depth(far, "out.q") >= 100, 20, "forwarding to far to be under way")
        far.kill()  # mid-stream: near is still taking sends and forwarding them
        loader.join(60)
        assert not loader.is_alive() and not failed, failed
        # Once near retries it has seen the link go: no Accepted can still arrive, and what it holds is
        # exactly what far never acknowledged (to be sent again).
        wait_until(lambda: "AMQ111002" in near.log(), 20, "near to notice that far is gone")
        unacked = depth(near, "out.q")
        stored = stored_bodies(far, "out.q")  # what far had made durable when it died
        assert len(stored) == len(set(stored)) and set(stored) <= a_bodies
        send(near.url, "out.q", [f"b{i}" for i in range(100)])  # queued locally while the remote is down
        far.start()
        wait_until(lambda: near.log().count("AMQ111003") >= 2, 20, "the connection to come back")
        wait_until(lambda: depth(near, "out.q") == 0, 20, "near to forward everything it holds")
        got = [m.body for m in receive(far.url, "out.q", 3000, timeout=3)]
        expected = a_bodies | {f"b{i}" for i in range(100)}
        assert set(got) == expected, f"missing {sorted(expected - set(got))[:5]}"
        # At-least-once across a kill: a message arrives twice exactly when far had stored it but near
        # never got its Accepted. Every a is stored on far or still held by near (nothing is lost), so
        # those are len(stored) + unacked - 1000 messages, each twice; anything else is a bug.
        duplicated = {body: n for body, n in Counter(got).items() if n > 1}
        assert set(duplicated.values()) <= {2} and set(duplicated) <= set(stored)
        assert len(duplicated) == len(stored) + unacked - len(a_bodies), (len(stored), unacked, duplicated)
    finally:
        near.stop()
        far.stop()


def test_first_alternate_down_at_start_then_active_killed(tmp_path: Path) -> None:
    dead_port = free_port()
    b = remote(tmp_path, "b").start()
    c = remote(tmp_path, "c").start()
    uri = f"tcp://127.0.0.1:{dead_port}#tcp://127.0.0.1:{b.port},tcp://127.0.0.1:{c.port}"
    near = BrokerProcess(
        tmp_path / "near",
        name="near",
        xml_kwargs={
            "addresses": anycast("out.q"),
            "extra": connection_xml(uri, children='<sender address-match="out.#"/>'),
        },
    )
    near.start()
    try:
        wait_until(
            lambda: f"127.0.0.1:{b.port} after 1 retries" in near.log(), 20, "failover to the first alternate"
        )
        send(near.url, "out.q", ["to-b"])
        assert [m.body for m in receive(b.url, "out.q", 1)] == ["to-b"]
        b.kill()
        wait_until(lambda: f"127.0.0.1:{c.port} after" in near.log(), 20, "failover to the second alternate")
        send(near.url, "out.q", ["to-c"])
        assert [m.body for m in receive(c.url, "out.q", 1)] == ["to-c"]
    finally:
        near.stop()
        c.stop()


def test_management_lists_starts_and_stops_connections(tmp_path: Path) -> None:
    far = remote(tmp_path, "far").start()
    near = BrokerProcess(
        tmp_path / "near",
        name="near",
        xml_kwargs={
            "addresses": anycast("out.q"),
            "extra": connection_xml(
                f"tcp://127.0.0.1:{far.port}",
                children='<sender address-match="out.#"/>',
                extra_attrs='auto-start="false"',
            ),
        },
    )
    near.start()
    try:
        [row] = json.loads(request(near.url, "listBrokerConnections", []))
        assert row["name"] == "remote" and row["started"] is False and row["connected"] is False
        send(near.url, "out.q", ["held"])
        assert receive(far.url, "out.q", 1, timeout=0.5) == []
        request(near.url, "startBrokerConnection", ["remote"])
        wait_until(
            lambda: json.loads(request(near.url, "listBrokerConnections", []))[0]["connected"],
            10,
            "the connection to be connected",
        )
        assert [m.body for m in receive(far.url, "out.q", 1)] == ["held"]
        cli = subprocess.run(
            [sys.executable, "-m", "amqp_mirror", "connections", "list", "--url", near.url],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert cli.returncode == 0 and "remote" in cli.stdout and "connected" in cli.stdout, cli.stderr
        request(near.url, "stopBrokerConnection", ["remote"])
        assert json.loads(request(near.url, "listBrokerConnections", []))[0]["started"] is False
        try:
            request(near.url, "startBrokerConnection", ["nope"])
            raise AssertionError("unknown connection name accepted")
        except RuntimeError as exc:
            assert "nope" in str(exc)
    finally:
        near.stop()
        far.stop()
