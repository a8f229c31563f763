"""Reader, export, report, plan and Pushgateway output without Spark (real journal written by Journal)."""

from __future__ import annotations

import gc
import http.server
import threading
from pathlib import Path
from typing import Any

import pytest
from proton import Message

from broker_core.journal import Journal, load_or_create_node_id
from broker_core.journal.records import (
    DeliveryCountUpdated,
    MessageAcked,
    MessageAdded,
    QueueAdded,
    QueueRemoved,
)
from broker_core.vocabulary import ANYCAST
from spark_dr.history import HISTORY
from spark_dr.identity import REPAIR_ANNOTATION, payload_digest, repair_origin
from spark_dr.payloads import read_record
from spark_dr.plan import build_plan
from spark_dr.pushgateway import exposition, write_and_push
from spark_dr.report import console_summary, repair_command
from spark_dr.report_html import html_report, plot_figure
from spark_dr.rows import COLUMN_NAMES, REMOVED_WITH_QUEUE, LiveMessages, journal_rows


def encoded(body: str, origin: str | None = None) -> bytes:
    msg = Message(body=body, durable=True, properties={"k": 1})
    if origin:
        msg.annotations = {REPAIR_ANNOTATION: origin}
    return bytes(msg.encode())


def test_rows_resolve_queues_identities_digests_and_positions(tmp_path: Path) -> None:
    node = load_or_create_node_id(tmp_path)
    with Journal(tmp_path, fsync=False) as j:
        j.open()
        j.append(QueueAdded(7, "orders", "orders", ANYCAST))
        j.append(MessageAdded(1, "orders", (7,), encoded("a"), timestamp_ms=5))
        j.append(MessageAdded(2, "orders", (7,), encoded("b"), origin_broker_id="peer", origin_message_id=9,
                              via_mirror=True))  # fmt: skip
        j.append(MessageAdded(3, "orders", (7,), encoded("c", origin="peer:40")))
        j.append(MessageAcked(7, 1, reason=1, via_mirror=True, timestamp_ms=6))
        j.flush()
    rows = [dict(zip(COLUMN_NAMES, r, strict=True)) for r in journal_rows(tmp_path)]
    sends = [r for r in rows if r["event"] == "send"]
    assert [(r["identity_broker"], r["identity_id"], r["repaired"]) for r in sends] == [
        (node, 1, False), ("peer", 9, False), ("peer", 40, True)]  # fmt: skip
    assert sends[0]["queues"] == ["orders"] and sends[0]["digest"] == payload_digest(encoded("a"))
    # the repair annotation is not part of the bare message: same digest as the original
    assert payload_digest(encoded("c", origin="peer:40")) == payload_digest(encoded("c"))
    ack = next(r for r in rows if r["event"] == "ack")
    assert (ack["queue"], ack["message_id"], ack["ack_reason"], ack["via_mirror"]) == ("orders", 1, 1, True)
    rec = read_record(tmp_path, sends[2]["segment"], sends[2]["offset"])
    assert isinstance(rec, MessageAdded) and repair_origin(rec.body) == ("peer", 40)


def test_acks_carry_the_identity_of_the_live_message_they_settle(tmp_path: Path) -> None:
    """Identity of acks and delivery counts resolved in replay order, across a compaction; an ack for a
    message not live at that point is an orphan (null identity); settled messages leave the table."""
    node = load_or_create_node_id(tmp_path)
    with Journal(tmp_path, fsync=False) as j:
        j.open()
        j.append(QueueAdded(7, "orders", "orders", ANYCAST))
        j.append(QueueAdded(8, "audit", "orders", ANYCAST))
        j.append(QueueAdded(9, "tmp", "tmp", ANYCAST))
        j.append(MessageAdded(1, "orders", (7, 8), encoded("a")))  # local, two queues
        j.append(MessageAdded(2, "orders", (7,), encoded("b"), origin_broker_id="peer", origin_message_id=9,
                              via_mirror=True))  # fmt: skip
        j.append(MessageAdded(3, "orders", (7,), encoded("c", origin="peer:40")))  # re-sent by a repair
        j.append(MessageAdded(4, "tmp", (9,), encoded("d")))
        j.append(MessageAcked(7, 1))
        j.append(DeliveryCountUpdated(7, 2, 3))
        j.flush()
        j.compact()  # live messages rewritten into a compacted generation, replayed first
        j.append(MessageAcked(8, 1, via_mirror=True))  # the last reference of message 1
        j.append(MessageAcked(8, 1))  # a second ack of a settled message: not live any more
        j.append(MessageAcked(7, 2, reason=1))
        j.append(MessageAcked(7, 3))
        j.append(MessageAcked(7, 77))  # never in this journal
        j.append(QueueRemoved(9))  # message 4's only reference dies with its queue
        j.append(MessageAcked(9, 4))
        j.flush()
    live = LiveMessages()
    rows = [dict(zip(COLUMN_NAMES, r, strict=True)) for r in journal_rows(tmp_path, live)]
    got = [(r["queue"], r["message_id"], r["identity_broker"], r["identity_id"], r["via_mirror"])
           for r in rows if r["event"] == "ack"]  # fmt: skip
    assert got == [
        ("audit", 1, node, 1, True),
        ("audit", 1, None, None, False),
        ("orders", 2, "peer", 9, False),
        ("orders", 3, "peer", 40, False),
        ("orders", 77, None, None, False),
        ("tmp", 4, node, 4, None),  # the reader's row: it died with its queue
        ("tmp", 4, None, None, False),
    ]
    (removed,) = [r for r in rows if r["event"] == "ack" and r["ack_reason"] == REMOVED_WITH_QUEUE]
    assert removed["message_id"] == 4
    counts = [
        (r["message_id"], r["identity_broker"], r["identity_id"])
        for r in rows
        if r["event"] == "delivery_count"
    ]
    assert counts == [(2, "peer", 9)]  # rewritten by the compaction, before the acks
    assert len(live) == 0 and not any(live.refs.values())


def test_the_live_table_holds_only_live_messages(tmp_path: Path) -> None:
    load_or_create_node_id(tmp_path)
    with Journal(tmp_path, fsync=False) as j:
        j.open()
        j.append(QueueAdded(1, "q", "q", ANYCAST))
        for i in range(1, 2001):
            j.append(MessageAdded(i, "q", (1,), encoded(str(i))))
            if i % 4:
                j.append(MessageAcked(1, i))
        j.flush()
    live = LiveMessages()
    peak = 0
    for row in journal_rows(tmp_path, live):
        peak = max(peak, len(live))
        if row[3] == "ack":
            assert row[7] is not None
    assert len(live) == peak == 500  # the unacknowledged quarter, never more
    assert sorted(live.entries)[:3] == [4, 8, 12]


def test_reading_pauses_the_collector_until_it_ends_or_is_abandoned(tmp_path: Path) -> None:
    load_or_create_node_id(tmp_path)
    with Journal(tmp_path, fsync=False) as j:
        j.open()
        j.append(QueueAdded(1, "q", "q", ANYCAST))
        j.append(MessageAdded(1, "q", (1,), encoded("a")))
        j.flush()
    assert gc.isenabled()
    rows = journal_rows(tmp_path)
    next(rows)
    assert not gc.isenabled(), "off while reading"
    rows.close()  # a reader abandoned half way
    assert gc.isenabled()
    records = [r for r in journal_rows(tmp_path) if r[COLUMN_NAMES.index("event")] != HISTORY]
    assert len(records) == 2 and gc.isenabled()


def test_parquet_export_has_one_row_per_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from spark_dr import export
    from spark_dr.export import export_journal

    load_or_create_node_id(tmp_path / "j")
    with Journal(tmp_path / "j", fsync=False) as j:
        j.open()
        j.append(QueueAdded(1, "q", "q", ANYCAST))
        for i in range(1, 6):
            j.append(MessageAdded(i, "q", (1,), encoded(str(i))))
        j.flush()
    stats = export_journal(tmp_path / "j", tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    events = table.column("event").to_pylist()
    assert stats["records"] == 6 and events[:6] == ["queue_create"] + ["send"] * 5
    assert set(events[6:]) == {HISTORY}  # and after the records, what the journal may have dropped
    # row groups of ROW_GROUP_ROWS records: the second pass skips groups by their message id statistics
    monkeypatch.setattr(export, "ROW_GROUP_ROWS", 4)
    export_journal(tmp_path / "j", tmp_path / "small-groups.parquet")
    assert pq.ParquetFile(tmp_path / "small-groups.parquet").metadata.num_row_groups == 2


def result() -> dict[str, Any]:
    diverged = [
        {"identity_broker": "n1", "identity_id": 3, "queue": "q", "address": "q", "class": "one_side_only",
         "side": "DC1", "dc1_status": "live", "dc2_status": "absent", "first_ms": 1000, "last_ms": 1000,
         "diverged_ms": 1000, "dc1_digest": "d", "dc1_size": 5, "dc1_segment": 1, "dc1_offset": 32,
         "dc2_digest": None, "dc2_size": None, "dc2_segment": None, "dc2_offset": None, "dc1_repaired": False,
         "dc2_repaired": None},
        {"identity_broker": "n1", "identity_id": 4, "queue": "q.sub", "address": "q",
         "class": "acked_one_side", "side": "DC1", "dc1_status": "acked", "dc2_status": "live",
         "first_ms": 900, "last_ms": 5000, "diverged_ms": 5000, "dc1_digest": "e", "dc1_size": 5,
         "dc1_segment": 1, "dc1_offset": 90,
         "dc2_digest": "e", "dc2_size": 5, "dc2_segment": 2, "dc2_offset": 40, "dc1_repaired": False,
         "dc2_repaired": False, "dc1_message_id": 11, "dc2_message_id": 17, "dc1_ack_reason": 0},
    ]  # fmt: skip
    return {
        "generated_at_ms": 1_700_000_000_000, "seconds": 1.5, "names": ["DC1", "DC2"], "survivor": "DC2",
        "failed": "DC1", "counts": {"in_sync": 4, "one_side_only": 1, "acked_one_side": 1, "consumed_both": 0,
                                    "payload_differs": 0, "orphan_ack": 0, "not_mirrored": 0},
        "total": 6, "by_address": [{"address": "q", "class": "in_sync", "side": None, "count": 4},
                                   {"address": "q", "class": "one_side_only", "side": "DC1", "count": 1},
                                   {"address": "q", "class": "acked_one_side", "side": "DC1", "count": 1}],
        "window": {"first_ms": 1000, "last_ms": 5000},
        "timeline": [{"bucket_ms": 1000, "class": "one_side_only", "count": 1},
                     {"bucket_ms": 5000, "class": "acked_one_side", "count": 1}],
        "sides": {n: {"node_id": f"{n}-node-id", "path": f"/data/{n}", "records": 9, "last_ms": 2000,
                      "unmirrored_messages": 1, "unmirrored_events": 2, "oldest_unmirrored_ms": 1000,
                      "recovery_point_gap_ms": 1000} for n in ("DC1", "DC2")},
        "repaired": {"DC1": 0, "DC2": 2},
        "survivor_in_sync": False, "diverged": diverged,
    }  # fmt: skip


def with_repair(r: dict[str, Any]) -> dict[str, Any]:
    plan = build_plan(r)
    r["repair"] = {"plan": "out/repair-plan.json", "command": repair_command(Path("out/repair-plan.json"),
                   "amqp://dc2:5672", r), "queues": plan["queues"], "resend": 1, "remove": 1,
                   "duplicates_expected": 0, "needs_decision": 0}  # fmt: skip
    r["timing"] = {"wall_s": 21.5, "spark_start_s": 9.2, "export_s": 4.1, "reconcile_s": 1.5}
    return r


def test_console_summary_says_what_to_do_next_on_one_screen() -> None:
    text = console_summary(with_repair(result()))
    assert len(text.splitlines()) <= 24 and max(map(len, text.splitlines())) <= 160
    assert "only on DC1" in text and "settled on DC1 only" in text and "NEEDS REPAIR" in text
    assert "  settled on DC1 only: 1 consumed" in text  # how: consumed, dead-lettered, expired, ...
    assert "21.5 s in all (Spark start-up 9.2 s" in text and "recovery-point gap 1.000 s" in text
    assert "in sync: 4 (of which 2 repaired copies)" in text
    assert "\n    amqp-mirror repair --plan out/repair-plan.json --broker amqp://dc2:5672" in text
    queue_lines = [line.split() for line in text.splitlines() if line.startswith("    q")]
    assert queue_lines == [
        ["queue", "address", "re-send", "remove"],
        ["q", "q", "1", "0"],
        ["q.sub", "q", "0", "1"],
    ]


def test_html_groups_references_by_action_with_a_bar_plot_and_no_none() -> None:
    page = html_report(with_repair(result()))
    assert "data:image/png;base64," in page and "None" not in page
    assert page.index("What the repair will do on DC2") < page.index("Re-send to DC2 (live on DC1 only): 1")
    assert page.index("Re-send to DC2 (live on DC1 only): 1") < page.index("Remove from DC2")
    assert "<th>settled on DC1 only</th>" in page or '<th class="n">settled on DC1 only</th>' in page
    assert "<td>consumed on DC1 only</td>" in page  # the reference's row says how
    assert "amqp-mirror repair --plan out/repair-plan.json --broker amqp://dc2:5672" in page


def test_plot_draws_bars_not_lines_across_empty_time() -> None:
    fig = plot_figure(result())
    [ax] = fig.axes
    assert list(ax.lines) == [], "a line would join 1 s and 5 s across the empty time between"
    bars = [(p.get_x(), p.get_height()) for p in ax.patches]
    assert bars == [(0.0, 1.0), (4.0, 1.0)]  # one bar per bucket that has divergence, where it is


def test_plan_names_messages_by_identity_with_their_queue_and_a_hint() -> None:
    plan = build_plan(result())
    assert plan["resend"] == [{"identity": "n1:3", "address": "q", "queue": "q", "digest": "d", "size": 5,
                               "hint": [1, 32]}]  # fmt: skip
    # and the survivor's own id, which the repair removes it by, and how DC1 settled it
    assert plan["remove"] == [
        {
            "identity": "n1:4",
            "address": "q",
            "queue": "q.sub",
            "digest": "e",
            "survivor_id": 17,
            "how": "consumed",
        }
    ]
    assert plan["not_mirrored"] == []
    assert plan["journals"]["DC1"] == "/data/DC1" and plan["nodes"]["DC2"] == "DC2-node-id"
    assert plan["kinds"] == {"DC1": "journal", "DC2": "journal"}
    assert plan["queues"] == [{"queue": "q", "address": "q", "resend": 1, "remove": 0},
                              {"queue": "q.sub", "address": "q", "resend": 0, "remove": 1}]  # fmt: skip


def test_pushgateway_text_is_written_and_put(tmp_path: Path) -> None:
    seen: list[tuple[str, str, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            seen.append((self.command, self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.handle_request)
    thread.start()
    try:
        text = write_and_push(result(), tmp_path / "m.prom", f"http://127.0.0.1:{server.server_port}")
    finally:
        thread.join(10)
        server.server_close()
    assert (tmp_path / "m.prom").read_text() == text == exposition(result())
    assert seen == [("PUT", "/metrics/job/amqp_mirror_dr/pair/DC1-DC2", text.encode())]
    assert 'amqp_mirror_dr_references{class="one_side_only"} 1' in text
    assert "amqp_mirror_dr_last_run_timestamp_seconds 1700000000.000" in text
    assert "amqp_mirror_dr_survivor_in_sync 0" in text
