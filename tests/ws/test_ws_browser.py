"""AMQP from a web page: Debian's headless Chromium (driven by Playwright) loads rhea's browser build
(tests/ws/page/rhea.html) and sends and receives through our broker's acceptor over WebSocket.

A browser cannot add headers to its WebSocket request, so a page names a server in the URL's query
(`?activemqServerName=`); a name no server here has is refused (the page sees its connection fail, the
broker says why). A screenshot of the page goes to build/test-output/console/.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import require
from tests.peers.ports import LOOPBACK, wait_until
from tests.peers.rhea import NODE_DIR
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.console import CHROMIUM, CHROMIUM_FLAGS, SCREENSHOTS, chromium_availability

PAGE = NODE_DIR.parent / "ws" / "page" / "rhea.html"
BUNDLE = NODE_DIR / "node_modules" / "rhea" / "dist" / "rhea.js"
QUEUE = '<address name="browser"><anycast><queue name="browser"/></anycast></address>'


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require("Chromium", *chromium_availability())
    require("rhea's browser build", BUNDLE.is_file(), f"no {BUNDLE} (npm ci in {NODE_DIR})")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("browser-ws"), name="main", xml_kwargs={"addresses": QUEUE})
    b.start()
    yield b
    assert b.stop() == 0


def run_page(browser: Any, query: str, screenshot: str | None = None) -> dict[str, Any]:
    page = browser.new_page()
    try:
        page.goto(f"{PAGE.as_uri()}?{query}")
        page.wait_for_function("window.outcome && window.outcome.done", timeout=30_000)
        outcome: dict[str, Any] = page.evaluate("window.outcome")
        if screenshot:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"{screenshot}.png"))
        return outcome
    finally:
        page.close()


def test_a_page_sends_and_receives_through_the_acceptor(browser: Any, broker: BrokerProcess) -> None:
    url = f"ws://{LOOPBACK}:{broker.port}/"
    outcome = run_page(browser, f"url={url}&count=25&address=browser", screenshot="websocket-rhea")
    assert outcome["error"] is None
    assert (outcome["sent"], outcome["accepted"]) == (25, 25)
    assert outcome["received"] == [f"from the browser {i}" for i in range(25)]
    assert receive(broker.url, "browser", 1, timeout=0.5) == []  # each was taken once, by the page


def test_a_page_names_the_server_in_the_query(browser: Any, broker: BrokerProcess) -> None:
    named = run_page(browser, f"url=ws://{LOOPBACK}:{broker.port}/?activemqServerName%3Dmain&count=3")
    assert (named["error"], named["accepted"], len(named["received"])) == (None, 3, 3)
    refused = run_page(browser, f"url=ws://{LOOPBACK}:{broker.port}/?activemqServerName%3Dnobody&count=3")
    assert refused["error"] is not None and refused["accepted"] == 0
    wait_until(
        lambda: "no server named nobody in this process (server: main)" in broker.log(),
        10,
        "the broker to say why it refused the page",
    )
