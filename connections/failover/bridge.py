"""The failover client over WebSocket (``ws://``, ``wss://``) and Artemis's HTTP upgrade
(``httpUpgradeEnabled=true``).

proton's blocking client opens its own TCP sockets and knows neither upgrade. So the upgrade is done
here first, in the caller's thread and within the connect timeout (a refusal is a failed connect attempt
carrying the server's status and line); then proton connects to a loopback port this bridge listens on
for that one connection, and a thread moves the bytes: as they are after activemq-remoting, in binary
WebSocket frames (masked, as a client's must be) otherwise. The thread never touches proton. When either
side closes, the bridge closes the other: proton sees a lost connection when the broker goes, and the
broker a WebSocket close when proton lets go.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import threading
from collections.abc import Mapping

from proton import ConnectionException

from broker_core.http_upgrade import ClientUpgrade, Refusal, Upgrade, UpgradeFailed, content_length, head_end
from broker_core.websocket import (
    NORMAL,
    PONG,
    FrameReader,
    WebSocketError,
    binary_frames,
    close_frame,
    frame,
)
from connections.failover.uri import BrokerUri

log = logging.getLogger(__name__)

UPGRADE_ENABLED = "httpUpgradeEnabled"
SERVER_NAME = "activemqServerName"
ENDPOINT = "httpUpgradeEndpoint"
# Qpid JMS's names for a wss:// connection's trust: a PEM bundle, and checks that can be turned off
TRUST_STORE = "transport.trustStoreLocation"
VERIFY_HOST = "transport.verifyHost"
TRUST_ALL = "transport.trustAll"
OPTIONS = frozenset({UPGRADE_ENABLED, SERVER_NAME, ENDPOINT, TRUST_STORE, VERIFY_HOST, TRUST_ALL})
READ_SIZE = 65536
MAX_FRAME = 64 * 1024 * 1024


def check_options(uri: BrokerUri) -> None:
    """`ValueError` for an upgrade option of `uri` that is not what it must be (true or false)."""
    for name in (UPGRADE_ENABLED, VERIFY_HOST, TRUST_ALL):
        try:
            _flag(uri.options, name, False)
        except ValueError as exc:
            raise ValueError(f"{exc} (in {uri})") from None


def upgrade_of(uri: BrokerUri) -> ClientUpgrade | None:
    """The upgrade a connection to `uri` starts with (None: plain AMQP, proton on its own)."""
    if uri.scheme in ("ws", "wss"):
        kind = Upgrade.WEBSOCKET
    elif _flag(uri.options, UPGRADE_ENABLED, False):
        kind = Upgrade.REMOTING
    else:
        return None
    return ClientUpgrade(
        kind,
        uri.host,
        uri.port,
        uri.path,
        server_name=uri.options.get(SERVER_NAME),
        endpoint=uri.options.get(ENDPOINT),
    )


class Bridge:
    """One upgraded connection to a broker, offered to proton at `url` (loopback, one connection)."""

    def __init__(self, remote: socket.socket, upgrade: ClientUpgrade, rest: bytes, timeout: float) -> None:
        self.remote = remote
        self.websocket = upgrade.kind is Upgrade.WEBSOCKET
        self.name = f"{upgrade.host}:{upgrade.port}"
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=1)
        self.listener.settimeout(timeout)
        self.url = f"amqp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.reader = FrameReader(masked=False, max_payload=MAX_FRAME)
        self.pending = rest  # what came after the 101, before proton connected
        self.thread = threading.Thread(target=self._run, name=f"amqp-bridge-{self.name}", daemon=True)
        self.thread.start()

    @classmethod
    def open(cls, uri: BrokerUri, timeout: float) -> Bridge:
        """Connect to `uri` and upgrade; `ConnectionException` saying why when that fails."""
        upgrade = upgrade_of(uri)
        assert upgrade is not None
        try:
            remote = socket.create_connection((uri.host, uri.port), timeout=timeout)
        except OSError as exc:
            raise ConnectionException(f"cannot connect to {uri}: {exc}") from exc
        try:
            if uri.scheme == "wss":
                remote = _tls(uri.options).wrap_socket(remote, server_hostname=uri.host)
            rest = _upgrade(remote, upgrade)
            remote.settimeout(None)
            return cls(remote, upgrade, rest, timeout)
        except (OSError, UpgradeFailed) as exc:
            remote.close()
            raise ConnectionException(f"{uri}: {exc}") from exc

    def close(self) -> None:
        """Stop serving (proton never connected, or is gone): both sockets closed, the thread ends."""
        with contextlib.suppress(OSError):
            self.listener.close()
        with contextlib.suppress(OSError):
            self.remote.close()

    def _run(self) -> None:
        try:
            local, _ = self.listener.accept()
        except OSError:  # proton did not come within the timeout, or the bridge was closed
            self.close()
            return
        finally:
            with contextlib.suppress(OSError):
                self.listener.close()
        try:
            self._pump(local)
        except (OSError, WebSocketError) as exc:
            log.debug("bridge to %s: %s", self.name, exc)
        finally:
            with contextlib.suppress(OSError):
                local.close()
            self.close()

    def _pump(self, local: socket.socket) -> None:
        if self.pending:
            self._from_remote(local, self.pending)
        with selectors.DefaultSelector() as selector:
            selector.register(local, selectors.EVENT_READ, local)
            selector.register(self.remote, selectors.EVENT_READ, self.remote)
            self._relay(local, selector)

    def _relay(self, local: socket.socket, selector: selectors.BaseSelector) -> None:
        while True:
            # TLS may hold a decrypted record the socket no longer shows as readable
            buffered = isinstance(self.remote, ssl.SSLSocket) and self.remote.pending() > 0
            ready = [self.remote] if buffered else [key.data for key, _ in selector.select()]
            for sock in ready:
                data = sock.recv(READ_SIZE)
                if sock is local:
                    if not data:  # proton let go: say goodbye to the broker
                        if self.websocket:
                            self.remote.sendall(close_frame(NORMAL, "", masked=True))
                        return
                    self.remote.sendall(binary_frames(data, masked=True) if self.websocket else data)
                elif not data or not self._from_remote(local, data):
                    return

    def _from_remote(self, local: socket.socket, data: bytes) -> bool:
        """Pass the broker's bytes to proton; False once the broker closed."""
        if not self.websocket:
            local.sendall(data)
            return True
        got = self.reader.feed(data)
        for ping in got.pings:
            self.remote.sendall(frame(PONG, ping, masked=True))
        if got.data:
            local.sendall(got.data)
        if got.close is not None:
            with contextlib.suppress(OSError):
                self.remote.sendall(close_frame(NORMAL, "", masked=True))
            return False
        return True


def _upgrade(remote: socket.socket, upgrade: ClientUpgrade) -> bytes:
    """Send the upgrade request and check the answer; what followed the 101 is returned."""
    remote.sendall(upgrade.request())
    buffer = bytearray()
    end = -1
    while end < 0:
        chunk = remote.recv(4096)
        if not chunk:
            raise UpgradeFailed("the server closed the connection during the HTTP upgrade")
        buffer += chunk
        try:
            end = head_end(buffer)
        except Refusal:
            raise UpgradeFailed("an HTTP answer with an oversized head") from None
    head = bytes(buffer[:end])
    wanted = min(content_length(head), 1024) if not head.startswith((b"HTTP/1.1 101", b"HTTP/1.0 101")) else 0
    while len(buffer) - end < wanted:  # a refusal's line
        chunk = remote.recv(4096)
        if not chunk:
            break
        buffer += chunk
    upgrade.check(head, bytes(buffer[end:]))
    return bytes(buffer[end:])


def _tls(options: Mapping[str, str]) -> ssl.SSLContext:
    ca = options.get(TRUST_STORE)
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    if not _flag(options, VERIFY_HOST, True) or _flag(options, TRUST_ALL, False):
        ctx.check_hostname = False
    if _flag(options, TRUST_ALL, False):
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise ValueError(f"option {name}={text!r}: expected true or false")
    return text.lower() == "true"
