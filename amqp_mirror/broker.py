"""One broker: a server wired to its listeners, broker connections, mirror and management.

This is the one place that knows every kind of part. It builds them in order, each given what it needs:
- the server (broker_core) and its loop turn;
- the services at addresses: management, and the mirror target at the mirror prefix;
- the management table, with the rows each part contributes;
- the broker connections, each `<mirror>` among them a `MirrorSource` link policy.
Several brokers can share a loop (the demo runs DC1 and DC2 side by side; colocated backups will too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Container
from typing import Any, Protocol

from broker_core.acceptor import Listener
from broker_core.amqp.connection import Connection
from broker_core.config.model import AmqpConnection, BrokerConfig, HaKind, HaRole
from broker_core.errors import NotAllowed
from broker_core.ha.cluster_service import CLUSTER_ADDRESS, ClusterService, own_connector
from broker_core.ha.quorum import Question
from broker_core.ha.scale_down import SCALE_DOWN_ADDRESS, ScaleDownService
from broker_core.inbound_attach import Termini
from broker_core.inbound_links import LinkConsumer
from broker_core.management import BROKER, Management, ManagementService
from broker_core.message import MessageView
from broker_core.queues import Address
from broker_core.server import Server
from broker_core.server_management import add_server_operations
from broker_core.services import Peer, Services
from broker_core.turn import Turn
from connections.manager import BrokerConnectionManager
from connections.policies import LinkPolicy
from mirror.inbound import MirrorLinks
from mirror.source import MirrorSource
from mirror.target import MirrorTarget
from mirror.wire import MIRROR_ADDRESS_PREFIX

ACK_RETRY_INTERVAL = 0.1  # Artemis's mirror-ack-manager-retry-delay default (100 ms)
WRITE_RETRY_INTERVAL = 1.0  # after a full disk, how often the held journal writes are tried again


class HaControl(Protocol):
    """What a broker's management asks of the HA controller that runs it (amqp_mirror/ha.py)."""

    role: HaRole

    def status(self) -> dict[str, object]: ...

    async def force_failover(self) -> None: ...


class Broker:
    """One server and its sockets on a running loop."""

    def __init__(self, config: BrokerConfig, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.config = config
        self.loop = loop or asyncio.get_event_loop()
        self.server = Server(config, log=logging.getLogger(f"broker.{config.name}"))
        self.turn = Turn(self.loop, self.server.persistence)
        self.management = Management()
        self.services = Services()
        self.listener: Listener | None = None
        self.connections: BrokerConnectionManager | None = None
        self.mirror_target: MirrorTarget | None = None
        self.mirror_links: MirrorLinks | None = None
        self._retry_timer: asyncio.TimerHandle | None = None
        self._disk_timer: asyncio.TimerHandle | None = None
        self._write_retry: asyncio.TimerHandle | None = None
        self.on_started: list[Callable[[Broker], None]] = []
        self.ha: HaControl | None = None  # its HA controller, under an HA policy

    async def start(self) -> None:
        """Recover, listen, then connect out."""
        self.assemble()
        assert self.connections is not None
        self.listener = Listener(self.server, self.loop, self.turn, self.services)
        await self.listener.start()
        self.connections.start()
        for cb in self.on_started:
            cb(self)

    def assemble(self) -> None:
        """Start the server (journal recovery) and wire every part to it; no socket yet."""
        server = self.server
        server.start(dispatch=self.turn.dispatch)
        if server.journal is not None:
            server.journal.on_failure = self.turn.journal_failed
        self.mirror_target = MirrorTarget(server)
        self._register_services()
        self.connections = BrokerConnectionManager(
            server, self.loop, self.turn, extra_factories=[_mirror_sources]
        )
        add_server_operations(self.management, server)
        self.connections.add_operations(self.management)
        self.management.add_operation(BROKER, "getMirrorStatus", lambda _, __: self.mirror_status())
        target = self.mirror_target
        self.management.add_operation(
            BROKER, "forgetMirrorRemote", lambda _, params: target.forget_remote(str(params[0]))
        )
        self._add_ha_operations()
        self._retry_timer = self.loop.call_later(ACK_RETRY_INTERVAL, self._retry_acks)
        server.space_listeners.append(self._space_changed)
        if server.disk.enabled:
            self._scan_disk()

    def _space_changed(self, full: bool) -> None:
        if full and self._write_retry is None:
            self._write_retry = self.loop.call_later(WRITE_RETRY_INTERVAL, self._retry_writes)

    def _retry_writes(self) -> None:
        """While the disk is full: try the held journal writes again, once a second."""
        self._write_retry = None
        persistence = self.server.persistence
        if not persistence.full:
            return
        persistence.retry()
        self._write_retry = self.loop.call_later(WRITE_RETRY_INTERVAL, self._retry_writes)

    def _scan_disk(self) -> None:
        self.server.disk.check()
        self._disk_timer = self.loop.call_later(self.config.disk_scan_period / 1000, self._scan_disk)

    def _add_ha_operations(self) -> None:
        """Artemis's HA operations on the broker: its role and state, and forceFailover (stop and let
        the backup take over). Only an active server answers them: a passive one accepts no client."""
        ha = self.ha
        op = self.management.add_operation
        op(BROKER, "getHAStatus", lambda _, __: ha.status() if ha is not None else {"policy": "primary-only"})
        op(BROKER, "isBackup", lambda _, __: ha is not None and ha.role == HaRole.BACKUP)
        op(BROKER, "isActive", lambda _, __: self.server.started)
        # Artemis's isReplicaSync: a replicated server whose replica is synchronized with it
        op(BROKER, "isReplicaSync", lambda _, __: ha is not None and ha.status().get("synchronized") is True)

        def force_failover(_: str, __: list[Any]) -> bool:
            if ha is None:
                raise ValueError("forceFailover needs an HA policy (shared-store or replication)")
            control = ha
            # after this reply is written: the stop closes every connection, the requester's too
            self.loop.call_later(0.1, lambda: self.loop.create_task(control.force_failover()))
            return True

        op(BROKER, "forceFailover", force_failover)

    def _register_services(self) -> None:
        server, config = self.server, self.config
        assert self.mirror_target is not None

        def authorize(user: str | None) -> None:
            server.check(user, server.config.management_address, "manage")

        def authorize_reply(peer: Peer, address: str) -> None:
            """A reply goes where its requester could send it: never to the broker's own addresses
            (internal ones, the mirror prefix, a service's), into a temporary queue only if it is the
            requester's own (a dynamic receiver on its connection), elsewhere only with send permission."""
            Termini(server, peer.acceptor, self.services).check_reachable(address)
            reply = server.addresses.get(address)
            if reply is None or not reply.temporary:
                server.check(peer.user, address, "send")
            elif not _own_temporary(reply, peer.conn):
                raise NotAllowed(f"address {address} is a temporary queue of another connection")

        def send_reply(address: str, payload: bytes) -> None:
            server.router.route(address, payload, MessageView(payload))

        # who this server is, to a member scaling down (a colocated backup into its host, too); under
        # quorum voting, the replicated coordinator answers instead, with its votes, once it is active
        policy = config.ha_policy
        if policy.kind != HaKind.REPLICATION or policy.manager is not None:
            group = policy.scale_down.group_name if policy.scale_down is not None else policy.group_name
            service = ClusterService(
                config.name, server.node_id, own_connector(config), group, lambda: {}, _no_vote, voter=False
            )
            self.services.register_sender(CLUSTER_ADDRESS, service)
        self.services.register(SCALE_DOWN_ADDRESS, ScaleDownService(server))
        management = ManagementService(self.management, authorize, authorize_reply, send_reply)
        self.services.register(server.config.management_address, management)
        self.mirror_links = MirrorLinks(server, self.mirror_target, clock=self.loop.time)
        self.services.register_prefix(MIRROR_ADDRESS_PREFIX, self.mirror_links)

    def _retry_acks(self) -> None:
        if self.mirror_links is not None:  # first: an ack retry matches a message released just now
            self.mirror_links.tick()
        if self.mirror_target is not None:
            self.mirror_target.retry_acks()
        self._retry_timer = self.loop.call_later(ACK_RETRY_INTERVAL, self._retry_acks)

    def mirror_sources(self) -> list[tuple[MirrorSource, bool]]:
        """Each mirror of this broker, and whether its connection is up."""
        if self.connections is None:
            return []
        return [
            (p, c.connected)
            for c in self.connections.connections.values()
            for p in c.policies
            if isinstance(p, MirrorSource)
        ]

    def mirror_status(self) -> dict[str, Any]:
        target = self.mirror_target.status() if self.mirror_target is not None else {}
        sources = [{**source.status(), "connected": up} for source, up in self.mirror_sources()]
        return {"sources": sources, "target": target}

    def port(self, acceptor: str | None = None) -> int:
        assert self.listener is not None
        if acceptor is None:
            return next(iter(self.listener.bound.values()))[1]
        return self.listener.bound[acceptor][1]

    def quiesce(self, keep: Container[object] = ()) -> None:
        """The first part of a stop: no new connection, no broker connection, and every client closed but
        the engines in `keep` (a replica's stream, which takes the last batches before the stop)."""
        if self.connections is not None:
            self.connections.stop()
        if self.listener is not None:
            self.listener.stop_accepting()
            self.listener.close_clients(keep)

    def isolate(self) -> None:
        """Stop serving, the journal kept (the network check found this server isolated): no acceptor, no
        client, no broker connection, until `serve_again`."""
        if self.connections is not None:
            self.connections.stop()
        if self.listener is not None:
            self.listener.stop_accepting()
            self.listener.close_clients(())

    async def serve_again(self) -> None:
        """After `isolate`: the acceptors listen again (bound anew) and the broker connections start."""
        if self.listener is not None:
            self.listener.servers.clear()  # closed by isolate(): start() binds them anew
            await self.listener.start()
        if self.connections is not None:
            self.connections.start()

    async def stop(self) -> None:
        if not self.server.started:
            return
        for timer in (self._retry_timer, self._disk_timer, self._write_retry):
            if timer is not None:
                timer.cancel()
        if self.connections is not None:
            self.connections.stop()
        if self.listener is not None:
            self.listener.stop_accepting()
            await self.listener.close_connections()
        self.server.stop()


def _no_vote(question: Question, vote: bool) -> None:
    pass


def _mirror_sources(server: Server, connection: AmqpConnection) -> list[LinkPolicy]:
    return [MirrorSource(server, connection, m) for m in connection.mirrors]


def _own_temporary(address: Address, conn: Connection) -> bool:
    """Whether a temporary address is `conn`'s: every queue on it consumed only by links of `conn` (a
    dynamic receiver's queue lives as long as its link)."""
    consumers = [c for q in address.queues for c in q.consumers]
    return bool(consumers) and all(isinstance(c, LinkConsumer) and c.host.conn is conn for c in consumers)
