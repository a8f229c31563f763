"""The repair plan: what to do on the surviving side, as data (JSON), made from a reconciliation result.

- ``resend``: live on the failed side, never received by the survivor: send it again, with the payload
  read from the failed side's journal at the recorded position;
- ``acks``: acknowledged (or settled and compacted) on the failed side, still live on the survivor:
  remove it there (it was consumed already);
- ``duplicates_expected``: consumed on both sides (already delivered twice; nothing can undo that);
- ``needs_decision``: payload differs, orphan acks: an operator decides;
- ``survivor_only``: live on the survivor only, or acked on the survivor while the failed side still
  holds it: nothing to do on the survivor (the failed side is stale; rebuild it from the survivor).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .identity import format_identity

PLAN_VERSION = 1


def _prefix(result: dict[str, Any], side: str) -> str:
    return "dc1_" if side == result["names"][0] else "dc2_"


def _entry(row: dict[str, Any], result: dict[str, Any], side: str) -> dict[str, Any]:
    p = _prefix(result, side)
    return {
        "identity": format_identity(row["identity_broker"], row["identity_id"]),
        "address": row["address"],
        "queue": row["queue"],
        "digest": row[f"{p}digest"],
        "size": row[f"{p}size"],
        "side": side,
        "segment": row[f"{p}segment"],
        "offset": row[f"{p}offset"],
    }


def build_plan(result: dict[str, Any]) -> dict[str, Any]:
    survivor, failed = result["survivor"], result["failed"]
    plan: dict[str, Any] = {
        "version": PLAN_VERSION,
        "survivor": survivor,
        "failed": failed,
        "journals": {name: info["path"] for name, info in result["sides"].items()},
        "resend": [],
        "acks": [],
        "duplicates_expected": [],
        "needs_decision": [],
        "survivor_only": 0,
    }
    for row in result["diverged"]:
        cls, side = row["class"], row["side"]
        if cls == "one_side_only" and side == failed:
            plan["resend"].append(_entry(row, result, failed))
        elif cls == "acked_one_side" and side == failed:
            plan["acks"].append(_entry(row, result, survivor))
        elif cls == "consumed_both":
            plan["duplicates_expected"].append(_entry(row, result, survivor))
        elif cls in ("payload_differs", "orphan_ack"):
            plan["needs_decision"].append({**_entry(row, result, side or survivor), "class": cls})
        else:
            plan["survivor_only"] += 1
    for key in ("resend", "acks"):
        plan[key].sort(key=lambda e: (e["queue"], e["segment"] or 0, e["offset"] or 0))
    return plan


def write_plan(plan: dict[str, Any], path: Path) -> None:
    Path(path).write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_plan(path: Path) -> dict[str, Any]:
    plan = json.loads(Path(path).read_text(encoding="utf-8"))
    if plan.get("version") != PLAN_VERSION:
        raise ValueError(f"{path}: plan version {plan.get('version')!r}, expected {PLAN_VERSION}")
    return dict(plan)
