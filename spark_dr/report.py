"""The operator's report of a reconciliation: a one-screen console summary, JSON, and HTML
(``report_html``). It leads to the next step: the verdict, what a repair will do on the survivor queue by
queue, and the exact command to run.

Words, not codes: each class on each side has a label (``label``), the same in the console, the HTML and
their column heads; a missing value is shown as "-", never as Python's None.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

from .plan import settled_how
from .transforms import CLASSES

MAX_ADDRESS_LINES = 12  # keeps the console summary on one screen
MAX_QUEUE_LINES = 8


def label(cls: str, side: str | None = None) -> str:
    """What a class (on a side, for the classes that have one) means to an operator."""
    where = {
        "one_side_only": "only on {}",
        "acked_one_side": "settled on {} only",
        "orphan_ack": "orphan ack on {}",
        "not_mirrored": "not mirrored, on {}",
    }
    if side and cls in where:
        return where[cls].format(side)
    return _TOTALS[cls]


def what_happened(d: dict[str, Any], names: list[str]) -> str:
    """A diverged reference's class in words, saying how a reference settled on one side only was
    settled there: consumed, dead-lettered, expired, replaced, or "settled" (compacted: not known)."""
    if d["class"] == "acked_one_side" and d["side"]:
        prefix = "dc1_" if d["side"] == names[0] else "dc2_"
        return f"{settled_how(d, prefix)} on {d['side']} only"
    return label(d["class"], d["side"])


def settled_counts(result: dict[str, Any]) -> dict[str, Counter[str]]:
    """Per side, how its references settled on it only were settled (``what_happened``)."""
    names = result["names"]
    out: dict[str, Counter[str]] = {}
    for d in result["diverged"]:
        if d["class"] == "acked_one_side" and d["side"]:
            prefix = "dc1_" if d["side"] == names[0] else "dc2_"
            out.setdefault(d["side"], Counter())[settled_how(d, prefix)] += 1
    return out


_TOTALS = {
    "in_sync": "in sync",
    "one_side_only": "only on one side",
    "acked_one_side": "settled on one side only",
    "consumed_both": "consumed on both",
    "payload_differs": "payload differs",
    "orphan_ack": "orphan acks",
    "not_mirrored": "not mirrored",
}


def fmt_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def cell(value: Any) -> str:
    """A value for a table: "-" for a missing one."""
    return "-" if value is None else str(value)


def pivot(result: dict[str, Any]) -> dict[str, dict[tuple[str, str | None], int]]:
    """address -> (class, side) -> count."""
    table: dict[str, dict[tuple[str, str | None], int]] = {}
    for row in result["by_address"]:
        cells = table.setdefault(row["address"] or "-", {})
        key = (row["class"], row["side"])
        cells[key] = cells.get(key, 0) + row["count"]
    return table


def columns(table: dict[str, dict[tuple[str, str | None], int]]) -> list[tuple[str, str | None]]:
    """The (class, side) pairs present, in the classes' order."""
    present = {k for cells in table.values() for k in cells}
    return sorted(present, key=lambda k: (CLASSES.index(k[0]), k[1] or ""))


def repair_command(plan: Path, broker: str | None, result: dict[str, Any]) -> str:
    """The command that applies the plan to the survivor (its URL as the operator gave it, else a
    placeholder to fill in)."""
    url = broker or f"amqp://<{result['survivor']} host>:<port>"
    return f"amqp-mirror repair --plan {shlex.quote(str(plan))} --broker {shlex.quote(url)}"


def timing_line(result: dict[str, Any]) -> str:
    t = result.get("timing")
    if not t:
        return f"reconciliation {result.get('seconds', 0):.1f} s"
    parts = [f"Spark start-up {t['spark_start_s']:.1f} s"]
    if t.get("export_s"):
        parts.append(f"journal export {t['export_s']:.1f} s, during the start-up")
    parts.append(f"reconciliation {t['reconcile_s']:.1f} s")
    return f"{t['wall_s']:.1f} s in all ({'; '.join(parts)})"


def console_summary(result: dict[str, Any]) -> str:
    names = result["names"]
    lines = [
        f"DR reconciliation {names[0]} vs {names[1]}: {result['total']} message references, "
        f"survivor {result['survivor']}",
        f"  took {timing_line(result)}",
        "  " + ", ".join(_class_counts(result)),
    ]
    lines += _address_table(result)
    for side, how in sorted(settled_counts(result).items()):
        said = ", ".join(f"{n} {h}" for h, n in sorted(how.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"  settled on {side} only: {said}")
    window = result["window"]
    lines.append(
        f"  divergence window (first to last divergent event): {fmt_time(window.get('first_ms'))} .. "
        f"{fmt_time(window.get('last_ms'))}"
    )
    for name, info in result["sides"].items():
        lines.append(
            f"  {name} {info['node_id'][:8]}: {info['records']} records, last {fmt_time(info['last_ms'])}; "
            f"recovery-point gap {info['recovery_point_gap_ms'] / 1000:.3f} s "
            f"({info['unmirrored_messages']} messages, {info['unmirrored_events']} events not mirrored)"
        )
    lines += next_step(result)
    return "\n".join(lines)


def _class_counts(result: dict[str, Any]) -> list[str]:
    counts = result["counts"]  # what the mirror does not carry, only when there is some
    out = [
        f"{label(cls)}: {counts.get(cls, 0)}" for cls in CLASSES if cls != "not_mirrored" or counts.get(cls)
    ]
    copies = sum(result.get("repaired", {}).values())
    if copies:
        out[0] += f" (of which {copies} repaired copies)"
    return out


def _address_table(result: dict[str, Any]) -> list[str]:
    table = pivot(result)
    cols = columns(table)
    heads = [label(c, s) for c, s in cols]
    width = max([len(a) for a in table] + [len("address")])
    lines = ["  " + "address".ljust(width) + "".join(f"  {h:>{max(len(h), 6)}}" for h in heads)]
    for address in sorted(table)[:MAX_ADDRESS_LINES]:
        cells = table[address]
        values = "".join(f"  {cells.get(c, 0):>{max(len(h), 6)}}" for c, h in zip(cols, heads, strict=True))
        lines.append("  " + address.ljust(width) + values)
    if len(table) > MAX_ADDRESS_LINES:
        lines.append(f"  ... {len(table) - MAX_ADDRESS_LINES} more addresses in the HTML and JSON reports")
    return lines


def next_step(result: dict[str, Any]) -> list[str]:
    """The verdict, and when the survivor needs a repair, what it will do and the command."""
    survivor = result["survivor"]
    repair = result.get("repair")
    if result["survivor_in_sync"]:
        return [f"  survivor {survivor}: in sync; nothing to repair", *_not_mirrored(result)]
    lines = [f"  survivor {survivor}: NEEDS REPAIR"]
    if repair is None:
        return lines
    lines.append(
        f"  repair will re-send {repair['resend']} and remove {repair['remove']} messages on {survivor}:"
    )
    queues = repair["queues"]
    qw = max([len(q["queue"]) for q in queues] + [len("queue")])
    aw = max([len(q["address"]) for q in queues] + [len("address")])
    lines.append(f"    {'queue'.ljust(qw)}  {'address'.ljust(aw)}  {'re-send':>7}  {'remove':>7}")
    for q in queues[:MAX_QUEUE_LINES]:
        lines.append(
            f"    {q['queue'].ljust(qw)}  {q['address'].ljust(aw)}  {q['resend']:>7}  {q['remove']:>7}"
        )
    if len(queues) > MAX_QUEUE_LINES:
        lines.append(f"    ... {len(queues) - MAX_QUEUE_LINES} more queues in the HTML report")
    if repair["duplicates_expected"] or repair["needs_decision"]:
        lines.append(
            f"  not for the repair: {repair['duplicates_expected']} delivered twice already, "
            f"{repair['needs_decision']} for you to decide (payload differs, orphan acks: the HTML report)"
        )
    lines += _not_mirrored(result)
    lines.append("  next, to repair (add --dry-run to see what it would do without changing anything):")
    lines.append(f"    {repair['command']}")
    return lines


def _not_mirrored(result: dict[str, Any]) -> list[str]:
    n = (result.get("repair") or {}).get("not_mirrored", 0)
    if not n:
        return []
    return [
        f"  not mirrored: {n} live on {result['failed']} only, where the mirror does not carry them (not a "
        "divergence, not re-sent; the repair re-sends them with --not-mirrored)"
    ]


def json_report(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1, sort_keys=True, default=str) + "\n"
