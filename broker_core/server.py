"""One broker server: addresses, queues, routing, persistence and the observers that watch it.

The server is a plain object driven by the protocol layer on one event loop; it never touches a
socket. Several servers live side by side in one process (two data centres in a test, a primary and
its colocated backups), so nothing here is module-level state.

Durability contract: a durable message routed to a durable queue is journalled in the current batch;
`after_durable(cb)` runs `cb` once everything journalled so far is on disk. The protocol layer Accepts
a durable send only from such a callback. Acks are journalled the same way.
"""

from __future__ import annotations

import logging
import secrets
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config.model import AddressSettings, BrokerConfig
from .errors import BrokerError
from .journal import records
from .journal.collector import collector_paused
from .journal.journal import Journal
from .journal.node_id import load_or_create_node_id
from .management import Management
from .message import MessageView
from .queues import MessageRef, Queue, StoredMessage
from .security import SecurityError
from .security.authentication import UserStore
from .security.authorization import Authorizer, Permission, SecuritySettings

ANYCAST = "ANYCAST"
MULTICAST = "MULTICAST"

ID_RESERVATION = "ids.message.reserved"  # meta key: message ids below it may have been handed out
ID_BLOCK = 100_000

# server.mirror_context while the broker does something no mirror may copy (e.g. an expiry move).
NO_MIRROR = "no-mirror"

# Ack reasons, as the Artemis mirror numbers them.
ACK_NORMAL, ACK_KILLED, ACK_EXPIRED, ACK_REPLACED = 0, 1, 2, 3


@dataclass
class Address:
    name: str
    routing_types: set[str]
    id: int = 0
    auto_created: bool = False
    internal: bool = False
    temporary: bool = False  # made for a temporary (dynamic) queue: never journalled nor mirrored
    queues: list[Queue] = field(default_factory=list)
    anycast_rr: int = 0
    routed: int = 0
    unrouted: int = 0


class Observer:
    """Broker events for the mirror and metrics; override what you need. Names are past tense."""

    def address_added(self, address: Address) -> None: ...
    def address_removed(self, address: Address) -> None: ...
    def queue_added(self, queue: Queue) -> None: ...
    def queue_removed(self, queue: Queue) -> None: ...
    def message_routed(self, message: StoredMessage, queues: list[Queue]) -> None: ...
    def message_acked(self, ref: MessageRef, reason: int) -> None: ...
    def extra_queues(self, message: StoredMessage, queues: list[Queue]) -> list[Queue]:
        return []


class Server:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.name = config.name
        self.log = log or logging.getLogger(f"broker.{config.name}")
        self.clock = clock
        self.addresses: dict[str, Address] = {}
        self.queues: dict[str, Queue] = {}
        self.queues_by_id: dict[int, Queue] = {}
        self.observers: list[Observer] = []  # add with `add_observer`
        self._adding_observers: list[Observer] = []  # those that add queues to a routed message
        self._routed_observers: list[Observer] = []  # those that watch routed messages
        self.node_id = ""
        self.journal: Journal | None = None
        self._next_message_id = 1
        self._id_ceiling = 0
        self._next_queue_id = 1
        self._next_address_id = 1
        self._pending_records: list[Any] = []
        self._pending_callbacks: list[Callable[[], None]] = []
        self._pending_enqueues: list[MessageRef] = []  # for after-durable queues, in journal order
        self._pending_meta: dict[str, bytes | Callable[[], bytes]] = {}
        self._settings_cache: dict[str, AddressSettings] = {}
        self._flush_scheduler: Callable[[], None] | None = None
        self._flush_scheduled = False
        self.flushes = 0  # batches handed to the journal: what was persisted before one is in it
        self.user_store = UserStore(
            {u.name: u.password for u in config.users},
            {u.name: config.roles_of(u.name) for u in config.users},
        )
        rules = {s.match: dict(s.permissions) for s in config.security_settings}
        self.authorizer = Authorizer(config.security_enabled, SecuritySettings(rules), self.user_store)
        self.management = Management(self)
        self.scram_secret = secrets.token_bytes(32)  # fake SCRAM salts for unknown users stay stable
        # (origin broker id, origin message id) -> live message: how mirrored acks find their message
        self.identity: dict[tuple[str, int], StoredMessage] = {}
        # the remote broker whose mirror event is being applied right now (None: a local client)
        self.mirror_context: str | None = None
        self.meta: dict[str, bytes] = {}
        self.mirror_target: Any = None  # mirror.target.MirrorTarget, installed by the runtime
        # sync mirrors: how many exist, and the events an operation in progress produced for them
        self.sync_mirrors = 0
        self.mirror_capture: list[tuple[Any, int]] | None = None
        self.started = False
        self.stats = {
            "messages_routed": 0,
            "messages_unrouted": 0,
            "messages_acked": 0,
            "messages_expired": 0,
            "messages_killed": 0,
        }

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self, dispatch: Callable[[Callable[[], None]], None] | None = None) -> None:
        """Open the journal, recover, create configured addresses and queues."""
        data_dir = Path(self.config.journal_directory)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.node_id = load_or_create_node_id(data_dir)
        self.journal = Journal(
            data_dir,
            segment_size=self.config.journal_file_size,
            fsync=self.config.persistence_enabled and self.config.journal_sync_durable,
            dispatch=dispatch,
            logger=self.log,
        )
        if self.config.persistence_enabled:
            with collector_paused():
                self._recover(self.journal.open())
        else:
            self.journal.open()
        for acfg in self.config.addresses:
            addr = self.ensure_address(acfg.name, {rt.value for rt in acfg.routing_types}, auto_created=False)
            addr.routing_types |= {rt.value for rt in acfg.routing_types}
            for qcfg in acfg.queues:
                if qcfg.name not in self.queues:
                    self.create_queue(
                        qcfg.name,
                        acfg.name,
                        qcfg.routing_type.value,
                        durable=qcfg.durable,
                        filter_string=qcfg.filter,
                        max_consumers=qcfg.max_consumers,
                        purge_on_no_consumers=qcfg.purge_on_no_consumers,
                    )
        self.started = True
        self.log.info(
            "server %s started: node id %s, %d addresses, %d queues, %d messages",
            self.name,
            self.node_id,
            len(self.addresses),
            len(self.queues),
            sum(q.depth for q in self.queues.values()),
        )

    def stop(self) -> None:
        self.flush_pending()
        if self.journal is not None:
            self.journal.close()
        self.started = False
        self.log.info("server %s stopped", self.name)

    def _recover(self, state: Any) -> None:
        for a in state.addresses.values():
            addr = Address(
                a.name,
                set(a.routing_types),
                id=a.address_id,
                auto_created=a.auto_created,
                internal=a.internal,
            )
            self.addresses[a.name] = addr
        for qrec in state.queues.values():
            q = Queue(
                qrec.queue_id,
                qrec.name,
                qrec.address,
                qrec.routing_type,
                durable=True,
                filter_string=qrec.filter_string,
                max_consumers=qrec.max_consumers,
                auto_created=qrec.auto_created,
                internal=qrec.internal,
            )
            self._bind(q)
        for rm in state.messages.values():
            m = rm.record
            msg = StoredMessage(
                m.message_id, m.address, m.body, True, m.expiry_ms, m.timestamp_ms, m.priority
            )
            msg.origin_broker_id = m.origin_broker_id
            msg.origin_message_id = m.origin_message_id
            msg.via_mirror = m.via_mirror
            indexed = False
            for queue_id in rm.queue_ids:
                rq = self.queues_by_id.get(queue_id)
                if rq is None:
                    continue
                msg.live_refs += 1
                indexed = indexed or not rq.internal  # mirror copies live only on internal queues
                rq.restore(MessageRef(msg, rq, rm.delivery_counts.get(queue_id, 0)))
            if indexed:
                self.identity[self.identity_of(msg)] = msg
        self.meta = {k: v for k, v in state.meta.items() if v}
        reserved = int(self.meta.get(ID_RESERVATION, b"0"))
        self._next_message_id = max(self._next_message_id, state.max_message_id + 1, reserved)
        self._next_queue_id = max(self._next_queue_id, state.max_queue_id + 1)
        self._next_address_id = max(self._next_address_id, state.max_address_id + 1)

    # ---------------------------------------------------------------------------------- persistence

    def set_flush_scheduler(self, schedule: Callable[[], None]) -> None:
        """How to run `flush_pending` soon (the event loop's call_soon); without it, flush at once."""
        self._flush_scheduler = schedule

    def pending_records(self) -> int:
        return len(self._pending_records)

    def persist(self, record: Any) -> None:
        self._pending_records.append(record)
        self._schedule_flush()

    def after_durable(self, callback: Callable[[], None]) -> None:
        """Run `callback` once every record persisted so far is on disk."""
        self._pending_callbacks.append(callback)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._flush_scheduled:
            return
        if self._flush_scheduler is None:
            self.flush_pending()
            return
        self._flush_scheduled = True
        self._flush_scheduler()

    def flush_pending(self) -> None:
        """Hand the batch to the journal: one group commit covers everything since the last one."""
        self._flush_scheduled = False
        self.flushes += 1
        if self._pending_meta:
            for key, value in self._pending_meta.items():
                if callable(value):  # set_meta_at_flush: read it now
                    value = self.meta[key] = value()
                self._pending_records.append(records.MetaRecord(key, value))
            self._pending_meta.clear()
        recs, cbs = self._pending_records, self._pending_callbacks
        if self._pending_enqueues:
            refs, self._pending_enqueues = self._pending_enqueues, []
            cbs.insert(0, lambda: self._enqueue_durable(refs))
        if not recs and not cbs:
            return
        self._pending_records, self._pending_callbacks = [], []
        done = _run_all(cbs) if cbs else None
        if self.journal is None or not self.config.persistence_enabled:
            if done:
                done()
            return
        try:
            self.journal.append_many(recs, on_durable=done)
        except (ValueError, TypeError, OverflowError, struct.error) as exc:
            # A record that cannot be encoded must not take the rest of the batch with it.
            self.log.error("journal batch refused (%s); writing its records one by one", exc)
            for rec in recs:
                try:
                    self.journal.append_many([rec])
                except (ValueError, TypeError, OverflowError, struct.error) as bad:
                    self.log.error("record %s dropped: %s", type(rec).__name__, bad)
            self.journal.append_many([], on_durable=done)

    # ------------------------------------------------------------------------------ ids and settings

    def new_message_id(self) -> int:
        mid = self._next_message_id
        self._next_message_id = mid + 1
        if mid >= self._id_ceiling:
            # Ids of non-durable messages are never journalled, yet the mirror names messages by id: a
            # restart must not hand out an id already used. Reserve blocks on disk, as Artemis does.
            self._id_ceiling = mid + ID_BLOCK
            self.set_meta(ID_RESERVATION, str(self._id_ceiling).encode(), coalesce=True)
        return mid

    def settings_for(self, address: str) -> AddressSettings:
        s = self._settings_cache.get(address)
        if s is None:
            s = self.config.address_settings_for(address)
            if len(self._settings_cache) > 10000:
                self._settings_cache.clear()
            self._settings_cache[address] = s
        return s

    # -------------------------------------------------------------------------- addresses and queues

    def ensure_address(
        self,
        name: str,
        routing_types: set[str],
        *,
        auto_created: bool = True,
        internal: bool = False,
        temporary: bool = False,
    ) -> Address:
        addr = self.addresses.get(name)
        if addr is not None:
            if not routing_types <= addr.routing_types:
                addr.routing_types |= routing_types
                self._persist_address(addr)
            return addr
        addr = Address(
            name,
            set(routing_types),
            id=self._next_address_id,
            auto_created=auto_created,
            internal=internal,
            temporary=temporary,
        )
        self._next_address_id += 1
        self.addresses[name] = addr
        self._persist_address(addr)
        self.log.debug("address %s created (%s)", name, ",".join(sorted(routing_types)))
        for o in self.observers:
            o.address_added(addr)
        return addr

    def _persist_address(self, addr: Address) -> None:
        if addr.temporary:
            return
        self.persist(
            records.AddressAdded(
                addr.id, addr.name, frozenset(addr.routing_types), addr.auto_created, addr.internal
            )
        )

    def create_queue(
        self,
        name: str,
        address: str,
        routing_type: str,
        *,
        durable: bool = True,
        filter_string: str | None = None,
        max_consumers: int = -1,
        auto_created: bool = False,
        internal: bool = False,
        temporary: bool = False,
        purge_on_no_consumers: bool = False,
    ) -> Queue:
        if name in self.queues:
            raise BrokerError("amqp:resource-locked", f"queue {name!r} already exists")
        addr = self.ensure_address(
            address, {routing_type}, auto_created=auto_created, internal=internal, temporary=temporary
        )
        q = Queue(
            self._next_queue_id,
            name,
            addr.name,
            routing_type,
            durable=durable,
            filter_string=filter_string,
            max_consumers=max_consumers,
            auto_created=auto_created,
            internal=internal,
            temporary=temporary,
            purge_on_no_consumers=purge_on_no_consumers,
        )
        self._next_queue_id += 1
        self._bind(q)
        if durable and not temporary:
            self.persist(
                records.QueueAdded(
                    q.id,
                    name,
                    addr.name,
                    routing_type,
                    True,
                    filter_string,
                    max_consumers,
                    auto_created,
                    internal,
                    {},
                )
            )
        self.log.debug("queue %s created on %s (%s)", name, address, routing_type)
        for o in self.observers:
            o.queue_added(q)
        return q

    def _bind(self, q: Queue) -> None:
        self.queues[q.name] = q
        self.queues_by_id[q.id] = q
        addr = self.addresses.get(q.address)
        if addr is None:
            addr = Address(q.address, {q.routing_type})
            self.addresses[q.address] = addr
        addr.queues.append(q)

    def delete_queue(self, name: str) -> None:
        q = self.queues.pop(name, None)
        if q is None:
            raise BrokerError("amqp:not-found", f"queue {name!r} does not exist")
        del self.queues_by_id[q.id]
        addr = self.addresses.get(q.address)
        if addr is not None and q in addr.queues:
            addr.queues.remove(q)
        for c in list(q.consumers):  # first, so that what they held comes back before the release below
            kick = getattr(c, "kick", None)
            if kick is not None:
                kick("amqp:resource-deleted", f"queue {name} was deleted")
        for ref in q.messages:
            ref.message.live_refs -= 1
            if ref.message.live_refs <= 0:
                self._forget_identity(ref.message)
        q.keep_only([])
        if q.durable and not q.temporary:
            self.persist(records.QueueRemoved(q.id))
        for o in self.observers:
            o.queue_removed(q)
        if (
            addr is not None
            and addr.auto_created
            and not addr.queues
            and self.settings_for(addr.name).auto_delete_addresses
        ):
            self.delete_address(addr.name)

    def delete_address(self, name: str, force: bool = False) -> None:
        addr = self.addresses.get(name)
        if addr is None:
            raise BrokerError("amqp:not-found", f"address {name!r} does not exist")
        if addr.queues and not force:
            raise BrokerError("amqp:precondition-failed", f"address {name!r} has queues")
        for q in list(addr.queues):
            self.delete_queue(q.name)
        self.addresses.pop(name, None)
        if not addr.temporary:
            self.persist(records.AddressRemoved(addr.id))
        for o in self.observers:
            o.address_removed(addr)

    # ------------------------------------------------------------------------------------- routing

    def route(
        self,
        address: str,
        payload: bytes,
        view: MessageView,
        *,
        via_mirror: bool = False,
        origin: tuple[str | None, int | None] | None = None,
        only_queues: list[str] | None = None,
        no_expiry: bool = False,
    ) -> StoredMessage | None:
        """Route one message to the queues bound at `address`; return it (None if nothing took it)."""
        addr = self.addresses.get(address)
        if addr is None or not addr.queues:
            self.stats["messages_unrouted"] += 1
            if addr is not None:
                addr.unrouted += 1
            return None
        targets: list[Queue] = []
        anycast: list[Queue] = []
        for q in addr.queues:
            if only_queues is not None:
                if q.name in only_queues:
                    targets.append(q)
            elif q.routing_type == MULTICAST:
                targets.append(q)
            else:
                anycast.append(q)
        if anycast:
            # Several anycast queues on one address share the messages round robin, as Artemis does.
            targets.append(anycast[addr.anycast_rr % len(anycast)])
            addr.anycast_rr += 1
        if not targets:
            addr.unrouted += 1
            return None
        h = view.header
        now_ms = int(self.clock() * 1000)
        expiry = now_ms + h.ttl if h.ttl and not no_expiry else 0
        if not expiry and not no_expiry:
            expiry = view.absolute_expiry_time
        msg = StoredMessage(self.new_message_id(), address, payload, h.durable, expiry, now_ms, h.priority)
        msg.via_mirror = via_mirror
        if origin is not None:
            msg.origin_broker_id, msg.origin_message_id = origin
        for o in self._adding_observers:
            # the mirror's store-and-forward queue joins here, so it is in the same journal record
            targets.extend(o.extra_queues(msg, targets))
        msg.live_refs += len(targets)
        durable_ids = [q.id for q in targets if q.durable and not q.temporary] if h.durable else None
        if durable_ids and self.config.persistence_enabled:
            self.persist(
                records.MessageAdded(
                    msg.id,
                    address,
                    tuple(durable_ids),
                    payload,
                    now_ms,
                    expiry,
                    h.priority,
                    msg.origin_broker_id,
                    msg.origin_message_id,
                    via_mirror,
                )
            )
        else:
            msg.durable = False
        addr.routed += 1
        self.stats["messages_routed"] += 1
        self.identity[self.identity_of(msg)] = msg
        for o in self._routed_observers:
            o.message_routed(msg, targets)
        for q in targets:
            self._enqueue(q, MessageRef(msg, q))
        return msg

    def add_observer(self, observer: Observer) -> None:
        self.observers.append(observer)
        # Routing calls only the observers that override its hooks: it runs for every message.
        kind = type(observer)
        if kind.extra_queues is not Observer.extra_queues:
            self._adding_observers.append(observer)
        if kind.message_routed is not Observer.message_routed:
            self._routed_observers.append(observer)

    def identity_of(self, msg: StoredMessage) -> tuple[str, int]:
        mid = msg.origin_message_id if msg.origin_message_id is not None else msg.id
        return (msg.origin_broker_id or self.node_id, mid)

    def enqueue_internal(self, queue: Queue, payload: bytes, durable: bool = True) -> StoredMessage:
        """Put a broker-made message (e.g. a mirror control event) on one internal queue."""
        now_ms = int(self.clock() * 1000)
        msg = StoredMessage(self.new_message_id(), queue.address, payload, durable, 0, now_ms)
        msg.live_refs = 1
        if durable and queue.durable and self.config.persistence_enabled:
            self.persist(records.MessageAdded(msg.id, queue.address, (queue.id,), payload, now_ms))
        else:
            msg.durable = False
        self._enqueue(queue, MessageRef(msg, queue))
        return msg

    def when_mirrored(self, waits: list[tuple[Any, int]], callback: Callable[[], None]) -> None:
        """Run `callback` once every (mirror source, event message id) in `waits` was accepted remotely."""
        remaining = [len(waits)]

        def one_done() -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                self.after_durable(callback)

        for source, message_id in waits:
            source.wait_for(message_id, one_done)

    def _enqueue(self, queue: Queue, ref: MessageRef) -> None:
        if queue.after_durable:
            # A store-and-forward queue hands nothing on before the operation that produced it is on
            # disk here: otherwise a crash could leave the other side with something this side lost.
            # One callback per journal batch adds them all (see flush_pending), not one per reference.
            self._pending_enqueues.append(ref)
            self._schedule_flush()
        else:
            queue.enqueue(ref)

    def _enqueue_durable(self, refs: list[MessageRef]) -> None:
        by_queue: dict[int, list[MessageRef]] = {}
        for ref in refs:
            by_queue.setdefault(id(ref.queue), []).append(ref)
        for qrefs in by_queue.values():
            q = qrefs[0].queue
            if self.queues.get(q.name) is q:  # not deleted while its batch was being written
                q.enqueue_many(qrefs)

    def _forget_identity(self, msg: StoredMessage) -> None:
        key = self.identity_of(msg)
        if self.identity.get(key) is msg:  # a mirror copy shares the identity but is not indexed
            del self.identity[key]

    def enqueue_copy(
        self, queue: Queue, original: StoredMessage, origin: tuple[str | None, int]
    ) -> StoredMessage:
        """Put a copy of a message, keeping its identity, on one internal queue (mirror initial sync)."""
        now_ms = int(self.clock() * 1000)
        msg = StoredMessage(self.new_message_id(), original.address, original.payload, True, 0, now_ms)
        msg.origin_broker_id, msg.origin_message_id = origin
        msg.live_refs = 1
        if queue.durable and self.config.persistence_enabled:
            self.persist(
                records.MessageAdded(
                    msg.id,
                    original.address,
                    (queue.id,),
                    original.payload,
                    now_ms,
                    0,
                    4,
                    origin[0],
                    origin[1],
                    False,
                )
            )
        else:
            msg.durable = False
        self._enqueue(queue, MessageRef(msg, queue))
        return msg

    def set_meta(self, key: str, value: bytes, coalesce: bool = False) -> None:
        """Persist a small fact; `coalesce` keeps only the last value per key in each journal batch."""
        self.meta[key] = value
        if not self.config.persistence_enabled:
            return
        if coalesce:
            self._pending_meta[key] = value
            self._schedule_flush()
        else:
            self.persist(records.MetaRecord(key, value))

    def set_meta_at_flush(self, key: str, value: Callable[[], bytes]) -> None:
        """A coalesced `set_meta` whose value is read when the journal batch is made: for a fact that
        moves with every message (a high-water mark), formatted once per batch, not once per message."""
        if not self.config.persistence_enabled:
            self.meta[key] = value()
            return
        self._pending_meta[key] = value
        self._schedule_flush()

    def find_ref(self, queue: Queue, origin: str, message_id: int) -> MessageRef | None:
        """The waiting (not in-flight) reference on `queue` to the message with that identity."""
        msg = self.identity.get((origin, message_id))
        return None if msg is None else queue.waiting.get(msg.id)

    def take(self, ref: MessageRef) -> None:
        """Remove a waiting reference from its queue (before acknowledging it out of band)."""
        ref.queue.remove(ref)

    def is_expired(self, ref: MessageRef) -> bool:
        if ref.queue.internal:
            return False
        exp = ref.message.expiry_ms
        if exp and exp <= self.clock() * 1000:
            self.expire(ref)
            return True
        return False

    # ------------------------------------------------------------------------------------ outcomes

    def acknowledge(self, ref: MessageRef, reason: int = ACK_NORMAL, via_mirror: bool = False) -> None:
        q, msg = ref.queue, ref.message
        if ref.consumer is not None:
            q.take_in_flight(ref)
        q.acked += 1
        msg.live_refs -= 1
        if msg.live_refs <= 0:
            self._forget_identity(msg)
        self.stats["messages_acked"] += 1
        if msg.durable and q.durable and self.config.persistence_enabled:
            self.persist(records.MessageAcked(q.id, msg.id, reason, via_mirror, int(self.clock() * 1000)))
        for o in self.observers:
            o.message_acked(ref, reason)

    def acknowledge_many(self, queue: Queue, refs: list[MessageRef]) -> None:
        """`acknowledge` for references of one queue settled together (the events a mirror's target
        accepted in one disposition), journalled as one `MessagesAcked` instead of one record each."""
        durable: list[int] = []
        for ref in refs:
            msg = ref.message
            if ref.consumer is not None:
                queue.take_in_flight(ref)
            msg.live_refs -= 1
            if msg.live_refs <= 0:
                self._forget_identity(msg)
            if msg.durable:
                durable.append(msg.id)
        queue.acked += len(refs)
        self.stats["messages_acked"] += len(refs)
        if durable and queue.durable and self.config.persistence_enabled:
            now_ms = int(self.clock() * 1000)
            self.persist(records.MessagesAcked(queue.id, tuple(durable), ACK_NORMAL, False, now_ms))
        for ref in refs:
            for o in self.observers:
                o.message_acked(ref, ACK_NORMAL)

    def release(self, ref: MessageRef, delivery_failed: bool, undeliverable: bool = False) -> None:
        """The consumer gave the message back: redeliver it, or dead-letter it after too many tries."""
        q = ref.queue
        q.take_in_flight(ref)
        if delivery_failed:
            ref.delivery_count += 1
            if ref.message.durable and q.durable and self.config.persistence_enabled:
                self.persist(records.DeliveryCountUpdated(q.id, ref.message.id, ref.delivery_count))
            limit = self.settings_for(q.address).max_delivery_attempts
            if undeliverable or (limit >= 0 and ref.delivery_count >= limit):
                self.dead_letter(ref)
                return
        q.requeue([ref])
        q.dispatch(self.is_expired)

    def requeue_all(self, refs: list[MessageRef]) -> None:
        """A consumer went away: everything it held goes back, counted as a failed delivery."""
        by_queue: dict[int, list[MessageRef]] = {}
        for ref in refs:
            ref.queue.take_in_flight(ref)
            ref.delivery_count += 1
            limit = self.settings_for(ref.queue.address).max_delivery_attempts
            if limit >= 0 and ref.delivery_count >= limit:
                self.dead_letter(ref)
            else:
                by_queue.setdefault(ref.queue.id, []).append(ref)
        for qrefs in by_queue.values():
            q = qrefs[0].queue
            q.requeue(qrefs)
            q.dispatch(self.is_expired)

    def dead_letter(self, ref: MessageRef) -> None:
        settings = self.settings_for(ref.queue.address)
        self._move(ref, settings.dead_letter_address, ACK_KILLED, "dead-letter")
        ref.queue.killed += 1
        self.stats["messages_killed"] += 1

    def expire(self, ref: MessageRef) -> None:
        settings = self.settings_for(ref.queue.address)
        self._move(ref, settings.expiry_address, ACK_EXPIRED, "expiry")
        ref.queue.expired += 1
        self.stats["messages_expired"] += 1

    def _move(self, ref: MessageRef, target: str | None, reason: int, what: str) -> None:
        msg = ref.message
        if ref.consumer is not None:
            ref.queue.take_in_flight(ref)
        if target and target in self.addresses and self.addresses[target].queues:
            view = MessageView(msg.payload)
            # the copy must not expire again on arrival
            payload = msg.payload if reason != ACK_EXPIRED else view.with_header(_no_ttl(view))
            # Each side expires its own copy (the mirror sends only the ack with reason EXPIRED), as
            # Artemis does; a dead-letter copy is an ordinary routing and is mirrored.
            outer = self.mirror_context
            if reason == ACK_EXPIRED:
                self.mirror_context = NO_MIRROR
            try:
                self.route(target, payload, MessageView(payload), no_expiry=reason == ACK_EXPIRED)
            finally:
                self.mirror_context = outer
        else:
            self.log.warning(
                "message %d on queue %s dropped: no %s address with a queue (configured: %s)",
                msg.id,
                ref.queue.name,
                what,
                target,
            )
        # consumer already detached above; acknowledge without touching in_flight again
        self.acknowledge(ref, reason)

    def expire_scan(self) -> int:
        """Move expired waiting messages out of every queue; returns how many."""
        now_ms = self.clock() * 1000
        n = 0
        for q in list(self.queues.values()):
            if q.internal:
                continue  # store-and-forward events never expire (Artemis ARTEMIS-5090)
            expired = [r for r in q.messages if r.message.expiry_ms and r.message.expiry_ms <= now_ms]
            if not expired:
                continue
            gone = {id(r) for r in expired}
            q.keep_only([r for r in q.messages if id(r) not in gone])
            for ref in expired:  # after the queue is rebuilt: an expiry copy may land on this very queue
                self.expire(ref)
            n += len(expired)
        return n

    # ------------------------------------------------------------------------------------ security

    def check(self, user: str | None, address: str, permission: str) -> None:
        if not self.authorizer.allowed(user, address, Permission(permission)):
            raise SecurityError(
                f"user {user or '<anonymous>'} does not have permission '{permission}' on address {address}"
            )

    def authenticate_plain(self, user: str, password: str) -> bool:
        return self.user_store.check_plain(user, password)


def _no_ttl(view: MessageView) -> Any:
    h = view.header
    h.ttl = None
    return h


def _run_all(callbacks: list[Callable[[], None]]) -> Callable[[], None]:
    def run() -> None:
        for cb in callbacks:
            try:
                cb()
            except Exception:  # one failing callback must not starve the others of their confirmation
                logging.getLogger("broker").exception("durability callback failed")

    return run
