"""The console over plain HTTP against a broker process: logins, sessions, CSRF, permissions, escaping and
the queue actions, each checked on the broker itself (over AMQP management) and in its log.

The browser's view of the same console is tests/console/test_console_browser.py.
"""

from __future__ import annotations

import html.parser
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from proton import Message

from tests.peers.ports import wait_until
from tests.support.client import connect, send
from tests.support.console import COOKIE, ORDERS, PASSWORDS, ConsoleBroker, console_broker, depth
from tests.support.ha import stays

HOSTILE_QUEUE = "evil<script>alert('q')</script>\"&"
HOSTILE_KEY = "<img src=x onerror=alert(1)>"
HOSTILE_VALUE = '"><script>alert("v")</script>'
HOSTILE_BODY = "</pre><script>alert('b')</script>"


@pytest.fixture(scope="module")
def cb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleBroker]:
    addresses = ORDERS + '<address name="other"><anycast><queue name="other"/></anycast></address>'
    console = console_broker(tmp_path_factory.mktemp("console"), addresses=addresses)
    console.broker.start()
    yield console
    console.broker.stop()


def test_a_login_gets_a_strict_http_only_cookie_and_a_session_id_never_seen_before(cb: ConsoleBroker) -> None:
    client = cb.client()
    assert client.get("/").status == 303  # not logged in: to the login page
    page = client.get("/login")
    assert page.status == 200
    [cookie] = page.cookies()
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age=" in cookie
    assert "Secure" not in cookie  # plain HTTP: a Secure cookie would never come back
    before = client.cookies[COOKIE]
    answer = client.post("/login", {"csrf": page.csrf(), "user": "admin", "password": "secret"})
    assert answer.status == 303 and answer.header("Location") == "/"
    after = client.cookies[COOKIE]
    assert after != before, "the login kept the session id it was given before (session fixation)"
    assert client.get("/").status == 200
    stale = cb.client()
    stale.cookies[COOKIE] = before
    assert stale.get("/").status == 303, "the id from before the login still opens a session"
    assert "AMQ951081: dc1: console: user admin logged in from 127.0.0.1" in cb.broker.log()
    for header in ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options"):
        assert client.get("/").header(header)


def test_a_refused_login_is_logged_once_and_never_with_the_password(cb: ConsoleBroker) -> None:
    client = cb.client()
    for _ in range(3):
        answer = client.login("admin", "not-the-password-4711")
        assert answer.status == 401 and "Wrong user name or password" in answer.body
    assert client.get("/").status == 303
    log = cb.broker.log()
    assert (
        log.count("AMQ951082: dc1: console: login refused for user admin from 127.0.0.1: wrong password") == 1
    )
    assert "not-the-password-4711" not in log
    assert "secret" not in log and PASSWORDS["vera"] not in log


def test_an_action_is_refused_without_the_session_token_or_from_another_site(cb: ConsoleBroker) -> None:
    send(cb.url, "orders", ["keep me"], user="admin", password="secret")
    before = depth(cb, "orders")
    client = cb.client()
    client.login("admin")
    token = client.get("/queue?name=orders").csrf()
    purge = {"do": "purge", "queue": "orders", "back": "/queues"}
    assert client.post("/action", {**purge, "csrf": "forged"}).status == 403
    assert client.post("/action", purge).status == 403  # no token at all
    assert client.post("/action", {**purge, "csrf": token}, origin="http://evil.example").status == 403
    other = cb.client()
    other.login("admin")  # another session's token is no good either
    assert client.post("/action", {**purge, "csrf": other.get("/").csrf()}).status == 403
    anonymous = cb.client()
    assert anonymous.post("/action", {**purge, "csrf": token}).status == 403  # no session cookie
    stays(lambda: depth(cb, "orders") != before, 1.0, "a refused purge to remove messages")
    assert "messages removed" not in cb.broker.log()


def test_a_viewer_sees_the_queues_and_messages_but_every_action_is_refused(cb: ConsoleBroker) -> None:
    send(cb.url, "orders", ["seen by vera"], user="admin", password="secret")
    before = depth(cb, "orders")
    vera = cb.client()
    vera.login("vera")
    queues = vera.get("/queues")
    assert queues.status == 200 and ">orders</a>" in queues.body
    page = vera.get("/queue?name=orders")
    assert "seen by vera" in page.body  # browse: she has the browse permission
    assert "Purge" not in page.body and 'name="do"' not in page.body  # no action is offered
    answer = vera.post("/action", {"csrf": page.csrf(), "do": "purge", "queue": "orders", "back": "/"})
    assert answer.status == 403
    stays(lambda: depth(cb, "orders") != before, 1.0, "vera's purge to remove messages")
    assert "AMQ951084: dc1: console: user vera may not purge (queue 'orders')" in cb.broker.log()


def test_a_user_with_view_but_not_browse_sees_the_queue_but_not_its_messages(cb: ConsoleBroker) -> None:
    send(cb.url, "orders", ["not for walt"], user="admin", password="secret")
    walt = cb.client()
    walt.login("walt")
    page = walt.get("/queue?name=orders")
    assert page.status == 200 and "<dt>messages</dt>" in page.body
    assert "You may not browse queue orders" in page.body
    assert "not for walt" not in page.body


def test_a_user_without_view_sees_no_page(cb: ConsoleBroker) -> None:
    bob = cb.client()
    assert bob.login("bob").status == 303  # his password is right: he is logged in
    for path in ("/", "/queues", "/queue?name=orders", "/connections", "/broker-connections"):
        answer = bob.get(path)
        assert answer.status == 403, path
        assert "view (or manage) permission" in answer.body
        assert ">orders<" not in answer.body


class _Elements(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parsed(body: str) -> _Elements:
    parser = _Elements()
    parser.feed(body)
    return parser


def test_hostile_queue_names_properties_and_bodies_are_shown_as_text(cb: ConsoleBroker) -> None:
    from connections.cli import request

    request(cb.url, "createQueue", [f'{{"name": {_json(HOSTILE_QUEUE)}, "routing-type": "ANYCAST"}}'],
            user="admin", password="secret")  # fmt: skip
    send(cb.url, HOSTILE_QUEUE, [HOSTILE_BODY], user="admin", password="secret",
         properties={HOSTILE_KEY: HOSTILE_VALUE})  # fmt: skip
    wait_until(lambda: depth(cb, HOSTILE_QUEUE) == 1, 10, "the hostile message to be stored")
    client = cb.client()
    client.login("admin")
    link = f"/queue?{urlencode({'name': HOSTILE_QUEUE})}"
    for path in ("/queues", "/addresses", link):
        answer = client.get(path)
        assert answer.status == 200, path
        page = _parsed(answer.body)
        scripts = [attrs for tag, attrs in page.tags if tag == "script"]
        assert scripts == [{"src": "/static/console.js", "defer": None}], f"{path}: a script from the data"
        assert not [t for t, _ in page.tags if t in ("img", "iframe", "object")], path
        assert not [(t, a) for t, attrs in page.tags for a in attrs if a.startswith("on")], path
        assert HOSTILE_QUEUE in "".join(page.text), f"{path}: the queue's name is not shown as it is"
        if path != link:  # the link to the queue's page names it, URL-encoded: it opens that queue
            assert link in [attrs.get("href") for tag, attrs in page.tags if tag == "a"], path
    text = "".join(page.text)
    assert HOSTILE_VALUE in text and HOSTILE_KEY in text and HOSTILE_BODY in text


def _json(text: str) -> str:
    import json

    return json.dumps(text)


def test_delete_one_message_then_move_some_then_retry_the_dead_letters(cb: ConsoleBroker) -> None:
    queue = "work"
    from connections.cli import request

    request(cb.url, "createQueue", [f'{{"name": "{queue}", "routing-type": "ANYCAST"}}'],
            user="admin", password="secret")  # fmt: skip
    send(cb.url, queue, [f"m{i}" for i in range(5)], user="admin", password="secret")
    client = cb.client()
    client.login("admin")
    page = client.get(f"/queue?name={queue}")
    ids = [int(a["value"] or 0) for t, a in _parsed(page.body).tags if t == "input" and a.get("name") == "id"]
    assert len(ids) == 5
    back = f"/queue?name={queue}"
    assert client.action(back, do="remove-message", queue=queue, id=str(ids[1])).status == 303
    assert f"queue {queue}: message {ids[1]} removed" in client.get(back).body  # the flash, once
    assert depth(cb, queue) == 4
    bodies = [item["text"] for item in request(cb.url, "browse", [], resource=f"queue.{queue}",
                                              user="admin", password="secret")]  # fmt: skip
    assert bodies == ["m0", "m2", "m3", "m4"], "the wrong message was deleted"
    assert client.action(back, do="move", queue=queue, to="other", count="2").status == 303
    assert depth(cb, queue) == 2 and depth(cb, "other") == 2
    log = cb.broker.log()
    assert f"AMQ951083: dc1: console: user admin: queue {queue}: message {ids[1]} removed" in log
    assert f"AMQ951061: queue {queue}: 1 messages removed by management (user admin)" in log
    assert f"AMQ951062: queue {queue}: 2 messages moved to queue other by management (user admin)" in log

    # a consumer rejects one: the broker dead-letters it with Artemis's breadcrumbs
    dead_before = depth(cb, "DLA")
    with connect(cb.url, "admin", "secret") as conn:
        receiver = conn.create_receiver(queue, credit=1)
        message: Message = receiver.receive(timeout=10)
        receiver.reject()
    wait_until(lambda: depth(cb, "DLA") == dead_before + 1, 10, "the rejected message on the DLA")
    dla = client.get("/queue?name=DLA").body
    assert f"messageAnnotations.x-opt-ORIG-QUEUE</b> = {queue}" in dla
    assert client.action("/queue?name=DLA", do="retry", queue="DLA").status == 303
    wait_until(lambda: depth(cb, queue) == 2, 10, "the dead letter back on its queue")
    assert depth(cb, "DLA") == dead_before
    bodies = [item["text"] for item in request(cb.url, "browse", [], resource=f"queue.{queue}",
                                              user="admin", password="secret")]  # fmt: skip
    assert message.body in bodies
    assert "AMQ951085: queue DLA: 1 messages retried to their original queues by management (user admin)" in (
        cb.broker.log()
    )


def test_logging_out_ends_the_session(cb: ConsoleBroker) -> None:
    client = cb.client()
    client.login("admin")
    cookie = client.cookies[COOKIE]
    answer = client.post("/logout", {"csrf": client.get("/").csrf()})
    assert answer.status == 303 and answer.header("Location") == "/login"
    assert COOKIE not in client.cookies
    client.cookies[COOKIE] = cookie
    assert client.get("/").status == 303, "the session outlived its logout"


def test_pages_need_no_login_when_the_broker_has_no_security(tmp_path: Path) -> None:
    console = console_broker(tmp_path)
    config = console.broker.config_path
    config.write_text(config.read_text().replace("<security-enabled>true", "<security-enabled>false"))
    console.broker.start()
    client = console.client()
    assert client.get("/queues").status == 200
    assert "security is disabled" in console.broker.log()
    console.broker.stop()


def test_the_connections_page_shows_each_client_its_user_and_its_links(cb: ConsoleBroker) -> None:
    client = cb.client()
    client.login("vera")
    with connect(cb.url, "admin", "secret") as conn:
        conn.create_receiver("orders", credit=7)
        conn.create_sender("other")
        page = client.get("/connections").body
        row = next(r for r in page.split("<tr>") if "consumer of" in r)
        assert "<td>admin</td>" in row and "<td>amqp</td>" in row
        assert "consumer of <b>orders</b> (credit " in row and "producer to <b>other</b> (credit 1000)" in row
    wait_until(lambda: "consumer of" not in client.get("/connections").body, 10, "the closed one to go")
