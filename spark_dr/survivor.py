"""The surviving broker as a repair sees it, over AMQP: a queue's depth, a scan of a queue that settles
each message as told, and sends of stored message bytes exactly as they are.

Every queue is named fully qualified (``address::queue``), for consumers and producers alike, so that
an anycast queue named apart from its address and one multicast subscription are each reached alone;
a queue the survivor does not have on that address is refused at attach (``Refused``), never
auto-created. Messages travel as raw bytes in both directions: a scan sees what the broker stores (its
header rewritten only on a redelivery), and a send hands the broker exactly the bytes given, which it
stores as they are (python-qpid-proton's ``Message`` would decode and encode them again, in encodings
of its own choosing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from proton import Delivery, Handler, Link, Timeout
from proton.utils import BlockingConnection, LinkDetached

from .identity import content_key, format_identity, repair_origin
from .plan import DEAD_LETTER, DELETE, EXPIRE

REJECT, RELEASE = "reject", "release"
ARTEMIS_NO_RESOURCE = "AMQ229067"  # Artemis's management: "Cannot find resource with name ..."
SEND_WINDOW = 256  # sends in flight before waiting for their outcomes


_REMOVALS = {  # plan.REMOVAL's actions: Artemis's QueueControl operations, which ours answers too
    DEAD_LETTER: "sendMessageToDeadLetterAddress",
    DELETE: "removeMessage",
    EXPIRE: "expireMessage",
}


class Refused(Exception):
    """The survivor refused a link to a fully qualified queue (no such queue on that address, not
    allowed, ...): the message says why."""


def fqqn(address: str, queue: str) -> str:
    return f"{address}::{queue}"


class Survivor:
    def __init__(self, url: str, user: str | None, password: str | None, timeout: float) -> None:
        from connections.cli import Management

        kwargs: dict[str, Any] = {"timeout": timeout}
        if user:
            kwargs.update(user=user, password=password, allowed_mechs="PLAIN")
        else:
            kwargs.update(allowed_mechs="ANONYMOUS")
        self.url, self.timeout = url, timeout
        self.conn = BlockingConnection(url, **kwargs)
        try:
            self.management = Management(url, user=user, password=password, timeout=timeout)
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        try:
            self.management.close()
        finally:
            self.conn.close()

    def depth(self, queue: str) -> int | None:
        """The queue's message count, None when the survivor has no such queue: our broker's
        statistics, or Artemis's ``countMessages`` (it has no ``getStatistics``)."""
        try:
            return int(self.management.call("getStatistics", [], resource=f"queue.{queue}")["message-count"])
        except RuntimeError as exc:  # the operation's error, as the broker put it
            if "does not exist" in str(exc):
                return None
            if "no operation getStatistics" not in str(exc):
                raise Refused(f"the survivor refused the statistics of queue {queue}: {exc}") from None
        try:
            return int(self.management.call("countMessages", [], resource=f"queue.{queue}"))
        except RuntimeError as exc:
            if ARTEMIS_NO_RESOURCE in str(exc):
                return None
            raise Refused(f"the survivor refused to count queue {queue}: {exc}") from None

    def remove(self, queue: str, message_id: int, action: str) -> bool:
        """Remove the message with the survivor's own id ``message_id`` from ``queue`` with management:
        moved to the queue's dead-letter address (``sendMessageToDeadLetterAddress``), deleted
        (``removeMessage``) or expired (``expireMessage``: to the expiry address, as the broker expires
        one). False when it does not wait there (consumed since, or out to a consumer)."""
        op = _REMOVALS[action]
        try:
            return bool(self.management.call(op, [message_id], resource=f"queue.{queue}"))
        except RuntimeError as exc:
            raise Refused(f"the survivor refused to remove message {message_id}: {exc}") from None

    def dead_letter_queues(self, queue: str) -> tuple[str | None, list[str]]:
        """The queue's dead-letter address (None: it has none) and the queues bound there (none: it
        has no queue, or does not exist): where a message moved there is kept."""
        try:
            address = self.management.get("deadLetterAddress", resource=f"queue.{queue}")
        except RuntimeError as exc:
            raise Refused(f"the survivor refused the dead-letter address of queue {queue}: {exc}") from None
        if not address:
            return None, []
        try:
            names = self.management.get("queueNames", resource=f"address.{address}")
        except RuntimeError:  # no such address
            return str(address), []
        return str(address), [str(n) for n in names or []]

    @contextmanager
    def _link(self, create: Callable[[], Any], name: str) -> Iterator[Any]:
        try:
            link = create()
        except LinkDetached as exc:
            cond = exc.link.remote_condition
            why = f"{cond.name}: {cond.description}" if cond is not None else str(exc)
            raise Refused(f"the survivor refused {name} ({why})") from None
        try:
            yield link
        finally:
            link.close()

    def scan(self, address: str, queue: str, count: int, decide: Callable[[list[Seen]], list[str]]) -> int:
        """Receive up to ``count`` messages of the queue unsettled (waiting at most the timeout for the
        last of them), then settle each as ``decide`` says of what was seen of them (content key, repair
        origin): released (not a delivery attempt: the delivery count does not grow), or rejected.
        Returns how many were received. Only what was seen is kept of a message, not its bytes."""
        if count <= 0:
            decide([])
            return 0
        collect = _Collect()
        name = fqqn(address, queue)
        with self._link(lambda: self.conn.create_receiver(name, credit=count, handler=collect), name):
            with suppress(Timeout):  # fewer than counted: the caller reports it
                self.conn.wait(lambda: len(collect.got) >= count, timeout=self.timeout)
            verdicts = decide([seen for _, seen in collect.got])
            for (delivery, _), verdict in zip(collect.got, verdicts, strict=True):
                delivery.update(Delivery.REJECTED if verdict == REJECT else Delivery.RELEASED)
                delivery.settle()
        return len(collect.got)

    def send(
        self, address: str, queue: str, payloads: list[bytes], accepted: Callable[[int], None]
    ) -> list[str]:
        """Send each payload as it is to the queue, durably stored by the broker; ``accepted(i)`` once
        the broker has Accepted payload ``i``. Returns a problem per payload not Accepted."""
        problems: list[str] = []
        name = fqqn(address, queue)
        with self._link(lambda: self.conn.create_sender(name), name) as sender:
            for first in range(0, len(payloads), SEND_WINDOW):
                window: list[Delivery] = [
                    sender.link.send(_Raw(p)) for p in payloads[first : first + SEND_WINDOW]
                ]
                with suppress(Timeout):  # what has no outcome by then is a problem
                    self.conn.wait(_all_settled(window), timeout=self.timeout)
                for i, delivery in enumerate(window, first):
                    if delivery.remote_state == Delivery.ACCEPTED:
                        accepted(i)
                    else:
                        problems.append(_outcome(delivery))
                    delivery.settle()
        return problems


@dataclass(frozen=True)
class Seen:
    """What a scan keeps of a message: its content key and the identity a repair stamped on it."""

    key: str
    origin: str | None


class _Collect(Handler):
    """A receiver's handler: what is seen of every complete delivery, the delivery left unsettled."""

    def __init__(self) -> None:
        super().__init__()
        self.got: list[tuple[Delivery, Seen]] = []

    def on_delivery(self, event: Any) -> None:
        delivery, link = event.delivery, event.link
        if delivery.readable and not delivery.partial:
            payload = bytes(link.recv(delivery.pending))  # the compiled codec takes bytes only
            link.advance()
            origin = repair_origin(payload)
            stamped = format_identity(*origin) if origin is not None else None
            self.got.append((delivery, Seen(content_key(payload), stamped)))


class _Raw:
    """Bytes for proton's ``Sender.send``: streamed as one delivery, unchanged."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def send(self, sender: Link, tag: str | None = None) -> Delivery:
        delivery = sender.delivery(tag or sender.delivery_tag())
        sender.stream(self.payload)
        sender.advance()
        return delivery


def _outcome(delivery: Delivery) -> str:
    state = delivery.remote_state
    if not state:
        return "no outcome from the broker in time"
    cond = delivery.remote.condition
    why = f" ({cond.name}: {cond.description})" if cond is not None else ""
    names: dict[Any, str] = {
        Delivery.REJECTED: "rejected",
        Delivery.RELEASED: "released",
        Delivery.MODIFIED: "modified",
    }
    return f"{names.get(state) or f'outcome {state}'}{why}"


def _all_settled(window: list[Delivery]) -> Callable[[], bool]:
    return lambda: all(d.remote_state for d in window)
