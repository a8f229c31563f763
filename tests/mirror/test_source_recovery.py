"""The mirror source across kill -9 and restarts, on whole brokers joined in memory (tests/support/pair.py).

What the target receives is recorded delivery by delivery, link by link (`WireTap`), and checked against
the two promises of docs/mirror.md, "Order on the wire":

- on every link an acknowledgement (`postAck`) comes after its message: never a message after its own
  acknowledgement, never an acknowledgement of a message the target was never sent;
- after a crash the source sends again at most `max-in-flight-events` events that the target already
  had, and each message among them is one of the last that many messages the target was sent (what its
  duplicate cache holds: Artemis keeps `amqpCredits`, 1,000, ids per origin).

The source is killed where its state is split: store-and-forward (SNF) events partly in page files with
younger ones in the journal, events out on the link, events whose journal batch is on disk but not yet
handed to the SNF queue, and a second kill while the first one's events are being sent again. The pending
figures of `getMirrorStatus` are checked against the events themselves through paging and restarts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker_core.config import ConfigError
from broker_core.journal.segment import HEADER_SIZE
from broker_core.paging.reader import records
from broker_core.persistence import Callback
from mirror import decode, wire
from tests.support.paging import body_of
from tests.support.pair import Network

ADDRESSES = "".join(
    f'<address name="{n}"><anycast><queue name="{n}"/></anycast></address>' for n in ("bulk", "orders")
)
SNF = wire.snf_name("dc2")
PAD = "x" * 500  # about 1,450 bytes of memory per event: a 20,000-byte SNF holds 13 in memory


def snf_settings(max_size: int = 20_000, page_size: int = 6_000) -> str:
    return (
        f'<address-setting match="{SNF}"><max-size-bytes>{max_size}</max-size-bytes>'
        f"<page-size-bytes>{page_size}</page-size-bytes></address-setting>"
    )


def mirror(in_flight: int | None = None) -> str:
    if in_flight is None:
        return "<mirror/>"
    return f'<mirror><property key="max-in-flight-events" value="{in_flight}"/></mirror>'


class WireTap:
    """Stands in front of the target's mirror service at the SNF address: records each delivery's identity,
    then hands it on untouched. `on_message(body)` runs after a message is applied (to cut the link at a
    chosen point)."""

    def __init__(self, net: Network, name: str) -> None:
        services = net.brokers[name].services
        self.inner = services.at(SNF)
        assert self.inner is not None
        services.register(SNF, self)  # exact addresses are looked up before the mirror's prefix
        self.links: list[list[tuple[str, Any]]] = []  # per mirror link, in order: ("m", id) / ("a", id)
        self._states: list[object] = []
        self.on_message: Callable[[str], None] = lambda body: None

    def attach(self, peer: Any, link: Any, attach: Any, address: str) -> Any:
        answer = self.inner.attach(peer, link, attach, address)
        self._states.append(answer.state)
        self.links.append([])
        return answer

    def on_delivery(
        self, peer: Any, link: Any, state: object, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        assert self.inner is not None
        seen = self.links[self._states.index(state)]
        event = decode.decode_mirror_delivery(payload)
        self.inner.on_delivery(peer, link, state, delivery_id, settled, payload)
        if isinstance(event, decode.ReplicatedMessage):
            seen.append(("m", event.mr_id))
            self.on_message(body_of(event.payload))
        elif isinstance(event, decode.ControlEvent) and event.kind == wire.POST_ACK:
            seen.append(("a", event.message_id))

    # ------------------------------------------------------------------------------ the promises

    def check_order(self) -> None:
        """On each link every acknowledgement follows its message (sent on that link, or on an earlier
        one and not sent again after it)."""
        earlier: set[Any] = set()
        for n, events in enumerate(self.links):
            here: set[Any] = set()
            acked: set[Any] = set()
            for kind, mid in events:
                if kind == "m":
                    assert mid not in acked, f"link {n}: message {mid} sent after its acknowledgement"
                    here.add(mid)
                else:
                    assert mid in here or mid in earlier, f"link {n}: acknowledgement of {mid} before it"
                    acked.add(mid)
            earlier |= here

    def resent(self, link: int) -> list[tuple[str, Any]]:
        """Messages and acknowledgements on `link` that an earlier link already carried."""
        before = {event for events in self.links[:link] for event in events}
        return [event for event in self.links[link] if event in before]

    def check_resent(self, link: int, window: int) -> int:
        """At most `window` events of `link` were sent before, each message among the `window` latest
        messages the target had been sent (its duplicate cache); returns how many there were."""
        again = self.resent(link)
        assert len(again) <= window, f"{len(again)} events sent again after the restart, more than {window}"
        latest = [event for events in self.links[:link] for event in events if event[0] == "m"][-window:]
        beyond = [event for event in again if event[0] == "m" and event not in latest]
        assert not beyond, f"messages sent again beyond the {window} latest: {beyond[:5]}"
        return len(again)


class Hold:
    """A barrier on a broker's persistence (as a replica's acknowledgement is): what waits for the disk
    waits for `release` too."""

    def __init__(self) -> None:
        self.waiting: list[Callback] = []

    def wait(self, release: Callback) -> bool:
        self.waiting.append(release)
        return True

    def release(self) -> None:
        waiting, self.waiting = self.waiting, []
        for release in waiting:
            release()


@pytest.fixture
def net(tmp_path: Path) -> Network:
    return Network(tmp_path)


def source_status(net: Network) -> dict[str, Any]:
    (status,) = net.brokers["dc1"].mirror_status()["sources"]
    return dict(status)


def snf_queue(net: Network) -> Any:
    return net.server("dc1").queues[SNF]


def pair(net: Network, mirror_element: str, snf: str = "") -> None:
    """DC1 mirroring to DC2, both durable, neither started; DC1's SNF address limited by `snf` settings."""
    net.broker(
        "dc1",
        persistence=True,
        mirror_to="dc2",
        mirror=mirror_element,
        addresses=ADDRESSES,
        settings=snf or snf_settings(),
    )
    net.broker("dc2", persistence=True, addresses=ADDRESSES)


def start_target(net: Network, on_message: Callable[[str], None] = lambda body: None) -> WireTap:
    """DC2 up, its mirror service tapped before DC1's next try to connect reaches it, and that try."""
    net.start("dc2")
    tap = WireTap(net, "dc2")
    tap.on_message = on_message
    net.loop.advance(0.1)  # DC1 retries every 100 ms: once
    net.pump()
    return tap


def drained(net: Network) -> None:
    net.loop.advance(1)
    net.pump()
    assert snf_queue(net).depth == 0


def cut_at(net: Network, prefix: str) -> Callable[[str], None]:
    """For `WireTap.on_message`: the first time a message whose body starts with `prefix` is applied,
    close every socket into DC2 (from inside its delivery handling: no pump, the caller is in one)."""
    done = False

    def cut(body: str) -> None:
        nonlocal done
        if done or not body.startswith(prefix):
            return
        done = True
        for sock in list(net.sockets["dc2"]):
            if sock.transport is not None:
                sock.transport.close()

    return cut


# ---------------------------------------------------------------------------------------- ordering


def test_after_a_restart_an_ack_in_the_journal_waits_for_its_message_in_a_page(net: Network) -> None:
    """Paged events read back and still unaccepted, younger acknowledgements of them in the journal: the
    restarted source sends the messages first, then the acknowledgements."""
    pair(net, mirror(5))
    net.start("dc1")
    c1 = net.client("dc1")
    for i in range(20):
        c1.send("bulk", f"b{i}{PAD}")
    for i in range(5):
        c1.send("orders", f"o{i}{PAD}")
    net.pump()
    assert snf_queue(net).paged >= 5  # the orders' events wait in a page
    tap = start_target(net, on_message=cut_at(net, "o0"))  # cut when the first order arrives
    q = snf_queue(net)
    assert q.paged == 0 and any(ref.page for ref in q.refs()), "no unaccepted event read back from a page"
    assert len(c1.receive("orders", 5)) == 5  # five acknowledgements, younger than their messages
    assert q.refs()[-1].page == 0 and net.server("dc1").paging.pages_of(SNF) > 0
    net.crash("dc1")  # the acknowledgements are in the journal, their messages in a page
    drained(net)
    tap.check_order()
    assert tap.resent(len(tap.links) - 1), "nothing was sent again: the crash was not where it should be"
    assert (net.depth("dc2", "bulk"), net.depth("dc2", "orders")) == (20, 0)


def test_events_out_on_a_lost_link_go_first_on_the_next(net: Network) -> None:
    """The link is lost (no restart) with messages out and their acknowledgements waiting behind them:
    what was out goes back to the head, and the next link carries it before the acknowledgements."""
    pair(net, mirror(5), snf=snf_settings(max_size=10_000_000))  # all in memory
    net.start("dc1")
    c1 = net.client("dc1")
    for i in range(30):
        c1.send("orders", f"o{i}{PAD}")
    net.pump()
    assert len(c1.receive("orders", 20)) == 20
    tap = start_target(net, on_message=cut_at(net, "o3"))
    drained(net)
    assert len(tap.links) == 2 and tap.resent(1)
    tap.check_order()
    assert net.depth("dc2", "orders") == 10


def test_a_second_kill_while_the_first_ones_events_are_sent_again_keeps_the_order(net: Network) -> None:
    """Killed with acknowledgements and messages out on the link, then killed again while sending them
    again: every link still carries each message before its acknowledgement."""
    pair(net, mirror(5))
    net.start("dc1")
    c1 = net.client("dc1")
    for i in range(30):
        c1.send("orders", f"o{i}{PAD}")
    net.pump()
    tap = start_target(net, on_message=cut_at(net, "o12"))
    assert len(c1.receive("orders", 20)) == 20  # acknowledgements of sent, unsent and paged messages
    net.crash("dc1")
    tap.on_message = cut_at(net, "o20")
    net.loop.advance(0.1)  # connects, sends again, and is cut mid-way
    net.pump()
    net.crash("dc1")
    drained(net)
    tap.check_order()
    assert len(tap.links) >= 3
    assert net.depth("dc2", "orders") == 10 and net.depth("dc1", "orders") == 10


def test_events_whose_batch_is_on_disk_but_not_yet_handed_on_are_sent_in_order_after_a_kill(
    net: Network,
) -> None:
    """The SNF queue takes a batch's events only once the batch is on disk and past every barrier (a
    replica's acknowledgement): killed in between, the restarted source finds them in its journal and
    sends them in their place, behind what was already waiting."""
    pair(net, mirror(5))
    net.start("dc1")
    tap = start_target(net)
    c1 = net.client("dc1")
    for i in range(10):
        c1.send("orders", f"o{i}{PAD}")
    net.pump()
    hold = Hold()
    net.server("dc1").persistence.add_barrier(hold)
    assert len(c1.receive("orders", 10)) == 10  # ten acknowledgements written, not handed on
    for i in range(10, 15):
        c1.send("orders", f"o{i}{PAD}")
    net.pump()
    assert hold.waiting and snf_queue(net).depth == 0  # on disk, not on the SNF queue yet
    net.crash("dc1")
    drained(net)
    tap.check_order()
    assert [kind for kind, _ in tap.links[-1]] == ["a"] * 10 + ["m"] * 5  # each in its place, once
    assert net.depth("dc2", "orders") == 5


# ------------------------------------------------------------------------------ what is sent again


def test_a_kill_with_events_out_on_the_link_sends_again_no_more_than_the_window(net: Network) -> None:
    """3,000 events waiting, the target's Accepted held back: the source sends 1,000 (the default window)
    and waits; killed then, it sends again exactly those, the latest 1,000 the target was sent."""
    pair(net, mirror(), snf=snf_settings(max_size=10_000_000))
    net.start("dc1")
    c1 = net.client("dc1")
    for i in range(3000):
        c1.send("orders", f"o{i}")
        if i % 200 == 199:
            net.pump()  # the client's credit comes back
    net.start("dc2")
    hold = Hold()
    net.server("dc2").persistence.add_barrier(hold)  # DC2 applies what comes, and accepts nothing
    tap = WireTap(net, "dc2")
    net.loop.advance(0.1)
    net.pump()
    assert source_status(net)["eventsSent"] == 1000
    net.crash("dc1")
    net.server("dc2").persistence.remove_barrier(hold)
    hold.release()
    drained(net)
    assert tap.check_resent(1, 1000) == len(tap.links[0])  # all of them (messages; a few were topology)
    tap.check_order()
    assert net.depth("dc2", "orders") == 3000 and tap.links[1].count(tap.links[0][0]) == 1


def test_accepted_events_count_in_the_window_until_their_leaving_is_on_disk(net: Network) -> None:
    """An accepted event leaves the SNF queue by a journal record; until that record is on disk (here:
    past a barrier that holds), a crash would send it again, so it still counts in the window."""
    pair(net, mirror(50), snf=snf_settings(max_size=10_000_000))
    net.start("dc1")
    c1 = net.client("dc1")
    for i in range(200):
        c1.send("orders", f"o{i}")
    net.pump()
    hold = Hold()
    net.server("dc1").persistence.add_barrier(hold)
    start_target(net)
    for _ in range(5):  # a window: nothing more goes out while the barrier holds
        net.loop.advance(1)
        net.pump()
        assert source_status(net)["eventsSent"] == 50
    assert source_status(net)["eventsAccepted"] == 50
    hold.release()
    net.server("dc1").persistence.remove_barrier(hold)
    drained(net)
    assert net.depth("dc2", "orders") == 200


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_the_window_is_a_whole_number_of_at_least_one(net: Network, value: str) -> None:
    element = f'<mirror><property key="max-in-flight-events" value="{value}"/></mirror>'
    with pytest.raises(ConfigError) as refused:
        net.broker("dc1", mirror_to="dc2", mirror=element)
    (problem,) = [str(p) for p in refused.value.problems if p.severity == "error"]
    assert problem.startswith("broker.xml:") and "mirror/property/@value" in problem, problem
    assert "expected an integer" in problem, problem


# --------------------------------------------------------------------------------- pending figures


def pending_truth(net: Network) -> tuple[int, int]:
    """The pending events and their bytes, counted from the events themselves: the SNF queue's references
    (waiting, out on the link) and what its pages hold for it, read from the page files."""
    q = snf_queue(net)
    refs = list(q.refs())
    consumer = net.brokers["dc1"].mirror_sources()[0][0].consumer
    if consumer is not None:
        refs += list(consumer.inflight.values())
    events, size = len(refs), sum(len(ref.message.payload) for ref in refs)
    paging = net.server("dc1").paging
    store = paging.stores.get(SNF)
    if store is not None and q.id in store.cursors:
        cursor = store.cursors[q.id]
        for page in store.pages.values():
            if page.seq < cursor.page or q.id not in page.needed:
                continue
            start = cursor.offset if page.seq == cursor.page else HEADER_SIZE
            acked = cursor.acked.get(page.seq, set())
            for _, record in records(page.file, start, page.file.end):
                if q.id in record.queue_ids and record.message_id not in acked:
                    events += 1
                    size += len(record.body)
    return events, size


def check_pending(net: Network) -> tuple[int, int]:
    status = source_status(net)
    figures = status["pendingEvents"], status["pendingBytes"]
    assert figures == pending_truth(net)
    assert figures[1] >= 0
    return figures


def test_pending_bytes_are_exact_through_paging_and_restarts(net: Network) -> None:
    pair(net, mirror(5))
    net.start("dc1")
    c1 = net.client("dc1")
    for i in range(40):
        c1.send("orders", f"o{i}{PAD}")
    assert len(c1.receive("orders", 10)) == 10
    net.pump()
    events = check_pending(net)[0]
    assert events == source_status(net)["eventsQueued"] >= 50  # the topology it announced, 40 sends, 10 acks
    assert snf_queue(net).paged > 20  # most of them in pages
    net.crash("dc1")
    announced = source_status(net)["eventsQueued"]  # the topology again, as at every start
    assert check_pending(net)[0] == events + announced  # counted again from the journal and the pages
    tap = start_target(net, on_message=cut_at(net, "o30"))  # part of the backlog accepted
    assert tap.links and 0 < check_pending(net)[0] < events
    net.crash("dc1")
    check_pending(net)
    c1 = net.client("dc1")
    for i in range(40, 45):
        c1.send("orders", f"o{i}{PAD}")
    net.pump()
    check_pending(net)
    drained(net)
    assert check_pending(net) == (0, 0)


def test_pending_figures_are_zero_once_the_store_and_forward_queue_is_deleted(net: Network) -> None:
    pair(net, mirror())
    net.start("dc1")
    c1 = net.client("dc1")
    for i in range(40):
        c1.send("orders", f"o{i}{PAD}")
    net.pump()
    assert check_pending(net)[0] > 0 and snf_queue(net).paged > 0
    queue = snf_queue(net)
    net.server("dc1").delete_queue(SNF)
    net.pump()
    assert queue.depth == 0 and source_status(net)["pendingBytes"] == 0
    assert source_status(net)["pendingEvents"] == 0
