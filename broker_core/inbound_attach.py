"""Which address or queue a client's terminus means, as Artemis decides it for AMQP clients.

- Routing type: the terminus capabilities (`queue` / `topic`), else the address's only routing type,
  else the address settings' default; an acceptor's `anycastPrefix` / `multicastPrefix` on the address
  decides first and is stripped.
- Addresses and anycast queues are auto-created when the address settings allow it and the user may.
- A multicast consumer gets a subscription queue of its own: durable (named by container id and link
  name) when the terminus says so, shared by link name with the `shared` capability (`global` drops the
  container id), otherwise a volatile queue deleted with the link.
- `address::queue` names one queue directly, for consumers and producers alike (a producer's messages
  go to that queue only, as Artemis routes a fully qualified queue name); the queue must exist on that
  address.
- Internal addresses and queues (the mirror's store-and-forward queue) are the broker's own: no client
  sends to them, consumes or browses them. Nor does a client reach an address a service answers (the
  mirror prefix) except through that service's own links.

The endpoint answers with frames; this module only decides, checks permissions and creates.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final

from .amqp.performatives import Coordinator, Source, Target, symbols
from .errors import InvalidField, NotAllowed, NotFound, NotImplementedHere, ResourceLimitExceeded
from .vocabulary import ANYCAST, MULTICAST

if TYPE_CHECKING:
    from .config.model import Acceptor
    from .queues import Queue
    from .server import Server
    from .services import Services

QUEUE_CAPS = {"queue", "temporary-queue"}
TOPIC_CAPS = {"topic", "temporary-topic"}
SELECTOR_FILTER = "apache.org:selector-filter:string"
SELECTOR_FILTER_CODE = 0x0000468C00000004


class Subscription:
    """What a consumer's queue is to it: its lifetime follows the link's (VOLATILE, TEMPORARY), the
    terminus's durability (DURABLE), or neither (a plain queue: None)."""

    DURABLE: Final = "durable"
    VOLATILE: Final = "volatile"
    TEMPORARY: Final = "temporary"


class Termini:
    """Resolves the termini of one acceptor's clients against one server."""

    def __init__(self, server: Server, acceptor: Acceptor, services: Services) -> None:
        self.server = server
        self.acceptor = acceptor
        self.services = services

    def check_reachable(self, address: str) -> None:
        """Refuse the broker's own addresses: internal ones, and those a service answers."""
        addr = self.server.addresses.get(address)
        if (addr is not None and addr.internal) or self.services.at(address) is not None:
            raise NotAllowed(f"address {address} is internal to the broker; clients cannot use it")

    # --------------------------------------------------------------------------------- addresses

    def strip_prefix(self, address: str) -> tuple[str, str | None]:
        a = self.acceptor
        if a.anycast_prefix and address.startswith(a.anycast_prefix):
            return address[len(a.anycast_prefix) :], ANYCAST
        if a.multicast_prefix and address.startswith(a.multicast_prefix):
            return address[len(a.multicast_prefix) :], MULTICAST
        return address, None

    def routing_type(self, caps: tuple[str, ...], address: str) -> str:
        if TOPIC_CAPS & set(caps):
            return MULTICAST
        if QUEUE_CAPS & set(caps):
            return ANYCAST
        addr = self.server.addresses.get(address)
        if addr is not None and len(addr.routing_types) == 1:
            return next(iter(addr.routing_types))
        return self.server.settings_for(address).default_address_routing_type.value

    def ensure_address(self, user: str | None, address: str, routing_type: str) -> None:
        srv = self.server
        addr = srv.addresses.get(address)
        if addr is not None and routing_type in addr.routing_types:
            return
        if not srv.settings_for(address).auto_create_addresses:
            raise NotFound(f"address {address} does not exist")
        srv.check(user, address, "createAddress")
        srv.ensure_address(address, {routing_type})

    def _anycast_queue(self, user: str | None, address: str) -> Queue:
        srv = self.server
        q = srv.queues.get(address)
        if q is not None:
            return q
        addr = srv.addresses.get(address)
        if addr is not None:  # Artemis: an anycast consumer takes a queue bound to the address
            for bound in addr.queues:
                if bound.routing_type == ANYCAST and not bound.temporary:
                    return bound
        if not srv.settings_for(address).auto_create_queues:
            raise NotFound(f"queue {address} does not exist")
        srv.check(user, address, "createDurableQueue")
        return srv.create_queue(address, address, ANYCAST, auto_created=True)

    # --------------------------------------------------------------------------------- producers

    def producer(self, user: str | None, target: object) -> tuple[str | None, str | None, str | None]:
        """(address, routing type, queue) a producer's target means: queue is None unless the target
        names one (``address::queue``); (None, None, None) for an anonymous relay."""
        if isinstance(target, Coordinator):
            raise InvalidField("a transaction coordinator is not a producer's target")
        if target is not None and not isinstance(target, Target):
            raise InvalidField("unrecognised target")
        if target is None:
            return None, None, None
        if target.dynamic:
            raise NotImplementedHere("dynamic targets are not supported")
        if not target.address:
            return None, None, None
        address, routing_type = self.strip_prefix(target.address)
        if "::" in address:
            queue = self.named_queue(user, address, "send")
            return queue.address, queue.routing_type, queue.name
        self.check_reachable(address)
        routing_type = routing_type or self.routing_type(symbols(target.capabilities), address)
        self.server.check(user, address, "send")
        self.ensure_address(user, address, routing_type)
        if routing_type == ANYCAST:
            addr = self.server.addresses[address]
            if not any(q.routing_type == ANYCAST for q in addr.queues):
                self._anycast_queue(user, address)
        return address, routing_type, None

    def named_queue(self, user: str | None, name: str, permission: str) -> Queue:
        """The queue a fully qualified name ``address::queue`` names, which must exist on that address;
        ``permission`` is checked on the whole name."""
        address, qname = name.split("::", 1)
        self.check_reachable(address)
        self.server.check(user, name, permission)
        found = self.server.queues.get(qname)
        if found is None or found.address != address:
            raise NotFound(f"queue {qname} on address {address} does not exist")
        if found.internal:
            raise NotAllowed(f"queue {qname} is internal to the broker; clients cannot use it")
        return found

    # --------------------------------------------------------------------------------- consumers

    def consumer(
        self, user: str | None, link_name: str, container: str, source: object
    ) -> tuple[Queue, str | None, Source]:
        """The queue a consumer's source means, what it is to the consumer, and the source to answer with."""
        if not isinstance(source, Source):
            raise InvalidField("consumer attach without a source")
        if source.filter and any(
            str(k) == SELECTOR_FILTER
            or getattr(v, "descriptor", None) in (SELECTOR_FILTER, SELECTOR_FILTER_CODE)
            for k, v in source.filter.items()
        ):
            raise NotImplementedHere("message selectors are not supported yet")
        if source.distribution_mode == "copy":
            # A browser must not take what it reads (Artemis never does); until browsing is here, it is
            # refused rather than served as a consumer whose accepts would remove the messages.
            raise NotImplementedHere("browsing (distribution-mode copy) is not supported yet")
        srv = self.server
        subscription = None
        if source.dynamic:
            name = f"{uuid.uuid4()}"
            srv.check(user, name, "createNonDurableQueue")
            queue = srv.create_queue(name, name, ANYCAST, durable=False, temporary=True, auto_created=True)
            source = Source(address=name, dynamic=True, capabilities=source.capabilities)
            subscription = Subscription.TEMPORARY
        else:
            if not source.address:
                raise InvalidField("consumer attach without a source address")
            address, routing_type = self.strip_prefix(source.address)
            if "::" in address:  # fully qualified queue name address::queue
                queue = self.named_queue(user, address, "consume")
            else:
                self.check_reachable(address)
                caps = symbols(source.capabilities)
                routing_type = routing_type or self.routing_type(caps, address)
                srv.check(user, address, "consume")
                self.ensure_address(user, address, routing_type)
                if routing_type == ANYCAST:
                    queue = self._anycast_queue(user, address)
                else:
                    queue, subscription = self._subscription(
                        user, link_name, container, source, address, caps
                    )
        if queue.internal:
            raise NotAllowed(f"queue {queue.name} is internal to the broker; clients cannot use it")
        if 0 <= queue.max_consumers <= len(queue.consumers):
            raise ResourceLimitExceeded(f"queue {queue.name} has its maximum of consumers")
        return queue, subscription, source

    def _subscription(
        self,
        user: str | None,
        link_name: str,
        container: str,
        source: Source,
        address: str,
        caps: tuple[str, ...],
    ) -> tuple[Queue, str]:
        """Multicast consumer: its own subscription queue (durable when the terminus says so)."""
        srv = self.server
        durable = bool(source.durable) and source.expiry_policy == "never"
        shared, global_ = "shared" in caps, "global" in caps
        base = link_name.split("|", 1)[0] if shared else link_name
        if durable:
            name = base if (shared and global_) else f"{container}.{base}"
            q = srv.queues.get(name)
            if q is not None:
                return q, Subscription.DURABLE
            srv.check(user, address, "createDurableQueue")
            return srv.create_queue(name, address, MULTICAST, auto_created=False), Subscription.DURABLE
        if shared:
            name = f"{base}:shared-volatile" if global_ else f"{container}.{base}:shared-volatile"
            q = srv.queues.get(name)
            if q is not None:
                return q, Subscription.VOLATILE
        else:
            name = str(uuid.uuid4())
        srv.check(user, address, "createNonDurableQueue")
        queue = srv.create_queue(name, address, MULTICAST, durable=False, temporary=True, auto_created=True)
        return queue, Subscription.VOLATILE
