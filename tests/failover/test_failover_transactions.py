"""Transactions through the failover client against our broker as processes: commit and rollback, a
consume-and-produce step, and what a lost connection does to a transaction (rolled back; a commit cut
off is in doubt) on two brokers the client fails over between."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Message

from connections.cli import Management
from connections.failover import (
    FailoverConnection,
    FailoverTransaction,
    TransactionInDoubtError,
    TransactionRolledBackError,
)
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.ha import Relay

QUEUES = (
    '<address name="in"><anycast><queue name="in"/></anycast></address>'
    '<address name="out"><anycast><queue name="out"/></anycast></address>'
)
FAST = "initialReconnectDelay=10&maxReconnectDelay=100&randomize=false"
DUP = "_AMQ_DUPL_ID"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    a, b = (BrokerProcess(tmp_path / n, name=n, xml_kwargs={"addresses": QUEUES}) for n in "ab")
    try:
        yield a.start(), b.start()
    finally:
        for proc in (a, b):
            proc.kill()


def uri(*brokers: BrokerProcess) -> str:
    return f"failover:({','.join(b.url for b in brokers)})?{FAST}"


def bodies(url: str, queue: str, n: int) -> list[object]:
    return sorted(str(m.body) for m in receive(url, queue, n, timeout=0.5))


def depth(url: str, queue: str) -> int:
    with Management(url) as management:
        return int(management.get("messageCount", resource=f"queue.{queue}"))


def test_commit_rollback_and_a_consume_and_produce_step(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, _ = pair
    with FailoverConnection(uri(a)) as conn:
        tx = FailoverTransaction(conn)
        out, inbox = conn.sender("out"), conn.receiver("in", credit=5)
        tx.send(out, Message(body="kept-1"))
        tx.send(out, Message(body="kept-2"))
        tx.commit()
        tx.send(out, Message(body="dropped"))
        tx.rollback()
        conn.sender("in").send(Message(body="job"))
        job = inbox.receive(timeout=5)
        tx.accept(inbox)
        tx.send(out, Message(body=f"done {job.body}"))
        tx.commit()
        assert (tx.committed, tx.rolled_back) == (2, 1)
    assert bodies(a.url, "out", 4) == ["done job", "kept-1", "kept-2"]
    assert bodies(a.url, "in", 1) == []


def test_a_lost_connection_rolls_the_transaction_back_and_it_starts_again_on_the_other(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    a, b = pair
    with FailoverConnection(uri(a, b)) as conn:
        tx = FailoverTransaction(conn)
        out = conn.sender("out")
        tx.send(out, Message(body="on-a"))
        a.kill()
        with pytest.raises(TransactionRolledBackError, match="connection was lost") as raised:
            tx.send(out, Message(body="second"))  # the failover is noticed here: the work so far is gone
        assert not isinstance(raised.value, TransactionInDoubtError)
        assert not tx.active
        tx.send(out, Message(body="on-b"))  # the transaction starts afresh on B
        tx.commit()
        assert conn.connected_uri is not None and conn.connected_uri.port == b.port
    assert bodies(b.url, "out", 2) == ["on-b"]


def test_a_commit_cut_off_is_in_doubt_and_its_retry_is_stored_once(tmp_path: Path) -> None:
    """As in Artemis's High Availability guide (5.2): the commit is done but its outcome is lost with the
    broker; the retry, with the same duplicate id, is refused whole on the restarted broker, so the message
    is there once."""
    a = BrokerProcess(tmp_path / "a", name="a", xml_kwargs={"addresses": QUEUES}).start()
    relay = Relay(a.port)
    try:
        with FailoverConnection(f"failover:({relay.url})?{FAST}") as conn:
            tx = FailoverTransaction(conn)
            out = conn.sender("out")
            tx.send(out, Message(body="m", durable=True, properties={DUP: "batch-1"}))
            relay.hold()  # from now on nothing the broker says reaches the client: the commit's outcome
            failure: list[BaseException] = []

            def commit() -> None:
                try:
                    tx.commit()
                except BaseException as error:
                    failure.append(error)

            thread = threading.Thread(target=commit)
            thread.start()
            wait_until(lambda: depth(a.url, "out") == 1, 10, "the commit to be done on the broker")
            a.kill()  # its connection goes: the client never learns that the commit was done
            thread.join(10)
            assert len(failure) == 1 and isinstance(failure[0], TransactionInDoubtError), failure
            a.start()  # the same journal: the first attempt is there
            tx.send(out, Message(body="m", durable=True, properties={DUP: "batch-1"}))
            with pytest.raises(TransactionRolledBackError, match="Duplicate message detected"):
                tx.commit()  # the retry is ignored whole: nothing is stored twice
        assert bodies(a.url, "out", 2) == ["m"]
    finally:
        relay.close()
        a.kill()
