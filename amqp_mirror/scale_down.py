"""Scale-down: on a clean stop, this server's messages move to an active member of its group.

`<scale-down>` names the members (`<connectors>`) and the group (`<group-name>`). Stopping, the server:
1. asks each member who it is, as the cluster user (`CLUSTER_ADDRESS`: its node id and group) and takes
   the first, in the order of the connectors, that is active with another node id and of its group
   (broker_core/ha/scale_down.py's `choose_target`); none within `FIND_TIMEOUT`: the stop says so and the
   messages stay in this server's journal (AMQ951166);
2. stops accepting and closes its clients with `amqp:connection:redirect` naming that member (they go on
   there) and its broker connections;
3. moves each queue on one link to the member's `SCALE_DOWN_ADDRESS`, in queue order: each message is
   removed here only once the member has settled it Accepted (durable there). Cut short (the member
   gone, a refusal), the rest stays here: in the journal for the next start, when a scale-down run again
   stores nothing twice (each message carries its stable scale-down id).

Moved messages arrive after those the member had already: the order within a queue is kept, not across
the two servers' messages. Every step is a log line AMQ951160-166; the messages moved are counted
(`messages_scaled_down_total`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from broker_core.amqp.performatives import Accepted, Attach, Source, Target
from broker_core.config.model import AmqpConnection, Connector, Endpoint, ScaleDown
from broker_core.config.uri import parse_acceptor_uri
from broker_core.ha.cluster_service import CLUSTER_ADDRESS, GROUP_NAME, NODE_ID
from broker_core.ha.scale_down import (
    SCALE_DOWN_ADDRESS,
    Member,
    choose_target,
    queue_properties,
    scale_down_id,
    with_scale_down_id,
)
from broker_core.queues import MessageRef, Queue, delivery_payload
from broker_core.vocabulary import AckReason
from connections.outbound import OutboundConnection
from connections.policies import LinkHost, LinkRole

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link

    from .broker import Broker

log = logging.getLogger("broker.ha")

FIND_TIMEOUT = 5.0  # seconds to find an active member of the group
ANSWER_TIMEOUT = 30.0  # seconds without progress (an attach answered, a message settled) before giving up
CLIENTS_GONE = 5.0  # seconds for the redirected clients to go (their in-flight messages come back)
TICK = 0.1


class MovedNothing(Exception):
    """The scale-down could not go on; the message says why."""


def scales_down(broker: Broker) -> ScaleDown | None:
    policy = broker.config.ha_policy.scale_down
    return policy if policy is not None and policy.enabled else None


class MemberLink:
    """The link policy of the connection to one member: who it is, then (the chosen one) a queue link
    at a time."""

    def __init__(self, scale_down: ScaleDownRun, connector: Connector) -> None:
        self.run = scale_down
        self.connector = connector
        self.host: LinkHost | None = None
        self.answer: asyncio.Future[Member | None] = scale_down.loop.create_future()
        self.progress = asyncio.Event()  # an attach answered, a message settled, credit, the link lost
        self.attached: Link | None = None  # the queue link, once the member answered it
        self.inflight: dict[int, MessageRef] = {}  # id(ref) -> ref
        self.lost = False
        self.refused: str | None = None  # the first outcome other than Accepted
        self._pending = 0

    def install(self) -> None:
        pass

    def attach_all(self, conn: LinkHost) -> None:
        self.host = conn
        attach = Attach(
            name=f"scale-down:who:{self.run.name}",
            role=True,
            snd_settle_mode=1,
            rcv_settle_mode=0,
            source=Source(address=CLUSTER_ADDRESS),
            target=Target(),
        )
        conn.attach(attach, LinkRole(self))
        self._pending = 1

    def remote_attached(self, conn: LinkHost, link: Link) -> None:
        self._pending = 0
        if link.is_sender:
            self.attached = link
            self.progress.set()
            return
        properties = (link.remote_attach.properties if link.remote_attach is not None else None) or {}
        node_id, group = properties.get(NODE_ID), properties.get(GROUP_NAME)
        if not self.answer.done():
            self.answer.set_result(
                Member(
                    str(node_id),
                    str(group) if group is not None else None,
                    self.connector.host,
                    self.connector.port,
                )
                if node_id is not None
                else None
            )

    def local_queue_added(self, conn: LinkHost, queue: Any) -> None:
        pass

    def on_delivery(
        self, conn: LinkHost, link: Link, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        pass

    def on_outcome(self, conn: LinkHost, link: Link, context: Any, state: Any) -> None:
        ref = self.inflight.pop(id(context), None)
        if ref is None:
            return
        if isinstance(state, Accepted):
            self.run.moved(ref)
        elif self.refused is None:
            self.refused = f"the member answered {type(state).__name__ if state is not None else 'nothing'}"
        self.progress.set()

    def outcomes_done(self, conn: LinkHost) -> None:
        pass

    def on_flow(self, conn: LinkHost, link: Link) -> None:
        self.progress.set()

    def detached_all(self, conn: LinkHost) -> None:
        self._pending = 0
        self.host = None
        if not self.answer.done():
            self.answer.set_result(None)
        if self.attached is not None or self.inflight:
            self.lost = True
        self.progress.set()

    def pending(self) -> int:
        return self._pending


class ScaleDownRun:
    """One scale-down of a stopping server."""

    def __init__(self, broker: Broker, policy: ScaleDown) -> None:
        self.broker = broker
        self.policy = policy
        self.server = broker.server
        self.name = broker.config.name
        self.loop = broker.loop
        self.moved_by_queue: dict[str, int] = {}
        self._ticker: asyncio.TimerHandle | None = None
        self.clients: list[OutboundConnection] = []

    async def run(self) -> bool:
        """Move every message; whether all of them moved (False: what is left stays here)."""
        group = self.policy.group_name
        log.info(
            "AMQ951160: %s scales down: it moves its messages to an active member%s of %s",
            self.name,
            f" of group {group}" if group else "",
            ", ".join(self.policy.connectors),
        )
        links = [self._connect(c) for c in self._connectors()]
        self._tick()
        try:
            target = await self._find(links)
            if target is None:
                left = sum(q.depth for q in self.server.queues.values() if not q.internal)
                log.log(
                    logging.ERROR if left else logging.WARNING,
                    "AMQ951166: %s could not scale down: no active member%s answered at %s within %.0f s; "
                    "its %d messages stay in its journal (a non-durable one goes with the stop)",
                    self.name,
                    f" of group {group}" if group else "",
                    ", ".join(self.policy.connectors),
                    FIND_TIMEOUT,
                    left,
                )
                return not left  # with nothing to move, nothing is stranded
            member, link = target
            await self._redirect_clients(member)
            return await self._move_all(member, link)
        finally:
            self._stop()

    def _connectors(self) -> list[Connector]:
        by_name = {c.name: c for c in self.broker.config.connectors}
        return [by_name[name] for name in self.policy.connectors if name in by_name]

    def _connect(self, connector: Connector) -> MemberLink:
        config = self.broker.config
        link = MemberLink(self, connector)
        connection = AmqpConnection(
            name=f"scale-down:{self.name}:{connector.name}",
            uri=connector.uri,
            endpoints=(
                Endpoint(
                    host=connector.host, port=connector.port, params=parse_acceptor_uri(connector.uri).params
                ),
            ),
            user=config.cluster_user,
            password=config.cluster_password,
            retry_interval=500,
        )
        client = OutboundConnection(self.server, connection, self.loop, self.broker.turn, [link])
        self.clients.append(client)
        client.start()
        return link

    def _tick(self) -> None:
        now = time.monotonic()
        for client in self.clients:
            client.tick(now)
        self._ticker = self.loop.call_later(TICK, self._tick)

    def _stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for client in self.clients:
            client.stop()

    async def _find(self, links: list[MemberLink]) -> tuple[Member, MemberLink] | None:
        """The first member, in the connectors' order, that suits: one that suits is taken once every
        connector before it has answered (or not, by the deadline)."""
        deadline = self.loop.time() + FIND_TIMEOUT
        own, group = self.server.node_id, self.policy.group_name
        while True:
            late = self.loop.time() >= deadline
            for link in links:
                if not link.answer.done():
                    if late:
                        continue  # silent: passed over
                    break  # an earlier connector may still answer
                member = link.answer.result()
                if choose_target([member], own, group) is not None and member is not None:
                    return member, link
            else:
                return None
            undecided = [link.answer for link in links if not link.answer.done()]
            await asyncio.wait(
                undecided, timeout=deadline - self.loop.time(), return_when=asyncio.FIRST_COMPLETED
            )

    async def _redirect_clients(self, member: Member) -> None:
        """No new client, every client told to go on at the member, no broker connection: from now on
        nothing adds to or takes from the queues but the scale-down. The clients' in-flight messages come
        back to their queues as their connections go."""
        broker = self.broker
        log.info(
            "AMQ951161: %s scales down to %s:%d (node id %s%s); its clients are redirected there",
            self.name,
            member.host,
            member.port,
            member.node_id,
            f", group {member.group_name}" if member.group_name else "",
        )
        if broker.connections is not None:
            broker.connections.stop()
        listener = broker.listener
        if listener is None:
            return
        listener.stop_accepting()
        listener.close_clients((), redirect=(member.host, member.port))
        for socket in list(listener.sockets):  # the close written: no need to wait for the client's
            if socket.transport is not None:
                socket.transport.close()
        deadline = self.loop.time() + CLIENTS_GONE
        while listener.sockets and self.loop.time() < deadline:
            await asyncio.sleep(TICK / 10)
        for socket in list(listener.sockets):  # a socket that would not even close
            if socket.transport is not None:
                socket.transport.abort()
        while listener.sockets and self.loop.time() < deadline + 1:
            await asyncio.sleep(TICK / 10)

    async def _move_all(self, member: Member, link: MemberLink) -> bool:
        queues = [q for q in self.server.queues.values() if not q.internal and not q.temporary]
        total = 0
        for queue in queues:
            try:
                moved = await self._move_queue(link, queue)
            except MovedNothing as exc:
                log.error(
                    "AMQ951165: %s's scale-down to %s:%d stopped at queue %s: %s; %d messages moved, the "
                    "others stay in its journal (a scale-down run again moves them, storing nothing twice)",
                    self.name,
                    member.host,
                    member.port,
                    queue.name,
                    exc,
                    total + self.moved_by_queue.get(queue.name, 0),
                )
                return False
            total += moved
            if moved:
                log.info(
                    "AMQ951162: %s scaled queue %s (%s, address %s) down: %d messages moved",
                    self.name,
                    queue.name,
                    queue.routing_type,
                    queue.address,
                    moved,
                )
        log.info(
            "AMQ951163: %s scaled down to %s:%d: %d messages moved from %d queues",
            self.name,
            member.host,
            member.port,
            total,
            len(queues),
        )
        return True

    async def _move_queue(self, member: MemberLink, queue: Queue) -> int:
        """Every message of `queue` to the member, in order; how many (each settled Accepted there)."""
        if not queue.depth:
            return 0
        host = member.host
        if host is None or host.conn is None:
            raise MovedNothing("the connection to the member is gone")
        member.attached = None
        attach = Attach(
            name=f"scale-down:{self.name}:{queue.name}",
            role=False,
            snd_settle_mode=0,
            rcv_settle_mode=0,
            source=Source(address=queue.name),
            target=Target(address=SCALE_DOWN_ADDRESS),
            initial_delivery_count=0,
            properties=queue_properties(queue),
        )
        host.attach(attach, LinkRole(member))
        host.write_out()
        await self._wait(member, lambda: member.attached is not None)
        link = member.attached
        assert link is not None
        if link.remote_attach is None or link.remote_attach.target is None:
            raise MovedNothing("the member refused the queue")
        self.moved_by_queue[queue.name] = 0
        node_id = self.server.node_id
        for tag, ref in enumerate(self._take(queue), 1):
            await self._wait(member, lambda: link.credit > 0 and link.session.remote_incoming_window > 0)
            engine = host.conn
            if engine is None:
                raise MovedNothing("the connection to the member is gone")
            payload = with_scale_down_id(delivery_payload(ref), scale_down_id(node_id, ref.message.id))
            member.inflight[id(ref)] = ref
            engine.send_delivery(link, tag.to_bytes(8, "big"), payload, False, ref)
            host.mark_dirty()
        await self._wait(member, lambda: not member.inflight)
        engine = host.conn
        if engine is not None and not link.closed_locally:
            engine.detach(link, closed=True)
            host.mark_dirty()
        return self.moved_by_queue[queue.name]

    def _take(self, queue: Queue) -> Any:
        """The queue's waiting messages, in order, taken out of it (page files read back batch by batch);
        what is not moved stays in the journal."""
        while True:
            taken = queue.refs()  # in delivery order: by priority, oldest first within one
            if taken:
                queue.keep_only([])
                yield from taken
            pager = queue.pager
            if not queue.paged or pager is None or not pager.fill(queue):
                return

    async def _wait(self, member: MemberLink, done: Any) -> None:
        """Until `done()`, as long as the member makes progress within ANSWER_TIMEOUT."""
        while not done():
            if member.lost:
                raise MovedNothing("the connection to the member was lost")
            if member.refused is not None:
                raise MovedNothing(member.refused)
            member.progress.clear()
            try:
                await asyncio.wait_for(member.progress.wait(), ANSWER_TIMEOUT)
            except TimeoutError:
                raise MovedNothing(f"the member answered nothing for {ANSWER_TIMEOUT:.0f} s") from None

    def moved(self, ref: MessageRef) -> None:
        """The member has the message durably: it leaves this server."""
        self.server.acknowledge(ref, AckReason.NORMAL)
        self.moved_by_queue[ref.queue.name] = self.moved_by_queue.get(ref.queue.name, 0) + 1
        self.server.stats.messages_scaled_down += 1
