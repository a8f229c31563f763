"""A dual mirror between our broker and Apache ActiveMQ Artemis, both from the very same broker.xml.

Each broker runs ``config(own port, mirror to the other's port)``: one text, two ports. Traffic and
acknowledgements flow both ways without echo; a crash (SIGKILL) of either broker, as the source or as
the target of a stream, loses nothing and duplicates nothing; ``sync="true"`` holds a client's
confirmation while the other side is down.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Message

from tests.artemis.support import (
    Broker,
    artemis,
    bodies,
    call,
    config,
    depth,
    mirror_complaints,
    mirror_connection,
    ours,
    queue_names,
    send_to_queue,
)
from tests.peers.artemis import CONNECTED, ArtemisProcess
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import Capabilities, connect, receive

pytestmark = pytest.mark.usefixtures("artemis_available")

Pair = tuple[BrokerProcess, ArtemisProcess]
SNF = "$ACTIVEMQ_ARTEMIS_MIRROR_peer"
# How long a sync send's client waits for its confirmation: the whole outage of the other side. Beside
# a CPU- and disk-heavy neighbour Artemis took 11-14 s to restart and the send was confirmed 0.4-0.7 s
# after it was up (15-17 s in all); a client's default wait of 10 s gave up first.
SYNC_WAIT = 90.0


def start_pair(root: Path, mirror_attrs: str = "") -> Pair:
    o_port, a_port = free_port(), free_port()
    ours_xml = config(o_port, mirror_connection("peer", a_port, mirror_attrs))
    artemis_xml = config(a_port, mirror_connection("peer", o_port, mirror_attrs))
    # the same file for both brokers: only the two port numbers differ
    assert ours_xml.replace(str(o_port), "P").replace(str(a_port), "Q") == artemis_xml.replace(
        str(a_port), "P"
    ).replace(str(o_port), "Q")
    dc1 = ours(root / "ours", o_port, ours_xml).start()
    dc2 = artemis(root / "artemis", a_port, artemis_xml).start()
    dc2.wait_for(CONNECTED, 30, "to connect its mirror to ours")
    wait_until(lambda: "AMQ111003" in dc1.log(), 30, "our mirror to connect to Artemis")
    return dc1, dc2


def drained(dc1: BrokerProcess, dc2: ArtemisProcess) -> bool:
    ours_pending = sum(s["pendingEvents"] for s in call(dc1, "getMirrorStatus")["sources"])
    return ours_pending == 0 and depth(dc2, SNF) == 0


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, artemis_available: None) -> Iterator[Pair]:
    dc1, dc2 = start_pair(tmp_path_factory.mktemp("dual-artemis"))
    try:
        yield dc1, dc2
        assert mirror_complaints(dc2) == []
    finally:
        dc1.stop()
        dc2.stop()


def test_sends_and_acks_flow_both_ways_without_echo(pair: Pair) -> None:
    dc1, dc2 = pair
    send_to_queue(dc1, "both", [f"o{i}" for i in range(100)])
    send_to_queue(dc2, "both", [f"a{i}" for i in range(100)])
    wait_until(lambda: depth(dc1, "both") == 200 and depth(dc2, "both") == 200, 30, "200 on each side")
    assert len(receive(dc1.url, "both", 30)) == 30  # acks from ours to Artemis
    assert len(receive(dc2.url, "both", 50)) == 50  # and from Artemis to ours
    wait_until(lambda: depth(dc1, "both") == 120 and depth(dc2, "both") == 120, 30, "120 on each side")
    wait_until(lambda: drained(dc1, dc2), 30, "both mirrors to drain")
    assert depth(dc1, "both") == depth(dc2, "both") == 120, "an event echoed"
    assert bodies(dc1, "both") == bodies(dc2, "both")
    assert call(dc1, "getMirrorStatus")["target"]["duplicates"] == 0


def test_queues_made_and_removed_on_either_side_appear_on_the_other(pair: Pair) -> None:
    dc1, dc2 = pair
    send_to_queue(dc1, "from.ours", ["x"])
    send_to_queue(dc2, "from.artemis", ["y"])
    wait_until(lambda: depth(dc2, "from.ours") == 1 and depth(dc1, "from.artemis") == 1, 30, "both")
    call(dc1, "destroyQueue", "from.artemis")
    call(dc2, "destroyQueue", "from.ours")
    wait_until(
        lambda: "from.artemis" not in queue_names(dc2) and "from.ours" not in queue_names(dc1),
        30,
        "each removal applied on the other side",
    )
    wait_until(lambda: drained(dc1, dc2), 30, "both mirrors to drain")
    assert "from.ours" not in queue_names(dc2) and "from.artemis" not in queue_names(dc1)


class Stream:
    """Durable sends, one by one from a thread, each Accepted noted, until done or cut off; what cut it
    off is kept (`error`), for the test to say whether it may have been."""

    def __init__(self, broker: Broker, address: str, prefix: str, count: int, timeout: float = 10.0) -> None:
        self.accepted: list[str] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(broker.url, address, prefix, count, timeout), daemon=True
        )
        self._thread.start()

    def _run(self, url: str, address: str, prefix: str, count: int, timeout: float) -> None:
        try:
            with connect(url, timeout=timeout) as conn:
                sender = conn.create_sender(address)
                for i in range(count):
                    sender.send(Message(body=f"{prefix}{i}", durable=True))
                    self.accepted.append(f"{prefix}{i}")
        except BaseException as exc:  # kept: the test asserts what it may be
            self.error = exc

    def waiting_after(self, seconds: float) -> bool:
        """Whether the sender still waits `seconds` from now (a window, not an instant)."""
        self._thread.join(seconds)
        return self._thread.is_alive()

    def join(self, timeout: float) -> Stream:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the sender still waits after {timeout:g} s"
        return self

    def completed(self, count: int) -> None:
        """Every send was Accepted and nothing went wrong."""
        assert self.error is None, f"a send failed after {len(self.accepted)} of {count}: {self.error!r}"
        assert len(self.accepted) == count


def _crash_mid_stream(sender: Broker, victim: Broker, prefix: str, all_accepted: list[str]) -> None:
    stream = Stream(sender, "outage", prefix, 400)
    wait_until(lambda: len(stream.accepted) >= 100, 60, f"{prefix}: 100 sends accepted before the crash")
    victim.kill()
    stream.join(60)
    if sender is victim:  # cut off by the crash of the broker it sends to
        assert stream.error is not None and len(stream.accepted) < 400, "the sender never saw the crash"
    else:  # the other side's crash is no concern of an asynchronous mirror's clients
        stream.completed(400)
        late = Stream(sender, "outage", prefix + "late-", 50).join(60)  # while the other is down
        late.completed(50)
        stream.accepted += late.accepted
    victim.start()
    all_accepted.extend(stream.accepted)


def test_a_crash_of_either_side_mid_stream_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    dc1, dc2 = start_pair(tmp_path)
    try:
        send_to_queue(dc1, "outage", [])  # the queue, on both sides
        wait_until(lambda: depth(dc2, "outage") == 0, 30, "the queue on Artemis")
        accepted: list[str] = []
        _crash_mid_stream(dc1, dc1, "ours-source-killed-", accepted)
        _crash_mid_stream(dc1, dc2, "artemis-target-killed-", accepted)
        _crash_mid_stream(dc2, dc2, "artemis-source-killed-", accepted)
        _crash_mid_stream(dc2, dc1, "ours-target-killed-", accepted)
        wait_until(lambda: drained(dc1, dc2), 90, "both mirrors to drain after the crashes")
        on_ours, on_artemis = bodies(dc1, "outage"), bodies(dc2, "outage")
        assert len(on_ours) == len(set(on_ours)), "a message duplicated on our side"
        assert len(on_artemis) == len(set(on_artemis)), "a message duplicated on Artemis"
        assert set(accepted) <= set(on_ours) & set(on_artemis), "an accepted message was lost"
        # Artemis writes a message, its queue's reference and its mirror queue's reference as three
        # records and confirms after all three: killed between the last two, it keeps a message it never
        # confirmed and never mirrors it (`artemis data print` shows the three). Only that may differ.
        in_doubt = set(on_artemis) - set(on_ours)
        assert all(m.startswith("artemis-source-killed-") for m in in_doubt), in_doubt
        assert not in_doubt & set(accepted), "Artemis confirmed a message it did not mirror"
        assert set(on_ours) <= set(on_artemis), "the two sides differ after the crashes"
        assert mirror_complaints(dc2) == []
    finally:
        dc1.stop()
        dc2.stop()


@pytest.mark.timeout(60 + 2 * (SYNC_WAIT + 30))  # room for each wait's own deadline on a loaded machine
def test_sync_holds_the_confirmation_while_the_other_side_is_down(tmp_path: Path) -> None:
    dc1, dc2 = start_pair(tmp_path, 'sync="true"')
    try:
        send_to_queue(dc1, "synced", ["s0"])  # confirmed while both are up
        send_to_queue(dc2, "synced", ["s1"])
        wait_until(lambda: depth(dc1, "synced") == 2 and depth(dc2, "synced") == 2, 30, "both on both")
        for sender, other in ((dc1, dc2), (dc2, dc1)):
            other.kill()
            held = Stream(sender, "synced", f"held-by-{type(sender).__name__}-", 1, timeout=SYNC_WAIT)
            assert held.waiting_after(3.0), f"the sync send ended while its target was down: {held.error!r}"
            assert held.accepted == [], "a sync mirror confirmed a send while its target was down"
            other.start()
            held.join(SYNC_WAIT + 10).completed(1)  # confirmed once the target is back
            same = (lambda a, b: lambda: depth(a, "synced") == depth(b, "synced"))(other, sender)
            wait_until(same, 30, "the same depth on both sides")
    finally:
        dc1.stop()
        dc2.stop()


PRIORITIES = [4, 1, 9, 4, 0, 7, 9, 4, 5, 1, 9, 3, 255, 8, 2, 6, 4, 0, 7, 7]


def _in_delivery_order(broker: Broker, queue: str) -> list[str]:
    """What `queue` holds, in the order its consumers would get it: browsed (distribution mode copy)."""
    from proton import Timeout
    from proton.reactor import Copy

    out = []
    with connect(broker.url) as conn:
        browser = conn.create_receiver(queue, credit=500, options=Copy())
        while True:
            try:
                out.append(browser.receive(timeout=1.0).body)
            except Timeout:
                return out
            browser.accept()


@pytest.mark.parametrize("origin", ["ours", "artemis"])
def test_mixed_priorities_are_delivered_in_the_same_order_on_both_sides(pair: Pair, origin: str) -> None:
    """Each side delivers by priority (higher first, oldest first within one), so a mirrored queue comes
    out in the same order on both, whichever side the messages were sent to and consumed from."""
    dc1, dc2 = pair
    source, other = (dc1, dc2) if origin == "ours" else (dc2, dc1)
    queue = f"prio-{origin}"
    with connect(source.url) as conn:
        sender = conn.create_sender(queue, options=Capabilities("queue"))
        for i, p in enumerate(PRIORITIES):
            sender.send(Message(body=f"p{i}", durable=True, priority=p))
    wait_until(lambda: depth(other, queue) == len(PRIORITIES), 60, "the messages mirrored")
    ranked = [f"p{i}" for i in sorted(range(len(PRIORITIES)), key=lambda i: (-min(PRIORITIES[i], 9), i))]
    assert _in_delivery_order(dc1, queue) == _in_delivery_order(dc2, queue) == ranked
    # consumed on the other side: the acknowledgements come back for the same messages
    assert [m.body for m in receive(other.url, queue, 8)] == ranked[:8]
    wait_until(lambda: depth(source, queue) == len(PRIORITIES) - 8, 60, "the acknowledgements mirrored")
    assert _in_delivery_order(dc1, queue) == _in_delivery_order(dc2, queue) == ranked[8:]
    assert [m.body for m in receive(source.url, queue, 100)] == ranked[8:]
    wait_until(lambda: depth(other, queue) == 0, 60, "the rest acknowledged on the other side")
