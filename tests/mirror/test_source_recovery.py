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
    assert q.paged == 0 and any(ref.page for ref in q.messages), "no unaccepted event read back from a page"
    assert len(c1.receive("orders", 5)) == 5  # five acknowledgements, younger than their messages
    assert q.messages[-1].page == 0 and net.server("dc1").paging.pages_of(SNF) > 0
    net.crash("dc1")  # the acknowledgements are in the journal, their messages in a page
    drained(net)
    tap.check_order()
    assert tap.resent(len(tap.links) - 1), "nothing was sent again: the crash was not where it should be"
    assert (net.depth("dc2", "bulk"), net.depth("dc2", "orders")) == (20, 0)
