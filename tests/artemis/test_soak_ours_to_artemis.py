"""A soak of our mirror to a real Apache ActiveMQ Artemis 2.40 through repeated kill -9 of our broker.

Producers and consumers work on our broker, each with a client's ledger of what was confirmed (a send's
Accepted; an acknowledgement once its receiver's detach was answered, which comes after the acks are on
disk) and of what a kill left in doubt. Every round kills our broker -9 twice mid-stream and starts it
again; Artemis stays up. Then both sides are drained and compared message by message:

- every message confirmed on ours and not consumed is on our broker and on Artemis, each exactly once;
- nothing that our broker still holds is missing on Artemis, and nothing consumed on ours (its
  acknowledgement confirmed, or in doubt and gone from ours) remains on Artemis: the two hold the same ids.

The form CI runs takes about a minute; ``AMQP_MIRROR_SOAK_SECONDS`` sets how long the rounds go on (the
long form, on demand). Artemis is told to log the acknowledgements it gives up on (AMQ111012, off by
default), so that a divergence comes with its cause.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from proton import Message, ProtonException, Timeout

from tests.artemis.support import ORDERS, artemis, bodies, call, config, depth, mirror_connection, ours
from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import connect

SOAK_SECONDS = float(os.environ.get("AMQP_MIRROR_SOAK_SECONDS", "30"))
pytestmark = [
    pytest.mark.usefixtures("artemis_available"),
    pytest.mark.slow,
    pytest.mark.timeout(SOAK_SECONDS + 300),  # the rounds, then up to 120 s to drain and 90 s to agree
]
QUEUE = "soak"
ADDRESSES = ORDERS + f'<address name="{QUEUE}"><anycast><queue name="{QUEUE}"/></anycast></address>'
ARTEMIS_EXTRA = "<mirror-ack-manager-warn-unacked>true</mirror-ack-manager-warn-unacked>"
# Our store-and-forward queue keeps about fifty events in memory: past that it pages, and with fifty
# events in flight at most, kills find its events split between the journal and page files, events read
# back and not yet sent, and acknowledgements of messages whose events wait behind them.
SNF_PAGES = """
      <address-setting match="$ACTIVEMQ_ARTEMIS_MIRROR_artemis">
        <max-size-bytes>50000</max-size-bytes>
        <page-size-bytes>20000</page-size-bytes>
      </address-setting>
    </address-settings>"""
WINDOW = '<property key="max-in-flight-events" value="50"/>'


@dataclass
class Ledger:
    """What the clients know, under one lock."""

    confirmed: set[int] = field(default_factory=set)  # sends Accepted
    in_doubt_send: set[int] = field(default_factory=set)  # sent, cut off before the outcome
    consumed: set[int] = field(default_factory=set)  # acknowledgements confirmed
    in_doubt_ack: set[int] = field(default_factory=set)  # accepted, cut off before the confirmation
    next_id: int = 0
    errors: list[str] = field(default_factory=list)  # anything but the kill's cut
    lock: threading.Lock = field(default_factory=threading.Lock)

    def new_id(self) -> int:
        with self.lock:
            self.next_id += 1
            self.in_doubt_send.add(self.next_id)
            return self.next_id


class Traffic:
    """A producer and a consumer on our broker until it is killed (or `stop`)."""

    def __init__(self, url: str, ledger: Ledger, rng: random.Random) -> None:
        self.url, self.ledger, self.rng = url, ledger, rng
        # the consumer stays this far behind the producer: near (its acknowledgements overtake the mirror's
        # backlog) or far (a backlog for the final comparison)
        self.behind = rng.choice([0, 10, 100, 1000])
        self.stopping = threading.Event()
        self.killed = threading.Event()
        work = (self._send, self._take)
        self.threads = [threading.Thread(target=self._guard(f), daemon=True) for f in work]
        for thread in self.threads:
            thread.start()

    def _guard(self, work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except (ProtonException, OSError) as exc:
                if not self.killed.is_set():  # only the kill may cut a client off
                    self.ledger.errors.append(f"{work.__name__}: {exc!r}")

        return run

    def _send(self) -> None:
        ledger = self.ledger
        with connect(self.url, timeout=10) as conn:
            sender = conn.create_sender(QUEUE)
            while not self.stopping.is_set():
                mid = ledger.new_id()
                sender.send(Message(body=mid, durable=True))
                with ledger.lock:
                    ledger.in_doubt_send.discard(mid)
                    ledger.confirmed.add(mid)

    def _take(self) -> None:
        ledger = self.ledger
        with connect(self.url, timeout=10) as conn:
            while not (self.stopping.is_set() or self.killed.is_set()):  # waiting, it may not see the kill
                with ledger.lock:
                    taken_all = len(ledger.consumed) + len(ledger.in_doubt_ack)
                    behind = taken_all + self.behind >= len(ledger.confirmed)
                if behind:
                    self.stopping.wait(0.05)
                    continue
                receiver = conn.create_receiver(QUEUE, credit=20)
                taken: list[int] = []
                for _ in range(self.rng.randint(1, 20)):
                    try:
                        msg = receiver.receive(timeout=0.5)
                    except Timeout:
                        break
                    with ledger.lock:
                        ledger.in_doubt_ack.add(msg.body)  # from here the ack may or may not land
                    receiver.accept()
                    taken.append(msg.body)
                receiver.close()  # answered once the acknowledgements are on disk
                with ledger.lock:
                    ledger.in_doubt_ack.difference_update(taken)
                    ledger.consumed.update(taken)

    def kill_after(self, broker: BrokerProcess, delay: float) -> None:
        def kill() -> None:
            self.killed.set()
            broker.kill()

        timer = threading.Timer(delay, kill)
        timer.start()
        timer.join()
        self.join()

    def stop(self) -> None:
        self.stopping.set()
        self.join()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(60)
            assert not thread.is_alive(), "a client thread hangs"


def more_sends(ledger: Ledger, count: int) -> Callable[[], bool]:
    floor = len(ledger.confirmed) + count
    return lambda: len(ledger.confirmed) >= floor


def pending_events(broker: BrokerProcess) -> int:
    return sum(int(s["pendingEvents"]) for s in call(broker, "getMirrorStatus")["sources"])


def test_our_mirror_to_artemis_through_repeated_kill_9_ends_with_the_same_messages(tmp_path: Path) -> None:
    o_port, a_port = free_port(), free_port()
    target = artemis(
        tmp_path / "artemis", a_port, config(a_port, addresses=ADDRESSES, extra=ARTEMIS_EXTRA)
    ).start()
    ours_xml = config(o_port, mirror_connection("artemis", a_port, children=WINDOW), addresses=ADDRESSES)
    source = ours(tmp_path / "ours", o_port, ours_xml.replace("</address-settings>", SNF_PAGES))
    rng = random.Random(int(os.environ.get("AMQP_MIRROR_SOAK_SEED", "0")) or None)
    ledger = Ledger()
    rounds = kills = 0
    try:
        source.start()
        wait_until(lambda: "AMQ111003" in source.log(), 30, "our mirror to connect to Artemis")
        end = time.monotonic() + SOAK_SECONDS
        while rounds == 0 or time.monotonic() < end:
            for _ in range(2):  # two kills a round, mid-stream
                traffic = Traffic(source.url, ledger, rng)
                wait_until(more_sends(ledger, rng.randint(50, 400)), 60, "sends confirmed before the kill")
                traffic.kill_after(source, rng.uniform(0.0, 0.5))
                kills += 1
                source.start()
            rounds += 1
        traffic = Traffic(source.url, ledger, rng)  # once more without a kill, then quiet
        wait_until(more_sends(ledger, 100), 60, "sends confirmed after the last kill")
        traffic.stop()
        assert not ledger.errors, ledger.errors
        wait_until(lambda: pending_events(source) == 0, 120, "our mirror to drain")
        wait_until(lambda: depth(target, QUEUE) == depth(source, QUEUE), 90, "the two to hold as many")
        on_ours, on_artemis = bodies(source, QUEUE), bodies(target, QUEUE)
        gave_up = target.all_logs().count("AMQ111012")
        logs = source.home.glob("broker-*.log")
        paged = sum(p.read_text(errors="replace").count("AMQ222038") for p in logs)
        summary = (
            f"{rounds} rounds, {kills} kills: {len(ledger.confirmed)} sends confirmed "
            f"(+{len(ledger.in_doubt_send)} in doubt), {len(ledger.consumed)} consumed "
            f"(+{len(ledger.in_doubt_ack)} in doubt); ours holds {len(on_ours)}, Artemis {len(on_artemis)}; "
            f"Artemis gave up {gave_up} acknowledgements; our mirror started paging {paged} times"
        )
        print(summary)
        assert len(on_ours) == len(set(on_ours)), f"a message twice on ours: {summary}"
        assert len(on_artemis) == len(set(on_artemis)), f"a message twice on Artemis: {summary}"
        held, mirrored = set(on_ours), set(on_artemis)
        missing = ledger.confirmed - ledger.consumed - ledger.in_doubt_ack - held
        assert not missing, f"confirmed, not consumed, not on ours: {sorted(missing)[:10]}; {summary}"
        unexpected = held - ledger.confirmed - ledger.in_doubt_send
        assert not unexpected, f"on ours, never confirmed nor in doubt: {sorted(unexpected)[:10]}; {summary}"
        assert not held & ledger.consumed, f"consumed and still on ours: {summary}"
        assert held - mirrored == set(), f"on ours, not on Artemis: {sorted(held - mirrored)[:10]}; {summary}"
        extra = mirrored - held
        assert not extra, (
            f"on Artemis, gone from ours: {sorted(extra)[:10]} ({len(extra & ledger.consumed)} of them "
            f"consumed on ours); {summary}"
        )
    finally:
        source.stop()
        target.stop()
