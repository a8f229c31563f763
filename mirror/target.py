"""The mirror target: apply a remote broker's events idempotently, then answer Accepted once durable.

- Origins: an event naming an origin broker its link may not speak for is refused (`trust.py`), before
  anything of it is applied.
- Messages: deduplicated per origin broker by id (`dedup.RecentIds`: an exact window of recent ids and
  a floor below it that no single id can push ahead; a confirmed watermark is persisted), stored with
  their (origin broker, origin id) identity, routed with the cause "applying from <remote>", so that
  our own mirror sources do not reflect them. A message no queue here would take yet is held on its
  link, unsettled and not counted as seen, until a queue at its address makes it storable
  (`holding.py`): a message is Accepted only once stored on the queues it names.
- postAck: the message is found by identity on the named queue. A postAck applied before (re-sent after
  a reconnect), or whose message was here and is gone (consumed here too), is settled at once and
  counted; one whose message may still come (or is out to a local consumer) is kept as a persisted
  retry and tried again, a bounded number of times (no attempt counts while its message is held here).
- Address/queue events: create if missing, delete if present; errors are logged, never refused.
- What a source never sends is not applied (a hardening beyond Artemis): an event or message naming an
  address or queue under the mirror prefix (a store-and-forward queue: another data centre's events),
  the management address, or one that is internal or temporary here; an origin broker id too long to
  key anything by; a negative message id. Such a delivery is dropped, counted (`refused`) and said
  (`MIR102`, once a minute per remote and event kind). A delivery that does not decode, or whose JSON
  body has the wrong shape, is dropped the same way (`undecodable`, `MIR103`): one line, no traceback.
The target always answers Accepted (an Artemis source treats Rejected as loss), once the work is on disk;
a delivery that is dropped deliberately is Accepted too: sent again, it would be dropped again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_core.amqp.codec import DecodeError
from broker_core.duplicates import duplicate_id
from broker_core.errors import BrokerError, Unauthorized
from broker_core.events import Cause
from broker_core.message import MessageView
from broker_core.topology import MAX_NAME_BYTES
from broker_core.vocabulary import ANYCAST, MULTICAST, AckReason

from . import decode, wire
from .dedup import RecentAcks, RecentIds
from .holding import HELD, Holding, LinkHolding
from .trust import MAX_BROKER_ID_BYTES, OriginTrust, RefusalLog, RemoteBindings, broker_id_too_long

if TYPE_CHECKING:
    from broker_core.server import Server

log = logging.getLogger("broker.mirror")

ACK_RETRY_PREFIX = "mirror.ackretry."
DEDUP_PREFIX = "mirror.dedup."  # the confirmed watermark of an origin (dedup.RecentIds)
NEWEST_PREFIX = "mirror.newest."  # the newest id of an origin: an exact entry after a restart

# What became of a postAck (`MirrorTarget.ack`)
MATCHED = 0  # its message was found and acknowledged
PENDING = 1  # its message may still come, or is out to a local consumer: retry
DUPLICATE = 2  # applied before: a copy re-sent after a reconnect
GONE = 3  # its message was here and is no longer on that queue (consumed here as well)
WAITING = 4  # a retry whose message is held here (holding.py): kept, no attempt counted

# A retried acknowledgement is applied as broker work that no mirror forwards: the event it retries was
# forwarded, or not, when it first arrived.
ACK_RETRY = Cause("mirror ack retry")

SAID_AT_MOST = 200  # characters of a peer's text in a log line


class AckRetries:
    """postAcks whose message was not found yet, persisted as meta records, retried on a timer."""

    def __init__(self, server: Server, attempts: int = 5) -> None:
        self.server = server
        self.attempts = attempts
        self.tries: dict[str, int] = {}
        self.stats = {"ack_retries": 0, "acks_never_matched": 0, "acks_matched_on_retry": 0}
        self.never_matched: dict[str, int] = {}  # by origin broker
        for key in list(server.meta):
            if key.startswith(ACK_RETRY_PREFIX):
                self.tries[key] = 0

    def add(self, origin: str, message_id: int, queue: str, reason: int) -> None:
        key = f"{ACK_RETRY_PREFIX}{origin}|{message_id}|{queue}"
        if _recordable(key):
            self.server.set_meta(key, str(reason).encode())
        else:  # a queue name near the journal's limit: retried all the same, only not across a restart
            self.server.meta[key] = str(reason).encode()
        self.tries[key] = 0
        self.stats["ack_retries"] += 1

    def retry_all(self, apply: Callable[[str, int, str, int], int]) -> None:
        for key in list(self.tries):
            origin, mid, queue = key[len(ACK_RETRY_PREFIX) :].split("|", 2)
            reason = int(self.server.meta.get(key, b"0") or b"0")
            outcome = apply(origin, int(mid), queue, reason)
            if outcome == WAITING:
                continue
            if outcome != PENDING:
                if outcome == MATCHED:
                    self.stats["acks_matched_on_retry"] += 1
                self._drop(key)
                continue
            self.tries[key] += 1
            if self.tries[key] >= self.attempts:
                self.stats["acks_never_matched"] += 1
                self.never_matched[origin] = self.never_matched.get(origin, 0) + 1
                log.warning(
                    "AMQ951003: mirror: acknowledgement of message %s from %s on queue %s never matched; "
                    "gave up",
                    mid,
                    origin,
                    queue,
                )
                self._drop(key)

    def _drop(self, key: str) -> None:
        del self.tries[key]
        self.server.meta.pop(key, None)
        if _recordable(key):
            self.server.set_meta(key, b"")  # an empty value deletes the key at recovery


class OriginCounts:
    """What the target did with one origin broker's events (metrics read them per origin)."""

    __slots__ = ("ack_retries", "acks", "duplicates", "messages")

    def __init__(self) -> None:
        self.messages = 0  # messages applied
        self.duplicates = 0  # messages dropped as applied before
        self.acks = 0  # postAcks received
        self.ack_retries = 0  # postAcks whose message was not there yet: kept to retry

    def as_dict(self) -> dict[str, int]:  # names spelt out: a compiled class has no __slots__ to read
        return {
            "messages": self.messages,
            "duplicates": self.duplicates,
            "acks": self.acks,
            "ack_retries": self.ack_retries,
        }


class UntrustedOrigin(Unauthorized):
    """An event whose origin broker its link may not speak for (`trust.py`): the link is closed."""

    def __init__(self, remote: str, origin: str, what: str) -> None:
        super().__init__(f"broker {remote} may not send {what} of origin {origin}")
        self.remote = remote
        self.origin = origin
        self.what = what


class MirrorTarget:
    """Everything one broker does as a mirror target (shared by all incoming mirror links)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.retries = AckRetries(server)
        self.stats = {
            "messages": 0,
            "duplicates": 0,
            "events": 0,
            "acks": 0,
            "acks_duplicate": 0,  # a postAck applied before, re-sent
            "acks_message_gone": 0,  # a postAck of a message that was here and was consumed here too
            "unknown_events": 0,
            "errors": 0,  # deliveries whose applying failed on a bug (logged with its traceback)
            "untrusted": 0,  # events refused: their origin is not one their link may speak for
            "refused": 0,  # deliveries not applied: what a source never sends (protected names, ids)
            "undecodable": 0,  # deliveries that do not decode, or whose body has the wrong shape
            "unrouted": 0,  # messages applied that no queue took (an address whose policy drops them)
        }
        self.said = RefusalLog()  # what was dropped, said once a minute per remote and kind
        self.bindings = RemoteBindings(server.meta, server.set_meta)
        # The mirror links' held messages (set by the links' service, `inbound.py`); None: nothing is
        # held, a message no queue takes is dropped (counted in `unrouted`), as Artemis's target does.
        self.holding: Holding | None = None
        self.dedup: dict[str, RecentIds] = {}
        # per origin broker: messages and acks applied, duplicates dropped, acks kept to retry
        self.origins: dict[str, OriginCounts] = {}
        self.acked: dict[str, RecentAcks] = {}
        for key, value in server.meta.items():
            if key.startswith(DEDUP_PREFIX) and value:
                origin = key[len(DEDUP_PREFIX) :]
                self.dedup[origin] = RecentIds(key, int(value), NEWEST_PREFIX + origin)
        for msg in server.index.by_identity.values():
            if msg.via_mirror and msg.origin_broker_id and msg.origin_message_id is not None:
                self._recent(msg.origin_broker_id).add(msg.origin_message_id)
        for key, value in server.meta.items():  # last: the newest id is what arrived last
            if key.startswith(NEWEST_PREFIX) and value:
                self._recent(key[len(NEWEST_PREFIX) :]).add(int(value))

    def _recent(self, origin: str) -> RecentIds:
        recent = self.dedup.get(origin)
        if recent is None:
            recent = self.dedup[origin] = RecentIds(DEDUP_PREFIX + origin, 0, NEWEST_PREFIX + origin)
        return recent

    def counts(self, origin: str) -> OriginCounts:
        counts = self.origins.get(origin)
        if counts is None:
            counts = self.origins[origin] = OriginCounts()
        return counts

    def forget_remote(self, remote: str) -> bool:
        """Forget which address and user `remote`'s links come through (management): its next link
        binds it afresh."""
        forgotten = self.bindings.forget(remote)
        if forgotten:
            log.info(
                "MIR107: mirror target: the binding of broker %s was forgotten; its next link binds it",
                remote,
            )
        return forgotten

    def status(self) -> dict[str, Any]:
        never = self.retries.never_matched
        held = self.holding.held_by_origin if self.holding is not None else {}
        by_origin = {
            origin: {**c.as_dict(), "acks_never_matched": never.get(origin, 0), "held": held.get(origin, 0)}
            for origin, c in self.origins.items()
        }
        return {
            **self.stats,
            **self.retries.stats,
            **(self.holding.status() if self.holding is not None else {}),
            "pendingAckRetries": len(self.retries.tries),
            "origins": by_origin,
            "remotes": self.bindings.status(),
        }

    def apply(
        self,
        remote_id: str,
        payload: bytes,
        trust: OriginTrust | None = None,
        held: LinkHolding | None = None,
    ) -> int:
        """Apply one delivery from `remote_id`: True when it journalled something durable (Accept it
        once durable), False (Accept it now), or `HELD`: a message no queue here takes yet, held on
        its link (`held`, the link's held messages), to be settled when it is stored.

        With `trust` (a mirror link's), an event of an origin the link may not speak for raises
        `UntrustedOrigin` before anything of it is applied."""
        try:
            delivery = decode.decode_mirror_delivery(payload)
        except decode.MirrorDecodeError as exc:
            self._undecodable(remote_id, exc)
            return False
        if not isinstance(delivery, decode.UnknownEvent):
            refusal = self._refusal(delivery)
            if refusal is not None:
                self._refuse(remote_id, _kind(delivery), refusal)
                return False
        if trust is not None:
            self._check_origin(remote_id, delivery, trust)
        cause = Cause.applying(remote_id)
        try:
            if isinstance(delivery, decode.ReplicatedMessage):
                return self._message(remote_id, delivery, cause, held)
            if isinstance(delivery, decode.ControlEvent):
                self.stats["events"] += 1
                return self._event(remote_id, delivery, cause)
            self.stats["unknown_events"] += 1
            if self._due(remote_id, "unknown") is not None:
                log.warning(
                    "mirror from %s: unknown event type %s ignored",
                    remote_id,
                    _said(repr(delivery.event_type)),
                )
            return False
        # (each exception its own name: a compiled function gives a name one type, its first binding's)
        except (ValueError, DecodeError, IndexError) as malformed:  # the sender's fault, not a bug:
            # a JSON body of the wrong shape raises JsonShapeError, a ValueError; a message's sections
            # DecodeError or IndexError
            self._undecodable(remote_id, malformed)
            return False
        except BrokerError as refused:  # the broker refused what the event asks (a name too long, ...)
            self._refuse(remote_id, _kind(delivery), refused.description)
            return False
        except Exception as bug:
            self.stats["errors"] += 1
            since = self._due(remote_id, "error")
            if since is not None:  # its traceback, but not once per delivery a peer can repeat
                log.exception(
                    "mirror from %s: applying a delivery failed (%s); accepted and dropped%s",
                    remote_id,
                    _said(repr(bug)),
                    _since(since),
                )
            return False

    # ------------------------------------------------------------------------ what is not applied

    def _refusal(self, delivery: decode.ReplicatedMessage | decode.ControlEvent) -> str | None:
        """Why a delivery must not be applied, from its annotations, or None (its body is judged when it
        is read: `_guarded`)."""
        origin = delivery.broker_id
        if origin is not None and broker_id_too_long(origin):
            return f"its origin broker id has {len(origin.encode()):,} bytes, at most {MAX_BROKER_ID_BYTES}"
        if isinstance(delivery, decode.ReplicatedMessage):
            if delivery.mr_id < 0:
                return f"message id {delivery.mr_id} is negative"
            why = self._protected(delivery.address, False)
            if why is not None:
                return why
            for queue in delivery.target_queues or ():
                why = self._protected(queue, True)
                if why is not None:
                    return why
        return None

    def _protected(self, name: str | None, queue: bool) -> str | None:
        """Why no mirror event may touch the address (or queue) `name`, or None. A source never mirrors
        the mirror prefix (another data centre's store-and-forward queue lives there), the management
        address, or an internal or temporary entity; applied here, such an event would act with the
        broker's own authority on what is not the remote's."""
        if not name:
            return None
        what = "queue" if queue else "address"
        if name.startswith(wire.MIRROR_ADDRESS_PREFIX):
            return f"{what} {_said(name)} is under the mirror prefix"
        if name.startswith(self.server.config.management_address):
            return f"{what} {_said(name)} is the management address"
        found = self.server.queues.get(name) if queue else self.server.addresses.get(name)
        if found is not None and (found.internal or found.temporary):
            return f"{what} {_said(name)} is {'internal' if found.internal else 'temporary'} here"
        return None

    def _guarded(
        self, remote_id: str, kind: str, names: list[tuple[str | None, bool]], internal: bool
    ) -> bool:
        """Whether an event naming `names` ((name, is a queue)), or claiming to be `internal`, is refused."""
        for name, queue in names:
            why = self._protected(name, queue)
            if why is not None:
                self._refuse(remote_id, kind, why)
                return True
        if internal:
            self._refuse(remote_id, kind, f"{_said(str(names[0][0]))} is declared internal")
            return True
        return False

    def _refuse(self, remote_id: str, kind: str, why: str) -> None:
        self.stats["refused"] += 1
        since = self._due(remote_id, kind)
        if since is not None:
            log.warning(
                "MIR102: mirror from %s: %s not applied: %s; accepted and dropped (a source never sends "
                "this)%s",
                remote_id,
                kind,
                why,
                _since(since),
            )

    def _undecodable(self, remote_id: str, exc: Exception) -> None:
        self.stats["undecodable"] += 1
        since = self._due(remote_id, "undecodable")
        if since is not None:
            log.warning(
                "MIR103: mirror from %s: undecodable delivery dropped: %s%s",
                remote_id,
                _said(str(exc)),
                _since(since),
            )

    def _due(self, remote_id: str, kind: str) -> int | None:
        return self.said.due(remote_id, kind)

    def _check_origin(self, remote_id: str, delivery: decode.MirrorDelivery, trust: OriginTrust) -> None:
        if isinstance(delivery, decode.ReplicatedMessage):
            origin = delivery.broker_id
            if origin is None or origin == remote_id or trust.allows(origin, False):
                return
            what = f"message {delivery.mr_id}"
        elif isinstance(delivery, decode.ControlEvent) and delivery.kind == wire.POST_ACK:
            origin = delivery.broker_id
            if origin is None or origin == remote_id or trust.allows(origin, True):
                return
            what = f"an acknowledgement of message {delivery.message_id}"
        else:
            return  # address and queue events name no origin
        self.stats["untrusted"] += 1
        raise UntrustedOrigin(remote_id, origin, what)

    # -------------------------------------------------------------------------------- messages

    def _message(
        self, remote_id: str, m: decode.ReplicatedMessage, cause: Cause, held: LinkHolding | None
    ) -> int:
        origin = m.broker_id or remote_id
        recent = self.dedup.get(origin) or self._recent(origin)
        counts = self.origins.get(origin) or self.counts(origin)
        if recent.seen(m.mr_id) and self._duplicate(recent, origin, m.mr_id, held):
            self.stats["duplicates"] += 1
            counts.duplicates += 1
            return False
        srv = self.server
        persistence = srv.persistence
        address = m.address
        if held is not None and address is not None and not self._storable(address, m.target_queues, held):
            held.hold_next(origin, m.mr_id, address)
            # held, so sent again after a restart: the floor persisted for a restart stays below it
            persistence.set_meta_at_flush(recent.meta_key, self._watermark_below_held(recent, origin))
            return HELD
        recent.add(m.mr_id)
        # One watermark (and newest id) record per origin per journal batch; recovery also takes the
        # origin ids of the live messages, which covers a batch torn between its messages and these.
        if recent.batch != persistence.flushes:
            recent.batch = persistence.flushes
            holding = self.holding
            watermark = (
                recent.watermark
                if holding is None or not holding.count
                else self._watermark_below_held(recent, origin)
            )
            persistence.set_meta_at_flush(recent.meta_key, watermark)
            persistence.set_meta_at_flush(recent.newest_key, recent.newest)
        if address is None:
            log.warning("mirror from %s: message %d has no address; dropped", remote_id, m.mr_id)
            return True
        self.stats["messages"] += 1
        counts.messages += 1
        only = list(m.target_queues) if m.target_queues is not None else None
        view = MessageView(m.payload, m.parts, m.expiry, m.header)
        msg = srv.router.route(
            address, m.payload, view, via_mirror=True, origin=(origin, m.mr_id), only_queues=only, cause=cause
        )
        if msg is None:
            self.stats["unrouted"] += 1
            return True
        dup = duplicate_id(view)
        if dup is not None:  # a client retrying here after a DR failover is deduped
            srv.duplicates.remember(address, dup)
        return True

    def _storable(self, address: str, only: tuple[str, ...] | None, held: LinkHolding) -> bool:
        """Whether a message to `address` can be stored now: a queue here takes it (each of `only`, when
        it names them), and no message to that address is held before it on its link."""
        addr = self.server.addresses.get(address)
        if addr is None or not addr.queues or (held.count and held.waiting(address)):
            return False
        if only is None:
            return True
        names = {q.name for q in addr.queues}
        return all(name in names for name in only)

    def _duplicate(self, recent: RecentIds, origin: str, mr_id: int, held: LinkHolding | None) -> bool:
        """A seen id is a duplicate, except that a held message being released may have fallen below the
        floor while it waited: then only an exact id, or a copy stored here, is one."""
        if held is None or held.releasing is None or mr_id in recent.ids or mr_id in recent.ahead:
            return True
        return self.server.index.get(origin, mr_id) is not None

    def _watermark_below_held(self, recent: RecentIds, origin: str) -> Callable[[], bytes]:
        """The watermark to persist while messages of `origin` are held: below the lowest of them, which
        the source sends again after a restart (everything at or below the watermark counts as seen)."""

        def value() -> bytes:
            holding = self.holding
            lowest = holding.lowest(origin) if holding is not None else None
            confirmed = int(recent.watermark())
            return str(confirmed if lowest is None else min(confirmed, lowest - 1)).encode()

        return value

    def dead_letter_held(self, remote_id: str, payload: bytes) -> str | None:
        """A message held past mirrorHoldTimeout (no queue here took it): stored on its address's
        dead-letter address, with its mirror identity, so that it is kept for the operator rather than
        Accepted and lost; the address it went to, or None (no dead-letter address with a queue: it stays
        held)."""
        m = decode.decode_mirror_delivery(payload)  # it decoded when it was held
        if not isinstance(m, decode.ReplicatedMessage) or m.address is None:
            return None
        srv = self.server
        dla = srv.settings_for(m.address).dead_letter_address
        target = srv.addresses.get(dla) if dla else None
        if dla is None or target is None or not target.queues:
            return None
        origin = m.broker_id or remote_id
        self.mark_seen(origin, m.mr_id)
        view = MessageView(m.payload, m.parts, m.expiry, m.header)
        srv.router.route(
            dla, m.payload, view, via_mirror=True, origin=(origin, m.mr_id), cause=Cause.applying(remote_id)
        )
        return dla

    def mark_seen(self, origin: str, mr_id: int) -> None:
        """A held message settled without being stored: a copy of it sent again is a duplicate."""
        self._recent(origin).add(mr_id)

    # ---------------------------------------------------------------------------------- events

    def _event(self, remote_id: str, ev: decode.ControlEvent, cause: Cause) -> bool:
        srv = self.server
        kind = ev.kind
        if kind == wire.POST_ACK:
            if ev.message_id is None or ev.queue is None:
                log.warning("mirror from %s: postAck without message id or queue ignored", remote_id)
                return False
            if self._guarded(remote_id, kind, [(ev.queue, True)], False):
                return False
            self.stats["acks"] += 1
            origin = ev.broker_id or remote_id
            counts = self.origins.get(origin) or self.counts(origin)
            counts.acks += 1
            outcome = self.ack(origin, ev.message_id, ev.queue, ev.reason, cause)
            if outcome == PENDING:
                counts.ack_retries += 1
                self.retries.add(origin, ev.message_id, ev.queue, int(ev.reason))
            return outcome == MATCHED or outcome == PENDING  # what journalled something

        if kind == wire.ADD_ADDRESS:
            info = ev.address_info()
            if self._guarded(remote_id, kind, [(info.name, False)], info.internal):
                return False
            if info.name not in srv.addresses:
                types = {rt.name for rt in info.routing_types} or {MULTICAST}
                srv.ensure_address(info.name, types, auto_created=info.auto_created, cause=cause)
            return True
        if kind == wire.DELETE_ADDRESS:
            name = ev.address_info().name if ev.body else ev.address
            if self._guarded(remote_id, kind, [(name, False)], False):
                return False
            if name and name in srv.addresses:
                srv.delete_address(name, force=True, cause=cause)
            return True
        if kind == wire.CREATE_QUEUE:
            qc = ev.queue_configuration()
            if self._guarded(remote_id, kind, [(qc.name, True), (qc.effective_address, False)], qc.internal):
                return False
            if qc.name not in srv.queues:
                rt = qc.routing_type.name if qc.routing_type is not None else ANYCAST
                try:
                    srv.create_queue(
                        qc.name,
                        qc.effective_address,
                        rt,
                        durable=qc.durable,
                        filter_string=qc.filter_string,
                        max_consumers=qc.max_consumers if qc.max_consumers is not None else -1,
                        auto_created=qc.auto_created,
                        cause=cause,
                        lenient_filter=True,  # one we cannot apply (XPath): the queue all the same
                    )
                except BrokerError as exc:
                    log.debug("mirror: createQueue %s ignored: %s", qc.name, exc)
            return True
        if kind == wire.DELETE_QUEUE:
            if self._guarded(remote_id, kind, [(ev.queue, True)], False):
                return False
            if ev.queue and ev.queue in srv.queues:
                srv.delete_queue(ev.queue, cause)
            return True
        return False

    def ack(self, origin: str, message_id: int, queue_name: str, reason: int, cause: Cause) -> int:
        """Apply one postAck: MATCHED, PENDING (retry it), DUPLICATE or GONE (settled, counted)."""
        srv = self.server
        q = srv.queues.get(queue_name)
        if q is not None and q.internal:  # never a mirror's to acknowledge on (`_protected`): dropped
            return DUPLICATE
        holding = self.holding
        if holding is not None and holding.count:
            held = holding.find(origin, message_id)
            if held is not None:
                if q is None and queue_name == held.address:
                    # its only queue (anycast or temporary), which no queue here stands for: the source
                    # consumed it before any queue here could take it
                    holding.consumed(held)
                    self._acked(origin).add((queue_name, message_id))
                    self.stats["acks_message_gone"] += 1
                    return GONE
                return PENDING  # a retry, matched once the message is stored
        if q is None:
            log.warning(
                "Queue %s not found on mirror target, ignoring ack for message %d", queue_name, message_id
            )
            return MATCHED
        ref = srv.index.waiting_ref(q, origin, message_id)
        if ref is not None:
            q.remove(ref)
        else:  # still in a page (a deep backlog here): read back out of order to be acknowledged
            ref = srv.paging.take_unread(q, origin, message_id)
            if ref is None:
                return self._unmatched(origin, message_id, queue_name)
        if reason == AckReason.EXPIRED:
            srv.outcomes.expire(ref, cause)
        else:
            srv.outcomes.acknowledge(ref, reason, via_mirror=True, cause=cause)
        self._acked(origin).add((queue_name, message_id))
        return MATCHED

    def _acked(self, origin: str) -> RecentAcks:
        acked = self.acked.get(origin)
        if acked is None:
            acked = self.acked[origin] = RecentAcks()
        return acked

    def _unmatched(self, origin: str, message_id: int, queue_name: str) -> int:
        """A postAck whose message does not wait on its queue: applied before, gone, or still to come."""
        acked = self.acked.get(origin)
        if acked is not None and (queue_name, message_id) in acked:
            self.stats["acks_duplicate"] += 1
            return DUPLICATE
        srv = self.server
        if srv.index.get(origin, message_id) is not None:
            return PENDING  # here, but out to a local consumer (or not on this queue): it may come back
        if origin == srv.node_id:  # one of ours, made here and gone since
            gone = message_id < srv.persistence.next_message_id
        else:  # one we received, and no longer hold
            recent = self.dedup.get(origin)
            gone = recent is not None and recent.seen(message_id)
        if gone:
            self.stats["acks_message_gone"] += 1
            return GONE
        return PENDING

    def retry_acks(self) -> None:
        if not self.retries.tries:
            return

        holding = self.holding

        def apply(origin: str, mid: int, queue: str, reason: int) -> int:
            outcome = self.ack(origin, mid, queue, reason, ACK_RETRY)
            if outcome == PENDING and holding is not None and holding.find(origin, mid) is not None:
                return WAITING
            return outcome

        self.retries.retry_all(apply)


def _recordable(key: str) -> bool:
    return len(key) <= MAX_NAME_BYTES // 4 or len(key.encode()) <= MAX_NAME_BYTES


def _kind(delivery: decode.MirrorDelivery) -> str:
    if isinstance(delivery, decode.ControlEvent):
        return str(delivery.kind)
    return "message" if isinstance(delivery, decode.ReplicatedMessage) else "event"


def _said(text: str) -> str:
    """A peer's text in a log line, cut short: a name may be 65,535 bytes long."""
    return text if len(text) <= SAID_AT_MOST else f"{text[:SAID_AT_MOST]}... ({len(text):,} characters)"


def _since(since: int) -> str:
    return f"; {since} more in the last minute" if since else ""
