"""When a side's missing record means "never had it" (``spark_dr.history``): what the journal reader says
a journal may have dropped (compaction, deleted page files), read from real journals of brokers joined
in memory, and the rule that turns it, the dedup marks and the other side's record into a status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker_core.journal import Journal
from spark_dr.history import (
    COMPACTED_FIRST,
    COMPACTED_LAST,
    HISTORY,
    QUEUE,
    VERSION,
    SideHistory,
    lost_key,
    missing_status,
    never_carried,
)
from spark_dr.rows import COLUMN_NAMES, journal_rows, read_node_id
from tests.support.paging import drain, settings
from tests.support.pair import Network

META_KEY, META_VALUE = COLUMN_NAMES.index("meta_key"), COLUMN_NAMES.index("meta_value")
EVENT = COLUMN_NAMES.index("event")


def history_of(journal: Path) -> dict[str, int]:
    rows = list(journal_rows(journal))
    facts = {r[META_KEY]: int(r[META_VALUE]) for r in rows if r[EVENT] == HISTORY}
    assert all(r[EVENT] == HISTORY for r in rows[len(rows) - len(facts) :]), "history rows come last"
    return facts


@pytest.fixture
def net(tmp_path: Path) -> Network:
    return Network(tmp_path)


def test_a_journal_that_never_dropped_anything_says_so(net: Network) -> None:
    net.broker("dc1", persistence=True)
    net.start_all()
    client = net.client("dc1")
    for i in range(5):
        client.send("orders", f"m{i}")
    net.pump()
    assert len(client.receive("orders", 3)) == 3
    net.stop("dc1")
    facts = history_of(net.home / "dc1" / "journal")
    assert facts[VERSION] == 1 and facts[QUEUE + "orders"] == 1
    assert not any(k.startswith("lost|") for k in facts) and COMPACTED_FIRST not in facts


def test_a_deleted_page_loses_its_queues_messages_up_to_when_it_was_removed(net: Network) -> None:
    net.broker("dc1", persistence=True, settings=settings())
    net.start_all()
    client = net.client("dc1")
    for i in range(200):
        client.send("orders", f"m{i:03d}-" + "x" * 100)
    net.pump()
    top = net.server("dc1").persistence.next_message_id - 1
    assert len(drain(client, "orders")) == 200  # every page consumed, so deleted
    net.stop("dc1")
    journal = net.home / "dc1" / "journal"
    node = read_node_id(journal)
    facts = history_of(journal)
    assert facts[lost_key(node, "orders")] >= top  # every message of those pages may be gone
    assert lost_key(node, "") not in facts  # nothing else: no compaction


def test_compaction_loses_what_was_settled_before_it(net: Network) -> None:
    net.broker("dc1", persistence=True, mirror_to="dc2")
    net.broker("dc2", persistence=True, mirror_to="dc1")
    net.start_all()
    c1, c2 = net.client("dc1"), net.client("dc2")
    for i in range(6):
        c1.send("orders", f"a{i}")
    net.pump()
    assert len(c2.receive("orders", 4)) == 4  # consumed on DC2, the acks mirrored
    dc1_top = net.server("dc1").persistence.next_message_id - 1
    net.stop("dc2")
    journal = net.home / "dc2" / "journal"
    with Journal(journal, fsync=False) as j:
        j.open()
        j.compact()
    facts = history_of(journal)
    assert COMPACTED_FIRST in facts and COMPACTED_LAST in facts
    dc1 = read_node_id(net.home / "dc1" / "journal")
    assert facts[lost_key(dc1, "")] >= 6  # DC1's messages DC2 had heard of when it compacted
    assert facts[lost_key(dc1, "")] <= dc1_top
    assert lost_key(read_node_id(journal), "") in facts


# ------------------------------------------------------------------------------------------ the rule

N1, N2 = "node-one", "node-two"
EXACT = SideHistory(known=True, queues={"orders", "news.eu"}, lost={(N1, ""): 100, (N1, "news.eu"): 500})


@pytest.mark.parametrize(
    ("history", "mark", "ident", "queue", "carried", "want"),
    [
        # no history (an export of an earlier version): the mark and production, as before
        (SideHistory(), 50, 40, "orders", False, "gone"),
        (SideHistory(), 50, 60, "orders", False, "absent"),
        (SideHistory(), None, 60, "orders", True, "unmirrored"),  # the holder's record: never carried
        # above every horizon: never had it, whatever the mark
        (EXACT, 10_000, 101, "orders", False, "absent"),
        # at or below a horizon: the mark (a queue's own horizon from a deleted page counts for it only)
        (EXACT, 10_000, 100, "orders", False, "gone"),
        (EXACT, 10_000, 400, "news.eu", False, "gone"),
        (EXACT, 10_000, 400, "orders", False, "absent"),
        (EXACT, 50, 60, "orders", False, "absent"),  # below the horizon, above the mark
        # the holder's own record the mirror never carried: whatever the mark
        (EXACT, 10_000, 60, "orders", True, "unmirrored"),
        # a queue the side never had
        (EXACT, 10_000, 60, "news.us", False, "unmirrored"),
    ],
)
def test_the_status_of_a_missing_reference(
    history: SideHistory, mark: int | None, ident: int, queue: str, carried: bool, want: str
) -> None:
    assert missing_status(history, N2, mark, N1, ident, queue, carried) == want


def test_a_side_had_what_it_produced_only_where_it_may_have_dropped_it() -> None:
    h = SideHistory(known=True, queues={"orders", "Expired"}, lost={(N2, ""): 30})
    assert missing_status(h, N2, None, N2, 20, "orders", False) == "gone"  # compacted away
    assert missing_status(h, N2, None, N2, 40, "Expired", False) == "absent"  # e.g. never expired here
    assert missing_status(h, N2, None, N2, 20, "Expired", True) == "unmirrored"  # the other's expiry copy


@pytest.mark.parametrize(
    ("segment", "via_mirror", "queued", "want"),
    [
        (9, False, False, True),
        (9, True, False, False),
        (9, False, True, False),
        (5, False, False, False),
        (None, False, False, False),
    ],
)
def test_a_record_the_mirror_never_carried(segment: Any, via_mirror: bool, queued: bool, want: bool) -> None:
    h = SideHistory(known=True, compacted=(4, 6))  # a record at 5 is in the compacted generation: trimmed
    assert never_carried(h.trimmed(segment), via_mirror, queued) is want
    assert never_carried(SideHistory().trimmed(9), via_mirror, queued) is False  # no history: never said
