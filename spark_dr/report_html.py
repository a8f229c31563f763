"""The HTML report: the verdict and the next step first, then what a repair will do per queue, the counts
per address, the divergence over time, and every diverged reference grouped by what is to be done
about it (re-send, remove, delivered twice, for the operator to decide, nothing to do on the survivor).
"""

from __future__ import annotations

import base64
import html
import io
import itertools
from collections.abc import Callable
from typing import Any

from .report import cell, columns, fmt_time, label, pivot, timing_line, what_happened
from .transforms import CLASSES

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:80em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}h3{font-size:1em}
table{border-collapse:collapse;margin:.4em 0 1em}
th{background:#eef;text-align:left;padding:3px 8px;border-bottom:2px solid #99a}
td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#f7f7fb}
.verdict{font-size:1.1em;font-weight:bold}.bad{color:#a00}.good{color:#070}
pre{background:#f4f4f4;padding:.6em;overflow-x:auto}
.note{color:#555}
"""


def _table(headers: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()

    def cls(i: int) -> str:
        return ' class="n"' if i in numeric else ""

    head = "".join(f"<th{cls(i)}>{html.escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(i)}>{html.escape(cell(c))}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_report(result: dict[str, Any], max_rows: int = 500) -> str:
    names = result["names"]
    title = f"DR reconciliation: {names[0]} vs {names[1]}"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *_verdict(result),
        *_repair_section(result),
        "<h2>Message references per address</h2>",
        _address_table(result),
        "<h2>Divergence over time</h2>",
        _plot(result),
        "<h2>Diverged references, by what is to be done</h2>",
        *_groups(result, max_rows),
        "<h2>Sides and recovery-point gap</h2>",
        _sides(result),
        "</body></html>",
    ]
    return "\n".join(parts)


def _verdict(result: dict[str, Any]) -> list[str]:
    ok = result["survivor_in_sync"]
    verdict = "in sync: nothing to repair" if ok else "NEEDS REPAIR"
    window = result["window"]
    copies = sum(result.get("repaired", {}).values())
    survivor = html.escape(result["survivor"])
    return [
        f"<p class='verdict {'good' if ok else 'bad'}'>Survivor {survivor}: {verdict}</p>",
        f"<p>{result['total']} message references; {html.escape(timing_line(result))}.</p>",
        f"<p>Divergence window, from the first to the last divergent event: "
        f"{fmt_time(window.get('first_ms'))} .. {fmt_time(window.get('last_ms'))}.</p>",
        f"<p>{copies} repaired copies (sent by amqp-mirror repair) counted as the messages they copy.</p>"
        if copies
        else "",
    ]


def _repair_section(result: dict[str, Any]) -> list[str]:
    repair = result.get("repair")
    if result["survivor_in_sync"] or repair is None:
        return []
    rows = [[q["queue"], q["address"], q["resend"], q["remove"]] for q in repair["queues"]]
    rows.append(["all queues", "", repair["resend"], repair["remove"]])
    return [
        f"<h2>What the repair will do on {html.escape(result['survivor'])}</h2>",
        _table(["queue", "address", "re-send", "remove"], rows, numeric={2, 3}),
        "<p>Run (with <code>--dry-run</code> first to see what it would do without changing anything):</p>",
        f"<pre>{html.escape(repair['command'])}</pre>",
        f"<p class='note'>Not for the repair: {repair['duplicates_expected']} messages were delivered on "
        f"both sides already; {repair['needs_decision']} are for you to decide (below).</p>",
    ]


def _address_table(result: dict[str, Any]) -> str:
    table = pivot(result)
    cols = columns(table)
    rows = [[a, *[table[a].get(c, 0) for c in cols]] for a in sorted(table)]
    return _table(["address", *[label(c, s) for c, s in cols]], rows, numeric=set(range(1, len(cols) + 1)))


def _plot(result: dict[str, Any]) -> str:
    png = plot_png(result)
    if png is None:
        return "<p>No divergence to plot.</p>"
    data = base64.b64encode(png).decode()
    return f'<img alt="diverged references per time bucket and class" src="data:image/png;base64,{data}">'


def plot_png(result: dict[str, Any]) -> bytes | None:
    """``plot_figure`` as PNG; None when nothing diverged."""
    fig = plot_figure(result)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def plot_figure(result: dict[str, Any]) -> Any:
    """Diverged references per time bucket (of their divergent event), stacked by class: bars, so
    nothing is drawn across a stretch of time with no divergence. None when nothing diverged."""
    if not result["timeline"]:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["timeline"]
    start = min(r["bucket_ms"] for r in rows)
    buckets = sorted({r["bucket_ms"] for r in rows})
    width = min([(b - a) / 1000 for a, b in itertools.pairwise(buckets)], default=1.0)
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=90)
    bottom: dict[int, int] = {}
    for cls in CLASSES:
        points = [(r["bucket_ms"], r["count"]) for r in rows if r["class"] == cls]
        if not points:
            continue
        xs = [(t - start) / 1000 for t, _ in points]
        ax.bar(xs, [n for _, n in points], width=width * 0.9, align="edge",
               bottom=[bottom.get(t, 0) for t, _ in points], label=label(cls))  # fmt: skip
        for t, n in points:
            bottom[t] = bottom.get(t, 0) + n
    ax.set_xlabel(f"seconds after {fmt_time(start)}")
    ax.set_ylabel("diverged references")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


_ONE_SIDE = ("one_side_only", "acked_one_side", "not_mirrored")


def _groups(result: dict[str, Any], max_rows: int) -> list[str]:
    survivor, failed = result["survivor"], result["failed"]
    groups: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
        (f"Re-send to {survivor} (live on {failed} only)",
         lambda d: d["class"] == "one_side_only" and d["side"] == failed),
        (f"Remove from {survivor} (settled on {failed}, still live on {survivor}: moved to {survivor}'s "
         f"dead-letter address when {failed} consumed it, deleted when {failed} dead-lettered or expired "
         "it, its own copy of it being re-sent)",
         lambda d: d["class"] == "acked_one_side" and d["side"] == failed),
        (f"Not mirrored (live on {failed} only, where the mirror does not carry it: an address its filter "
         f"excludes, a message from before the mirror, a queue {survivor} does not have; not re-sent, "
         "unless the repair is given --not-mirrored)",
         lambda d: d["class"] == "not_mirrored" and d["side"] == failed),
        ("Delivered twice (consumed on both sides; nothing to undo)",
         lambda d: d["class"] == "consumed_both"),
        ("For you to decide (payload differs, orphan acknowledgements)",
         lambda d: d["class"] in ("payload_differs", "orphan_ack")),
        (f"Nothing to do on {survivor} ({failed}'s copy is stale: rebuild {failed} from {survivor})",
         lambda d: d["class"] in _ONE_SIDE and d["side"] == survivor),
    ]  # fmt: skip
    names = result["names"]
    heads = ["message (origin:id)", "address", "queue", "what happened", "divergent event",
             f"on {names[0]}", f"on {names[1]}", "repaired copy"]  # fmt: skip
    out = []
    for title, wanted in groups:
        rows = [d for d in result["diverged"] if wanted(d)]
        out.append(f"<h3>{html.escape(title)}: {len(rows)}</h3>")
        if not rows:
            continue
        shown = [_reference_row(d, names) for d in rows[:max_rows]]
        out.append(_table(heads, shown))
        if len(rows) > max_rows:
            out.append(f"<p class='note'>... {len(rows) - max_rows} more in reconciliation.json</p>")
    return out


def _reference_row(d: dict[str, Any], names: list[str]) -> list[Any]:
    repaired = "yes" if d.get("dc1_repaired") or d.get("dc2_repaired") else ""
    what = what_happened(d, names)
    return [f"{d['identity_broker']}:{d['identity_id']}", d["address"], d["queue"], what,
            fmt_time(d.get("diverged_ms")), d["dc1_status"], d["dc2_status"], repaired]  # fmt: skip


def _sides(result: dict[str, Any]) -> str:
    copies = result.get("repaired", {})
    rows = [
        [name, i["node_id"], i["records"], fmt_time(i["last_ms"]), i["unmirrored_messages"],
         i["unmirrored_events"], f"{i['recovery_point_gap_ms'] / 1000:.3f}", copies.get(name, 0)]
        for name, i in result["sides"].items()
    ]  # fmt: skip
    heads = ["side", "node id", "records", "last record", "unmirrored messages", "unmirrored events",
             "recovery-point gap (s)", "repaired copies held"]  # fmt: skip
    return _table(heads, rows, numeric={2, 4, 5, 6, 7})
