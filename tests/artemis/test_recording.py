"""The Artemis installed here still speaks as the recording our Java-free replay test uses says
(``tests/conformance/artemis_mirror_recording.json``; remake it with ``python -m tests.artemis.recording``).

Compared per step: which events, with which annotation keys and value types, and which delivery
annotations on messages. Ids, timestamps and the number of management replies differ from run to run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.artemis.recording import record
from tests.support.peer.frames import decode_sections

RECORDED = Path(__file__).resolve().parents[1] / "conformance" / "artemis_mirror_recording.json"

pytestmark = pytest.mark.usefixtures("artemis_available")


def shapes(recording: dict[str, Any]) -> dict[str, set[tuple[Any, ...]]]:
    out: dict[str, set[tuple[Any, ...]]] = {}
    for step in recording["steps"]:
        for d in step["deliveries"]:
            sections = {s.code: s.value for s in decode_sections(bytes.fromhex(d["payload"]))}
            annotations = sections.get(0x72) or {}
            kind = str(annotations.get("x-opt-amq-mr-ev-type", "message"))
            typed = tuple(sorted((str(k), type(v).__name__) for k, v in annotations.items()))
            da = tuple(sorted((str(k), type(v).__name__) for k, v in (sections.get(0x71) or {}).items()))
            out.setdefault(step["step"], set()).add((kind, d["format"], typed, da))
    return out


def test_artemis_still_sends_what_the_recording_holds(tmp_path: Path) -> None:
    fresh = record(tmp_path)
    recorded = json.loads(RECORDED.read_text())
    assert fresh["artemis_version"] == recorded["artemis_version"]
    assert fresh["attach_desired_capabilities"] == recorded["attach_desired_capabilities"]
    assert fresh["open_idle_time_out"] == recorded["open_idle_time_out"]
    assert shapes(fresh) == shapes(recorded)
