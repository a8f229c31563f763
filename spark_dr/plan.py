"""The repair plan: what to do on the surviving side, as data (JSON), made from a reconciliation result.

Every message is named by its mirror identity (``broker:id``, stable across both journals' compactions
and restarts), with its address and queue (a repair reaches the queue as ``address::queue``) and the
digest of its bare message (``digest``: the first 16 hex digits of its sha256, ``identity.content_key``):

- ``resend``: live on the failed side, never received by the survivor: send it again, its bytes read
  from the failed side's journal (``hint``: where reconciliation saw the record, tried first; by
  identity when the journal was compacted since);
- ``remove``: settled on the failed side, still live on the survivor: remove it there, by
  ``survivor_id``, the survivor's own id for its copy (``digest`` is that copy's). ``how`` it was
  settled on the failed side (``settled_how``) says what the repair keeps of it: a message consumed
  there (or settled and compacted, how is not known) is moved to the survivor's dead-letter address,
  for the operator; one dead-lettered, expired or replaced there is deleted, its dead-letter or expiry
  copy being the failed side's own (re-sent like any message live there only);
- ``not_mirrored``: live on the failed side only, and the mirror never carried it there (an address
  its ``address-filter`` excludes, a message from before the mirror, a queue whose creation was not
  mirrored): not a divergence, so not re-sent, unless the repair is asked to (``--not-mirrored``);
  the failed side's expiry copies are left out (the survivor makes its own when it expires the
  original: a ``remove`` settled ``expired``);
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

from broker_core.vocabulary import AckReason

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
        "not_mirrored": [],
        "duplicates_expected": [],
        "needs_decision": [],
        "survivor_only": 0,
    }
    for row in result["diverged"]:
        cls, side = row["class"], row["side"]
        if cls == "one_side_only" and side == failed:
            plan["resend"].append(_resend(row, result, failed))
        elif cls == "acked_one_side" and side == failed:
            survivor_id = row.get(f"{_prefix(result, survivor)}message_id")
            how = settled_how(row, _prefix(result, failed))
            plan["remove"].append({**_entry(row, result, survivor), "survivor_id": survivor_id, "how": how})
        elif cls == "not_mirrored" and side == failed:
            plan["not_mirrored"].append(_resend(row, result, failed))
        elif cls == "consumed_both":
            plan["duplicates_expected"].append(_entry(row, result, survivor))
        elif cls in ("payload_differs", "orphan_ack"):
            plan["needs_decision"].append({**_entry(row, result, side or survivor), "class": cls})
        else:
            plan["survivor_only"] += 1
    expired = {e["identity"] for e in plan["remove"] if e["how"] == "expired"}
    plan["not_mirrored"] = [e for e in plan["not_mirrored"] if e["identity"] not in expired]
    for key in ("resend", "remove", "not_mirrored"):
        plan[key].sort(key=lambda e: (e["queue"], _identity_order(e["identity"])))
    plan["queues"] = queue_actions(plan)
    return plan


SETTLED_HOW = {AckReason.NORMAL: "consumed", AckReason.KILLED: "dead-lettered", AckReason.EXPIRED: "expired",
               AckReason.REPLACED: "replaced"}  # fmt: skip
# what a removal does on the survivor, by how the failed side settled the message: keep it on the
# dead-letter address for the operator (consumed there, or not known); delete it (dead-lettered or
# replaced there: the failed side's dead letter is a message of its own, re-sent where it is still
# live); expire it, as the failed side did (the survivor makes its own expiry copy)
DEAD_LETTER, DELETE, EXPIRE = "dead-letter", "delete", "expire"
REMOVAL = {"consumed": DEAD_LETTER, "settled": DEAD_LETTER, "dead-lettered": DELETE, "replaced": DELETE,
           "expired": EXPIRE}  # fmt: skip


def settled_how(row: dict[str, Any], prefix: str) -> str:
    """How a reference was settled on the side of ``prefix`` (``dc1_``, ``dc2_``): consumed,
    dead-lettered (killed: moved to its dead-letter address, or removed), expired, replaced, or
    "settled" when its record was dropped by compaction (how is not known)."""
    reason = row.get(f"{prefix}ack_reason")
    if row.get(f"{prefix}status") != "acked" or reason is None:
        return "settled"
    return SETTLED_HOW.get(reason, "settled")


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
