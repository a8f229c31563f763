"""Addresses and queues: created, bound, deleted, journalled, and announced to observers.

Invariants:
- A queue is bound to exactly one address, which exists while the queue does.
- Temporary addresses and queues (made for dynamic and volatile consumers) are never journalled.
- Deleting a queue first kicks its consumers, so that what they held comes back before the queue's
  references are dropped.
- A name the journal cannot record (over 65,535 bytes in UTF-8) is refused before anything is made, so
  nothing is ever confirmed that a restart would not bring back.
"""

from __future__ import annotations

import logging

from .config.model import AddressSettings, BrokerConfig
from .errors import AlreadyExists, InvalidField, NotAllowed, NotFound, NotImplementedHere, PreconditionFailed
from .events import Cause, Observers
from .identity import MessageIndex
from .journal import records
from .message_fields import matcher, selector
from .persistence import Persistence
from .queues import Address, Queue, release_ref
from .usage import Budget, Usage

MAX_NAME_BYTES = 65_535  # the journal records names as short strings (u16 length)


def check_name(name: str, what: str) -> None:
    """Refuse a name the journal could not record (InvalidField: the attach or the delivery is refused)."""
    if len(name) > MAX_NAME_BYTES // 4 and len(name.encode()) > MAX_NAME_BYTES:
        raise InvalidField(f"{what} name of {len(name.encode()):,} bytes: at most {MAX_NAME_BYTES:,}")


def _from_remote(cause: Cause | None) -> bool:
    """Whether the work applies another broker's event (a mirror's)."""
    return cause is not None and cause.remote_id is not None


class Topology:
    def __init__(
        self,
        config: BrokerConfig,
        persistence: Persistence,
        observers: Observers,
        index: MessageIndex,
        log: logging.Logger,
        budget: Budget | None = None,
    ) -> None:
        self.config = config
        self.budget = budget or Budget()
        self.persistence = persistence
        self.observers = observers
        self.index = index
        self.log = log
        self.addresses: dict[str, Address] = {}
        self.queues: dict[str, Queue] = {}
        self.queues_by_id: dict[int, Queue] = {}
        self.next_queue_id = 1
        self.next_address_id = 1
        self._settings: dict[str, AddressSettings] = {}

    def settings_for(self, address: str) -> AddressSettings:
        s = self._settings.get(address)
        if s is None:
            s = self.config.address_settings_for(address)
            if len(self._settings) > 10000:
                self._settings.clear()
            self._settings[address] = s
        return s

    def usage_for(self, name: str, internal: bool) -> Usage:
        """The memory limits and full policy of an address, from its settings. A store-and-forward
        queue's (internal) address always pages: a mirror must never drop or refuse an event."""
        s = self.settings_for(name)
        return Usage(
            name,
            self.budget,
            max_bytes=s.max_size_bytes,
            max_messages=s.max_size_messages,
            policy="PAGE" if internal else s.address_full_policy.value,
            reject_threshold=s.max_size_bytes_reject_threshold,
            read_bytes=s.max_read_page_bytes,
            read_messages=s.max_read_page_messages,
        )

    def add_address(self, addr: Address) -> Address:
        """Make `addr` known, with its usage (created here, or restored at recovery)."""
        addr.usage = self.usage_for(addr.name, addr.internal)
        self.addresses[addr.name] = addr
        return addr

    # ------------------------------------------------------------------------------- addresses

    def ensure_address(
        self,
        name: str,
        routing_types: set[str],
        *,
        auto_created: bool = True,
        internal: bool = False,
        temporary: bool = False,
        cause: Cause | None = None,
    ) -> Address:
        addr = self.addresses.get(name)
        if addr is not None:
            if not routing_types <= addr.routing_types:
                addr.routing_types |= routing_types
                self._persist_address(addr)
            return addr
        check_name(name, "address")
        addr = Address(
            name,
            set(routing_types),
            id=self.next_address_id,
            auto_created=auto_created,
            internal=internal,
            temporary=temporary,
        )
        self.next_address_id += 1
        self.add_address(addr)
        self._persist_address(addr)
        self.log.debug("address %s created (%s)", name, ",".join(sorted(routing_types)))
        for o in self.observers.all:
            o.address_added(addr, cause)
        return addr

    def _persist_address(self, addr: Address) -> None:
        if addr.temporary:
            return
        self.persistence.persist(
            records.AddressAdded(
                addr.id, addr.name, frozenset(addr.routing_types), addr.auto_created, addr.internal
            )
        )

    def delete_address(self, name: str, force: bool = False, cause: Cause | None = None) -> None:
        addr = self.addresses.get(name)
        if addr is None:
            raise NotFound(f"address {name!r} does not exist")
        if addr.queues and not force:
            raise PreconditionFailed(f"address {name!r} has queues")
        if _from_remote(cause) and (addr.internal or any(q.internal for q in addr.queues)):
            raise NotAllowed(
                f"address {name} is internal to this broker: no remote broker's event deletes it"
            )
        for q in list(addr.queues):
            self.delete_queue(q.name, cause)
        self.addresses.pop(name, None)
        if not addr.temporary:
            self.persistence.persist(records.AddressRemoved(addr.id))
        for o in self.observers.all:
            o.address_removed(addr, cause)

    # ---------------------------------------------------------------------------------- queues

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
        cause: Cause | None = None,
        lenient_filter: bool = False,
    ) -> Queue:
        """A new queue. A filter it cannot apply refuses it before anything changes, or with
        `lenient_filter` (a queue another broker made, which must exist here too) leaves it unfiltered,
        said (AMQ951095)."""
        if name in self.queues:
            raise AlreadyExists(f"queue {name!r} already exists")
        check_name(name, "queue")
        try:
            match = matcher(selector(filter_string))
        except (InvalidField, NotImplementedHere) as exc:
            if not lenient_filter:
                raise
            self.log.error("AMQ951095: queue %s keeps its filter but cannot apply it: %s", name, exc)
            match = None
        addr = self.ensure_address(
            address,
            {routing_type},
            auto_created=auto_created,
            internal=internal,
            temporary=temporary,
            cause=cause,
        )
        q = Queue(
            self.next_queue_id,
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
        self.next_queue_id += 1
        q.filter = match
        self.bind(q)
        if durable and not temporary:
            self.persistence.persist(
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
                )
            )
        self.log.debug("queue %s created on %s (%s)", name, address, routing_type)
        for o in self.observers.all:
            o.queue_added(q, cause)
        return q

    def bind(self, q: Queue) -> None:
        """Make `q` known and bound to its address (made if missing, as at recovery)."""
        self.queues[q.name] = q
        self.queues_by_id[q.id] = q
        addr = self.addresses.get(q.address)
        if addr is None:
            addr = self.add_address(Address(q.address, {q.routing_type}, internal=q.internal))
        q.usage = addr.usage
        addr.queues.append(q)
        if q.filter is None and q.filter_string:  # a recovered queue
            try:
                q.filter = matcher(selector(q.filter_string))
            except (InvalidField, NotImplementedHere) as exc:  # kept before filters were checked
                self.log.error("AMQ951095: queue %s keeps its filter but cannot apply it: %s", q.name, exc)

    def delete_queue(self, name: str, cause: Cause | None = None) -> None:
        q = self.queues.get(name)
        if q is None:
            raise NotFound(f"queue {name!r} does not exist")
        if q.internal and _from_remote(cause):  # a mirror's store-and-forward queue: another DC's events
            raise NotAllowed(f"queue {name} is internal to this broker: no remote broker's event deletes it")
        del self.queues[name]
        del self.queues_by_id[q.id]
        addr = self.addresses.get(q.address)
        if addr is not None and q in addr.queues:
            addr.queues.remove(q)
        # first, so that what they held comes back before the release below
        for c in [*q.consumers, *(browser for browser, _ in q.browsers)]:
            c.kick("amqp:resource-deleted", f"queue {name} was deleted")
        for ref in q.refs():
            if release_ref(ref):
                self.index.forget(ref.message)
        q.keep_only([])
        if q.durable and not q.temporary:
            self.persistence.persist(records.QueueRemoved(q.id))
        for o in self.observers.all:
            o.queue_removed(q, cause)
        # A temporary address goes with its last queue whatever auto-delete-addresses says, as on Artemis
        # (or every request/reply client would leave one address behind for good).
        if (
            addr is not None
            and addr.auto_created
            and not addr.queues
            and (addr.temporary or self.settings_for(addr.name).auto_delete_addresses)
        ):
            self.delete_address(addr.name, cause=cause)
