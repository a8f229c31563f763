"""Duplicate detection per origin cannot be pushed ahead by one event (mirror/dedup.py).

An id of 2^62 arriving once (injected, or corrupt) used to become the floor when it left the window, or
after a restart (the highest id was persisted): every later id of that origin was then dropped as a
duplicate. Legitimate ids rise with gaps (a reserved block of ids is skipped when the origin restarts),
and a transaction can deliver an older id late; those must keep working.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.message import build_message
from broker_core.persistence import ID_BLOCK
from mirror import wire
from mirror.dedup import RecentIds
from mirror.target import MirrorTarget
from tests.support.pair import Network

ORIGIN = "00000000-0000-0000-0000-0000000000d1"
FAR = 2**62


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(RecentIds, "WINDOW", 100)
    monkeypatch.setattr(RecentIds, "CATCH_UP", 10)  # as the real one, well inside the window
    return 100


def test_one_id_far_ahead_moves_neither_the_floor_nor_the_watermark(small_window: int) -> None:
    recent = RecentIds()
    for mid in range(1, 51):
        recent.add(mid)
    recent.add(FAR)
    for mid in range(51, 1001):
        assert not recent.seen(mid), f"id {mid} taken for a duplicate"
        recent.add(mid)
    assert recent.seen(FAR), "the outlier itself is still recognised when it comes again"
    assert recent.floor == 900  # the 901 oldest arrivals left the window: 1..50, FAR, 51..900
    assert int(recent.watermark()) == 999 and int(recent.newest()) == 1000
    assert not recent.seen(1001)


def test_an_origin_restart_jumps_a_reserved_block_and_the_floor_follows(small_window: int) -> None:
    recent = RecentIds()
    after_restart = list(range(ID_BLOCK + 151, ID_BLOCK + 301))
    for mid in [*range(1, 151), *after_restart]:
        assert not recent.seen(mid)
        recent.add(mid)
    assert recent.floor == ID_BLOCK + 200  # 200 left the window: 1..150, then the first 50 after the jump
    assert all(recent.seen(mid) for mid in after_restart)


def test_a_late_older_id_is_still_not_a_duplicate(small_window: int) -> None:
    recent = RecentIds()
    for mid in [*range(1, 60), 70, 71, 60, *range(72, 90)]:  # 60 arrives after 70, 71
        assert not recent.seen(mid)
        recent.add(mid)
    assert recent.seen(60) and not recent.seen(65)  # 61-69 never came: still expected


def apply_ids(target: MirrorTarget, ids: list[int]) -> None:
    for mid in ids:
        target.apply(ORIGIN, wire.replicate(build_message(f"m{mid}", durable=True), mid, None, "orders"))


def restarted(net: Network, name: str) -> MirrorTarget:
    net.stop(name)
    net.broker(name, persistence=True)
    net.start(name)
    target = net.brokers[name].mirror_target
    assert target is not None
    return target


def test_after_a_target_restart_an_injected_id_blocks_nothing_and_resends_are_still_dropped(
    tmp_path: Path,
) -> None:
    net = Network(tmp_path)
    net.broker("dc2", persistence=True)
    net.start_all()
    target = net.brokers["dc2"].mirror_target
    assert target is not None
    apply_ids(target, [*range(1, 11), FAR, *range(11, 21)])
    net.pump()
    assert len(net.client("dc2").receive("orders", 50)) == 21  # consumed: no live message is left
    target = restarted(net, "dc2")
    apply_ids(target, list(range(11, 21)))  # what the source re-sends, its Accepted lost in the crash
    net.pump()
    assert net.depth("dc2", "orders") == 0 and target.stats["duplicates"] == 10
    apply_ids(target, list(range(21, 31)))  # the origin carries on
    net.pump()
    assert net.depth("dc2", "orders") == 10, "later ids were taken for duplicates"
