"""A journal record that cannot be encoded refuses only the send whose message it was, with the reason.

Names are checked before anything is made, so such a record is a bug (a mirror origin of 65,530 bytes
once made the target's `mirror.dedup.<origin>` key one): it is dropped and logged (AMQ224016), the send
whose message it was is refused with amqp:internal-error saying why, and every other send of the same
journal batch is written and Accepted, never refused as if the disk were full.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker_core.errors import BrokerError
from broker_core.journal.journal import Journal
from broker_core.journal.records import AddressAdded, MessageAdded, MetaRecord, QueueAdded
from broker_core.persistence import Persistence
from tests.support.pair import Network

LOG = logging.getLogger("test.unencodable")
TOO_LONG = "k" * 70_000  # a meta key the journal cannot hold (its keys are short strings, u16 length)


def message(message_id: int, origin_message_id: int | None = None) -> MessageAdded:
    return MessageAdded(message_id, "orders", (1,), b"body", origin_message_id=origin_message_id)


def test_only_the_send_whose_record_cannot_be_encoded_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal(tmp_path / "journal", fsync=False)
    journal.open()
    p = Persistence(enabled=True, log=LOG)
    p.journal = journal
    p.set_scheduler(lambda: None)  # one batch, handed over when the test says
    outcomes: dict[int, object] = {}

    def send(record: MessageAdded) -> None:
        mid = record.message_id

        def refused(error: BrokerError) -> None:  # as a send's: its message is taken back
            p.rolled_back.add(mid)
            outcomes[mid] = error

        p.persist(record)
        p.confirm(lambda: outcomes.__setitem__(mid, "accepted"), on_fail=refused, message_id=mid)

    p.persist(AddressAdded(1, "orders", frozenset({"ANYCAST"})))
    p.persist(QueueAdded(1, "orders", "orders", "ANYCAST"))
    send(message(1))
    send(message(2, origin_message_id=-1))  # an origin id journalled unsigned: it cannot be encoded
    p.persist(MetaRecord(TOO_LONG, b"1"))  # a fact of no send's: dropped, nobody refused for it
    send(message(3))
    p.confirm(lambda: outcomes.__setitem__(0, "accepted"))  # work without a send (an ack)
    p.flush()
    journal.flush()
    assert outcomes[1] == outcomes[3] == outcomes[0] == "accepted"
    refused = outcomes[2]
    assert isinstance(refused, BrokerError) and refused.condition == "amqp:internal-error"
    assert refused.description.startswith("the message could not be stored: its journal record cannot be")
    assert "disk" not in refused.description
    assert [r.getMessage()[:10] for r in caplog.records if r.levelno == logging.ERROR] == ["AMQ224016:"] * 2
    assert not p.rolled_back, "a refused message's id is forgotten once its batch is written"
    journal.close()
    again = Journal(tmp_path / "journal", fsync=False)
    recovered = again.open()
    again.close()
    assert sorted(recovered.messages) == [1, 3] and TOO_LONG not in recovered.meta


def test_client_sends_beside_an_unencodable_record_of_the_broker_are_accepted(tmp_path: Path) -> None:
    """The symptom once seen: sends refused as if the disk were full, for a record not theirs."""
    net = Network(tmp_path)
    net.broker("dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    persistence = net.server("dc1").persistence
    added: list[int] = []

    def with_the_sends() -> None:  # the broker's bad record joins the batch that holds the sends
        if persistence.pending_records() and not added:
            added.append(persistence.pending_records())
            persistence.persist_now(MetaRecord(TOO_LONG, b"1"))

    persistence.on_batch(with_the_sends)
    sends = [client.send("orders", f"m{i}") for i in range(3)]
    net.pump()
    assert len(added) == 1 and added[0] >= 3, "the sends and the bad record were not one batch"
    assert all(client.accepted(d) for d in sends), [client.rejected(d) for d in sends]
    assert net.depth("dc1", "orders") == 3
    net.stop("dc1")
    net.broker("dc1", persistence=True)
    net.start("dc1")
    assert net.depth("dc1", "orders") == 3
