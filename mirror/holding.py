"""Replicated messages no queue here would take yet: held unsettled until one does (docs/mirror.md).

An Artemis source can send a message before the addAddress and createQueue of the queue it went to: the
queue is created (and its events queued for the mirror) when the client's link attaches, in one
operation context, and the client's first message is routed in the session's; each context adds its
references to the store-and-forward queue when its journal writes complete, on its own executor, so
under load the message can overtake its queue's events on the link. Routed at once it would reach no
queue here; Artemis's own target drops it and answers Accepted. Here it is held instead:

- A replicated message is held when no queue here would take it: its address is missing or has no
  queue, or a queue it names (`x-opt-amq-mr-trg-q`) is missing; and so is a later message to an address
  with messages held on the same link (per link and address, they are stored in the order they came).
  Held means not applied, not counted as seen by duplicate detection, and not settled: a lost link
  makes the source send it again, and a restart loses nothing, since nothing held was ever Accepted.
- A queue made at its address (by a createQueue on any link, or by hand here) releases it: it is
  applied, then Accepted once durable.
- Its acknowledgement becomes an ack retry that waits for it (no attempt is counted while its message
  is held) and matches once it is stored. One exception: an acknowledgement on the queue named like the
  message's address (an anycast or a temporary queue: the only queue the message was on) when no such
  queue exists here says the source consumed the message before any queue here could take it: the
  held message is Accepted without being stored (a temporary queue's replies are never announced).
- Bounds, per link, acceptor URI parameters like the other mirror ones:
  - `mirrorMaxHeldMessages` (default 10,000): while that many are held, the link's credit is not topped
    up (WARN AMQ951051); the source keeps the rest in its store-and-forward queue, on its disk. Nothing
    is dropped; credit comes back when fewer are held (INFO AMQ951053).
  - `mirrorHoldTimeout` (ms, default 60,000): a message held that long was sent for a queue this
    broker does not have (a temporary queue of the source, or a queue the operator did not create here
    with `queue-creation="false"`, or one whose creation failed here). Holding on would stop the mirror
    of every other address for one that cannot be stored; Artemis's target drops such a message at once.
    Here it is stored on its address's dead-letter address instead (with its mirror identity), then
    Accepted: kept for the operator, never lost (WARN AMQ951052, once a minute per address). Without a
    dead-letter address that has a queue it stays held (WARN AMQ951054), and the link's credit runs out
    at `mirrorMaxHeldMessages`: the source keeps the rest, nothing is lost, and the log says why.
Every hold and how each ended is counted; the first hold of each address is logged once (AMQ951050).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker_core.services import ServiceLink

from .trust import OriginTrust

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link, Session
    from broker_core.services import Peer

log = logging.getLogger("broker.mirror")

HELD = 2  # what `MirrorTarget.apply` returns for a message it held (False / True: accept now / once durable)

DEFAULT_MAX_HELD = 10000
DEFAULT_HOLD_TIMEOUT_MS = 60000
MAX_HELD_PARAMETER = "mirrorMaxHeldMessages"
HOLD_TIMEOUT_PARAMETER = "mirrorHoldTimeout"

# how a hold ended (the counters)
STORED = "held_stored"  # its queue came: applied and Accepted
CONSUMED = "held_consumed_at_source"  # acknowledged on its one queue before that queue existed here
DEAD_LETTERED = "held_dead_lettered"  # no queue here in the hold timeout: on its dead-letter address
LINK_LOST = "held_link_lost"  # its link went away: the source sends it again

FIRST_HOLDS_REMEMBERED = 10000  # addresses whose first hold was logged (then forgotten, all at once)
WARN_INTERVAL = 60.0  # seconds between two timeout lines of one address

# settle(session, delivery id, settled, durable): Accept a stored delivery, once durable if `durable`
Settle = Callable[["Session", int, bool, bool], None]
# apply(remote id, payload, trust, holding) -> False / True / HELD: `MirrorTarget.apply`
Apply = Callable[[str, bytes, OriginTrust, "LinkHolding"], int]
# dead_letter(remote id, payload) -> the dead-letter address it was stored on, or None: none with a queue
DeadLetter = Callable[[str, bytes], "str | None"]


class HeldMessage:
    __slots__ = (
        "address",
        "delivery_id",
        "mr_id",
        "origin",
        "owner",
        "payload",
        "session",
        "settled",
        "since",
    )

    def __init__(
        self,
        owner: LinkHolding,
        origin: str,
        mr_id: int,
        address: str,
        session: Session,
        delivery_id: int,
        settled: bool,
        payload: bytes,
        since: float,
    ) -> None:
        self.owner = owner
        self.origin = origin
        self.mr_id = mr_id
        self.address = address
        self.session = session
        self.delivery_id = delivery_id
        self.settled = settled
        self.payload = payload
        self.since = since


class LinkHolding:
    """One mirror link's held messages, per address in the order they came."""

    __slots__ = (
        "by_address",
        "count",
        "incoming",
        "limit",
        "link",
        "paused",
        "peer",
        "releasing",
        "remote_id",
        "settle",
        "timeout",
        "trust",
    )

    def __init__(
        self,
        peer: Peer,
        link: Link,
        remote_id: str,
        trust: OriginTrust,
        settle: Settle,
        limit: int = DEFAULT_MAX_HELD,
        timeout: float = DEFAULT_HOLD_TIMEOUT_MS / 1000,
    ) -> None:
        self.peer = peer
        self.link = link
        self.remote_id = remote_id
        self.trust = trust
        self.settle = settle
        self.limit = limit
        self.timeout = timeout
        self.by_address: dict[str, deque[HeldMessage]] = {}
        self.count = 0
        self.paused = False  # credit withheld: `limit` messages are held
        self.releasing: str | None = None  # the address whose held messages are being applied
        self.incoming: tuple[str, int, str] | None = None  # (origin, id, address) the target just held

    def waiting(self, address: str) -> bool:
        """Whether a message to `address` must wait behind messages held before it."""
        return address != self.releasing and address in self.by_address

    def hold_next(self, origin: str, mr_id: int, address: str) -> None:
        """The target could not store this message: `Holding.hold` keeps the delivery it came in."""
        self.incoming = (origin, mr_id, address)

    def alive(self) -> bool:
        link, peer = self.link, self.peer
        return not (
            peer.closed
            or peer.conn.closed
            or link.closed_locally
            or link.closed_remotely
            or link.session.ended_locally
        )

    def _service_link(self) -> ServiceLink | None:
        context = self.link.context
        return context if isinstance(context, ServiceLink) else None

    def pause(self) -> None:
        """Stop topping the link's credit up (the endpoint asks the service link before each top-up)."""
        sl = self._service_link()
        if sl is not None:
            sl.paused = True
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        sl = self._service_link()
        if sl is None:
            return
        sl.paused = False
        if self.alive() and self.link.credit <= sl.credit_low:
            self.peer.conn.flow(self.link, credit=sl.credit_window)
            self.peer.mark_dirty()


class Holding:
    """Every mirror link's held messages: release, bounds, counters and log lines."""

    def __init__(self, apply: Apply, mark_seen: Callable[[str, int], None], dead_letter: DeadLetter) -> None:
        self.apply = apply
        self.mark_seen = mark_seen  # an id settled without being stored: a copy sent again is a duplicate
        self.dead_letter = dead_letter  # a message held too long: stored on its dead-letter address
        self.count = 0  # held now, on every link
        self.links: set[LinkHolding] = set()  # the links holding something
        self.by_identity: dict[tuple[str, int], HeldMessage] = {}
        self.changed: set[str] = set()  # addresses that got a queue since the last release
        self.stats = {"held": 0, STORED: 0, CONSUMED: 0, DEAD_LETTERED: 0, LINK_LOST: 0}
        self.held_by_origin: dict[str, int] = {}
        self.logged: set[str] = set()  # addresses whose first hold was logged
        self.dead_lettered: dict[str, tuple[float, int]] = {}  # address -> (last line, held since then)
        self.no_dead_letter: dict[str, float] = {}  # address -> when AMQ951054 last said it

    # ------------------------------------------------------------------------------- holding

    def hold(
        self,
        owner: LinkHolding,
        session: Session,
        delivery_id: int,
        settled: bool,
        payload: bytes,
        now: float,
    ) -> None:
        """Keep the delivery the target just held (`LinkHolding.hold_next`), unsettled."""
        assert owner.incoming is not None
        origin, mr_id, address = owner.incoming
        owner.incoming = None
        entry = HeldMessage(owner, origin, mr_id, address, session, delivery_id, settled, payload, now)
        entries = owner.by_address.get(address)
        if entries is None:
            entries = owner.by_address[address] = deque()
        entries.append(entry)
        owner.count += 1
        self.count += 1
        self.links.add(owner)
        self.by_identity[(origin, mr_id)] = entry
        self.stats["held"] += 1
        self.held_by_origin[origin] = self.held_by_origin.get(origin, 0) + 1
        if address not in self.logged:
            if len(self.logged) >= FIRST_HOLDS_REMEMBERED:
                self.logged.clear()
            self.logged.add(address)
            log.info(
                "AMQ951050: mirror from %s: message %d held: no queue here takes address %s yet; it is "
                "stored when one is made (the source's createQueue, or by hand), and Accepted then",
                owner.remote_id,
                mr_id,
                address,
            )
        if owner.count >= owner.limit and not owner.paused:
            owner.pause()
            log.warning(
                "AMQ951051: mirror from %s: %d messages held for addresses with no queue here (%s): credit "
                "withheld, the source keeps the rest, until their queues exist here (limit %s=%d)",
                owner.remote_id,
                owner.count,
                ", ".join(sorted(owner.by_address)[:10]),
                MAX_HELD_PARAMETER,
                owner.limit,
            )

    def find(self, origin: str, mr_id: int) -> HeldMessage | None:
        return self.by_identity.get((origin, mr_id)) if self.count else None

    def lowest(self, origin: str) -> int | None:
        """The lowest id of `origin` held: duplicate detection's persisted floor must stay below it."""
        if not self.count:
            return None
        ids = [mid for (o, mid) in self.by_identity if o == origin]
        return min(ids) if ids else None

    # ------------------------------------------------------------------------------- ending

    def _end(self, entry: HeldMessage, outcome: str) -> None:
        owner = entry.owner
        entries = owner.by_address[entry.address]
        if entries[0] is entry:
            entries.popleft()
        else:
            entries.remove(entry)
        if not entries:
            del owner.by_address[entry.address]
        owner.count -= 1
        self.count -= 1
        key = (entry.origin, entry.mr_id)
        if self.by_identity.get(key) is entry:
            del self.by_identity[key]
        self.stats[outcome] += 1
        if not owner.count:
            self.links.discard(owner)
        if owner.paused and owner.count < owner.limit:
            owner.resume()
            log.info(
                "AMQ951053: mirror from %s: %d messages held: credit resumed", owner.remote_id, owner.count
            )

    def _accept_unstored(self, entry: HeldMessage, outcome: str) -> None:
        """Settle a held message Accepted without storing it (its source no longer needs it here)."""
        self._end(entry, outcome)
        self.mark_seen(entry.origin, entry.mr_id)
        owner = entry.owner
        if not entry.settled and owner.alive():
            owner.peer.accept_later(entry.session, entry.delivery_id)

    def consumed(self, entry: HeldMessage) -> None:
        """Its source acknowledged it on its only queue, which does not exist here."""
        self._accept_unstored(entry, CONSUMED)

    def release_changed(self) -> None:
        """Apply what the queues made since the last call let us store, in order, per link and address."""
        changed, self.changed = self.changed, set()
        for owner in list(self.links):
            if owner.alive():
                for address in [a for a in owner.by_address if a in changed]:
                    self._release(owner, address)

    def _release(self, owner: LinkHolding, address: str) -> None:
        owner.releasing = address
        try:
            while owner.by_address.get(address):
                entry = owner.by_address[address][0]
                outcome = self.apply(owner.remote_id, entry.payload, owner.trust, owner)
                if outcome == HELD:
                    owner.incoming = None
                    return  # still not (a queue it names is missing): it and those behind it wait
                self._end(entry, STORED)
                owner.settle(entry.session, entry.delivery_id, entry.settled, bool(outcome))
        finally:
            owner.releasing = None

    def tick(self, now: float) -> None:
        """On a timer: forget the held messages of links gone; dead-letter those held too long."""
        if self.changed:
            self.release_changed()
        for owner in list(self.links):
            if not owner.alive():
                for entries in list(owner.by_address.values()):
                    for entry in list(entries):
                        self._end(entry, LINK_LOST)
                continue
            deadline = now - owner.timeout
            for address, entries in list(owner.by_address.items()):
                expired = 0
                stored_on = None
                while entries and entries[0].since <= deadline:
                    entry = entries[0]
                    stored_on = self.dead_letter(owner.remote_id, entry.payload)
                    if stored_on is None:
                        self._warn_no_dead_letter(owner, address, now)
                        break  # it and those behind it stay held
                    self._end(entry, DEAD_LETTERED)
                    owner.settle(entry.session, entry.delivery_id, entry.settled, True)
                    expired += 1
                if expired and stored_on is not None:
                    self._warn_dead_lettered(owner, address, stored_on, expired, now)

    def _warn_dead_lettered(self, owner: LinkHolding, address: str, dla: str, count: int, now: float) -> None:
        last, since = self.dead_lettered.get(address, (0.0, 0))
        if last and now - last < WARN_INTERVAL:
            self.dead_lettered[address] = (last, since + count)
            return
        if len(self.dead_lettered) >= FIRST_HOLDS_REMEMBERED:
            self.dead_lettered.clear()
        self.dead_lettered[address] = (now, 0)
        log.warning(
            "AMQ951052: mirror from %s: %d messages for address %s stored on its dead-letter address %s: "
            "no queue here took them within %g s (%s); a temporary queue of the source, or a queue not "
            'created here (queue-creation="false"): create it here to keep what comes next there',
            owner.remote_id,
            count + since,
            address,
            dla,
            owner.timeout,
            HOLD_TIMEOUT_PARAMETER,
        )

    def _warn_no_dead_letter(self, owner: LinkHolding, address: str, now: float) -> None:
        last = self.no_dead_letter.get(address, 0.0)
        if last and now - last < WARN_INTERVAL:
            return
        if len(self.no_dead_letter) >= FIRST_HOLDS_REMEMBERED:
            self.no_dead_letter.clear()
        self.no_dead_letter[address] = now
        log.warning(
            "AMQ951054: mirror from %s: messages for address %s held for over %g s stay held: no queue here "
            "takes them and there is no dead-letter address with a queue to keep them; create the queue "
            "here, or a dead-letter address for it (held messages beyond %s=%d stop the link's credit)",
            owner.remote_id,
            address,
            owner.timeout,
            MAX_HELD_PARAMETER,
            owner.limit,
        )

    def status(self) -> dict[str, int]:
        return {
            **self.stats,
            "heldNow": self.count,
            "linksWithoutCredit": sum(1 for owner in self.links if owner.paused),
        }
