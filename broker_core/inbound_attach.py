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
- A source's selector (`apache.org:selector-filter:string`, JMS names rewritten to Artemis's filter
  names) is the consumer's on a queue, and the subscription queue's own filter on a multicast address,
  as Artemis keeps it there: untranslated, and with `no-local` (`apache.org:no-local-filter:list`) as
  `__AMQ_CID<>'<container id>'` added. A durable subscription attached with another filter is made
  anew when it has no consumer (JMS: its messages are dropped), refused while it has one. An invalid
  selector is amqp:invalid-field. The reply's source names the filters honoured.
- A consumer attach without a source names a durable subscription by its link name (Qpid JMS's
  unsubscribe; closing the link deletes it), answered with the subscription's source and filters.
- `distribution-mode` copy on a queue browses it: copies of what waits, nothing acquired (on a
  subscription it means nothing, as in Artemis).

The endpoint answers with frames; this module only decides, checks permissions and creates.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from filters.selector import Selector

from .amqp.performatives import Coordinator, Source, Target, symbols
from .amqp.types import Described, Symbol, ULong
from .errors import (
    IllegalState,
    InvalidField,
    NotAllowed,
    NotFound,
    NotImplementedHere,
    ResourceLimitExceeded,
)
from .message_fields import CONNECTION_ID, selector
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
NO_LOCAL_FILTER = "apache.org:no-local-filter:list"
NO_LOCAL_FILTER_CODE = 0x0000468C00000003


def _find_filter(filters: dict[Any, Any] | None, name: str, code: int) -> tuple[Any, Any] | None:
    """The (key, value) of a source filter known by its descriptor's name or code, or by its key."""
    for key, value in (filters or {}).items():
        if str(key) == name or getattr(value, "descriptor", None) in (name, code):
            return key, value
    return None


@dataclass(slots=True)
class ConsumerChoice:
    """What a consumer's source means: its queue, what the queue is to it (`Subscription`), the source to
    answer with, its own selector (None: everything) and whether it only browses."""

    queue: Queue
    subscription: str | None
    source: Source
    selector: Selector | None = None
    browse: bool = False


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
        self, user: str | None, link_name: str, container: str, source: object, desired: object = None
    ) -> ConsumerChoice:
        """The queue a consumer's source means, what it is to the consumer, the source to answer with, the
        consumer's selector and whether it browses. `desired`: the attach's desired capabilities."""
        if source is None:
            return self._recovered_subscription(user, link_name, container, symbols(desired))
        if not isinstance(source, Source):
            raise InvalidField("consumer attach without a source")
        found = _find_filter(source.filter, SELECTOR_FILTER, SELECTOR_FILTER_CODE)
        text = getattr(found[1], "value", found[1]) if found is not None else None
        if text is not None and not isinstance(text, str):
            raise InvalidField("a selector filter must be a string")
        selector(text, jms=True)  # amqp:invalid-field now, whatever the queue
        no_local = _find_filter(source.filter, NO_LOCAL_FILTER, NO_LOCAL_FILTER_CODE)
        honoured = dict([found] if found is not None else [])
        srv = self.server
        subscription = None
        queue_filter: str | None = None
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
                    queue_filter = text
                    if no_local is not None:  # Artemis's own form, which its recovery recognises
                        local = f"{CONNECTION_ID}<>'{container}'"
                        queue_filter = local if text is None else f"{text} AND {local}"
                        honoured[no_local[0]] = no_local[1]
                    queue, subscription = self._subscription(
                        user, link_name, container, source, address, caps, queue_filter
                    )
        if queue.internal:
            raise NotAllowed(f"queue {queue.name} is internal to the broker; clients cannot use it")
        browse = subscription is None and source.distribution_mode == "copy"
        if not browse and 0 <= queue.max_consumers <= len(queue.consumers):
            raise ResourceLimitExceeded(f"queue {queue.name} has its maximum of consumers")
        if source.filter is not None or honoured:
            source = _with_filter(source, honoured or None)
        own = None if subscription is not None else selector(text, jms=True)
        return ConsumerChoice(queue, subscription, source, own, browse)

    def _subscription(
        self,
        user: str | None,
        link_name: str,
        container: str,
        source: Source,
        address: str,
        caps: tuple[str, ...],
        queue_filter: str | None,
    ) -> tuple[Queue, str]:
        """Multicast consumer: its own subscription queue (durable when the terminus says so), filtered by
        its selector."""
        srv = self.server
        durable = bool(source.durable) and source.expiry_policy == "never"
        shared, global_ = "shared" in caps, "global" in caps
        base = link_name.split("|", 1)[0] if shared else link_name
        if durable:
            name = base if (shared and global_) else f"{container}.{base}"
            q = self._existing_subscription(name, address, queue_filter)
            if q is not None:
                return q, Subscription.DURABLE
            srv.check(user, address, "createDurableQueue")
            q = srv.create_queue(
                name,
                address,
                MULTICAST,
                auto_created=False,
                filter_string=queue_filter,
                max_consumers=-1 if shared else 1,
            )
            return q, Subscription.DURABLE
        if shared:
            name = f"{base}:shared-volatile" if global_ else f"{container}.{base}:shared-volatile"
            q = self._existing_subscription(name, address, queue_filter)
            if q is not None:
                return q, Subscription.VOLATILE
        else:
            name = str(uuid.uuid4())
        srv.check(user, address, "createNonDurableQueue")
        queue = srv.create_queue(
            name,
            address,
            MULTICAST,
            durable=False,
            temporary=True,
            auto_created=True,
            filter_string=queue_filter,
        )
        return queue, Subscription.VOLATILE

    def _recovered_subscription(
        self, user: str | None, link_name: str, container: str, desired: tuple[str, ...]
    ) -> ConsumerChoice:
        """A consumer attach without a source names a durable subscription by its link name (how Qpid JMS
        unsubscribes: it attaches so, then closes the link, which deletes the subscription). Answered, as
        Artemis does, with a source naming the subscription queue and the filters it was made with."""
        base = link_name.split("|", 1)[0]
        name = base if "global" in desired else f"{container}.{base}"
        q = self.server.queues.get(name)
        if q is None or q.routing_type != MULTICAST or not q.durable or q.internal:
            raise NotFound(f"Unknown subscription link: {link_name}")
        self.server.check(user, q.address, "consume")
        if 0 <= q.max_consumers <= len(q.consumers):
            raise ResourceLimitExceeded(f"queue {q.name} has its maximum of consumers")
        filters: dict[Any, Any] = {}
        text = q.filter_string
        if text is not None:
            local = f"{CONNECTION_ID}<>'{container}'"
            if text.endswith(local):
                text = text[: -len(local)].removesuffix(" AND ")
                filters[Symbol(NO_LOCAL_FILTER)] = Described(ULong(NO_LOCAL_FILTER_CODE), "NoLocalFilter{}")
            if text.strip():
                filters[Symbol(SELECTOR_FILTER)] = Described(ULong(SELECTOR_FILTER_CODE), text)
        source = Source(
            address=name,
            durable=2,  # unsettled-state
            expiry_policy="never",
            distribution_mode="copy",
            filter=filters or None,
            capabilities=[Symbol("topic")],
        )
        return ConsumerChoice(q, Subscription.DURABLE, source)

    def _existing_subscription(self, name: str, address: str, queue_filter: str | None) -> Queue | None:
        """The subscription queue `name` if it exists as asked; one on another address or with another
        filter is deleted to be made anew (JMS), unless consumers still use it."""
        srv = self.server
        q = srv.queues.get(name)
        if q is None or (q.address == address and q.filter_string == queue_filter):
            return q
        if q.consumers or q.browsers:
            raise IllegalState("Unable to recreate subscription, consumers already exist")
        srv.delete_queue(name)
        return None


def _with_filter(source: Source, filters: dict[Any, Any] | None) -> Source:
    """The source to answer with: the client's, naming only the filters honoured."""
    return Source(
        address=source.address,
        durable=source.durable,
        expiry_policy=source.expiry_policy,
        timeout=source.timeout,
        dynamic=source.dynamic,
        dynamic_node_properties=source.dynamic_node_properties,
        distribution_mode=source.distribution_mode,
        filter=filters,
        default_outcome=source.default_outcome,
        outcomes=source.outcomes,
        capabilities=source.capabilities,
    )
