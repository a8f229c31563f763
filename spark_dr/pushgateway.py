"""The reconciliation's result in the Prometheus text exposition format, written to a file and pushed.

Pushed with PUT to ``<url>/metrics/job/<job>/pair/<DC1>-<DC2>`` (replacing that pair's group), so the
dashboard always shows each pair's last run (every series labelled with its `pair`, so two pairs pushing
to one Pushgateway do not overwrite each other): when it ran, how long it took, what it found per class
and side, and the recovery-point gap.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(result: dict[str, Any]) -> str:
    lines = [
        "# HELP amqp_mirror_dr_last_run_timestamp_seconds When the DR reconciliation last finished.",
        "# TYPE amqp_mirror_dr_last_run_timestamp_seconds gauge",
        f"amqp_mirror_dr_last_run_timestamp_seconds {result['generated_at_ms'] / 1000:.3f}",
        "# HELP amqp_mirror_dr_duration_seconds How long the last reconciliation took.",
        "# TYPE amqp_mirror_dr_duration_seconds gauge",
        f"amqp_mirror_dr_duration_seconds {result.get('seconds', 0)}",
        "# HELP amqp_mirror_dr_references Message references per reconciliation class.",
        "# TYPE amqp_mirror_dr_references gauge",
    ]
    for cls, n in sorted(result["counts"].items()):
        lines.append(f'amqp_mirror_dr_references{{class="{_label(cls)}"}} {n}')
    lines += [
        "# HELP amqp_mirror_dr_address_references Message references per address, class and side.",
        "# TYPE amqp_mirror_dr_address_references gauge",
    ]
    for row in result["by_address"]:
        labels = f'address="{_label(row["address"] or "")}",class="{row["class"]}",side="{row["side"] or ""}"'
        lines.append(f"amqp_mirror_dr_address_references{{{labels}}} {row['count']}")
    lines += [
        "# HELP amqp_mirror_dr_unmirrored Records not yet mirrored when the journal ended, per side.",
        "# TYPE amqp_mirror_dr_unmirrored gauge",
    ]
    for name, info in sorted(result["sides"].items()):
        lines.append(
            f'amqp_mirror_dr_unmirrored{{side="{name}",kind="message"}} {info["unmirrored_messages"]}'
        )
        lines.append(f'amqp_mirror_dr_unmirrored{{side="{name}",kind="event"}} {info["unmirrored_events"]}')
    lines += [
        "# HELP amqp_mirror_dr_recovery_point_gap_seconds Age of the oldest unmirrored record.",
        "# TYPE amqp_mirror_dr_recovery_point_gap_seconds gauge",
    ]
    for name, info in sorted(result["sides"].items()):
        gap = info["recovery_point_gap_ms"] / 1000
        lines.append(f'amqp_mirror_dr_recovery_point_gap_seconds{{side="{name}"}} {gap:.3f}')
    lines += [
        "# HELP amqp_mirror_dr_survivor_in_sync 1 when the survivor needs no repair.",
        "# TYPE amqp_mirror_dr_survivor_in_sync gauge",
        f"amqp_mirror_dr_survivor_in_sync {int(bool(result['survivor_in_sync']))}",
    ]
    return "\n".join(lines) + "\n"


def push(
    text: str, url: str, job: str = "amqp_mirror_dr", timeout: float = 10.0, pair: str = "DC1-DC2"
) -> int:
    """PUT the exposition to a Pushgateway, grouped by the DC pair; returns the HTTP status (raises on
    failure)."""
    target = f"{url.rstrip('/')}/metrics/job/{job}/pair/{urllib.parse.quote(pair, safe='')}"
    request = urllib.request.Request(
        target, data=text.encode(), method="PUT", headers={"Content-Type": "text/plain; version=0.0.4"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return int(response.status)


def write_and_push(result: dict[str, Any], path: Path | None, url: str | None, pair: str = "DC1-DC2") -> str:
    text = exposition(result)
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    if url:
        push(text, url, pair=pair)
    return text
