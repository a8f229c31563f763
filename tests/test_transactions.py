"""Local transactions (AMQP 1.0 part 4) on whole brokers joined in memory: the coordinator, transactional
sends and acknowledgements, commit and rollback, what other consumers and the mirror see meanwhile, and
what a restart keeps."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker_core.amqp.performatives import (
    Accepted,
    Coordinator,
    Declare,
    Discharge,
    Rejected,
    Released,
    TransactionalState,
)
from broker_core.message import MessageView, section_value
from tests.support.pair import MemoryClient, Network

ADDRESSES = (
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="invoices"><anycast><queue name="invoices"/></anycast></address>'
    '<address name="work"><anycast><queue name="work"/></anycast></address>'
)
DUP = "_AMQ_DUPL_ID"


def one_broker(tmp_path: Path, **options: object) -> tuple[Network, MemoryClient]:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True, addresses=ADDRESSES, **options)  # type: ignore[arg-type]
    net.start_all()
    return net, net.client("dc1")


def restarted(net: Network) -> None:
    net.stop("dc1")
    net.broker("dc1", persistence=True, addresses=ADDRESSES)
    net.start("dc1")


def condition(answer: object) -> str | None:
    if isinstance(answer, Rejected) and answer.error is not None:
        return str(answer.error.condition)
    return None


def delivery_count(payload: bytes) -> int:
    return MessageView(payload).header.delivery_count


def body(payload: bytes) -> object:
    view = MessageView(payload)
    return next(section_value(payload, start) for code, start, _ in view.all_sections() if code == 0x77)


def test_the_coordinator_offers_local_transactions_and_declares_distinct_ones(tmp_path: Path) -> None:
    _, client = one_broker(tmp_path)
    first, second = client.declare(), client.declare()
    assert first != second
    link = client.senders["$coordinator"]
    assert link.remote_attach is not None
    target = link.remote_attach.target
    assert isinstance(target, Coordinator)
    assert "amqp:local-transactions" in [str(c) for c in target.capabilities]
    answer = client.control(Declare(global_id=b"xa"))
    assert condition(answer) == "amqp:not-implemented"


def test_sends_in_a_transaction_are_stored_and_visible_only_once_it_commits(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    watcher = net.client("dc1")
    assert watcher.take("orders", 10) == []
    txn = client.declare()
    ids = [client.send("orders", f"m{i}", txn=txn) for i in range(3)]
    net.pump()
    for i in ids:  # settled at once, Accepted into the transaction
        state = client.outcomes[i]
        assert isinstance(state, TransactionalState) and state.txn_id == txn
        assert isinstance(state.outcome, Accepted)
    assert net.depth("dc1", "orders") == 0
    assert watcher.received == {}  # the consumer with credit got nothing
    assert isinstance(client.discharge(txn), Accepted)
    got = watcher.received.pop("recv-orders", [])
    assert [body(p) for _, p in got] == ["m0", "m1", "m2"]
    assert net.depth("dc1", "orders") == 3
    restarted(net)
    assert net.depth("dc1", "orders") == 3


def test_a_rolled_back_transaction_leaves_nothing_behind(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    txn = client.declare()
    for i in range(3):
        client.send("orders", f"m{i}", txn=txn)
    net.pump()
    assert isinstance(client.discharge(txn, fail=True), Accepted)
    assert net.depth("dc1", "orders") == 0
    assert net.server("dc1").budget.bytes == 0  # the held sends let go of their memory
    restarted(net)
    assert net.depth("dc1", "orders") == 0


def test_one_transaction_spans_addresses_links_and_acknowledgements(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    producer = net.client("dc1")
    for i in range(2):
        producer.send("work", f"w{i}")
    net.pump()
    txn = client.declare()
    taken = client.take("work", 2)
    assert len(taken) == 2
    for delivery_id, _ in taken:
        client.settle(delivery_id, txn=txn)
    client.send("orders", "o", txn=txn)
    client.send("invoices", "i", txn=txn)
    net.pump()
    assert net.depth("dc1", "work") == 2  # acquired, not yet acknowledged
    assert (net.depth("dc1", "orders"), net.depth("dc1", "invoices")) == (0, 0)
    other = net.client("dc1")
    assert other.take("work", 10) == []  # nobody else gets what the transaction acquired
    assert isinstance(client.discharge(txn), Accepted)
    counts = [net.depth("dc1", q) for q in ("work", "orders", "invoices")]
    assert counts == [0, 1, 1]
    restarted(net)
    assert [net.depth("dc1", q) for q in ("work", "orders", "invoices")] == [0, 1, 1]


def test_a_rollback_gives_acquired_messages_back_with_their_delivery_count(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    producer = net.client("dc1")
    for i in range(3):
        producer.send("work", f"w{i}")
    net.pump()
    txn = client.declare()
    taken = client.take("work", 3)
    for delivery_id, _ in taken:
        client.settle(delivery_id, txn=txn)
    assert isinstance(client.discharge(txn, fail=True), Accepted)
    assert net.depth("dc1", "work") == 3
    client.conn.flow(client.receivers["work"], credit=0)
    again = net.client("dc1").take("work", 3)
    assert [body(p) for _, p in again] == [body(p) for _, p in taken] == ["w0", "w1", "w2"]
    assert [delivery_count(p) for _, p in again] == [1, 1, 1]  # in order, one delivery more each
    restarted(net)  # the count was journalled
    after = net.client("dc1").take("work", 3)
    assert [delivery_count(p) for _, p in after] == [1, 1, 1]


def test_an_unsettled_transactional_acknowledgement_stays_with_its_consumer_on_rollback(
    tmp_path: Path,
) -> None:
    net, client = one_broker(tmp_path)
    net.client("dc1").send("work", "w")
    net.pump()
    first = client.declare()
    [(delivery_id, _)] = client.take("work", 1)
    client.settle(delivery_id, txn=first, settled=False)
    settled, state = client.sent_states[delivery_id]  # said back, unsettled, as Artemis does
    assert not settled and isinstance(state, TransactionalState) and state.txn_id == first
    assert isinstance(client.discharge(first, fail=True), Accepted)
    assert net.depth("dc1", "work") == 1
    assert net.client("dc1").take("work", 5) == []  # still acquired by its consumer
    second = client.declare()
    client.settle(delivery_id, txn=second, settled=False)
    assert isinstance(client.discharge(second), Accepted)
    assert client.sent_states[delivery_id][0]  # settled once the commit was confirmed
    assert net.depth("dc1", "work") == 0


def test_unknown_transactions_are_refused(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    assert condition(client.discharge(b"nope")) == "amqp:transaction:unknown-id"
    txn = client.declare()
    assert isinstance(client.discharge(txn), Accepted)
    assert condition(client.discharge(txn)) == "amqp:transaction:unknown-id"  # discharged already
    sent = client.send("orders", "m", txn=txn)
    net.pump()
    assert client.rejected(sent) == "amqp:transaction:unknown-id"
    assert net.depth("dc1", "orders") == 0
    net.client("dc1").send("work", "w")
    net.pump()
    [(delivery_id, _)] = client.take("work", 1)
    client.settle(delivery_id, txn=b"nope")
    assert ("amqp:transaction:unknown-id", "unknown transaction 6e6f7065") in client.refusals
    assert net.client("dc1").take("work", 1) != []  # the consumer was detached: the message came back


def test_a_duplicate_in_a_transaction_rolls_the_whole_transaction_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="broker.transactions")
    net, client = one_broker(tmp_path)
    txn = client.declare()
    client.send("orders", "a", properties={DUP: "batch-1/a"}, txn=txn)
    client.send("orders", "b", properties={DUP: "batch-1/b"}, txn=txn)
    assert isinstance(client.discharge(txn), Accepted)
    net.client("dc1").send("work", "w")
    net.pump()
    retry = client.declare()  # the retried transaction: a new message and one already stored
    [(delivery_id, _)] = client.take("work", 1)
    client.settle(delivery_id, txn=retry)
    client.send("orders", "c", properties={DUP: "batch-1/c"}, txn=retry)
    client.send("orders", "b", properties={DUP: "batch-1/b"}, txn=retry)
    answer = client.discharge(retry)
    assert condition(answer) == "amqp:transaction:rollback"
    assert isinstance(answer, Rejected) and answer.error is not None
    assert "Duplicate message detected" in str(answer.error.description)
    assert "AMQ222059" in caplog.text and "AMQ951130" in caplog.text
    stats = net.server("dc1").stats
    assert (stats.transactions_declared, stats.transactions_committed, stats.transactions_rolled_back) == (
        2,
        1,
        1,
    )
    assert net.depth("dc1", "orders") == 2
    assert net.depth("dc1", "work") == 1  # its acknowledgement was rolled back too
    client.send("orders", "c", properties={DUP: "batch-1/c"})  # its id was never stored
    net.pump()
    assert net.depth("dc1", "orders") == 3


def test_a_transaction_left_open_by_a_lost_connection_rolls_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="broker.transactions")
    net, client = one_broker(tmp_path)
    net.client("dc1").send("work", "w")
    net.pump()
    txn = client.declare()
    [(delivery_id, _)] = client.take("work", 1)
    client.settle(delivery_id, txn=txn)
    client.send("orders", "o", txn=txn)
    net.pump()
    assert client.transport is not None
    client.transport.close()
    net.pump()
    assert net.depth("dc1", "orders") == 0
    [(_, payload)] = net.client("dc1").take("work", 1)
    assert delivery_count(payload) == 1
    assert net.server("dc1").budget.bytes < 5000  # the work message only: the held send is gone
    assert "AMQ951131: 1 transaction(s)" in caplog.text


def test_a_coordinator_link_detached_rolls_its_transactions_back(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    net.client("dc1").send("work", "w")
    net.pump()
    txn = client.declare()
    [(delivery_id, _)] = client.take("work", 1)
    client.settle(delivery_id, txn=txn)
    client.send("orders", "o", txn=txn)
    net.pump()
    client.conn.detach(client.senders.pop("$coordinator"))
    client._write()
    net.pump()
    assert net.client("dc1").take("work", 1) != []  # what it acquired is back for others
    assert condition(client.discharge(txn)) == "amqp:transaction:unknown-id"  # on a new coordinator link
    assert net.depth("dc1", "orders") == 0


def test_a_refused_send_dooms_its_transaction(tmp_path: Path) -> None:
    full = (
        '<address-setting match="orders"><max-size-messages>1</max-size-messages>'
        "<address-full-policy>FAIL</address-full-policy></address-setting>"
    )
    net, client = one_broker(tmp_path, settings=full)
    client.send("orders", "fills it")
    net.pump()
    txn = client.declare()
    kept = client.send("invoices", "i", txn=txn)
    refused = client.send("orders", "o", txn=txn)
    net.pump()
    assert isinstance(client.outcomes[kept], TransactionalState)
    assert client.rejected(refused) == "amqp:resource-limit-exceeded"
    answer = client.discharge(txn)
    assert condition(answer) == "amqp:transaction:rollback"
    assert net.depth("dc1", "invoices") == 0


def test_a_commit_is_accepted_only_once_its_batch_is_on_disk(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    watcher = net.client("dc1")
    watcher.take("orders", 5)
    txn = client.declare()
    client.send("orders", "o", txn=txn)
    net.pump()
    net.hold_disk()
    assert client.discharge(txn) is None  # not answered while the write is not confirmed
    assert watcher.received == {}  # and not visible to consumers either
    net.release_disk()
    assert isinstance(client.outcomes[max(client.outcomes)], Accepted)
    assert len(watcher.received.get("recv-orders", [])) == 1


def test_a_released_outcome_in_a_transaction_applies_at_commit(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    net.client("dc1").send("work", "w")
    net.pump()
    txn = client.declare()
    [(delivery_id, _)] = client.take("work", 1)
    client.settle(delivery_id, Released(), txn=txn)
    other = net.client("dc1")
    assert other.take("work", 1) == []
    assert isinstance(client.discharge(txn), Accepted)
    [(_, payload)] = other.received.pop("recv-work")
    assert delivery_count(payload) == 0  # released: back without a delivery counted


def test_a_committed_transaction_is_mirrored_as_its_events_and_a_rolled_back_one_not_at_all(
    tmp_path: Path,
) -> None:
    net = Network(tmp_path)
    net.broker("dc1", persistence=True, mirror_to="dc2", addresses=ADDRESSES)
    net.broker("dc2", persistence=True, addresses=ADDRESSES)
    net.start_all()
    producer = net.client("dc1")
    producer.send("work", "w1")
    producer.send("work", "w2")
    net.pump()
    assert net.depth("dc2", "work") == 2
    client = net.client("dc1")
    txn = client.declare()
    taken = client.take("work", 2)
    client.settle(taken[0][0], txn=txn)
    client.send("orders", "o", txn=txn)
    net.pump()
    assert (net.depth("dc2", "orders"), net.depth("dc2", "work")) == (0, 2)  # nothing before the commit
    assert isinstance(client.discharge(txn), Accepted)
    net.pump()
    assert (net.depth("dc2", "orders"), net.depth("dc2", "work")) == (1, 1)
    doomed = client.declare()
    client.settle(taken[1][0], txn=doomed)
    client.send("orders", "never", txn=doomed)
    assert isinstance(client.discharge(doomed, fail=True), Accepted)
    net.pump()
    assert (net.depth("dc2", "orders"), net.depth("dc2", "work")) == (1, 1)
    assert (net.depth("dc1", "orders"), net.depth("dc1", "work")) == (1, 1)


def test_a_discharge_is_decoded_or_refused(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    link = client._controller()
    client.tag += 1
    from broker_core.message import build_message

    bad = client.conn.send_delivery(link, b"x", build_message("not a control"), False)
    client._write()
    net.pump()
    assert client.rejected(bad) == "amqp:decode-error"
    txn = client.declare()
    assert isinstance(client.control(Discharge(txn, False)), Accepted)


def test_messages_acquired_in_a_transaction_go_back_if_it_rolls_back(tmp_path: Path) -> None:
    """Transactional acquisition (part 4.4.3): a receiver's flow names a transaction; what it is sent then
    carries that transaction's state, and comes back to the queue if the transaction rolls back."""
    net, client = one_broker(tmp_path)
    producer = net.client("dc1")
    for i in range(3):
        producer.send("work", f"w{i}")
    net.pump()
    first = client.declare()
    taken = client.take("work", 2, txn=first)
    assert len(taken) == 2
    for delivery_id, _ in taken:
        state = client.received_states[delivery_id]
        assert isinstance(state, TransactionalState) and state.txn_id == first
    other = net.client("dc1")
    assert len(other.take("work", 5)) == 1  # the third one only: the two are acquired
    assert isinstance(client.discharge(first, fail=True), Accepted)
    back = other.received.pop("recv-work", [])
    assert [body(p) for _, p in back] == ["w0", "w1"] and [delivery_count(p) for _, p in back] == [1, 1]


def test_messages_acquired_and_accepted_in_one_transaction_go_at_its_commit(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    net.client("dc1").send("work", "w")
    net.pump()
    txn = client.declare()
    [(delivery_id, _)] = client.take("work", 1, txn=txn)
    client.settle(delivery_id, txn=txn)
    assert net.depth("dc1", "work") == 1
    assert isinstance(client.discharge(txn), Accepted)
    assert net.depth("dc1", "work") == 0
    net.client("dc1").send("work", "after")
    net.pump()
    [(later, _)] = client.take("work", 1)  # a flow without the transaction: acquisition as usual again
    assert later not in client.received_states


def test_an_acquisition_in_an_unknown_transaction_detaches_the_consumer(tmp_path: Path) -> None:
    net, client = one_broker(tmp_path)
    net.client("dc1").send("work", "w")
    net.pump()
    assert client.take("work", 1, txn=b"nope") == []
    assert any(c == "amqp:transaction:unknown-id" for c, _ in client.refusals)
    assert net.client("dc1").take("work", 1) != []
