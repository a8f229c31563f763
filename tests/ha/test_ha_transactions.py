"""Transactions across the failover of a replicated pair (the recipe of Artemis's High Availability guide,
5.1-5.2): a transacted producer and a transacted consume-and-produce worker on the failover client, kill -9
of the primary mid-transaction.

- The producer sends batches of five in transactions, each message with its `_AMQ_DUPL_ID`, and rolls
  back a doomed transaction now and then. A transaction rolled back by the failover is done again; one
  whose commit was cut off (in doubt) is retried with the same ids: if its first attempt was committed,
  the backup refuses the retry whole as a duplicate. One commit is made to be in doubt every run: the
  primary's frames are held back by a relay, and the primary is killed once the batch is in both
  servers' journals (replicated before the commit was confirmed).
- The worker takes each message from `orders` and sends its result to `done` in one transaction; one
  the failover rolled back comes again.
Afterwards every committed batch's result is on `done` exactly once, `orders` is empty, and nothing of
a rolled-back transaction is anywhere.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path

from proton import Message

from connections.cli import Management
from connections.failover import (
    FailoverConnection,
    FailoverTransaction,
    ReceiveTimeout,
    TransactionInDoubtError,
    TransactionRolledBackError,
)
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.client import receive
from tests.support.ha import Relay, failover_uri, journal_holds, journal_of, replicated_pair

DONE = '<address name="done"><anycast><queue name="done"/></anycast></address>'
DUP = "_AMQ_DUPL_ID"
BATCH, BATCHES, IN_DOUBT_BATCH = 5, 40, 12
NESTED = "amqp.idleTimeout=1000&transport.connectTimeout=1000"


def status(url: str) -> dict:  # type: ignore[type-arg]
    with Management(url) as management:
        return dict(management.call("getHAStatus", []))


def depth(url: str, queue: str) -> int:
    with Management(url) as management:
        return int(management.get("messageCount", resource=f"queue.{queue}"))


class Producer:
    """Batches of BATCH messages in transactions, each committed once in the end."""

    def __init__(self, uri: str, relay: Relay) -> None:
        self.uri, self.relay = uri, relay
        self.run = uuid.uuid4().hex[:8]
        self.committed: list[int] = []  # batches
        self.refused_as_duplicates: list[int] = []  # retried after a commit in doubt that was done
        self.in_doubt: list[int] = []
        self.rolled_back = 0  # by a failover (done again)
        self.held = threading.Event()  # the in-doubt batch's commit is on its way, its outcome held back
        self.errors: list[BaseException] = []

    def id_of(self, n: int) -> str:
        return f"{self.run}-{n:06d}"

    def __call__(self) -> None:
        try:
            with FailoverConnection(self.uri) as conn:
                tx, sender = FailoverTransaction(conn), conn.sender("orders")
                for batch in range(BATCHES):
                    self.commit_once(tx, sender, batch)
        except BaseException as exc:
            self.errors.append(exc)

    def commit_once(self, tx: FailoverTransaction, sender: object, batch: int) -> None:
        while True:
            try:
                if batch % 7 == 3:  # a doomed transaction first: nothing of it may ever be stored
                    tx.send(sender, Message(body=f"doomed-{batch}", durable=True))  # type: ignore[arg-type]
                    tx.rollback()
                for i in range(BATCH):
                    n = batch * BATCH + i
                    message = Message(body=n, durable=True, properties={DUP: self.id_of(n)})
                    tx.send(sender, message)  # type: ignore[arg-type]
                if batch == IN_DOUBT_BATCH and not self.held.is_set():
                    self.relay.hold()  # from now on the primary's answers are lost: the commit is in doubt
                    self.held.set()
                tx.commit()
            except TransactionInDoubtError:
                self.in_doubt.append(batch)
                continue  # retried with the same ids
            except TransactionRolledBackError as refused:
                if "Duplicate message detected" in refused.description:
                    self.refused_as_duplicates.append(batch)  # the first attempt was committed
                    break
                self.rolled_back += 1
                continue
            break
        self.committed.append(batch)


class Worker:
    """Takes each message from `orders` and sends its result to `done`, in one transaction each."""

    def __init__(self, uri: str, total: int) -> None:
        self.uri, self.total = uri, total
        self.committed: list[int] = []
        self.rolled_back = 0
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    def __call__(self) -> None:
        try:
            with FailoverConnection(self.uri) as conn:
                tx, inbox, out = (
                    FailoverTransaction(conn),
                    conn.receiver("orders", credit=5),
                    conn.sender("done"),
                )
                while not self.stop.is_set():
                    try:
                        job = inbox.receive(timeout=0.5)
                    except ReceiveTimeout:
                        continue
                    try:
                        tx.accept(inbox)
                        result = Message(body=job.body, durable=True, properties={DUP: f"done-{job.body}"})
                        tx.send(out, result)
                        tx.commit()
                    except TransactionRolledBackError:
                        self.rolled_back += 1  # not acknowledged: the job comes again
                        continue
                    self.committed.append(job.body)
        except BaseException as exc:
            self.errors.append(exc)


def test_kill_9_of_the_primary_mid_transaction_every_committed_transaction_counts_once(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "tx1")
    for broker in (primary, backup):
        broker.xml_kwargs["addresses"] += DONE
    primary.start()
    backup.start()
    wait_until(lambda: status(primary.url)["synchronized"] is True, 30, "the backup to synchronize")
    relay = Relay(primary.port)
    producer = Producer(failover_uri([relay.url, backup.url], NESTED), relay)
    worker = Worker(failover_uri([primary.url, backup.url], NESTED), BATCH * BATCHES)
    threads = [threading.Thread(target=producer, daemon=True), threading.Thread(target=worker, daemon=True)]
    try:
        for thread in threads:
            thread.start()
        wait_until(producer.held.is_set, 40, "the producer to reach the batch whose commit is held")
        last = producer.id_of(IN_DOUBT_BATCH * BATCH + BATCH - 1)
        journals = [journal_of(primary), journal_of(backup)]
        wait_until(lambda: journal_holds(journals, last), 30, "the held commit in both servers' journals")
        assert IN_DOUBT_BATCH not in producer.committed
        primary.kill()
        wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
        threads[0].join(40)
        assert not threads[0].is_alive() and not producer.errors, (producer.errors, producer.committed)
        wait_until(lambda: depth(backup.url, "done") >= BATCH * BATCHES, 30, "every result on done")
    finally:
        worker.stop.set()
        threads[1].join(30)
        relay.close()
    assert not worker.errors, worker.errors
    assert producer.committed == list(range(BATCHES))
    assert producer.in_doubt == [IN_DOUBT_BATCH]  # its commit was cut off...
    assert producer.refused_as_duplicates == [IN_DOUBT_BATCH]  # ...done, and its retry refused whole
    results = [m.body for m in receive(backup.url, "done", 2 * BATCH * BATCHES, timeout=2)]
    repeated = {n: c for n, c in Counter(results).items() if c > 1}
    assert not repeated, f"results stored more than once: {repeated}"
    assert sorted(results) == list(range(BATCH * BATCHES))  # nothing lost, nothing doomed
    assert receive(backup.url, "orders", 10, timeout=1) == []
    print(
        f"transactions across kill -9 of a replicated primary: {len(producer.committed)} batches committed "
        f"({producer.rolled_back} rolled back by the failover and done again, 1 in doubt and refused as a "
        f"duplicate on retry); {len(worker.committed)} consume-and-produce steps ({worker.rolled_back} "
        "rolled back and done again)"
    )
    backup.stop()
