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


def test_two_ids_far_ahead_do_not_confirm_each_other() -> None:
    """2^62 then 2^62 + 1 (the second "catching up" with the first): neither is confirmed, and the
    watermark a restart starts from stays with the traffic."""
    recent = RecentIds()
    for mid in [*range(1, 51), FAR, FAR + 1]:
        recent.add(mid)
    assert int(recent.watermark()) == 50  # 50 was confirmed by the next arrival, FAR by nothing
    for mid in range(51, 200):
        assert not recent.seen(mid), f"id {mid} taken for a duplicate"
        recent.add(mid)
    assert int(recent.watermark()) == 198
    assert recent.seen(FAR) and recent.seen(FAR + 1), "the outliers are still recognised exactly"


def test_traffic_below_a_jump_keeps_it_unconfirmed_however_long_it_goes_on(small_window: int) -> None:
    """The real origin's traffic between a peer's far ids: a jump is made real only by arrivals in a
    row beyond the confirmed ones, so more far ids than CATCH_UP in all confirm nothing."""
    recent = RecentIds()
    for mid in range(1, 51):
        recent.add(mid)
    for k in range(3 * RecentIds.CATCH_UP):
        recent.add(FAR + 2 * k)
        recent.add(FAR + 2 * k + 1)
        recent.add(51 + k)
    assert int(recent.watermark()) < FAR and recent.floor < FAR
    assert not recent.seen(51 + 3 * RecentIds.CATCH_UP)


def test_an_artemis_crash_jump_is_caught_up_with(small_window: int) -> None:
    """An Artemis origin that crashed resumes up to 2^31 - 1 ids further on (its id checkpoint): the jump
    confirms nothing for CATCH_UP arrivals, then the floor and the watermark follow the traffic."""
    recent = RecentIds()
    jump = 50 + 2**31 - 1
    after = list(range(jump, jump + 150))
    for mid in [*range(1, 51), *after]:
        assert not recent.seen(mid)
        recent.add(mid)
    assert int(recent.watermark()) == jump + 148
    assert recent.floor == jump + 49  # the 100 left in the window are the newest, 50 left it confirmed
    assert all(recent.seen(mid) for mid in after) and not recent.seen(jump + 150)


def test_after_a_target_restart_two_far_ids_block_nothing(tmp_path: Path) -> None:
    """The poisoning of a restart's floor: ids 2^62 and 2^62 + 1 from the origin's own link, consumed,
    then a restart of the target; the origin's traffic is stored, and its re-sends still dropped."""
    net = Network(tmp_path)
    net.broker("dc2", persistence=True)
    net.start_all()
    target = net.brokers["dc2"].mirror_target
    assert target is not None
    apply_ids(target, [*range(1, 11), FAR, FAR + 1])
    net.pump()
    assert len(net.client("dc2").receive("orders", 50)) == 12
    target = restarted(net, "dc2")
    apply_ids(target, list(range(6, 11)))  # re-sent: their Accepted was lost with the crash
    apply_ids(target, list(range(11, 31)))
    net.pump()
    assert net.depth("dc2", "orders") == 20, "the origin's traffic was taken for duplicates"
    assert target.stats["duplicates"] == 5
