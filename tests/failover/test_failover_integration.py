"""The failover client against our broker as separate processes: kill the active broker, carry on on the
other one, and see every operation that was cut off reported as in doubt."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Message

from connections.failover import FailoverConnection, InDoubtError, ReconnectExhaustedError
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive

QUEUE = '<address name="q"><anycast><queue name="q"/></anycast></address>'
FAST = "initialReconnectDelay=10&maxReconnectDelay=100&randomize=false"


def broker(home: Path, name: str) -> BrokerProcess:
    return BrokerProcess(home / name, name=name, xml_kwargs={"addresses": QUEUE})


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    a, b = broker(tmp_path, "a"), broker(tmp_path, "b")
    try:
        yield a.start(), b.start()
    finally:
        for proc in (a, b):
            proc.kill()


def failover_uri(*brokers: BrokerProcess, options: str = FAST) -> str:
    return f"failover:({','.join(b.url for b in brokers)})?{options}"


def test_kill_active_broker_client_continues_on_the_other(
    pair: tuple[BrokerProcess, BrokerProcess], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = pair
    caplog.set_level(logging.INFO, logger="connections.failover")
    with FailoverConnection(failover_uri(a, b)) as conn:
        sender = conn.sender("q")
        sender.send(Message(body="on-a"))
        assert conn.connected_uri is not None and conn.connected_uri.port == a.port
        a.kill()
        # The loss happened while idle: it is noticed before the next message is committed, so this
        # send is not in doubt and lands on B.
        sender.send(Message(body="on-b"))
        assert conn.connected_uri.port == b.port and conn.failovers == 1
        receiver = conn.receiver("q")
        assert receiver.receive(timeout=5).body == "on-b"
        receiver.accept()
    assert f"failed over to amqp://127.0.0.1:{b.port}" in caplog.text
    assert receive(b.url, "q", 1, timeout=0.2) == []  # accepted for real on B


def test_send_cut_off_by_the_kill_is_in_doubt_and_the_next_succeeds(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    a, b = pair
    conn = FailoverConnection(failover_uri(a, b))
    try:
        sender = conn.sender("q")
        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)  # A hangs: the next send waits for an outcome that never comes
        outcome: list[BaseException | None] = []

        def send_blocked() -> None:
            try:
                sender.send(Message(body="cut-off"))
                outcome.append(None)
            except BaseException as error:
                outcome.append(error)

        thread = threading.Thread(target=send_blocked)
        thread.start()
        wait_until(lambda: sender.in_flight == 1, 5, "the send to be waiting for its outcome")
        a.kill()
        thread.join(10)
        assert len(outcome) == 1 and isinstance(outcome[0], InDoubtError)
        in_doubt = outcome[0]
        assert in_doubt.operation == "send" and in_doubt.message.body == "cut-off"
        assert in_doubt.uri is not None and in_doubt.uri.port == a.port
        # The caller decides: here it resends, now on B.
        sender.send(in_doubt.message)
        assert conn.connected_uri is not None and conn.connected_uri.port == b.port
    finally:
        conn.close()
    assert [m.body for m in receive(b.url, "q", 2, timeout=0.5)] == ["cut-off"]


def test_accept_of_a_delivery_from_the_killed_broker_is_in_doubt(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    a, b = pair
    with FailoverConnection(failover_uri(a, b)) as conn:
        conn.sender("q").send(Message(body="from-a"))
        receiver = conn.receiver("q", credit=5)
        assert receiver.receive(timeout=5).body == "from-a"
        a.kill()
        with pytest.raises(InDoubtError) as raised:
            receiver.accept()
        assert raised.value.operation == "accept" and raised.value.message.body == "from-a"
        assert "redeliver" in str(raised.value)
        assert receiver.unsettled == 0
        # Receiving carries on on B; a delivery from B accepts normally.
        conn.sender("q").send(Message(body="from-b"))
        assert receiver.receive(timeout=5).body == "from-b"
        receiver.accept()
        assert conn.connected_uri is not None and conn.connected_uri.port == b.port


def test_receive_waiting_across_the_kill_continues_on_the_other_broker(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    a, b = pair
    with FailoverConnection(failover_uri(a, b)) as conn:
        receiver = conn.receiver("q")
        got: list[Message | BaseException] = []

        def receive_blocked() -> None:
            try:
                got.append(receiver.receive(timeout=10))
            except BaseException as error:
                got.append(error)

        thread = threading.Thread(target=receive_blocked)
        thread.start()
        wait_until(lambda: receiver.waiting, 5, "the receive to be waiting on A")
        a.kill()
        with FailoverConnection(b.url) as other:
            other.sender("q").send(Message(body="later"))
        thread.join(10)
        assert len(got) == 1 and isinstance(got[0], Message) and got[0].body == "later"  # not in doubt
        receiver.release()
        assert conn.connected_uri is not None and conn.connected_uri.port == b.port
    assert [m.body for m in receive(b.url, "q", 1, timeout=5)] == ["later"]  # released, not lost


def test_first_uri_down_at_startup_connects_to_the_second(tmp_path: Path) -> None:
    b = broker(tmp_path, "b").start()
    try:
        down = f"amqp://127.0.0.1:{free_port()}"
        with FailoverConnection(f"failover:({down},{b.url})?randomize=false") as conn:
            assert conn.connected_uri is not None and conn.connected_uri.port == b.port
            assert conn.failovers == 0
            conn.sender("q").send(Message(body="x"))
    finally:
        b.kill()


def test_priority_backup_returns_to_the_priority_broker(tmp_path: Path) -> None:
    a, b = broker(tmp_path, "a"), broker(tmp_path, "b").start()
    try:
        with FailoverConnection(failover_uri(a, b, options=FAST + "&priorityBackup=true")) as conn:
            assert conn.connected_uri is not None and conn.connected_uri.port == b.port
            sender = conn.sender("q")
            a.start()

            def on_a_after_a_send() -> bool:
                sender.send(Message(body="probe"))
                return conn.connected_uri is not None and conn.connected_uri.port == a.port

            wait_until(on_a_after_a_send, 10, "the client to return to the priority broker")
    finally:
        a.kill()
        b.kill()


def test_plain_uri_does_not_reconnect(tmp_path: Path) -> None:
    a = broker(tmp_path, "a").start()
    conn = FailoverConnection(a.url)
    try:
        sender = conn.sender("q")
        a.kill()
        with pytest.raises(ReconnectExhaustedError, match="maxReconnectAttempts=0"):
            sender.send(Message(body="x"))
    finally:
        conn.close()
