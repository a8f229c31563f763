"""The target's door: remote brokers' mirror links, answered and fed as a service at the mirror prefix.

A link whose target address starts with `$ACTIVEMQ_ARTEMIS_MIRROR` is a mirror link, as Artemis decides
(spec §1.3): its user needs SEND on that address (checked first, as Artemis does), the link must desire
`amq.mirror` and name its broker. Its user also needs MANAGE on that address, which Artemis does not ask:
a mirror link creates and deletes addresses and queues and acknowledges messages with the broker's own
authority, so send permission alone must not open one (a deliberate hardening beyond Artemis).

A link also claims its remote broker (the id it announces): it is refused when that id is too long to
key anything by, when the remote is bound to another mirror address or user (`trust.RemoteBindings`),
or when the remote has a live mirror link here already (`amqp:resource-locked`: one broker's traffic
comes through one link; a source reconnecting while its old connection lingers is let in once that
connection goes, at the latest after the acceptor's idle timeout).

Every delivery is applied by the `MirrorTarget` and Accepted once what it journalled is durable; the
Accepted of a whole journal batch costs one callback, not one each. A replicated message no queue here
takes yet is held on its link, unsettled, until a queue made at its address lets it be stored
(`holding.py`). An event of an origin broker the link may not speak for (`trust.py`) closes the link
instead: nothing of it is applied, and the source keeps it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker_core.amqp import errors
from broker_core.errors import BrokerError, InvalidField, ResourceLocked, Unauthorized
from broker_core.events import Cause, Observer
from broker_core.services import Answer

from .attach import mirror_refusal, mirror_target_answer, remote_broker_id, send_permission_refusal
from .holding import HELD, Holding, LinkHolding
from .target import UntrustedOrigin
from .trust import (
    MAX_BROKER_ID_BYTES,
    REMOTE_KEY_PREFIX,
    TRUST_PARAMETER,
    OriginTrust,
    RefusalLog,
    broker_id_too_long,
)

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link, Session
    from broker_core.amqp.performatives import Attach
    from broker_core.queues import Queue
    from broker_core.server import Server
    from broker_core.services import Peer

    from .target import MirrorTarget

log = logging.getLogger("broker.mirror")

# A mirror link carries a whole broker's traffic and catch-up backlogs: a deeper credit window than a
# client link keeps the source streaming while this side journals (measured: bench/).
MIRROR_CREDIT_WINDOW = 5000


class MirrorLink:
    """One remote broker's mirror link into this broker, its held messages, and the deliveries
    awaiting their batch."""

    __slots__ = ("batch", "batch_at", "batch_session", "held", "remote_id", "trust")

    def __init__(self, remote_id: str, trust: OriginTrust) -> None:
        self.remote_id = remote_id
        self.trust = trust
        self.held: LinkHolding | None = None  # set once the link is known (`MirrorLinks.attach`)
        self.batch: list[int] | None = None  # delivery ids whose journal batch is not on disk yet
        self.batch_at = -1  # persistence.flushes when that batch was started
        self.batch_session: Session | None = None


class LiveLink:
    """The mirror link a remote broker has here: whose, on which address."""

    __slots__ = ("address", "link", "peer")

    def __init__(self, peer: Peer, link: Link, address: str) -> None:
        self.peer = peer
        self.link = link
        self.address = address

    def alive(self) -> bool:
        link, session = self.link, self.link.session
        return not (
            self.peer.closed
            or link.closed_locally
            or link.closed_remotely
            or session.ended_locally
            or session.ended_remotely
        )


class QueuesMade(Observer):
    """Notes the addresses that got a queue (whatever made it) while messages are held."""

    def __init__(self, holding: Holding) -> None:
        self.holding = holding

    def queue_added(self, queue: Queue, cause: Cause | None) -> None:
        if self.holding.count:
            self.holding.changed.add(queue.address)


class MirrorLinks:
    """The `LinkService` registered for the mirror prefix."""

    def __init__(
        self, server: Server, target: MirrorTarget, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.server = server
        self.target = target
        self.clock = clock
        self.refusals = RefusalLog()
        self.live: dict[str, LiveLink] = {}  # the mirror link of each remote broker, by its id
        self.holding = target.holding = Holding(target.apply, target.mark_seen, target.dead_letter_held)
        server.add_observer(QueuesMade(self.holding))

    def mirrors_to(self, broker_id: str) -> bool:
        """Whether one of this broker's own mirrors goes to `broker_id` (as its link last announced)."""
        meta = self.server.meta
        wanted = broker_id.encode()
        return any(k.startswith(REMOTE_KEY_PREFIX) and v == wanted for k, v in list(meta.items()))

    def attach(self, peer: Peer, link: Link, attach: Attach, address: str) -> Answer:
        try:
            self.server.check(peer.user, address, "send")
        except Unauthorized as exc:
            refused = send_permission_refusal(exc.description)
            log.warning("%s: mirror link %r refused: %s", peer.name, link.name, refused.description)
            raise refused from exc
        try:
            self.server.check(peer.user, address, "manage")
        except Unauthorized as exc:
            refused = Unauthorized(
                f"a mirror link needs the manage permission as well as send: {exc.description}"
            )
            log.warning("%s: mirror link %r refused: %s", peer.name, link.name, refused.description)
            raise refused from exc
        refusal = mirror_refusal(attach)
        if refusal is not None:
            log.warning("%s: mirror link %r refused: %s", peer.name, link.name, refusal.description)
            raise refusal
        remote = str(remote_broker_id(attach))
        node_id = self.server.node_id
        if (
            remote == node_id
        ):  # it would speak for our own messages (origin trust): no broker mirrors to itself
            refused = Unauthorized(f"a mirror link from broker {remote} claims this broker's own id")
            log.warning("%s: mirror link %r refused: %s", peer.name, link.name, refused.description)
            raise refused
        self._claim(peer, link, remote, address)
        log.info(
            "%s: mirror link from broker %s attached on %s as user %s",
            peer.name,
            remote,
            address,
            peer.user or "<anonymous>",
        )
        reply = mirror_target_answer(attach, node_id, handle=0)
        acceptor = peer.acceptor
        trust = OriginTrust(remote, node_id, acceptor.mirror_trusted_origins, self.mirrors_to)
        state = MirrorLink(remote, trust)

        def settle(session: Session, delivery_id: int, settled: bool, durable: bool) -> None:
            self._settle(peer, state, session, delivery_id, settled, durable)

        limit, timeout = acceptor.mirror_max_held_messages, acceptor.mirror_hold_timeout / 1000
        state.held = LinkHolding(peer, link, remote, trust, settle, limit, timeout)
        return Answer(reply, state, max(peer.credit_window, MIRROR_CREDIT_WINDOW))

    def _claim(self, peer: Peer, link: Link, remote: str, address: str) -> None:
        """Take `remote` for this link, or refuse the link: its id too long to key anything by, its remote
        bound to another address or user, or with a live link here already. A remote is bound to the
        address and user of its first link (persisted)."""
        user = peer.user
        refused: BrokerError
        if broker_id_too_long(remote):
            size = len(remote.encode())
            refused = InvalidField(
                f"a mirror link with a broker id of {size:,} bytes: at most {MAX_BROKER_ID_BYTES}"
            )
            log.warning("MIR106: %s: mirror link %r refused: %s", peer.name, link.name, refused.description)
            raise refused
        bound = self.target.bindings.conflict(remote, address, user)
        if bound is not None:
            refused = Unauthorized(
                f"broker {remote} mirrors to this broker through {bound[0]} as user {_user(bound[1])}, "
                f"not through {address} as user {_user(user)}"
            )
            log.warning(
                "MIR104: %s: mirror link %r refused: %s; if that broker now legitimately comes this way, "
                "forget its binding (amqp-mirror connections forget-remote %s) and its next link binds it",
                peer.name,
                link.name,
                refused.description,
                remote,
            )
            raise refused
        live = self.live.get(remote)
        if live is not None and live.alive():
            refused = ResourceLocked(
                f"broker {remote} already has a mirror link here (from {live.peer.name} on {live.address})"
            )
            log.warning(
                "MIR105: %s: mirror link %r refused: %s; a source that reconnects while its old "
                "connection lingers gets in once that connection goes",
                peer.name,
                link.name,
                refused.description,
            )
            raise refused
        self.target.bindings.bind(remote, address, user)
        if len(self.live) >= 64:  # remotes whose links are gone are forgotten now and then
            self.live = {r: lk for r, lk in self.live.items() if lk.alive()}
        self.live[remote] = LiveLink(peer, link, address)

    def on_delivery(
        self, peer: Peer, link: Link, state: object, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        assert isinstance(state, MirrorLink)  # never relayed: the prefix is looked up at attach only
        if link.closed_locally:
            return  # refused: what was in flight stays unsettled, and the source sends it again
        held = state.held
        try:
            outcome = self.target.apply(state.remote_id, payload, state.trust, held)
        except UntrustedOrigin as exc:
            self._refuse(peer, link, exc)
            return
        holding = self.holding
        if outcome == HELD:
            assert held is not None
            holding.hold(held, link.session, delivery_id, settled, payload, self.clock())
        else:
            self._settle(peer, state, link.session, delivery_id, settled, bool(outcome))
        if holding.changed:  # a queue was made: what waited for it is stored now, in order
            holding.release_changed()

    def tick(self) -> None:
        """On the broker's retry timer: release, forget and time out held messages (`holding.py`)."""
        self.holding.tick(self.clock())

    def _settle(
        self, peer: Peer, state: MirrorLink, session: Session, delivery_id: int, settled: bool, durable: bool
    ) -> None:
        """Accept a delivery applied, once what it journalled is on disk (`durable`), or now."""
        if settled:
            return
        if not durable:
            peer.accept_later(session, delivery_id)
            return
        # Disk only, no confirmation condition: a sync mirror of ours must never hold up what we owe
        # another broker's mirror (two brokers mirroring each other synchronously would wait for ever).
        persistence = self.server.persistence
        batch = state.batch
        if batch is None or state.batch_at != persistence.flushes or state.batch_session is not session:
            batch = state.batch = []
            state.batch_at, state.batch_session = persistence.flushes, session
            persistence.after_durable(lambda: _accept_all(peer, session, batch))
        batch.append(delivery_id)

    def _refuse(self, peer: Peer, link: Link, exc: UntrustedOrigin) -> None:
        """Close the link: its remote spoke for an origin it may not (nothing of the event was applied)."""
        peer.conn.detach(link, closed=True, condition=errors.UNAUTHORIZED_ACCESS, description=exc.description)
        peer.mark_dirty()
        since = self.refusals.due(exc.remote, exc.origin)
        if since is None:
            return
        log.warning(
            "MIR101: %s: mirror link %r from broker %s closed: it sent %s of origin %s, a broker it may not "
            "speak for; allow it with the acceptor parameter %s=%s:%s (a chain or ring)%s",
            peer.name,
            link.name,
            exc.remote,
            exc.what,
            exc.origin,
            TRUST_PARAMETER,
            exc.remote,
            exc.origin,
            f"; {since} more refusals in the last minute" if since else "",
        )


def _user(user: str | None) -> str:
    return user if user is not None else "<anonymous>"


def _accept_all(peer: Peer, session: Session, delivery_ids: list[int]) -> None:
    for delivery_id in delivery_ids:
        peer.accept_later(session, delivery_id)
