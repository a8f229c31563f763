"""The compiled hot path: used only while its build matches the sources; plain Python still works."""

from __future__ import annotations

import inspect
import json
import os
import shutil
from pathlib import Path

import pytest

from broker_core import compiled
from tests.mirror.test_mirror_scenarios import broker, drained
from tests.peers.ports import free_port, wait_until
from tests.support.client import receive, send

IN_CI = os.environ.get("CI") == "true"


def _copy_sources(root: Path) -> None:
    for module in compiled.MODULES:
        target = compiled.source_path(root, module)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(compiled.source_path(compiled.ROOT, module), target)


def test_the_build_is_used_only_while_it_matches_this_python_and_every_source(tmp_path: Path) -> None:
    root, build = tmp_path / "src", tmp_path / "build"
    _copy_sources(root)
    assert compiled.why_not(root, build, env={}).startswith("not built")

    build.mkdir()
    stamp = compiled.stamp_for(root)
    (build / compiled.STAMP).write_text(json.dumps(stamp))
    assert compiled.why_not(root, build, env={}) is None
    assert compiled.why_not(root, build, env={compiled.SWITCH: "0"}).startswith("turned off")

    edited = compiled.source_path(root, "mirror.target")
    edited.write_text(edited.read_text() + "\n# an edit\n")
    reason = compiled.why_not(root, build, env={})
    assert reason is not None and reason.startswith("stale: mirror.target changed"), reason

    (build / compiled.STAMP).write_text(json.dumps(dict(compiled.stamp_for(root), ext_suffix=".other.so")))
    assert compiled.why_not(root, build, env={}).startswith("built for another Python")

    (build / compiled.STAMP).write_text("{not json")
    assert compiled.why_not(root, build, env={}).startswith("unreadable stamp")

    (build / compiled.STAMP).write_text(json.dumps(stamp))
    edited.unlink()
    assert compiled.why_not(root, build, env={}).startswith("cannot read a compiled module's source")


def test_ci_runs_the_compiled_build() -> None:
    """CI builds the hot path (scripts/install-deps): the whole suite then runs the compiled modules."""
    if not compiled.IN_USE:
        message = f"the compiled hot path is not in use: {compiled.REASON}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    import broker_core.server
    import mirror.target

    for module in (broker_core.server, mirror.target):
        assert module.__file__ is not None and Path(module.__file__).is_relative_to(compiled.BUILD)


def test_the_objects_made_per_message_have_a_compiled_init() -> None:
    """A dataclass's generated __init__ runs as interpreted Python even in a compiled module, at six
    times the cost: the classes made for every message write their own, which mypyc compiles."""
    if not compiled.IN_USE:
        pytest.skip(f"the compiled hot path is not in use: {compiled.REASON}")
    from broker_core.journal.records import MessageAcked, MessageAdded
    from broker_core.journal.state import LiveMessage
    from broker_core.journal.writer import Entry
    from broker_core.message import Header
    from mirror.decode import ControlEvent, ReplicatedMessage

    for cls in (MessageAdded, MessageAcked, LiveMessage, Entry, Header, ControlEvent, ReplicatedMessage):
        assert not inspect.isfunction(cls.__init__), f"{cls.__name__}.__init__ is interpreted Python"


def test_a_plain_python_mirror_pair_still_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled.SWITCH, "0")  # the brokers inherit it
    p1, p2 = free_port(), free_port()
    dc1 = broker(tmp_path, "dc1", p1, ("DC2", p2, ""))
    dc2 = broker(tmp_path, "dc2", p2, ("DC1", p1, ""))
    dc2.start()
    dc1.start()
    for b in (dc1, dc2):
        assert "compiled hot path: not in use, turned off" in b.log()
    send(dc1.url, "orders", [f"m{i}" for i in range(20)])
    got = receive(dc2.url, "orders", 20, timeout=10)
    assert sorted(m.body for m in got) == sorted(f"m{i}" for i in range(20))
    wait_until(lambda: drained(dc1, dc2), 10, "both mirrors to drain")
    assert receive(dc1.url, "orders", 20, timeout=1) == [], "DC2's acks did not remove DC1's copies"
    dc1.stop()
    dc2.stop()
