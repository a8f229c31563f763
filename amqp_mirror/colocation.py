"""Colocated backups (`<colocated>`): a primary asks the other primaries of its cluster to host a backup
for it, and hosts theirs, each as another server of its own process, on its loop.

The request is one attach exchange on a connection as the cluster user, as the cluster's own traffic
(ha_cluster.py): the asking primary (`BackupRequester`, once active) attaches a receiving link from
`COLOCATION_ADDRESS` whose properties say who it is (name, node id, the connector it is reached at and,
under a shared store, its directories); the host's answering attach (`ColocationService`) says whether
it accepted and the name of the backup it runs. A refused or unanswered request goes to the next static
connector of the cluster connection; when none accepted, the round is tried again after
backup-request-retry-interval, backup-request-retries times (-1: for ever).

A host (`Hosting`) accepts at most max-backups and runs each as an HA controller of its own
(amqp_mirror/ha.py), named colocated_backup_01, _02, ..., with the configuration
broker_core/config/colocated.py makes of the host's. The backup listens on its own (offset) acceptors;
on the host's HTTP-upgrade and doNotOffset acceptors, the host hands it the connections that name it
(`activemqServerName`, `Server.routes`): redirected while it is passive, served once it is active.

The same address answers one question too (`LOCATE`, `locate_active`): where a server active with a
node id runs. A replicated primary that comes back while its colocated backup serves asks its members,
as Artemis looks its node id up in the cluster's topology: its static connectors name the other
primaries, not the backup one of them hosts, which it must replicate from to fail back.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker_core.amqp.codec import Symbol
from broker_core.amqp.performatives import Attach, Source, Target
from broker_core.config.colocated import (
    BackupRequest,
    backup_config,
    backup_name,
    backup_request,
    own_connector_uri,
)
from broker_core.config.model import AmqpConnection, Connector, Endpoint
from broker_core.config.uri import parse_acceptor_uri
from broker_core.errors import Unauthorized
from broker_core.ha.states import Event, State
from broker_core.passive import PassiveSocket
from broker_core.services import OutgoingLink, Peer
from connections.outbound import OutboundConnection
from connections.policies import LinkHost, LinkRole

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link
    from broker_core.config.model import Acceptor, BrokerConfig, HaPolicy, HaRole
    from broker_core.passive import PassiveListener

    from .broker import Broker

log = logging.getLogger("broker.ha")

COLOCATION_ADDRESS = "$amqp-mirror.colocation"
REQUESTER = Symbol("requester")  # the asking primary's name
NODE_ID = Symbol("node-id")
CONNECTOR = Symbol("connector")  # the URI it is reached at
DIRECTORIES = Symbol("directories")  # shared store: field name -> path
ACCEPTED = Symbol("accepted")
BACKUP = Symbol("backup")  # accepted: the name of the backup the host runs
TICK = 0.5  # seconds between looks at a kept request connection's keep-alives and silence
REASON = Symbol("reason")  # refused: why
LOCATE = Symbol("locate")  # a question instead of a request: where is a server active with this node id?
AT = Symbol("at")  # its answer: the connector URI of the hosted backup active with it (absent: none here)


class HaController(Protocol):
    """What colocation needs of an HA controller (amqp_mirror/ha.py): the host's, a hosted backup's, or
    the asking primary's."""

    config: BrokerConfig
    loop: asyncio.AbstractEventLoop
    policy: HaPolicy
    role: HaRole
    state: State
    broker: Broker
    passive: PassiveListener | None
    active_elsewhere: tuple[str, int] | None
    backs_up: str | None
    on_transition: list[Callable[[State, Event, State], None]]

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


# (its configuration, what to call when it exits) -> a hosted backup's HA controller, not started
NewController = Callable[["BrokerConfig", Callable[[int, str], None]], HaController]

# ----------------------------------------------------------------------------------------- host


@dataclass
class Hosted:
    request: BackupRequest
    controller: HaController


class Hosting:
    """The backups a primary hosts for the other primaries of its cluster."""

    def __init__(self, host: HaController, new_controller: NewController) -> None:
        self.host = host
        self.new_controller = new_controller
        self.backups: dict[str, Hosted] = {}
        self.refused = 0  # requests refused (max-backups reached, or not active): a metric

    def accept(self, request: BackupRequest) -> tuple[bool, str]:
        """(True, the backup's name) or (False, why not)."""
        host = self.host
        for name, hosted in self.backups.items():  # a request again (its answer was lost): the same backup
            same = (hosted.request.name, hosted.request.node_id) == (request.name, request.node_id)
            if same and hosted.controller.state not in (State.STOPPING, State.STOPPED):
                return True, name  # (one stopping, having failed back to the asker, is not its backup)
        colocated = host.policy.colocated
        assert colocated is not None
        if host.state != State.ACTIVE:
            why = f"{host.config.name} is not active"
        elif len(self.backups) >= colocated.max_backups:
            why = f"{host.config.name} hosts {len(self.backups)} backups, max-backups {colocated.max_backups}"
        else:
            return True, self._start(request)
        self.refused += 1
        log.info("AMQ951182: %s refuses to host a backup for %s: %s", host.config.name, request.name, why)
        return False, why

    def _start(self, request: BackupRequest) -> str:
        host = self.host
        number = next(n for n in itertools.count(1) if backup_name(n) not in self.backups)
        name = backup_name(number)
        config = backup_config(host.config, number, request)
        controller = self.new_controller(config, self._ended(name))
        controller.backs_up = request.name
        controller.on_transition.append(self._transition(name, request))
        self.backups[name] = Hosted(request, controller)
        host.broker.server.routes.add(name, self._serve(controller))
        log.info(
            "AMQ951181: %s accepts to host %s, a %s backup of %s (%s); it hosts %d of max-backups %d",
            host.config.name,
            name,
            host.policy.kind,
            request.name,
            request.connector,
            len(self.backups),
            host.policy.colocated.max_backups if host.policy.colocated is not None else 0,
        )
        host.loop.create_task(self._run(name, controller))
        return name

    async def _run(self, name: str, controller: HaController) -> None:
        try:
            await controller.start()
        except (OSError, ValueError) as exc:
            log.error("AMQ951187: colocated backup %s could not start: %s", name, exc)
            self._forget(name)
            return
        log.info(
            "AMQ951183: colocated backup %s started in the process of %s, backing up %s (acceptors: %s)",
            name,
            self.host.config.name,
            controller.backs_up,
            ", ".join(f"{a.name} {a.host}:{a.port}" for a in controller.config.acceptors) or "its host's",
        )

    def _transition(self, name: str, request: BackupRequest) -> Callable[[State, Event, State], None]:
        def changed(old: State, event: Event, new: State) -> None:
            if new == State.ACTIVE and old != State.ACTIVE:
                log.info(
                    "AMQ951184: colocated backup %s is active in the process of %s: it serves in place of %s",
                    name,
                    self.host.config.name,
                    request.name,
                )

        return changed

    def _ended(self, name: str) -> Callable[[int, str], None]:
        def ended(code: int, why: str) -> None:
            if name in self.backups:
                log.info(
                    "AMQ951187: colocated backup %s stopped (exit code %d%s): %s hosts it no longer",
                    name,
                    code,
                    f": {why}" if why else "",
                    self.host.config.name,
                )
            self._forget(name)

        return ended

    def _forget(self, name: str) -> None:
        self.backups.pop(name, None)
        self.host.broker.server.routes.remove(name)

    @staticmethod
    def _serve(controller: HaController) -> Callable[[Acceptor], asyncio.Protocol | None]:
        """What takes a connection the host's acceptor hands to this backup: its own server while it
        is active, a redirect to its primary while it is passive; nothing (503) in between."""

        def serve(acceptor: Acceptor) -> asyncio.Protocol | None:
            broker = controller.broker
            if controller.state == State.ACTIVE and broker.listener is not None:
                return broker.listener.serve(acceptor)
            if controller.passive is not None:
                return PassiveSocket(broker.server, acceptor, controller.active_elsewhere)
            return None

        return serve

    def locate(self, node_id: str) -> dict[Any, Any]:
        """Where the backup this process hosts for `node_id` serves, if it is active: what a returning
        primary replicates from to fail back (its cluster's topology, as far as colocation goes)."""
        for name, hosted in self.backups.items():
            if node_id and hosted.request.node_id == node_id and hosted.controller.state == State.ACTIVE:
                return {AT: own_connector_uri(hosted.controller.config), BACKUP: name}
        return {}

    async def stop(self) -> None:
        for hosted in list(self.backups.values()):
            await hosted.controller.stop()

    def status(self) -> list[dict[str, object]]:
        return [
            {
                "name": name,
                "role": str(hosted.controller.role),
                "state": str(hosted.controller.state),
                "backsUp": hosted.request.name,
                "primaryAt": hosted.request.connector,
            }
            for name, hosted in self.backups.items()
        ]


class ColocationService:
    """Answers a primary's request for a backup: the `SenderService` at `COLOCATION_ADDRESS`."""

    def __init__(self, hosting: Hosting) -> None:
        self.hosting = hosting

    def attach_sender(self, peer: Peer, link: Link, attach: Attach, address: str) -> Attach:
        if not peer.cluster_member:
            raise Unauthorized("a backup request needs the cluster user and password")
        asked = attach.properties or {}
        link.context = OutgoingLink(_nothing, _nothing_settled, _nothing)
        if LOCATE in asked:
            return self._answer(link, attach, self.hosting.locate(str(asked[LOCATE])))
        directories = asked.get(DIRECTORIES)
        request = BackupRequest(
            str(asked.get(REQUESTER) or peer.name),
            str(asked.get(NODE_ID) or ""),
            str(asked.get(CONNECTOR) or ""),
            {str(k): str(v) for k, v in directories.items()} if isinstance(directories, dict) else None,
        )
        try:
            accepted, what = self.hosting.accept(request)
        except ValueError as exc:  # a connector URI that does not parse
            accepted, what = False, str(exc)
        return self._answer(link, attach, {ACCEPTED: accepted, (BACKUP if accepted else REASON): what})

    @staticmethod
    def _answer(link: Link, attach: Attach, properties: dict[Any, Any]) -> Attach:
        return Attach(
            name=link.name,
            role=False,
            snd_settle_mode=1,
            rcv_settle_mode=0,
            source=attach.source,
            target=attach.target,
            initial_delivery_count=0,
            properties=properties,
        )


def _nothing() -> None:
    pass


def _nothing_settled(context: object, state: object) -> None:
    pass


# ------------------------------------------------------------------------------------ requester


class _Exchange:
    """The link policy of one question to a member: one attach with `properties`, the answering attach's
    properties into `answer`."""

    def __init__(
        self,
        name: str,
        properties: dict[Any, Any],
        answer: asyncio.Future[dict[Any, Any]],
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.properties = properties
        self.answer = answer
        self.on_lost = on_lost  # kept open once answered: told when the link or the connection goes
        self._pending = 0

    def install(self) -> None:
        pass

    def attach_all(self, conn: LinkHost) -> None:
        attach = Attach(
            name=self.name,
            role=True,
            snd_settle_mode=1,
            rcv_settle_mode=0,
            source=Source(address=COLOCATION_ADDRESS),
            target=Target(),
            properties=self.properties,
        )
        conn.attach(attach, LinkRole(self))
        self._pending = 1

    def remote_attached(self, conn: LinkHost, link: Link) -> None:
        self._pending = 0
        properties = (link.remote_attach.properties if link.remote_attach is not None else None) or {}
        if not self.answer.done():
            self.answer.set_result(dict(properties))

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
        if self.answer.done() and self.on_lost is not None:
            self.on_lost()

    def pending(self) -> int:
        return self._pending


async def ask_member(
    config: BrokerConfig,
    broker: Broker,
    member: Connector,
    name: str,
    properties: dict[Any, Any],
    timeout: float,
    on_lost: Callable[[], None] | None = None,
) -> tuple[dict[Any, Any] | None, OutboundConnection | None]:
    """One attach exchange with `member`'s colocation service, as the cluster user: the properties of
    its answer, or None when it gave none within `timeout` seconds (down, or not a broker). With
    `on_lost`, an answered connection is kept open and returned (the caller ticks and stops it), and
    `on_lost` is called when it goes: the member is gone."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[dict[Any, Any]] = loop.create_future()
    parsed = parse_acceptor_uri(member.uri)
    cluster = config.cluster_connection()
    connection = AmqpConnection(
        name=f"colocation:{config.name}:{member.name}",
        uri=member.uri,
        endpoints=(
            Endpoint(
                host=parsed.host,
                port=parsed.port,
                params=parsed.params,
                scheme=parsed.scheme,
                path=parsed.path,
            ),
        ),
        user=config.cluster_user,
        password=config.cluster_password,
        retry_interval=cluster.retry_interval if cluster is not None else 500,
        idle_timeout=cluster.connection_ttl if cluster is not None else 60000,
    )
    exchange = _Exchange(name, properties, answer, on_lost)
    client = OutboundConnection(broker.server, connection, loop, broker.turn, [exchange])
    client.start()
    try:
        got = await asyncio.wait_for(answer, timeout)
    except TimeoutError:
        got = None
    if got is not None and on_lost is not None:
        return got, client
    exchange.on_lost = None
    with contextlib.suppress(Exception):
        client.stop()
    return got, None


async def locate_active(config: BrokerConfig, broker: Broker, node_id: str) -> tuple[Connector, str] | None:
    """Where a server active with `node_id` runs as a colocated backup, as the members of `config`'s
    cluster say (each asked in turn): (its connector, who said so), or None when none says so."""
    for member in config.ha_partners():
        answer, _ = await ask_member(config, broker, member, f"locate:{config.name}", {LOCATE: node_id}, 5.0)
        answer = answer or {}
        uri = answer.get(AT)
        if isinstance(uri, str) and uri:
            parsed = parse_acceptor_uri(uri)
            found = Connector(
                name=f"{member.name}:{answer.get(BACKUP)}", uri=uri, host=parsed.host, port=parsed.port
            )
            return found, f"{member.host}:{member.port}"
    return None


class BackupRequester:
    """An active primary with request-backup: asks its cluster's members, in turn, to host its backup.
    Once one accepts, the connection of its request stays open: when it goes (the host died or stopped,
    and its backup with it), the primary asks again, as it did at first (AMQ951143)."""

    def __init__(self, controller: HaController) -> None:
        self.controller = controller
        self.hosted_by: str | None = None  # "<member connector> as <backup name>", once accepted
        self.attempts = 0
        self._task: asyncio.Task[None] | None = None
        self._host: OutboundConnection | None = None  # the accepted request's connection, kept open
        self._ticker: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if self._task is None and self.hosted_by is None:
            self._task = self.controller.loop.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._let_go()

    def _let_go(self) -> None:
        host, self._host = self._host, None
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if host is not None:
            with contextlib.suppress(Exception):
                host.stop()

    def _tick(self) -> None:
        """The kept connection's clock: keep-alives out, a silent host noticed within connection-ttl."""
        self._ticker = None
        if self._host is not None:
            self._host.tick(time.monotonic())
            self._ticker = self.controller.loop.call_later(TICK, self._tick)

    def _host_lost(self) -> None:
        if self._host is not None:  # not a connection this requester let go of itself
            self.controller.loop.call_soon(self._ask_again)

    def _ask_again(self) -> None:
        if self._host is None:
            return
        self._let_go()
        log.warning(
            "AMQ951143: %s lost the host of its backup (%s): it requests a backup again",
            self.controller.config.name,
            self.hosted_by,
        )
        self.hosted_by = None
        self.attempts = 0
        self.start()

    async def _run(self) -> None:
        controller = self.controller
        config = controller.config
        colocated = config.ha_policy.colocated
        assert colocated is not None
        request = backup_request(config, controller.broker.server.node_id)
        members = config.ha_partners()
        retries, interval = colocated.backup_request_retries, colocated.backup_request_retry_interval
        while True:
            self.attempts += 1
            for member in members:
                where = f"{member.host}:{member.port}"
                log.info(
                    "AMQ951180: %s requests a backup from %s (attempt %d of %s)",
                    config.name,
                    where,
                    self.attempts,
                    "unlimited" if retries < 0 else retries + 1,
                )
                answer = await self._ask(member, request, interval)
                if answer is None:
                    continue
                accepted, what = answer
                if accepted:
                    self.hosted_by = f"{where} as {what}"
                    log.info("AMQ951186: %s has its backup hosted by %s as %s", config.name, where, what)
                    self._task = None
                    return
            if not members or (0 <= retries < self.attempts):
                log.warning(
                    "AMQ951188: %s gives up requesting a backup after %d attempts (backup-request-retries "
                    "%d): it runs without one",
                    config.name,
                    self.attempts,
                    retries,
                )
                self._task = None
                return
            await asyncio.sleep(interval / 1000)

    async def _ask(self, member: Connector, request: BackupRequest, interval: int) -> tuple[bool, str] | None:
        """The member's answer, or None when it did not give one in time (down, or not a broker). An
        accepting member's connection is kept (`_host`)."""
        properties: dict[Any, Any] = {
            REQUESTER: request.name,
            NODE_ID: request.node_id,
            CONNECTOR: request.connector,
        }
        if request.directories is not None:
            properties[DIRECTORIES] = dict(request.directories)
        controller = self.controller
        timeout = max(1.0, min(5.0, interval / 1000))
        answer, client = await ask_member(
            controller.config,
            controller.broker,
            member,
            f"colocation:{request.name}",
            properties,
            timeout,
            on_lost=self._host_lost,
        )
        if answer is None:
            return None
        accepted = answer.get(ACCEPTED) is True
        if accepted and client is not None:
            self._host = client
            self._tick()
        elif client is not None:
            with contextlib.suppress(Exception):
                client.stop()
        return accepted, str(answer.get(BACKUP if accepted else REASON) or "")

    def status(self) -> dict[str, object]:
        return {"backupHostedBy": self.hosted_by, "backupRequests": self.attempts}
