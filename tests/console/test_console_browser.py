"""The console in a real browser: Debian's headless Chromium, driven by Playwright, against two brokers.

DC1 runs the console and mirrors to DC2. An operator logs in, watches a queue fill while a client sends
(the page refreshes itself), browses a message whose property is hostile, purges the queue, stops the
mirror's broker connection (its backlog grows while a client sends) and starts it again (the backlog
drains to DC2); a viewer sees the same queue and is refused when she forces an action. Screenshots go to
build/test-output/console/.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.conftest import require
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import connect, send
from tests.support.console import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    ORDERS,
    SCREENSHOTS,
    ConsoleBroker,
    chromium_availability,
    console_broker,
    depth,
)
from tests.support.ha import stays
from tests.support.ops import mirror_xml

HOSTILE = "<script>alert('colour')</script>"
SENT_WHILE_WATCHED = 40


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ConsoleBroker, BrokerProcess]]:
    home = tmp_path_factory.mktemp("browser")
    dc2 = BrokerProcess(home / "dc2", name="dc2", xml_kwargs={"addresses": ORDERS})
    dc2.start()
    dc1 = console_broker(home, "dc1", extra=mirror_xml("DC2", dc2.port))
    dc1.broker.start()
    wait_until(lambda: "AMQ111003" in dc1.broker.log(), 20, "DC1's mirror to connect to DC2")
    yield dc1, dc2
    dc1.broker.stop()
    dc2.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require("Chromium", *chromium_availability())
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


class Operator:
    """One person at one browser: a fresh profile (context), one tab, every dialog recorded."""

    def __init__(self, browser: Any, console: ConsoleBroker) -> None:
        self.base = f"http://127.0.0.1:{console.console_port}"
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.dialogs: list[tuple[str, str]] = []

        def on_dialog(dialog: Any) -> None:
            self.dialogs.append((dialog.type, dialog.message))
            dialog.accept()  # a confirm() before a destructive action: yes

        self.page.on("dialog", on_dialog)

    def log_in(self, user: str, password: str) -> None:
        self.page.goto(self.base + "/")
        assert self.page.url.endswith("/login")
        self.page.fill("input[name=user]", user)
        self.page.fill("input[name=password]", password)
        self.page.click("button:text-is('Log in')")
        self.page.wait_for_url(self.base + "/")

    def go(self, path: str) -> None:
        self.page.goto(self.base + path)

    def fact(self, name: str) -> str:
        """The value of a fact of the page's first list (`messages` -> `40`)."""
        return str(self.page.locator(f"dl dt:text-is('{name}') + dd").first.inner_text())

    def row(self, first_cell: str, table: int = 0) -> Any:
        """The row whose first cell is `first_cell` in the page's `table`-th table."""
        return (
            self.page.locator("table").nth(table).locator(f"tr:has(td:first-child:text-is('{first_cell}'))")
        )

    def alerts(self) -> list[str]:
        return [message for kind, message in self.dialogs if kind == "alert"]

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path

    def close(self) -> None:
        self.context.close()


def _send_slowly(url: str, count: int, pause: float) -> threading.Thread:
    """A client sending `count` durable messages, one every `pause` seconds (a steady producer)."""

    def run() -> None:
        from proton import Message

        with connect(url, "admin", "secret") as conn:
            sender = conn.create_sender("orders")
            for i in range(count):
                sender.send(Message(body=f"order {i}", durable=True, properties={"colour": HOSTILE, "n": i}))
                time.sleep(pause)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_an_operator_watches_browses_purges_and_stops_and_starts_a_mirror(
    pair: tuple[ConsoleBroker, BrokerProcess], browser: Any
) -> None:
    dc1, dc2 = pair
    admin = Operator(browser, dc1)
    admin.log_in("admin", "secret")
    assert "Overview" in admin.page.title()
    admin.screenshot("overview")

    # the queue fills as a client sends: the page refreshes itself and shows the count growing
    admin.go("/queue?name=orders")
    assert admin.fact("messages") == "0"
    sender = _send_slowly(dc1.url, SENT_WHILE_WATCHED, 0.25)
    seen: set[int] = set()

    def filled() -> bool:
        try:
            seen.add(int(admin.fact("messages")))
        except Exception:  # the page is reloading this instant
            return False
        return SENT_WHILE_WATCHED in seen

    wait_until(filled, 60, f"the queue page to show {SENT_WHILE_WATCHED} messages by itself")
    sender.join(10)
    assert len(seen - {0, SENT_WHILE_WATCHED}) >= 1, f"never seen filling, only {sorted(seen)}"
    admin.go("/queue?name=orders")  # reloads by itself every few seconds: a fresh page for what follows

    # browse: the oldest message with its properties and body, the hostile one as text, nothing run
    first = admin.page.locator("tbody tr").first
    assert "order 0" in first.inner_text()
    assert f"applicationProperties.colour = {HOSTILE}" in first.inner_text()
    admin.screenshot("queue")
    assert depth(dc1, "orders") == SENT_WHILE_WATCHED, "browsing took messages"
    assert admin.alerts() == [], "a message's property ran as a script"

    # purge: asked to confirm, done, said, and the queue is empty on the broker
    admin.page.click("button:text-is('Purge')")
    admin.page.wait_for_selector(f"text=queue orders: {SENT_WHILE_WATCHED} messages removed")
    assert ("confirm", "Remove every waiting message of orders?") in admin.dialogs
    assert depth(dc1, "orders") == 0
    assert admin.fact("messages") == "0"

    # stop the mirror's broker connection: what a client sends now waits in its backlog
    admin.go("/broker-connections")
    assert "connected" in admin.row("DC2").inner_text()
    admin.row("DC2").locator("button:text-is('Stop')").click()
    admin.page.wait_for_selector("text=broker connection DC2 stopped")
    assert "stopped" in admin.row("DC2").inner_text()
    dc2_before = depth_of(dc2, "orders")
    send(dc1.url, "orders", [f"while stopped {i}" for i in range(5)], user="admin", password="secret")

    def backlog() -> int:
        admin.go("/broker-connections")
        cells = admin.row("DC2", table=1).locator("td").all_inner_texts()  # the mirrors' table
        return int(cells[2])

    wait_until(lambda: backlog() >= 5, 20, "the mirror's backlog to show the messages sent while stopped")
    stays(lambda: depth_of(dc2, "orders") != dc2_before, 1.0, "messages to reach DC2 while stopped")
    admin.screenshot("broker-connections-stopped")

    # start it again: it connects, the backlog drains, DC2 has the messages
    admin.row("DC2").locator("button:text-is('Start')").click()
    admin.page.wait_for_selector("text=broker connection DC2 started")
    wait_until(lambda: backlog() == 0, 30, "the mirror's backlog to drain")
    wait_until(lambda: depth_of(dc2, "orders") == dc2_before + 5, 20, "DC2 to hold the five messages")
    assert "connected" in admin.row("DC2").inner_text()
    admin.screenshot("broker-connections")
    log = dc1.broker.log()
    for done in (
        "queue orders: 40 messages removed",
        "broker connection DC2 stopped",
        "broker connection DC2 started",
    ):
        assert f"AMQ951083: dc1: console: user admin: {done}" in log
    admin.close()


def test_a_viewer_sees_the_queue_and_is_refused_an_action_she_forces(
    pair: tuple[ConsoleBroker, BrokerProcess], browser: Any
) -> None:
    dc1, _ = pair
    send(dc1.url, "orders", ["for vera"], user="admin", password="secret")
    before = depth(dc1, "orders")
    vera = Operator(browser, dc1)
    vera.log_in("vera", "viewer-pass")
    vera.go("/queue?name=orders")
    assert "for vera" in vera.page.inner_text("main")
    assert vera.page.locator("button:text-is('Purge')").count() == 0
    assert vera.page.locator("button:text-is('Delete')").count() == 0
    vera.go("/broker-connections")
    assert vera.page.locator("button:text-is('Stop')").count() == 0
    vera.screenshot("viewer")
    # she forges the purge form with her own session's token: the server refuses it
    token = vera.page.locator("input[name=csrf]").first.get_attribute("value")
    answer = vera.context.request.post(
        vera.base + "/action",
        form={"csrf": token, "do": "purge", "queue": "orders", "back": "/"},
        headers={"Origin": vera.base},
    )
    assert answer.status == 403
    answer = vera.context.request.post(
        vera.base + "/action",
        form={"csrf": token, "do": "stop-connection", "name": "DC2", "back": "/"},
        headers={"Origin": vera.base},
    )
    assert answer.status == 403
    stays(
        lambda: depth(dc1, "orders") != before or not started(dc1, "DC2"), 1.0, "the viewer's actions to act"
    )
    log = dc1.broker.log()
    assert "AMQ951084: dc1: console: user vera may not purge (queue 'orders')" in log
    assert "AMQ951084: dc1: console: user vera may not stop-connection (name 'DC2')" in log
    vera.close()


def started(console: ConsoleBroker, name: str) -> bool:
    import json

    from connections.cli import request

    listed = json.loads(request(console.url, "listBrokerConnections", [], user="admin", password="secret"))
    return bool(next(c for c in listed if c["name"] == name)["started"])


def depth_of(broker: BrokerProcess, queue: str) -> int:
    from connections.cli import request

    return int(request(broker.url, "countMessages", [], resource=f"queue.{queue}"))


def test_a_mirror_s_store_and_forward_queue_is_shown_and_left_alone(
    pair: tuple[ConsoleBroker, BrokerProcess],
) -> None:
    dc1, _ = pair
    snf = "$ACTIVEMQ_ARTEMIS_MIRROR_DC2"
    client = dc1.client()
    client.login("admin")
    assert snf in client.get("/queues").body  # listed, with its depth, among the queues
    page = client.get(f"/queue?{urlencode({'name': snf})}")
    assert page.status == 200 and "internal to the broker" in page.body and "Purge" not in page.body
    back = f"/queue?{urlencode({'name': snf})}"
    assert client.action(back, do="purge", queue=snf).status == 303
    assert "the console leaves it alone" in client.get(back).body
    log = dc1.broker.log()
    assert f"AMQ951086: dc1: console: user admin: purge (queue '{snf}') failed" in log
    assert f"AMQ951061: queue {snf}" not in log
