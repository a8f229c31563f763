"""DR reconciliation of an Artemis side with a transaction open at the crash.

Unlike ours, Artemis journals a transaction's work as it happens (`AddRecordTX`, `UpdateTX`) and its
commit as a record of its own. A real Artemis is killed (-9) with one transaction committed and one
open (two sends and an acknowledgement in it); its own `artemis data print` shows the open one's
records in the journal, with no commit. Its `artemis data exp`, which reconciliation reads
(`spark_dr/artemis_export.py`), holds the committed transaction's messages and the message the open
one acknowledged, and nothing the open one sent: reconciliation sees the transaction as never done.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from proton import Message

from connections.failover import FailoverConnection, FailoverTransaction
from spark_dr.artemis_export import Exported, export_rows, read_export
from spark_dr.rows import COLUMN_NAMES
from tests.artemis.support import artemis, config
from tests.peers.ports import free_port

pytestmark = [pytest.mark.usefixtures("artemis_available"), pytest.mark.timeout(180)]


def message(n: str) -> Message:
    return Message(body=n, durable=True, properties={"n": n})


def test_an_artemis_export_holds_nothing_of_a_transaction_open_at_the_crash(tmp_path: Path) -> None:
    port = free_port()
    a = artemis(tmp_path / "artemis", port, config(port)).start()
    try:
        with FailoverConnection(f"failover:({a.url})") as conn:
            plain = conn.sender("orders")
            plain.send(message("before"))
            tx = FailoverTransaction(conn)
            tx.send(plain, message("c1"))
            tx.send(plain, message("c2"))
            tx.commit()
            inbox = conn.receiver("orders", credit=1)
            assert inbox.receive(timeout=10).properties["n"] == "before"
            tx.accept(inbox)  # acknowledged in the open transaction
            tx.send(plain, message("o1"))
            tx.send(plain, message("o2"))
            # a durable send outside it: Artemis's journal is written in order, so once this one is
            # synced, the open transaction's records are on disk too
            with FailoverConnection(f"failover:({a.url})") as other:
                other.sender("orders").send(message("fence"))
            a.kill()
    finally:
        a.kill()

    journal = a.print_journal()
    open_sends = re.findall(r"operation@AddRecordTX;txID=(\d+),.*applicationProperties=\{n=(o\d)\}", journal)
    assert [n for _, n in open_sends] == ["o1", "o2"], "the open transaction never reached Artemis's journal"
    txid = open_sends[0][0]
    assert f"operation@Commit;txID={txid}," not in journal
    assert f"operation@Rollback;txID={txid}," not in journal

    export = a.export(tmp_path / "artemis.xml")
    held = sorted(e.properties["n"][1] for e in read_export(export) if isinstance(e, Exported))
    assert held == ["before", "c1", "c2", "fence"]
    event, queues = COLUMN_NAMES.index("event"), COLUMN_NAMES.index("queues")
    sends = [r for r in export_rows(export, "artemis-node") if r[event] == "send" and "orders" in r[queues]]
    assert len(sends) == 4  # the rows reconciliation compares: nothing of o1 and o2
