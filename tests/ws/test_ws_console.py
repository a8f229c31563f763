"""The web console's HTTP and the AMQP acceptor's HTTP upgrades side by side in one broker process.

They cannot share a port (`protocols=CONSOLE` is alone on its acceptor: tests/console/test_console_config.py),
so what is checked is that neither takes the other's requests: a WebSocket upgrade sent to the console
is answered by the console as a page request (never 101), the console's page request sent to the AMQP
acceptor is told it reached an AMQP acceptor (426, no page), and meanwhile AMQP over WebSocket and the
console both serve."""

from __future__ import annotations

from pathlib import Path

from proton import Message

from connections.failover import FailoverConnection
from tests.peers.ports import LOOPBACK
from tests.support.console import PASSWORDS, console_broker
from tests.support.websocket import request, websocket_request


def test_the_console_and_the_websocket_acceptor_each_keep_their_own_requests(tmp_path: Path) -> None:
    console = console_broker(tmp_path)
    broker = console.broker.start()
    try:
        upgrade = request(LOOPBACK, console.console_port, websocket_request(LOOPBACK, console.console_port))
        assert upgrade.status != 101 and "upgrade" not in upgrade.headers
        assert upgrade.status in (200, 302, 303)  # the console's login page, or its way there
        upgrade.close()

        page = request(LOOPBACK, broker.port, b"GET /login HTTP/1.1\r\nHost: h\r\n\r\n")
        assert (page.status, page.headers["upgrade"]) == (426, "websocket")
        assert "this is an AMQP acceptor" in page.body.decode() and "<form" not in page.body.decode()
        page.close()

        ws = f"ws://{LOOPBACK}:{broker.port}"
        with FailoverConnection(ws, user="admin", password=PASSWORDS["admin"]) as conn:
            conn.sender("orders").send(Message(body="over ws beside the console"))
        assert console.client().get("/login").status == 200
        log = broker.log()
        assert f"AMQ951120: acceptor amqp: HTTP request from {LOOPBACK}:" in log  # the page request, said
        assert "AMQ951120: acceptor console" not in log  # the console is no AMQP acceptor
    finally:
        broker.stop()
