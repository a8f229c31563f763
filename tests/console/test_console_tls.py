"""The console over its acceptor's TLS (PEM), and a login that lasts only `consoleSessionTimeout`."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator

import pytest

from tests.conftest import require
from tests.peers.ports import LOOPBACK, wait_until
from tests.support.certs import make_certs
from tests.support.console import ConsoleBroker, console_broker

TIMEOUT_MS = 2000


@pytest.fixture(scope="module")
def cb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleBroker]:
    home = tmp_path_factory.mktemp("console-tls")
    (home / "certs").mkdir()
    certs = make_certs(home / "certs")
    require("a certificate generator", certs is not None, "neither the cryptography package nor openssl")
    assert certs is not None
    params = (
        f"sslEnabled=true;sslCertPath={certs.cert};sslKeyPath={certs.key};consoleSessionTimeout={TIMEOUT_MS}"
    )
    console = console_broker(home, console_params=params)
    console.broker.start()
    yield console
    console.broker.stop()


def test_the_console_answers_over_tls_only_and_its_cookie_is_secure(cb: ConsoleBroker) -> None:
    assert "AMQ951080: dc1: console on https://127.0.0.1:" in cb.broker.log()
    client = cb.client()
    page = client.get("/login")
    assert page.status == 200
    [cookie] = page.cookies()
    assert "; Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert client.login("admin").status == 303
    assert client.get("/queues").status == 200
    plain = http.client.HTTPConnection(LOOPBACK, cb.console_port, timeout=5)
    try:
        plain.request("GET", "/login")
        status: int | None = plain.getresponse().status
    except (http.client.HTTPException, OSError):  # the TLS handshake fails: the connection is dropped
        status = None
    assert status is None, "the TLS console answered plain HTTP"


def test_a_session_ends_after_its_timeout_without_a_request(cb: ConsoleBroker) -> None:
    client = cb.client()
    client.login("admin")
    answer = client.get("/")
    assert answer.status == 200
    [cookie] = answer.cookies()
    assert f"Max-Age={TIMEOUT_MS // 1000}" in cookie  # the browser forgets it with the session too
    # idle for longer than the timeout (any request would restart its clock: nothing to poll on)
    idle_until = time.monotonic() + TIMEOUT_MS / 1000 + 0.5
    wait_until(lambda: time.monotonic() >= idle_until, 10, "the session's idle time to pass")
    assert client.get("/").status == 303, "the session outlived its timeout"
    assert client.get("/login").status == 200  # a new one begins at the login page
