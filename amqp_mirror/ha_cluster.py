"""A cluster of primaries, as a `<cluster-connection>` makes it: each server keeps a connection, as the
cluster user, to every static connector of its cluster connection, and on it a link from the member's
`CLUSTER_ADDRESS` (broker_core/ha/cluster_service.py): a member that answers is active, with the node id
and connector its answer names, for as long as that connection lives (a passive member redirects, a dead
or cut-off one is silent past connection-ttl). That is this server's *topology*: what it votes from, and
what its clients are told of (`failover-server-list`). Each answer also says the member's activation
sequence and the newest it has seen per node id: this server remembers, per node id, the newest
activation sequence it has seen (`newest`, in memory), and refuses a vote to an older journal.

A vote (quorum voting, broker_core/ha/quorum.py) is asked of every member in the topology but those of
the asker's own node id, each on its member connection, as one more attach that carries the question; a
member not connected casts no vote. Every vote asked and its outcome is a log line (AMQ951100,
AMQ951102) and counted; each vote cast is the voter's line (AMQ951101).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_core.amqp.performatives import Attach, Source, Target
from broker_core.config.model import AmqpConnection, BroadcastGroup, Connector, Endpoint
from broker_core.config.uri import parse_acceptor_uri
from broker_core.ha.cluster_service import (
    ASKED_NODE,
    ASKER_CONNECTOR,
    ASKER_SEQUENCE,
    BY_VOTE,
    CLUSTER_ADDRESS,
    CONNECTOR,
    NEWEST,
    NODE_ID,
    QUESTION,
    SEQUENCE,
    VOTE,
    own_connector,
)
from broker_core.ha.quorum import Outcome, Promise, Question, Tally, kept, quorum_size, remember, votes_needed
from connections.outbound import OutboundConnection
from connections.policies import LinkHost, LinkRole

from .discovery import Broadcaster, Discovery, encode

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link

    from .broker import Broker

log = logging.getLogger("broker.ha")

TICK = 0.1  # seconds between looks at the member connections' keep-alives and silence


class Member:
    """One static connector of the cluster connection: the link policy of its member connection."""

    def __init__(self, membership: ClusterMembership, connector: Connector) -> None:
        self.membership = membership
        self.connector = connector
        self.node_id: str | None = None  # while active: the node id it is active with
        self.reached_at: str | None = None  # ... and the connector it names
        self.sequence = 0  # ... its activation sequence, as it answered
        self.by_vote = False  # ... whether it activated by winning a vote
        self._host: LinkHost | None = None
        self._pending = 0
        self._asked: dict[str, asyncio.Future[bool]] = {}  # vote link name -> its answer

    @property
    def active(self) -> bool:
        return self.node_id is not None

    # ---------------------------------------------------------------------------- LinkPolicy

    def install(self) -> None:
        pass

    def attach_all(self, conn: LinkHost) -> None:
        self._host = conn
        conn.attach(self._attach(f"cluster:{self.membership.name}", None), LinkRole(self))
        self._pending = 1

    def _attach(self, name: str, properties: dict[Any, Any] | None) -> Attach:
        return Attach(
            name=name,
            role=True,
            snd_settle_mode=1,
            rcv_settle_mode=0,
            source=Source(address=CLUSTER_ADDRESS),
            target=Target(),
            properties=properties,
        )

    def remote_attached(self, conn: LinkHost, link: Link) -> None:
        properties = (link.remote_attach.properties if link.remote_attach is not None else None) or {}
        asked = self._asked.pop(link.name, None)
        if asked is not None:  # a vote's answer: the link has done its work
            if not asked.done():
                asked.set_result(properties.get(VOTE) is True)
            engine = conn.conn
            if engine is not None:
                engine.detach(link, closed=True)
                conn.mark_dirty()
            return
        self._pending = 0
        node_id = properties.get(NODE_ID)
        self.node_id = str(node_id) if node_id is not None else None
        self.reached_at = str(properties.get(CONNECTOR) or f"{self.connector.host}:{self.connector.port}")
        sequence = properties.get(SEQUENCE)
        self.sequence = sequence if isinstance(sequence, int) else 0
        self.by_vote = properties.get(BY_VOTE) is True
        newest = properties.get(NEWEST)
        if isinstance(newest, dict):
            for node, seen in newest.items():
                if isinstance(seen, int):
                    self.membership.remember(str(node), seen)
        if self.node_id is not None:
            self.membership.remember(self.node_id, self.sequence)
        self.membership.changed(self, up=True)

    def local_queue_added(self, conn: LinkHost, queue: Any) -> None:
        pass

    def on_delivery(
        self, conn: LinkHost, link: Link, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        pass

    def on_outcome(self, conn: LinkHost, link: Link, context: Any, state: Any) -> None:
        pass

    def outcomes_done(self, conn: LinkHost) -> None:
        pass

    def on_flow(self, conn: LinkHost, link: Link) -> None:
        pass

    def detached_all(self, conn: LinkHost) -> None:
        self._pending = 0
        self._host = None
        for future in self._asked.values():
            if not future.done():
                future.set_result(False)  # the member is gone before it answered: no vote
        self._asked.clear()
        if self.node_id is not None:
            self.node_id = None
            self.membership.changed(self, up=False)

    def pending(self) -> int:
        return self._pending

    # ---------------------------------------------------------------------------------- votes

    def ask(self, question: Question, node_id: str, connector: str, sequence: int) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = self.membership.loop.create_future()
        host = self._host
        if host is None or host.conn is None or not self.active:
            future.set_result(False)
            return future
        name = f"vote:{self.membership.name}:{uuid.uuid4().hex[:12]}"
        properties = {
            QUESTION: question.value,
            ASKED_NODE: node_id,
            ASKER_CONNECTOR: connector,
            ASKER_SEQUENCE: sequence,
        }
        self._asked[name] = future
        host.attach(self._attach(name, properties), LinkRole(self))
        host.write_out()
        return future

    def describe(self) -> dict[str, object]:
        return {
            "connector": f"{self.connector.host}:{self.connector.port}",
            "active": self.active,
            "nodeId": self.node_id,
            **({"activeAt": self.reached_at, "activationSequence": self.sequence} if self.active else {}),
        }


class ClusterMembership:
    """This server's member connections and what they say: its topology, and the votes it asks."""

    def __init__(self, broker: Broker, on_change: Callable[[], None] = lambda: None) -> None:
        config = broker.config
        self.config = config
        self.name = config.name
        self.loop = broker.loop
        self.on_change = on_change
        self.connector = own_connector(config)
        self.members: list[Member] = []
        self.clients: list[OutboundConnection] = []
        self.largest = 1  # the most node ids seen active at once, this server's own counted
        # node id -> the newest activation sequence seen active with it (in memory only): a vote to an
        # older journal is refused
        self.newest: dict[str, int] = {}
        self.promises: dict[str, Promise] = {}  # node id -> the sequence a stay-active yes let it move on to
        # votes asked ("asked <question> <won|lost>") and cast ("cast <question> <yes|no>"): the metrics
        self.counts: Counter[str] = Counter()
        self._broker = broker
        self.cluster = config.cluster_connection()
        for connector in config.ha_partners():
            self._add(connector)
        # UDP discovery (amqp_mirror/discovery.py): every broadcast group of this server says where it is;
        # the discovery group its cluster connection refers to adds (and drops) members as they are heard
        self.broadcasters = [
            Broadcaster(config.name, group, self.loop, self._datagram) for group in config.broadcast_groups
        ]
        wanted = self.cluster.discovery_group if self.cluster is not None else None
        self.discoveries = [
            Discovery(config.name, group, self.loop, self.connector, self._discovered, self._undiscovered)
            for group in config.discovery_groups
            if group.name == wanted
        ]
        self._ticker: asyncio.TimerHandle | None = None
        self.own: Callable[[], tuple[str | None, bool]] = lambda: (None, False)  # (node id, active)

    def _add(self, connector: Connector) -> Member:
        cluster = self.cluster
        member = Member(self, connector)
        connection = AmqpConnection(
            name=f"cluster:{self.name}:{connector.name}",
            uri=connector.uri,
            endpoints=(
                Endpoint(
                    host=connector.host, port=connector.port, params=parse_acceptor_uri(connector.uri).params
                ),
            ),
            user=self.config.cluster_user,
            password=self.config.cluster_password,
            retry_interval=cluster.retry_interval if cluster is not None else 500,
            idle_timeout=cluster.connection_ttl if cluster is not None else 60000,
        )
        broker = self._broker
        self.members.append(member)
        self.clients.append(OutboundConnection(broker.server, connection, broker.loop, broker.turn, [member]))
        return member

    def _datagram(self, group: BroadcastGroup) -> bytes | None:
        """What `group` says: this server's node id (once it has one), whether it is active, and where
        the connectors the group names are."""
        node_id, active = self.own()
        if node_id is None:
            return None
        by_name = {c.name: c for c in self.config.connectors}
        named = [by_name[name] for name in group.connectors if name in by_name]
        return encode(node_id, active, [f"{c.host}:{c.port}" for c in named])

    def _discovered(self, connector: Connector, node_id: str) -> None:
        """A member heard by UDP: one more member connection, as a static connector has."""
        where = (connector.host, connector.port)
        if any((m.connector.host, m.connector.port) == where for m in self.members):
            return  # a static connector already
        self._add(connector)
        if self._ticker is not None:  # started: connect to it now
            self.clients[-1].start()

    def _undiscovered(self, connector: Connector) -> None:
        """A discovered member not heard for refresh-timeout: its member connection goes."""
        for i, member in enumerate(self.members):
            if member.connector.name == connector.name:
                client = self.clients.pop(i)
                del self.members[i]
                client.stop()
                if member.active:  # the connection's end did not say so already
                    member.node_id = None
                    self.changed(member, up=False)
                return

    def start(self) -> None:
        for client in self.clients:
            client.start()
        for broadcaster in self.broadcasters:
            broadcaster.start()
        for discovery in self.discoveries:
            discovery.start()
        self._tick()

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for broadcaster in self.broadcasters:
            broadcaster.stop()
        for discovery in self.discoveries:
            discovery.stop()
        for client in self.clients:
            client.stop()

    def _tick(self) -> None:
        now = time.monotonic()
        for discovery in self.discoveries:
            discovery.expire(now)
        for client in self.clients:
            client.tick(now)
        self._ticker = self.loop.call_later(TICK, self._tick)

    def remember(self, node_id: str, sequence: int) -> None:
        """`node_id` was seen active at activation `sequence` (by a member, or this server itself)."""
        self.newest = remember(self.newest, node_id, sequence)
        promise = kept(self.promises.get(node_id), sequence)
        if promise is None:
            self.promises.pop(node_id, None)

    def changed(self, member: Member, up: bool) -> None:
        where = f"{member.connector.host}:{member.connector.port}"
        if up:
            log.info(
                "AMQ951106: %s sees %s active with node id %s (activation sequence %d) in its cluster",
                self.name,
                where,
                member.node_id,
                member.sequence,
            )
        else:
            log.info("AMQ951107: %s lost cluster member %s", self.name, where)
        node_id, _ = self.own()
        self.largest = max(self.largest, len(set(self.topology()) | ({node_id} if node_id else set())))
        self.on_change()

    def topology(self) -> dict[str, str]:
        """node id -> the connector active with it, as this server sees it (itself included, active)."""
        seen = {m.node_id: m.reached_at or "" for m in self.members if m.node_id is not None}
        node_id, active = self.own()
        if active and node_id is not None:
            seen[node_id] = self.connector
        return seen

    def live_members(self) -> list[tuple[str, int]]:
        """Where the other active members are, as this server's clients may fail over to them."""
        return [(m.connector.host, m.connector.port) for m in self.members if m.active]

    def size(self, configured: int) -> int:
        node_id, _ = self.own()
        now = len(set(self.topology()) | ({node_id} if node_id else set()))
        self.largest = max(self.largest, now)
        return quorum_size(configured, self.largest)

    async def vote(
        self, question: Question, node_id: str, sequence: int, size: int, wait: float, attempt: str
    ) -> Tally:
        """One vote: asked of every active member but those of `node_id`, over at most `wait` seconds, by
        this server with its journal at activation `sequence`."""
        voters = [m for m in self.members if m.active and m.node_id != node_id]
        tally = Tally(votes_needed(size), len(voters))
        log.info(
            "AMQ951100: %s asks its cluster %s %s (vote %s: %d node ids, %d votes needed, %d voters: %s)",
            self.name,
            "whether the primary of node id" if question == Question.PRIMARY_GONE else "to stay active with",
            f"{node_id} is gone"
            if question == Question.PRIMARY_GONE
            else f"node id {node_id} at {self.connector}",
            attempt,
            size,
            tally.needed,
            len(voters),
            ", ".join(f"{m.connector.host}:{m.connector.port}" for m in voters) or "none",
        )
        pending = {m.ask(question, node_id, self.connector, sequence) for m in voters}
        deadline = self.loop.time() + wait
        while pending and tally.outcome() == Outcome.OPEN:
            done, pending = await asyncio.wait(
                pending, timeout=max(deadline - self.loop.time(), 0), return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                break  # the wait is over: what was not cast counts as no
            for future in done:
                tally = tally.with_vote(not future.cancelled() and future.result())
        for future in pending:
            future.cancel()
        return tally

    def describe(self) -> list[dict[str, object]]:
        return [m.describe() for m in self.members]
