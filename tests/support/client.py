"""Blocking python-qpid-proton clients for tests: the independent AMQP implementation we test against."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from proton import Data, Message, Timeout, symbol
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender


@contextmanager
def connect(
    url: str, user: str | None = None, password: str | None = None, timeout: float = 10.0
) -> Iterator[BlockingConnection]:
    kwargs: dict[str, Any] = {"timeout": timeout}
    if user is not None:
        kwargs.update(user=user, password=password, allowed_mechs="PLAIN")
    else:
        kwargs.update(allowed_mechs="ANONYMOUS")
    conn = BlockingConnection(url, **kwargs)
    try:
        yield conn
    finally:
        conn.close()


def send(
    url: str,
    address: str,
    bodies: Iterable[Any],
    *,
    durable: bool = True,
    user: str | None = None,
    password: str | None = None,
    properties: dict[str, Any] | None = None,
    ttl: float | None = None,
) -> int:
    """Send each body as one message and wait for every outcome; returns how many were Accepted."""
    n = 0
    with connect(url, user, password) as conn:
        sender: BlockingSender = conn.create_sender(address)
        for body in bodies:
            msg = Message(body=body, durable=durable, properties=properties)
            if ttl is not None:
                msg.ttl = ttl
            sender.send(msg)
            n += 1
    return n


def receive(
    url: str,
    address: str,
    count: int,
    *,
    timeout: float = 10.0,
    user: str | None = None,
    password: str | None = None,
    accept: bool | None = True,
) -> list[Message]:
    """Receive up to `count` messages (stopping early when none arrives within `timeout`).

    accept: True accepts each, False releases each, None leaves them unsettled (they return to the
    queue when the connection closes: a way to look without consuming).

    Only proton's `Timeout` ends the loop quietly: a detached link or a lost connection raises, so
    that "no message" (an empty or short list) always means the link was up and nothing came.
    """
    out: list[Message] = []
    with connect(url, user, password) as conn:
        receiver: BlockingReceiver = conn.create_receiver(address, credit=min(count, 500) or 1)
        while len(out) < count:
            try:
                msg = receiver.receive(timeout=timeout)
            except Timeout:
                break
            out.append(msg)
            try:
                if accept:
                    receiver.accept()
                elif accept is False:
                    receiver.release()
            except IndexError:
                pass  # the peer sent it pre-settled (e.g. the Proton C example broker)
    return out


class Capabilities(LinkOption):
    """Set capabilities on the terminus at the broker's end (target for senders, source for receivers)."""

    def __init__(self, *caps: str) -> None:
        self.caps = caps

    def apply(self, link: Any) -> None:
        terminus = link.target if link.is_sender else link.source
        data = terminus.capabilities
        data.put_array(False, Data.SYMBOL)
        data.enter()
        for c in self.caps:
            data.put_symbol(symbol(c))
        data.exit()


def send_all(
    url: str,
    address: str,
    bodies: list[Any],
    *,
    durable: bool = True,
    timeout: float = 20.0,
    properties: Callable[[Any], dict[str, Any]] | None = None,
) -> dict[int, str]:
    """Send every body as fast as credit allows, each unsettled, and wait (up to `timeout`) for their
    outcomes: index -> "accepted", "rejected:<condition>", "released", "modified" or "none" (no outcome
    by the deadline, or no credit to send it). `properties(body)`: each message's application
    properties."""
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    outcomes = {i: "none" for i in range(len(bodies))}

    class Sender(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(auto_accept=False)
            self.next = 0
            self.tags: dict[Any, int] = {}
            self.settled = 0
            self.conn: Any = None

        def on_start(self, event: Any) -> None:
            self.conn = event.container.connect(url, allowed_mechs="ANONYMOUS")
            event.container.create_sender(self.conn, address)
            event.container.schedule(timeout, self)

        def on_timer_task(self, event: Any) -> None:
            self.conn.close()

        def on_sendable(self, event: Any) -> None:
            while event.sender.credit and self.next < len(bodies):
                body = bodies[self.next]
                props = properties(body) if properties is not None else None
                delivery = event.sender.send(Message(body=body, durable=durable, properties=props))
                self.tags[delivery.tag] = self.next
                self.next += 1

        def _settle(self, event: Any, outcome: str) -> None:
            index = self.tags.get(event.delivery.tag)
            if index is not None:
                outcomes[index] = outcome
                self.settled += 1
            if self.settled == len(bodies):
                self.conn.close()

        def on_accepted(self, event: Any) -> None:
            self._settle(event, "accepted")

        def on_rejected(self, event: Any) -> None:
            condition = event.delivery.remote.condition
            self._settle(event, f"rejected:{condition.name if condition else ''}")

        def on_released(self, event: Any) -> None:
            self._settle(event, "released")

        def on_connection_closed(self, event: Any) -> None:
            event.container.stop()

        def on_transport_error(self, event: Any) -> None:
            event.container.stop()

    Container(Sender()).run()
    return outcomes


class BackgroundSender:
    """Sends `count` messages on one link from a thread of its own, each unsettled, as fast as credit
    allows, while the test watches: `outcomes` (index -> "accepted", "rejected:<condition>", "released")
    fills as they come, `credit` is the link's. `address` None sends through the anonymous relay, each
    message to `to(i)`. Stops when every send has its outcome, or at `deadline` seconds."""

    def __init__(
        self,
        url: str,
        address: str | None,
        count: int,
        body: Callable[[int], Any],
        *,
        to: Callable[[int], str] | None = None,
        durable: bool = True,
        deadline: float = 120.0,
    ) -> None:
        import threading

        from proton.handlers import MessagingHandler
        from proton.reactor import Container

        self.outcomes: dict[int, str] = {}
        self.sent = 0
        self.credit = -1
        owner = self

        class Handler(MessagingHandler):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__(auto_accept=False)
                self.tags: dict[Any, int] = {}
                self.conn: Any = None

            def on_start(self, event: Any) -> None:
                self.conn = event.container.connect(url, allowed_mechs="ANONYMOUS")
                event.container.create_sender(self.conn, address)
                event.container.schedule(deadline, self)

            def on_timer_task(self, event: Any) -> None:
                self.conn.close()

            def on_link_flow(self, event: Any) -> None:
                owner.credit = event.link.credit

            def on_sendable(self, event: Any) -> None:
                sender = event.sender
                while sender.credit and owner.sent < count:
                    i = owner.sent
                    msg = Message(body=body(i), durable=durable, address=to(i) if to else None)
                    self.tags[sender.send(msg).tag] = i
                    owner.sent += 1
                owner.credit = sender.credit

            def _outcome(self, event: Any, outcome: str) -> None:
                owner.outcomes[self.tags[event.delivery.tag]] = outcome
                if len(owner.outcomes) == count:
                    self.conn.close()

            def on_accepted(self, event: Any) -> None:
                self._outcome(event, "accepted")

            def on_rejected(self, event: Any) -> None:
                condition = event.delivery.remote.condition
                self._outcome(event, f"rejected:{condition.name if condition else ''}")

            def on_released(self, event: Any) -> None:
                self._outcome(event, "released")

            def on_connection_closed(self, event: Any) -> None:
                event.container.stop()

            def on_transport_error(self, event: Any) -> None:
                event.container.stop()

        self.thread = threading.Thread(target=Container(Handler()).run, daemon=True)
        self.thread.start()

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()

    @property
    def stalled(self) -> bool:
        """Everything sent has its outcome and the link has no credit left (the broker holds it)."""
        return self.credit == 0 and len(self.outcomes) == self.sent
