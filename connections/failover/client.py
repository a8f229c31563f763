"""A blocking AMQP client that fails over between brokers, built on proton's ``BlockingConnection``.

Invariants:
* One live proton connection at a time; ``generation`` counts them. A link or a received delivery
  belongs to the generation it was made on and is never used on another one (links are re-attached
  lazily on the next operation; deliveries of a lost connection are in doubt).
* Reconnecting happens inside the operation that needs the connection (no background thread: proton's
  blocking connection is not thread-safe), following ``backoff.connect_schedule``.
* Nothing is retried behind the caller's back once it may have reached a broker: a send without an
  outcome, or an accept that may not have been delivered, raises ``InDoubtError`` carrying the message.
  A receive that was only waiting is not in doubt: it just carries on after failover.
* Before every operation the connection is pumped once without blocking, so a loss that happened
  while idle is noticed before a new message is committed to a dead socket.

Use from one thread at a time.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from proton import ConnectionException, Delivery, Endpoint, LinkException, Message, ProtonException, Timeout
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender, ConnectionClosed, SendException

from connections.failover.backoff import Attempt, connect_schedule, priority_probes
from connections.failover.bridge import OPTIONS as UPGRADE_OPTIONS
from connections.failover.bridge import Bridge, check_options, upgrade_of
from connections.failover.uri import BrokerUri, FailoverUri, parse_failover_uri

if TYPE_CHECKING:
    from proton._delivery import DispositionType

log = logging.getLogger(__name__)

# One unreachable broker must not stall a pass forever even with timeout=-1, so each single connection
# attempt is bounded (nested option transport.connectTimeout overrides it).
DEFAULT_CONNECT_TIMEOUT_S = 10.0
# Options of a nested URI that this client uses; any other is kept but reported once as unused.
CONNECT_TIMEOUT_OPTION = "transport.connectTimeout"
IDLE_TIMEOUT_OPTION = "amqp.idleTimeout"
# proton's reactor needs a few non-blocking turns to select, read and dispatch (measured: 3 for an EOF).
PUMP_TURNS = 4
REDIRECT = "amqp:connection:redirect"
# Failures that mean "this connection is unusable" (as opposed to a refused link or delivery).
CONNECTION_FAILURES: tuple[type[Exception], ...] = (ConnectionException, Timeout)


class FailoverError(Exception):
    """Base of every error raised by the failover client."""


class InDoubtError(FailoverError):
    """An operation may or may not have taken effect at the broker; the caller decides what to do.

    ``operation`` is "send" or "accept"; ``message`` is the message concerned; ``uri`` the broker.
    """

    def __init__(self, operation: str, message: Message, uri: BrokerUri | None, reason: str) -> None:
        super().__init__(f"{operation} in doubt on {uri}: {reason}")
        self.operation = operation
        self.message = message
        self.uri = uri
        self.reason = reason


class FailoverTimeoutError(FailoverError, TimeoutError):
    """No connection (or no send outcome) within the ``timeout`` option."""


class ReconnectExhaustedError(FailoverError, ConnectionError):
    """Every allowed connect attempt failed (``maxReconnectAttempts`` / ``startupMaxReconnectAttempts``)."""


class ReceiveTimeout(FailoverError, TimeoutError):
    """No message arrived within the timeout given to ``receive``."""


class DeliveryRefusedError(FailoverError):
    """The broker settled a sent message as rejected or released: it was not taken."""

    def __init__(self, message: Message, state: int, uri: BrokerUri | None) -> None:
        super().__init__(f"send refused by {uri}: delivery state {state}")
        self.message = message
        self.state = state


class LinkError(FailoverError):
    """The broker refused or closed a link (e.g. unknown address, not authorised)."""


class ClosedError(FailoverError):
    """The failover connection was closed by its owner."""


Connector = Callable[..., BlockingConnection]


class Redirected(ConnectionClosed):
    """The broker answered `amqp:connection:redirect` (a passive HA server): `where` to go instead."""

    def __init__(self, connection: Any, where: tuple[str, int] | None) -> None:
        super().__init__(connection)
        self.where = where


class RedirectAwareConnection(BlockingConnection):
    """proton's blocking connection, keeping a redirect's fields (its own error keeps only the name)."""

    def on_connection_remote_close(self, event: Any) -> None:
        condition = event.connection.remote_condition
        if (
            condition is not None
            and condition.name == REDIRECT
            and event.connection.state & Endpoint.LOCAL_ACTIVE
        ):
            event.connection.close()
            raise Redirected(event.connection, _host_port(condition.info or {}))
        super().on_connection_remote_close(event)


class FailoverConnection:
    """A connection to the first reachable broker of a failover URI, re-established after a loss."""

    def __init__(
        self,
        uri: str | FailoverUri,
        user: str | None = None,
        password: str | None = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        connector: Connector = RedirectAwareConnection,
    ) -> None:
        self.config = uri if isinstance(uri, FailoverUri) else parse_failover_uri(uri)
        self._auth = _auth_kwargs(user, password)
        self._rng = rng or random.Random()
        self._clock, self._sleep, self._connector = clock, sleep, connector
        self.uris: list[BrokerUri] = list(self.config.uris)  # and those the brokers told us about
        self._settings = {u: _uri_settings(u) for u in self.config.uris}
        self._conn: BlockingConnection | None = None
        self.connected_uri: BrokerUri | None = None
        self.generation = 0
        self.failovers = 0
        self._lost_uri: BrokerUri | None = None
        self._probes: Iterator[Attempt] | None = None
        self._probe: Attempt | None = None
        self._probe_due = 0.0
        self._receivers: list[FailoverReceiver] = []
        self._closed = False
        self._reconnect(self._deadline())

    # -- public API ------------------------------------------------------------------------------------

    def sender(self, address: str) -> FailoverSender:
        """A sender to ``address``; its link is attached now, so a refused address fails here."""
        sender = FailoverSender(self, address)
        sender._attach_now()
        return sender

    def receiver(self, address: str, credit: int = 1) -> FailoverReceiver:
        """A receiver from ``address`` with ``credit`` messages of prefetch; attached now."""
        if credit < 1:
            raise ValueError(f"receiver credit={credit!r}: expected an integer >= 1")
        receiver = FailoverReceiver(self, address, credit)
        receiver._attach_now()
        self._receivers.append(receiver)
        return receiver

    def close(self) -> None:
        """Close the connection; further operations raise ``ClosedError``."""
        if self._closed:
            return
        self._closed = True
        if self._conn is not None:
            _discard(self._conn)
            self._conn = None

    def __enter__(self) -> FailoverConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def timeout_s(self) -> float | None:
        """The ``timeout`` option in seconds, None when infinite."""
        ms = self.config.options.timeout
        return None if ms < 0 else ms / 1000.0

    # -- used by senders and receivers -----------------------------------------------------------------

    def _deadline(self) -> float | None:
        timeout = self.timeout_s
        return None if timeout is None else self._clock() + timeout

    def _remaining(self, deadline: float | None) -> float | None:
        return None if deadline is None else max(deadline - self._clock(), 0.0)

    def _live(self, deadline: float | None) -> BlockingConnection:
        """The current connection after a non-blocking liveness check, reconnecting when it is gone."""
        if self._closed:
            raise ClosedError("the failover connection is closed")
        if self._conn is not None:
            try:
                _pump(self._conn)
            except CONNECTION_FAILURES as error:
                self._lost(error)
        if self._conn is None:
            self._reconnect(deadline if deadline is not None else self._deadline())
        else:
            self._maybe_return_to_priority()
        assert self._conn is not None
        return self._conn

    def _lost(self, error: BaseException) -> None:
        if self._conn is None:
            return
        log.warning("connection to %s lost: %s", self.connected_uri, error)
        where = _redirect(error)  # a server scaling down closes with where its messages went: go on there
        if where is not None:
            self._learn(where, f"redirected by {self.connected_uri}")
        _discard(self._conn)
        self._conn = None
        self._lost_uri = self.connected_uri
        self._probe = None

    def _pump_current(self) -> None:
        """Flush and process pending I/O; a failure marks the connection lost and is re-raised."""
        if self._conn is None:
            raise ConnectionException("no connection")
        try:
            _pump(self._conn)
        except CONNECTION_FAILURES as error:
            self._lost(error)
            raise

    # -- connecting ------------------------------------------------------------------------------------

    def _reconnect(self, deadline: float | None) -> None:
        startup = self.generation == 0
        options = self.config.options
        schedule = connect_schedule(self.uris, options, startup=startup, rng=self._rng, failed=self._lost_uri)
        last_error: BaseException | None = None
        for attempt in schedule:
            if attempt.warn:
                log.warning(
                    "failed to connect to any of %s after %d attempt(s), continuing to retry",
                    _names(tuple(self.uris)),
                    attempt.failures,
                )
            self._wait(attempt.delay_ms, deadline)
            uri = attempt.uri
            try:
                conn = self._open(uri, deadline)
            except CONNECTION_FAILURES as error:
                log.debug("connect to %s failed: %s", uri, error)
                last_error = error
                redirect = _redirect(error)  # a passive server says where the active one is: go there
                if redirect is None:
                    continue
                uri = self._learn(redirect, f"redirected by {uri}")
                try:
                    conn = self._open(uri, deadline)
                except CONNECTION_FAILURES as again:
                    last_error = again
                    continue
            self._install(conn, uri, startup)
            return
        raise ReconnectExhaustedError(self._exhausted_text(startup, last_error))

    def _exhausted_text(self, startup: bool, error: BaseException | None) -> str:
        options = self.config.options
        if startup:
            what = f"startupMaxReconnectAttempts={options.startup_max_reconnect_attempts}"
        else:
            what = f"maxReconnectAttempts={options.max_reconnect_attempts}"
        phase = "could not connect" if startup else f"lost {self._lost_uri} and could not reconnect"
        return f"{phase} to any of {_names(tuple(self.uris))} ({what}); last error: {error}"

    def _wait(self, delay_ms: int, deadline: float | None) -> None:
        delay = delay_ms / 1000.0
        if deadline is not None and self._clock() + delay > deadline:
            raise FailoverTimeoutError(
                f"no connection to any of {_names(tuple(self.uris))} within "
                f"timeout={self.config.options.timeout}ms"
            )
        if delay > 0:
            self._sleep(delay)

    def _open(self, uri: BrokerUri, deadline: float | None) -> BlockingConnection:
        settings = dict(self._settings[uri])
        remaining = self._remaining(deadline)
        if remaining is not None:
            settings["timeout"] = max(min(settings["timeout"], remaining), 0.001)
        if upgrade_of(uri) is None:
            return self._connector(uri.url, **settings, **self._auth)
        # proton connects to the bridge, which did the upgrade; the AMQP hostname stays the broker's
        bridge = Bridge.open(uri, settings["timeout"])
        try:
            return self._connector(bridge.url, **settings, virtual_host=uri.host, **self._auth)
        except BaseException:
            bridge.close()
            raise

    def _install(self, conn: BlockingConnection, uri: BrokerUri, startup: bool) -> None:
        previous = self.connected_uri
        self._conn, self.connected_uri = conn, uri
        self.generation += 1
        if startup:
            log.info("connected to %s", uri)
        else:
            self.failovers += 1
            log.info("failed over to %s (previous broker %s)", uri, previous)
        self._lost_uri = None
        if self.config.options.update_uris_supported:  # the server's failover-server-list (partner, cluster)
            for entry in _server_list(conn):
                self._learn(entry, f"failover-server-list of {uri}")
        self._probes = priority_probes(self.config.uris, self.config.options, uri)
        self._next_probe()

    def _learn(self, where: tuple[str, int], why: str) -> BrokerUri:
        """A broker a server told us of: known from now on (used as the configured ones are)."""
        for known in self.uris:
            if (known.host.lower(), known.port) == (where[0].lower(), where[1]):
                return known
        template = self.uris[0]
        uri = BrokerUri(template.scheme, where[0], where[1], template.options, template.path)
        self.uris.append(uri)
        self._settings[uri] = _uri_settings(uri)
        log.info("learnt of %s (%s)", uri, why)
        return uri

    # -- returning to a priority broker (priorityBackup) -----------------------------------------------

    def _next_probe(self) -> None:
        self._probe = next(self._probes, None) if self._probes is not None else None
        if self._probe is not None:
            self._probe_due = self._clock() + self._probe.delay_ms / 1000.0

    def _maybe_return_to_priority(self) -> None:
        probe = self._probe
        if probe is None or self._clock() < self._probe_due:
            return
        if any(r._unsettled for r in self._receivers):
            return  # switching now would put the caller's unsettled deliveries in doubt
        try:
            conn = self._open(probe.uri, None)
        except CONNECTION_FAILURES as error:
            log.debug("priority broker %s still unavailable: %s", probe.uri, error)
            self._next_probe()
            return
        old, previous = self._conn, self.connected_uri
        self._install(conn, probe.uri, startup=True)
        log.info("returned to priority broker %s (leaving %s)", probe.uri, previous)
        if old is not None:
            _discard(old)


class FailoverSender:
    """Sends to one address; the link is re-attached on the current connection after a failover."""

    def __init__(self, owner: FailoverConnection, address: str) -> None:
        self.owner = owner
        self.address = address
        self.in_flight = 0
        self._link: BlockingSender | None = None
        self._generation = 0

    def send(self, message: Message) -> None:
        """Send and wait for the outcome; raises ``InDoubtError`` if the outcome was cut off."""
        deadline = self.owner._deadline()
        link = self._attached(deadline)
        self.in_flight += 1
        try:
            link.send(message, timeout=self.owner._remaining(deadline))
        except SendException as error:
            raise DeliveryRefusedError(message, error.state, self.owner.connected_uri) from error
        except Timeout as error:
            reason = f"no outcome within timeout={self.owner.config.options.timeout}ms"
            raise InDoubtError("send", message, self.owner.connected_uri, reason) from error
        except (ConnectionException, LinkException) as error:
            uri = self.owner.connected_uri
            self._on_failure(error)
            reason = f"connection lost before the outcome: {error}"
            raise InDoubtError("send", message, uri, reason) from error
        finally:
            self.in_flight -= 1

    def _on_failure(self, error: Exception) -> None:
        self._link = None
        if isinstance(error, ConnectionException):
            self.owner._lost(error)

    def _attach_now(self) -> None:
        self._attached(self.owner._deadline())

    def _attached(self, deadline: float | None) -> BlockingSender:
        while True:
            conn = self.owner._live(deadline)
            if self._link is not None and self._generation == self.owner.generation:
                return self._link
            try:
                self._link = conn.create_sender(self.address)
            except CONNECTION_FAILURES as error:
                self.owner._lost(error)
                continue
            except LinkException as error:
                where = f"sender to {self.address!r} on {self.owner.connected_uri}"
                raise LinkError(f"{where}: {error}") from error
            self._generation = self.owner.generation
            return self._link


class FailoverReceiver:
    """Receives from one address; ``accept``/``release`` settle the oldest unsettled received message."""

    def __init__(self, owner: FailoverConnection, address: str, credit: int) -> None:
        self.owner = owner
        self.address = address
        self.credit = credit
        self.waiting = False  # True while blocked in receive(): lets a watcher see the client idle
        self._link: BlockingReceiver | None = None
        self._generation = 0
        # (the link it arrived on, message): a delivery is only settled on its own link.
        self._unsettled: deque[tuple[BlockingReceiver, Message]] = deque()

    def receive(self, timeout: float | None = None) -> Message:
        """The next message, waiting up to ``timeout`` s (None: forever) across failovers."""
        until = None if timeout is None else self.owner._clock() + timeout
        while True:
            link = self._attached(None)
            self.waiting = True
            try:
                message: Message = link.receive(timeout=self.owner._remaining(until))
            except Timeout as error:
                raise ReceiveTimeout(f"no message from {self.address!r} within {timeout}s") from error
            except ConnectionException as error:
                self._link = None
                self.owner._lost(error)  # nothing was taken yet: keep waiting on the next broker
                continue
            except LinkException as error:
                self._link = None
                raise LinkError(f"receiver from {self.address!r}: {error}") from error
            finally:
                self.waiting = False
            self._unsettled.append((link, message))
            return message

    def accept(self) -> None:
        """Accept the oldest unsettled message; ``InDoubtError`` if its connection was lost."""
        self._settle(Delivery.ACCEPTED)

    def release(self) -> None:
        """Release the oldest unsettled message. If its connection was lost the broker has already
        returned it to the queue, so there is nothing left to do and no error."""
        self._settle(Delivery.RELEASED)

    @property
    def unsettled(self) -> int:
        return len(self._unsettled)

    def _settle(self, state: DispositionType) -> None:
        if not self._unsettled:
            raise FailoverError(f"receiver from {self.address!r}: no received message left to settle")
        link, message = self._unsettled.popleft()
        uri = self.owner.connected_uri
        try:
            if link is not self._link or self._generation != self.owner.generation:
                raise ConnectionException("the delivery belongs to a connection or link that was lost")
            self.owner._pump_current()
            link.settle(state)
            self.owner._pump_current()  # flush the disposition now; a failure here leaves it in doubt
        except CONNECTION_FAILURES as error:
            self._link = None
            if state == Delivery.ACCEPTED:
                reason = f"{error}; the broker may redeliver the message"
                raise InDoubtError("accept", message, uri, reason) from error
            log.debug("release of a delivery from a lost connection: nothing to do (%s)", error)

    def _attach_now(self) -> None:
        self._attached(self.owner._deadline())

    def _attached(self, deadline: float | None) -> BlockingReceiver:
        while True:
            conn = self.owner._live(deadline)
            if self._link is not None and self._generation == self.owner.generation:
                return self._link
            try:
                self._link = conn.create_receiver(self.address, credit=self.credit)
            except CONNECTION_FAILURES as error:
                self.owner._lost(error)
                continue
            except LinkException as error:
                where = f"receiver from {self.address!r} on {self.owner.connected_uri}"
                raise LinkError(f"{where}: {error}") from error
            self._generation = self.owner.generation
            return self._link


def _redirect(error: BaseException) -> tuple[str, int] | None:
    """Where an `amqp:connection:redirect` sends us, if that is what `error` is."""
    return error.where if isinstance(error, Redirected) else None


def _server_list(conn: BlockingConnection) -> list[tuple[str, int]]:
    """The `failover-server-list` a broker put in its open frame's properties."""
    properties = getattr(getattr(conn, "conn", None), "remote_properties", None) or {}
    entries = properties.get("failover-server-list") or []
    found = [_host_port(entry) for entry in entries if isinstance(entry, dict)]
    return [where for where in found if where is not None]


def _host_port(info: Any) -> tuple[str, int] | None:
    host = info.get("network-host") if hasattr(info, "get") else None
    port = info.get("port") if hasattr(info, "get") else None
    return (str(host), int(port)) if host and port else None


def _pump(conn: BlockingConnection) -> None:
    """Process pending I/O without blocking; raises ``ConnectionException`` if the peer is gone."""
    container = conn.container
    saved = container.timeout
    container.timeout = 0
    try:
        for _ in range(PUMP_TURNS):
            container.process()
    finally:
        container.timeout = saved
    if conn.disconnected:
        raise ConnectionException(f"connection {conn.url} disconnected: {conn.disconnected}")


def _discard(conn: BlockingConnection) -> None:
    """Close ``conn`` without letting a dead peer stall or fail the caller."""
    with contextlib.suppress(ProtonException):
        _pump(conn)  # notices a dead peer, so close() below only frees resources instead of waiting
    try:
        conn.close()
    except ProtonException as error:
        log.debug("closing connection: %s", error)


def _auth_kwargs(user: str | None, password: str | None) -> dict[str, Any]:
    if user is None:
        return {"allowed_mechs": "ANONYMOUS"}
    return {"user": user, "password": password, "allowed_mechs": "PLAIN"}


def _uri_settings(uri: BrokerUri) -> dict[str, Any]:
    """BlockingConnection arguments from a nested URI's options; validated at construction."""
    settings: dict[str, Any] = {"timeout": DEFAULT_CONNECT_TIMEOUT_S}
    if CONNECT_TIMEOUT_OPTION in uri.options:
        settings["timeout"] = _positive_ms(uri, CONNECT_TIMEOUT_OPTION) / 1000.0
    if IDLE_TIMEOUT_OPTION in uri.options:
        settings["heartbeat"] = _positive_ms(uri, IDLE_TIMEOUT_OPTION) / 1000.0
    check_options(uri)
    unused = sorted(set(uri.options) - {CONNECT_TIMEOUT_OPTION, IDLE_TIMEOUT_OPTION, *UPGRADE_OPTIONS})
    if unused:
        log.warning("options %s of %s are not used by this AMQP client", ", ".join(unused), uri)
    return settings


def _positive_ms(uri: BrokerUri, name: str) -> int:
    text = uri.options[name]
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"option {name}={text!r} of {uri}: expected a positive number of milliseconds")
    return int(text)


def _names(uris: tuple[BrokerUri, ...]) -> str:
    return "[" + ", ".join(str(u) for u in uris) + "]"
