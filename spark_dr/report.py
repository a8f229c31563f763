"""The operator's report of a reconciliation: a one-screen console summary, HTML with a plot, JSON."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import json
from pathlib import Path
from typing import Any

from .transforms import CLASSES

MAX_ADDRESS_LINES = 12  # keeps the console summary on one screen
SHORT = {"in_sync": "sync", "one_side_only": "only", "acked_one_side": "acked", "consumed_both": "twice",
         "payload_differs": "differs", "orphan_ack": "orphan"}  # fmt: skip


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _pivot(result: dict[str, Any]) -> dict[str, dict[str, int]]:
    """address -> column ("class" or "class@side") -> count."""
    table: dict[str, dict[str, int]] = {}
    for row in result["by_address"]:
        col = row["class"] if not row["side"] else f"{row['class']}@{row['side']}"
        cells = table.setdefault(row["address"] or "?", {})
        cells[col] = cells.get(col, 0) + row["count"]
    return table


def _columns(table: dict[str, dict[str, int]]) -> list[str]:
    present = {c for cells in table.values() for c in cells}
    return [c for cls in CLASSES for c in sorted(present) if c == cls or c.startswith(cls + "@")]


def console_summary(result: dict[str, Any]) -> str:
    counts = result["counts"]
    lines = [
        f"DR reconciliation {result['names'][0]} vs {result['names'][1]}: "
        f"{result['total']} message references (survivor {result['survivor']})"
        f" in {result.get('seconds', '?')} s",
        "  " + "  ".join(f"{c}={counts[c]}" for c in CLASSES),
    ]
    table = _pivot(result)
    cols = _columns(table)
    width = max([len(a) for a in table] + [7])
    heads = [SHORT[c.split("@")[0]] + ("@" + c.split("@")[1] if "@" in c else "") for c in cols]
    widths = [max(len(h), 6) for h in heads]
    lines.append(
        "  " + "address".ljust(width) + "".join(f" {h:>{w}}" for h, w in zip(heads, widths, strict=True))
    )
    for address in sorted(table)[:MAX_ADDRESS_LINES]:
        cells = table[address]
        values = [f" {cells.get(c, 0):>{w}}" for c, w in zip(cols, widths, strict=True)]
        lines.append("  " + address.ljust(width) + "".join(values))
    if len(table) > MAX_ADDRESS_LINES:
        lines.append(f"  ... {len(table) - MAX_ADDRESS_LINES} more addresses in the HTML/JSON report")
    window = result["window"]
    lines.append(f"  divergence window: {_time(window.get('first_ms'))} .. {_time(window.get('last_ms'))}")
    for name, info in result["sides"].items():
        lines.append(
            f"  {name} {info['node_id'][:8]}: {info['records']} records, last {_time(info['last_ms'])}; "
            f"recovery-point gap {info['recovery_point_gap_ms'] / 1000:.3f} s "
            f"({info['unmirrored_messages']} messages, {info['unmirrored_events']} events not mirrored)"
        )
    verdict = "in sync" if result["survivor_in_sync"] else "NEEDS REPAIR"
    lines.append(f"  survivor {result['survivor']}: {verdict}")
    return "\n".join(lines)


def json_report(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1, sort_keys=True, default=str) + "\n"


def plot_png(result: dict[str, Any]) -> bytes | None:
    """Diverged references over time, one line per class (None when nothing diverged)."""
    if not result["timeline"]:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, dict[int, int]] = {}
    for row in result["timeline"]:
        series.setdefault(row["class"], {})[row["bucket_ms"]] = row["count"]
    start = min(row["bucket_ms"] for row in result["timeline"])
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=90)
    for cls in CLASSES:
        if cls in series:
            points = sorted(series[cls].items())
            ax.plot([(t - start) / 1000 for t, _ in points], [n for _, n in points], marker=".", label=cls)
    ax.set_xlabel(f"seconds after {_time(start)}")
    ax.set_ylabel("diverged references")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def html_report(result: dict[str, Any], max_rows: int = 500) -> str:
    table = _pivot(result)
    cols = _columns(table)
    png = plot_png(result)
    plot = (
        f'<img alt="divergence over time" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        if png
        else "<p>No divergence to plot.</p>"
    )
    sides = [
        [
            name,
            i["node_id"],
            i["records"],
            _time(i["last_ms"]),
            i["unmirrored_messages"],
            i["unmirrored_events"],
            f"{i['recovery_point_gap_ms'] / 1000:.3f}",
        ]
        for name, i in result["sides"].items()
    ]
    diverged = [
        [
            d["identity_broker"],
            d["identity_id"],
            d["address"],
            d["queue"],
            d["class"],
            d["side"],
            d["dc1_status"],
            d["dc2_status"],
            _time(d["first_ms"]),
        ]
        for d in result["diverged"][:max_rows]
    ]
    window = result["window"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>DR reconciliation</title>",
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #999;padding:2px 6px;text-align:right}</style></head><body>",
        f"<h1>DR reconciliation: {html.escape(result['names'][0])} vs {html.escape(result['names'][1])}</h1>",
        f"<pre>{html.escape(console_summary(result))}</pre>",
        "<h2>Classes</h2>",
        _table(["class", "references"], [[c, result["counts"][c]] for c in CLASSES]),
        "<h2>Per address</h2>",
        _table(["address", *cols], [[a, *[table[a].get(c, 0) for c in cols]] for a in sorted(table)]),
        "<h2>Divergence over time</h2>",
        plot,
        f"<p>Window: {_time(window.get('first_ms'))} .. {_time(window.get('last_ms'))}</p>",
        "<h2>Sides and recovery-point gap</h2>",
        _table(
            [
                "side",
                "node id",
                "records",
                "last record",
                "unmirrored messages",
                "unmirrored events",
                "gap (s)",
            ],
            sides,
        ),
        f"<h2>Diverged references (first {max_rows})</h2>",
        _table(
            ["origin broker", "origin id", "address", "queue", "class", "side", "DC1", "DC2", "first"],
            diverged,
        ),
        "</body></html>",
    ]
    return "\n".join(parts)


def write_reports(result: dict[str, Any], out: Path) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "reconciliation.json",
        "html": out / "reconciliation.html",
        "text": out / "summary.txt",
    }
    paths["json"].write_text(json_report(result), encoding="utf-8")
    paths["html"].write_text(html_report(result), encoding="utf-8")
    paths["text"].write_text(console_summary(result) + "\n", encoding="utf-8")
    return paths
