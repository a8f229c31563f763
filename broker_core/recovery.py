"""A server rebuilt from its journal: addresses, queues, messages on their queues, meta, id counters."""

from __future__ import annotations

from .identity import MessageIndex
from .journal.state import Recovered
from .persistence import ID_RESERVATION, Persistence
from .queues import Address, MessageRef, Queue, StoredMessage, hold_ref
from .topology import Topology


def restore(state: Recovered, topology: Topology, index: MessageIndex, persistence: Persistence) -> None:
    for a in state.addresses.values():
        topology.add_address(
            Address(
                a.name,
                set(a.routing_types),
                id=a.address_id,
                auto_created=a.auto_created,
                internal=a.internal,
            )
        )
    for qrec in state.queues.values():
        topology.bind(
            Queue(
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
        )
    by_id = topology.queues_by_id
    for rm in state.messages.values():
        m = rm.record
        msg = StoredMessage(m.message_id, m.address, m.body, True, m.expiry_ms, m.timestamp_ms, m.priority)
        msg.origin_broker_id = m.origin_broker_id
        msg.origin_message_id = m.origin_message_id
        msg.via_mirror = m.via_mirror
        indexed = False
        for queue_id in rm.queue_ids:
            rq = by_id.get(queue_id)
            if rq is None:
                continue
            ref = MessageRef(msg, rq, rm.delivery_counts.get(queue_id, 0))
            hold_ref(ref)
            indexed = indexed or not rq.internal  # mirror copies live only on internal queues
            rq.restore(ref)
        if indexed:
            index.add(msg)
    persistence.meta.update((k, v) for k, v in state.meta.items() if v)  # in place: others hold the dict
    reserved = int(persistence.meta.get(ID_RESERVATION, b"0"))
    persistence.next_message_id = max(persistence.next_message_id, state.max_message_id + 1, reserved)
    topology.next_queue_id = max(topology.next_queue_id, state.max_queue_id + 1)
    topology.next_address_id = max(topology.next_address_id, state.max_address_id + 1)
