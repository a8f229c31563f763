"""The repair plan: what to do on the surviving side, as data (JSON), made from a reconciliation result.

Every message is named by its mirror identity (``broker:id``, stable across both journals' compactions
and restarts), with its address and queue (a repair reaches the queue as ``address::queue``) and the
digest of its bare message (``digest``: the first 16 hex digits of its sha256, ``identity.content_key``):

- ``resend``: live on the failed side, never received by the survivor: send it again, its bytes read
  from the failed side's journal (``hint``: where reconciliation saw the record, tried first; by
  identity when the journal was compacted since);
- ``remove``: consumed (or settled and compacted) on the failed side, still live on the survivor:
  remove it there (it was delivered already); ``digest`` is the survivor's copy's, ``survivor_id`` its
  id on the survivor (how it is removed from an Artemis survivor, ``kinds``: read from its export);
- ``duplicates_expected``: consumed on both sides (already delivered twice; nothing can undo that);
- ``needs_decision``: payload differs, orphan acks: an operator decides;
- ``survivor_only``: live on the survivor only, or acked on the survivor while the failed side still
  holds it: nothing to do on the survivor (the failed side is stale; rebuild it from the survivor).

``queues`` sums ``resend`` and ``remove`` per queue: what the report says a repair will do.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .identity import format_identity, parse_identity

PLAN_VERSION = 2
ENTRY_KEYS = {"identity", "address", "queue", "digest"}


def _prefix(result: dict[str, Any], side: str) -> str:
    return "dc1_" if side == result["names"][0] else "dc2_"


def _entry(row: dict[str, Any], result: dict[str, Any], side: str) -> dict[str, Any]:
    p = _prefix(result, side)
    return {
        "identity": format_identity(row["identity_broker"], row["identity_id"]),
        "address": row["address"],
        "queue": row["queue"],
        "digest": row[f"{p}digest"],
    }


def _resend(row: dict[str, Any], result: dict[str, Any], side: str) -> dict[str, Any]:
    p = _prefix(result, side)
    hint = [row[f"{p}segment"], row[f"{p}offset"]] if row[f"{p}segment"] is not None else None
    return {**_entry(row, result, side), "size": row[f"{p}size"], "hint": hint}


def build_plan(result: dict[str, Any]) -> dict[str, Any]:
    survivor, failed = result["survivor"], result["failed"]
    plan: dict[str, Any] = {
        "version": PLAN_VERSION,
        "made_at_ms": result["generated_at_ms"],
        "survivor": survivor,
        "failed": failed,
        "nodes": {name: info["node_id"] for name, info in result["sides"].items()},
        "kinds": {name: info.get("kind", "journal") for name, info in result["sides"].items()},
        "journals": {name: info["path"] for name, info in result["sides"].items()},
        "resend": [],
        "remove": [],
        "duplicates_expected": [],
        "needs_decision": [],
        "survivor_only": 0,
    }
    for row in result["diverged"]:
        cls, side = row["class"], row["side"]
        if cls == "one_side_only" and side == failed:
            plan["resend"].append(_resend(row, result, failed))
        elif cls == "acked_one_side" and side == failed:
            # the survivor's own id too: what removes it from an Artemis survivor, whose export has no
            # digest to match it by
            survivor_id = row.get(f"{_prefix(result, survivor)}message_id")
            plan["remove"].append({**_entry(row, result, survivor), "survivor_id": survivor_id})
        elif cls == "consumed_both":
            plan["duplicates_expected"].append(_entry(row, result, survivor))
        elif cls in ("payload_differs", "orphan_ack"):
            plan["needs_decision"].append({**_entry(row, result, side or survivor), "class": cls})
        else:
            plan["survivor_only"] += 1
    for key in ("resend", "remove"):
        plan[key].sort(key=lambda e: (e["queue"], _identity_order(e["identity"])))
    plan["queues"] = queue_actions(plan)
    return plan


def _identity_order(text: str) -> tuple[str, int]:
    return parse_identity(text) or (text, 0)


def queue_actions(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Per queue (and its address): how many messages a repair re-sends and removes there."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for key in ("resend", "remove"):
        for e in plan[key]:
            blank = {"queue": e["queue"], "address": e["address"], "resend": 0, "remove": 0}
            table.setdefault((e["queue"], e["address"]), blank)[key] += 1
    return [table[k] for k in sorted(table)]


def plan_id(plan: dict[str, Any]) -> str:
    """A digest of the plan's actions: a repair's progress file belongs to one plan."""
    actions = json.dumps([plan["resend"], plan["remove"]], sort_keys=True).encode()
    return hashlib.sha256(actions).hexdigest()[:16]


def write_plan(plan: dict[str, Any], path: Path) -> None:
    Path(path).write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_plan(path: Path) -> dict[str, Any]:
    """The plan at ``path``; ValueError (one line) when it is not a plan this version can apply."""
    plan = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(plan, dict):
        raise ValueError("not a repair plan (a JSON object)")
    version = plan.get("version")
    if version != PLAN_VERSION:
        older = " (it names messages by journal positions, which compaction moves)" if version == 1 else ""
        raise ValueError(
            f"plan version {version!r}{older}, this repair applies version {PLAN_VERSION}: "
            "make a new plan with amqp-mirror reconcile --plan"
        )
    for key in ("resend", "remove"):
        for n, entry in enumerate(plan.get(key, [])):
            missing = ENTRY_KEYS - set(entry)
            if missing:
                raise ValueError(f"{key}[{n}] lacks {', '.join(sorted(missing))}")
    for key in ("survivor", "failed", "journals"):
        if key not in plan:
            raise ValueError(f"no {key!r} in the plan")
    return dict(plan)
