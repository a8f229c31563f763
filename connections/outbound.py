"""One broker connection: an outbound AMQP connection driven by the reconnect table.

Opens the socket (TLS when the URI says `sslEnabled=true` or the scheme is `wss`), upgrades it when the
URI asks (`ws://` and `wss://`: the AMQP WebSocket binding; `httpUpgradeEnabled=true`: Artemis's HTTP
upgrade; either naming `activemqServerName` when set), runs our engine as a client, picks the SASL
mechanism from what the remote offers (SCRAM, then PLAIN when a user and password are set, else
ANONYMOUS), opens one session and lets the link policies attach. The connection counts as connected once
every link the policies asked for has been answered and accepted.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from typing import TYPE_CHECKING, Any

from broker_core.amqp import errors
from broker_core.amqp.codec import Symbol
from broker_core.amqp.connection import Connection, Link, Session
from broker_core.amqp.performatives import Attach, Begin, Close, Detach, End, Open
from broker_core.http_upgrade import ClientUpgrade, Upgrade
from broker_core.security.scram import ScramClient, ScramError
from broker_core.upgrade import ClientUpgrading

from .policies import ConnectError, LinkPolicy, LinkRole, LoginRefused
from .reconnect import Action, Event, Reconnect, State

if TYPE_CHECKING:
    from broker_core.config.model import AmqpConnection, Endpoint
    from broker_core.queues import Queue
    from broker_core.server import Server
    from broker_core.turn import Turn

log = logging.getLogger("broker.connections")

PRODUCT = "amqp-mirror"
VERSION = "0.1.0"
# A connection that keeps failing for the same reason says so at most once this often (seconds), with the
# count since, not twice per attempt: at a 200 ms retry interval that was ten lines a second for as long
# as the remote was down. A new reason is news, and logged at once.
RETRY_LOG_EVERY = 60.0
# Artemis's open property naming a broker connection and its node to the remote broker
BROKER_CONNECTION_INFO = Symbol("broker-connection-info")


class OutboundConnection:
    """A `<amqp-connection>`: lifecycle, socket, engine handler; the `LinkHost` of its link policies."""

    def __init__(
        self,
        server: Server,
        config: AmqpConnection,
        loop: asyncio.AbstractEventLoop,
        turn: Turn,
        policies: list[LinkPolicy],
        login_refused: str | None = None,
    ) -> None:
        """`login_refused`: what to say when the remote refuses our password (SASL outcome 1), instead
        of the generic line; e.g. the HA replication client names the cluster user and password."""
        self.server = server
        self.login_refused = login_refused
        self.config = config
        self.name = config.name
        self.loop = loop
        self.turn = turn
        self.policies = policies
        self.endpoints: list[Endpoint] = list(config.endpoints)
        self.machine = Reconnect(
            config.name, [f"{e.host}:{e.port}" for e in self.endpoints], config.reconnect_attempts
        )
        self.conn: Connection | None = None
        self.session: Session | None = None
        self.transport: Any = None
        self.remote_node_id: str | None = None
        self._retry_handle: asyncio.TimerHandle | None = None
        self._links_waiting = 0
        self._scram: ScramClient | None = None
        self.connected_at: float | None = None
        self.last_connected = 0.0  # epoch seconds of the last time it came up (0: never)
        self.stats = {"connects": 0, "failures": 0}
        self._quiet_until = 0.0  # loop time before which a repeated failure goes to DEBUG
        self._quiet_attempts = 0  # attempts not logged since the last retry line
        self._last_failure = ""  # the reason last logged
        self._news = False  # the failure just logged was news: its retry line goes with it
        self._login_refused = False  # the last attempt failed at the login (its next one likely will)

    # --------------------------------------------------------------------------------- lifecycle

    @property
    def state(self) -> State:
        return self.machine.state

    @property
    def connected(self) -> bool:
        return self.machine.state is State.CONNECTED

    def start(self) -> None:
        for p in self.policies:
            p.install()  # e.g. the mirror starts capturing events now, connected or not
        self._do(self.machine.handle(Event.START))

    def stop(self) -> None:
        if self._retry_handle is not None:
            self._retry_handle.cancel()
            self._retry_handle = None
        self._do(self.machine.handle(Event.STOP))
        self._teardown()

    def _do(self, action: Action) -> None:
        if action.log:
            if action.schedule_retry:
                self._log_retry(action.log_level, action.log)
            else:
                log.log(action.log_level, "%s", action.log)
                self._quiet_until, self._quiet_attempts, self._last_failure = 0.0, 0, ""  # news next time
                self._login_refused = False
        if action.close:
            self._teardown()
        if action.schedule_retry:
            self._retry_handle = self.loop.call_later(self.config.retry_interval / 1000.0, self._retry_due)
        if action.connect is not None:
            self.loop.create_task(self._connect(self.endpoints[action.connect]))

    def _retry_due(self) -> None:
        self._retry_handle = None
        self._do(self.machine.handle(Event.RETRY_DUE))

    def _log_failure(self, level: int, why: str) -> None:
        """A failure is logged when it is news: a reason not logged last, or RETRY_LOG_EVERY passed."""
        news = why != self._last_failure or self.loop.time() >= self._quiet_until
        log.log(level if news else logging.DEBUG, "broker connection %s: %s", self.name, why)
        if news:
            self._last_failure, self._news = why, True

    def _log_retry(self, level: int, line: str) -> None:
        """A retry line goes with a failure that was news, saying how many attempts were not logged."""
        if not self._news:
            self._quiet_attempts += 1
            log.debug("%s", line)
            return
        if self._quiet_attempts:
            line += f" ({self._quiet_attempts} more attempts since the last such line)"
        log.log(level, "%s", line)
        self._news, self._quiet_attempts = False, 0
        self._quiet_until = self.loop.time() + RETRY_LOG_EVERY

    def _failed(self, why: str, level: int = logging.INFO) -> None:
        """Connect-phase failure: tear down, count, retry or give up."""
        self.stats["failures"] += 1
        self._log_failure(level, why)
        self._teardown()
        if self.machine.state is State.CONNECTING:
            self._do(self.machine.handle(Event.FAILED))

    def _lost(self, why: str) -> None:
        was = self.machine.state
        self._teardown()
        if was is State.CONNECTED:
            log.warning("broker connection %s lost: %s", self.name, why)
            self._last_failure, self._news = why, True
            self._do(self.machine.handle(Event.LOST))
        elif was is State.CONNECTING:
            self.stats["failures"] += 1
            self._log_failure(logging.INFO, why)
            self._do(self.machine.handle(Event.FAILED))

    def _teardown(self) -> None:
        conn, self.conn = self.conn, None
        self.session = None
        self.connected_at = None
        if conn is not None:
            for p in self.policies:
                p.detached_all(self)
            if not conn.closed:
                conn.close()
                self._write(conn)
        if self.transport is not None:
            t, self.transport = self.transport, None
            t.close()

    # ------------------------------------------------------------------------------------ socket

    async def _connect(self, endpoint: Endpoint) -> None:
        ctx = _ssl_context(endpoint)
        upgrade = client_upgrade(endpoint)

        def protocol() -> asyncio.Protocol:
            socket = _Socket(self)
            if upgrade is None:
                return socket
            return ClientUpgrading(socket, upgrade, lambda why: self._failed(why, logging.WARNING))

        try:
            await self.loop.create_connection(
                protocol,
                endpoint.host,
                endpoint.port,
                ssl=ctx,
                server_hostname=endpoint.host if ctx else None,
            )
        except (OSError, ssl.SSLError) as exc:
            self._failed(f"cannot connect to {endpoint.host}:{endpoint.port}: {exc}")

    def socket_made(self, transport: Any) -> None:
        if self.machine.state is not State.CONNECTING:
            transport.close()
            return
        self.transport = transport
        props = {
            Symbol("product"): PRODUCT,
            Symbol("version"): VERSION,
            BROKER_CONNECTION_INFO: {"connectionName": self.name, "nodeId": self.server.node_id},
        }
        self.conn = Connection(
            self,
            server=False,
            container_id=self.server.node_id,
            open_properties=props,
            idle_timeout_ms=self.config.idle_timeout,
            hostname=self.endpoints[self.machine.current].host,
        )
        self.conn.last_received = time.monotonic()
        self.conn.start_client(sasl=True)
        self._write(self.conn)

    def socket_data(self, data: bytes) -> None:
        conn = self.conn
        if conn is None:
            return
        conn.last_received = time.monotonic()
        try:
            conn.receive(data)
        except ConnectError as exc:
            self._login_refused = isinstance(exc, LoginRefused)
            self._failed(str(exc), logging.WARNING if self._login_refused else logging.INFO)
            return
        except Exception as exc:
            log.exception("broker connection %s: internal error", self.name)
            conn.fail(errors.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
        if conn.closed:
            self._write(conn)
            why = conn.error.description if conn.error else "closed"
            if conn.remote_close is not None and conn.remote_close.error is not None:
                why = f"{conn.remote_close.error.condition}: {conn.remote_close.error.description}"
            self._lost(f"connection closed: {why}")
            return
        self.mark_dirty()
        self.turn.after_read()

    def socket_lost(self, exc: Exception | None) -> None:
        if self.transport is None and self.conn is None:
            return
        self.transport = None
        self._lost(f"connection lost{f': {exc}' if exc else ''}")

    # -------------------------------------------------------------------------- output plumbing

    def write_out(self) -> None:
        if self.conn is not None:
            self._write(self.conn)

    def mark_dirty(self) -> None:
        self.turn.mark_dirty(self)

    def _write(self, conn: Connection) -> None:
        out = conn.take_output()
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(out)
            conn.last_sent = time.monotonic()

    def tick(self, now: float) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.tick(now)
            if self.conn.closed:
                self._lost("idle timeout")
            elif self.conn.has_output():
                self.mark_dirty()

    # ------------------------------------------------------------------------ engine: SASL/open

    def on_sasl_init(self, conn: Connection, mechanism: str, response: bytes | None) -> None:
        pass  # server side only

    def on_sasl_response(self, conn: Connection, response: bytes) -> None:
        pass  # server side only

    def on_sasl_mechanisms(self, conn: Connection, offered: list[str]) -> None:
        user, password = self.config.user, self.config.password
        # while the same login keeps being refused (its lines summarised), this one goes to DEBUG too
        quiet = self._login_refused and self.loop.time() < self._quiet_until
        level = logging.DEBUG if quiet else logging.INFO
        if user and password:
            for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
                if mech in offered:
                    self._scram = ScramClient(mech, user, password)
                    line = "broker connection %s: authenticating as %s with %s"
                    log.log(level, line, self.name, user, mech)
                    conn.sasl_init(mech, self._scram.first())
                    return
            if "PLAIN" in offered:
                log.log(level, "broker connection %s: authenticating as %s with PLAIN", self.name, user)
                conn.sasl_init("PLAIN", f"\0{user}\0{password}".encode())
                return
        if "ANONYMOUS" in offered:
            conn.sasl_init("ANONYMOUS", b"")
            return
        raise ConnectError(f"no usable SASL mechanism among {offered} (user set: {bool(user)})")

    def on_sasl_challenge(self, conn: Connection, challenge: bytes) -> None:
        if self._scram is None:
            raise ConnectError("unexpected SASL challenge")
        try:
            conn.sasl_respond(self._scram.final(challenge))
        except ScramError as exc:
            raise ConnectError(str(exc)) from exc

    def on_sasl_outcome(self, conn: Connection, code: int) -> None:
        if code == 1 and self.login_refused is not None:
            raise LoginRefused(self.login_refused)
        if code == 1:  # auth: the remote does not know the user, or not with this password
            raise LoginRefused(
                f"authentication failed (SASL outcome 1) as user {self.config.user}: the remote refused "
                "the user or its password; check the user and password of this <amqp-connection>"
            )
        if code != 0:  # sys, sys-perm, sys-temp: the remote could not decide
            raise ConnectError(f"authentication failed (SASL outcome {code}: a system error on the remote)")
        if self._scram is not None:
            try:  # the server must prove it knows the credentials too
                self._scram.verify(conn.sasl.additional or b"")
            except ScramError as exc:
                raise ConnectError(f"the remote failed SCRAM server verification: {exc}") from exc
        self._scram = None

    def on_open(self, conn: Connection, open_: Open) -> None:
        self.session = conn.begin()
        self.mark_dirty()

    def on_begin(self, session: Session, begin: Begin) -> None:
        self._links_waiting = 0
        for p in self.policies:
            p.attach_all(self)
        self._maybe_connected()

    def _maybe_connected(self) -> None:
        if self.machine.state is State.CONNECTING and all(p.pending() == 0 for p in self.policies):
            self.connected_at = time.monotonic()
            self.last_connected = time.time()
            self.stats["connects"] += 1
            self._do(self.machine.handle(Event.CONNECTED))

    # ------------------------------------------------------------------------------ engine: links

    def attach(self, attach: Attach, role: LinkRole) -> Link:
        assert self.conn is not None and self.session is not None
        link = self.conn.attach(self.session, attach)
        link.context = role
        self.mark_dirty()
        return link

    def on_attach(self, link: Link, attach: Attach) -> None:
        policy = _policy_of(link)
        if policy is None:  # the remote opened a link we did not ask for
            assert self.conn is not None  # the attach just came on it
            self.conn.detach(
                link,
                closed=True,
                condition=errors.NOT_ALLOWED,
                description="broker connections accept no incoming links",
            )
            return
        refused = (attach.target is None) if link.is_sender else (attach.source is None)
        if refused:
            # The remote refused: its detach with the reason follows; treat it as a connect failure.
            link.context.refused = True
            return
        try:
            policy.remote_attached(self, link)
        except ConnectError as exc:
            self._failed(str(exc))
            return
        self._maybe_connected()

    def on_detach(self, link: Link, detach: Detach) -> None:
        if link.closed_locally:
            return  # the answer to a detach of ours (e.g. its local queue was deleted)
        role = link.context
        why = f"{detach.error.condition}: {detach.error.description}" if detach.error else "detached"
        kind = "Sender" if link.is_sender else "Receiver"
        if isinstance(role, LinkRole) and role.refused:
            code = "AMQ119023" if link.is_sender else "AMQ119029"
            self.loop.call_soon(
                self._failed, f"{code}: {kind} link refused for address {_address_of(link)}: {why}"
            )
            return
        # Any active link closed by the remote: the whole connection is recreated (AMQ119021).
        self.loop.call_soon(self._lost, f"AMQ119021: remote closed link {link.name!r}: {why}")

    def on_flow(self, link: Link) -> None:
        policy = _policy_of(link)
        if policy is not None:
            policy.on_flow(self, link)

    def on_session_flow(self, session: Session) -> None:
        for link in session.local_links.values():
            policy = _policy_of(link)
            if policy is not None and link.is_sender:
                policy.on_flow(self, link)

    def on_delivery(
        self, link: Link, delivery_id: int, tag: bytes, settled: bool, payload: bytes, message_format: int
    ) -> None:
        policy = _policy_of(link)
        if policy is not None:
            policy.on_delivery(self, link, delivery_id, settled, payload)

    def on_disposition(
        self, session: Session, role: bool, first: int, last: int, settled: bool, state: Any
    ) -> None:
        if not role:
            return
        unsettled = session.outgoing_unsettled
        touched: list[LinkPolicy] = []
        for i in range(first, last + 1) if last - first < 4096 else sorted(unsettled):
            if not first <= i <= last:
                continue
            entry = unsettled.get(i)
            if entry is None or (state is None and not settled):
                continue
            del unsettled[i]
            link, context = entry
            policy = _policy_of(link)
            if policy is not None:
                policy.on_outcome(self, link, context, state)
                if policy not in touched:
                    touched.append(policy)
        for policy in touched:
            policy.outcomes_done(self)
        self.mark_dirty()

    def on_end(self, session: Session, end: End) -> None:
        self.loop.call_soon(self._lost, "remote ended the session")

    def on_close(self, conn: Connection, close: Close) -> None:
        pass  # handled after receive() returns (socket_data sees conn.closed)

    def queue_added(self, queue: Queue) -> None:
        if self.machine.state in (State.CONNECTED, State.CONNECTING) and self.session is not None:
            for p in self.policies:
                p.local_queue_added(self, queue)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "protocol": "AMQP",
            "started": self.machine.state is not State.STOPPED,
            "uri": redacted(self.config.uri),
            "connected": self.connected,
            "state": self.machine.state.value,
            "retries": self.machine.counter,
            "gaveUp": self.machine.gave_up,
            "remote": self.remote(),
            "lastConnectedAt": int(self.last_connected * 1000),  # epoch ms, 0: never
        }

    def remote(self) -> str:
        """The endpoint connected to, or to be tried next (one of the configured `#` alternates)."""
        endpoint = self.endpoints[self.machine.current]
        return f"{endpoint.host}:{endpoint.port}"


class _Socket(asyncio.Protocol):
    def __init__(self, owner: OutboundConnection) -> None:
        self.owner = owner
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.owner.socket_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.owner.transport is self.transport:
            self.owner.socket_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.owner.transport is self.transport:
            self.owner.socket_lost(exc)


def _policy_of(link: Link) -> LinkPolicy | None:
    role = link.context
    return role.policy if isinstance(role, LinkRole) else None


def _address_of(link: Link) -> str | None:
    a = link.attach
    if a is None:
        return None
    t = a.target if link.is_sender else a.source
    return getattr(t, "address", None)


def redacted(uri: str) -> str:
    """The URI with every secret parameter's value (any name with "password" in it) replaced: what
    management and the logs show of a broker connection."""
    return re.sub(r"([;?&][^;?&=]*password[^;?&=]*=)[^;&#),]*", r"\1*****", uri, flags=re.IGNORECASE)


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    return list(v)


def client_upgrade(endpoint: Endpoint) -> ClientUpgrade | None:
    """The HTTP upgrade a connection to `endpoint` starts with, if its URI asks for one."""
    p = endpoint.params
    if endpoint.scheme in ("ws", "wss"):
        kind = Upgrade.WEBSOCKET
    elif p.get("httpUpgradeEnabled", "false").lower() == "true":
        kind = Upgrade.REMOTING
    else:
        return None
    return ClientUpgrade(
        kind,
        endpoint.host,
        endpoint.port,
        endpoint.path,
        server_name=p.get("activemqServerName"),
        endpoint=p.get("httpUpgradeEndpoint"),
    )


def _ssl_context(endpoint: Endpoint) -> ssl.SSLContext | None:
    p = endpoint.params
    if endpoint.scheme != "wss" and p.get("sslEnabled", "false").lower() != "true":
        return None
    ca = p.get("trustStorePath") or p.get("sslCaPath")
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    if p.get("verifyHost", "true").lower() == "false":
        ctx.check_hostname = False
    if p.get("trustAll", "false").lower() == "true":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert, key = p.get("sslCertPath"), p.get("sslKeyPath")
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx
