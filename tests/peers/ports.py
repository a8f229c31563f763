"""Free loopback ports and deadline-bounded waiting, shared by the peer launchers and tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

LOOPBACK = "127.0.0.1"

# The AMQP 1.0 protocol header (plain AMQP, id 0) and the SASL variant (id 3). A broker that is ready
# answers our header with one of these; anything else, or silence, means "not yet".
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


class WaitTimeout(TimeoutError):
    """A condition did not become true before its deadline."""


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until it returns true; raise ``WaitTimeout`` naming ``what`` after ``timeout`` s.

    Backs off from 10 ms to 200 ms so quick conditions are seen quickly and slow ones cost little CPU.
    """
    deadline = time.monotonic() + timeout
    delay = 0.01
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.2)


def answers_amqp(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if something on ``host:port`` replies to an AMQP 1.0 header with an AMQP header."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(AMQP_HEADER)
            reply = _read_exactly(sock, len(AMQP_HEADER))
    except OSError:
        return False
    return reply in (AMQP_HEADER, SASL_HEADER)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data
