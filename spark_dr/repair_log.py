"""What a repair has done so far, kept beside its plan (``PLAN.progress``), so that a run killed halfway
resumes where it stopped and a second run does nothing again.

One JSON object per line, appended and flushed to disk before the step it records can be repeated: the
first line names the plan (a digest of its actions), a later plan starts the file afresh. ``sent``: a
re-send the broker Accepted. ``removing``: a removal about to be settled (written before the reject is
sent: if the run dies in between, the next one finds the message either gone, and counts it removed,
or still there, and removes it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

Ref = tuple[str, str]  # (queue, identity): a multicast message has one reference per queue


class RepairLog:
    def __init__(self, path: Path | None, plan_id: str) -> None:
        self.path = path
        self.sent: set[Ref] = set()
        self.removing: set[Ref] = set()
        if path is None:  # a dry run writes nothing
            return
        lines = _read(path)
        if not lines or lines[0].get("plan") != plan_id:
            lines = [{"plan": plan_id}]
        for line in lines[1:]:
            getattr(self, line["did"]).add((line["queue"], line["identity"]))
        # written again as read: a line torn by a kill must not stay between the old and the new ones
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

    def record(self, did: str, refs: list[Ref]) -> None:
        """``did`` ("sent" or "removing") for each reference, durably."""
        getattr(self, did).update(refs)
        if self.path is None or not refs:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.writelines(json.dumps({"did": did, "queue": q, "identity": i}) + "\n" for q, i in refs)
            f.flush()
            os.fsync(f.fileno())


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line torn by a kill: everything before it holds
            break
        if out[-1].get("did") not in (None, "sent", "removing"):
            out.pop()
            break
    return out
