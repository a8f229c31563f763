"""A broker with its web console on (tests/console/), and a plain HTTP client that keeps its cookies.

Users: `admin` (role amq: manage, send, consume), `vera` (role viewers: view and browse, nothing else),
`walt` (role watchers: view only), `bob` (role consumers: none of the console's permissions).
"""

from __future__ import annotations

import http.client
import re
import ssl
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode

from tests.peers.ports import LOOPBACK, free_port
from tests.support.broker import REPO, ROLES, USERS, BrokerProcess

ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
SECURITY = """
      <security-setting match="#">
        <permission type="createAddress" roles="amq"/>
        <permission type="createDurableQueue" roles="amq"/>
        <permission type="createNonDurableQueue" roles="amq"/>
        <permission type="deleteNonDurableQueue" roles="amq"/>
        <permission type="send" roles="amq"/>
        <permission type="consume" roles="amq"/>
        <permission type="manage" roles="amq"/>
        <permission type="view" roles="viewers,watchers"/>
        <permission type="browse" roles="viewers"/>
      </security-setting>"""
PASSWORDS = {"admin": "secret", "vera": "viewer-pass", "walt": "watcher-pass", "bob": "builder"}
COOKIE = "amqp_mirror_console"

# Debian's Chromium, as the machine notes start it: headless, no sandbox (root), and none of its own
# connections to the outside (refused here, many at a time, without these flags)
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# where a browser test leaves its screenshots (build/ is not versioned)
SCREENSHOTS = REPO / "build" / "test-output" / "console"


def chromium_availability() -> tuple[bool, str]:
    if not CHROMIUM.exists():
        return False, f"no {CHROMIUM} (Debian's chromium and chromium-driver: scripts/install-deps)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False, "the playwright Python package is not installed (pip install -e '.[test]')"
    return True, ""


@dataclass
class ConsoleBroker:
    broker: BrokerProcess
    console_port: int
    tls: bool = False

    @property
    def url(self) -> str:
        return self.broker.url

    def client(self) -> HttpClient:
        return HttpClient(self.console_port, self.tls)


def console_broker(
    home: Path,
    name: str = "dc1",
    *,
    console_params: str = "",
    extra: str = "",
    addresses: str = ORDERS,
    port: int | None = None,
) -> ConsoleBroker:
    """Not started: `.broker.start()`. Security on, with the users above."""
    console_port = free_port()
    params = f";{console_params}" if console_params else ""
    acceptor = f'\n      <acceptor name="console">tcp://{LOOPBACK}:{console_port}?protocols=CONSOLE{params}</acceptor>'
    broker = BrokerProcess(
        home / name,
        name=name,
        port=port or free_port(),
        xml_kwargs={
            "security": True,
            "addresses": addresses,
            "security_settings": SECURITY,
            "extra_acceptors": acceptor,
            "extra": extra,
        },
    )
    broker.write_config()
    etc = broker.config_path.parent
    extra_users = "".join(f"{user} = {PASSWORDS[user]}\n" for user in ("vera", "walt"))
    (etc / "artemis-users.properties").write_text(USERS + extra_users)
    (etc / "artemis-roles.properties").write_text(ROLES + "viewers = vera\nwatchers = walt\n")
    return ConsoleBroker(broker, console_port, tls="sslEnabled=true" in console_params)


@dataclass
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: str

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def cookies(self) -> list[str]:
        return [v for k, v in self.headers if k.lower() == "set-cookie"]

    def csrf(self) -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', self.body)
        assert found, f"no CSRF token in the page:\n{self.body[:2000]}"
        return found.group(1)


@dataclass
class HttpClient:
    """One browser's worth of HTTP: keeps the cookies it is given, sends them back."""

    port: int
    tls: bool = False
    cookies: dict[str, str] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://{LOOPBACK}:{self.port}"

    def _connection(self) -> http.client.HTTPConnection:
        if self.tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # the test's own self-signed certificate
            return http.client.HTTPSConnection(LOOPBACK, self.port, timeout=10, context=context)
        return http.client.HTTPConnection(LOOPBACK, self.port, timeout=10)

    def request(self, method: str, path: str, form: dict[str, str] | None = None, **headers: str) -> Answer:
        conn = self._connection()
        sent = {"Host": f"{LOOPBACK}:{self.port}", **{k.replace("_", "-"): v for k, v in headers.items()}}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        answer = Answer(response.status, response.getheaders(), response.read().decode())
        conn.close()
        for raw in answer.cookies():
            jar: SimpleCookie = SimpleCookie()
            jar.load(raw)
            for key, morsel in jar.items():
                if morsel["max-age"] == "0":
                    self.cookies.pop(key, None)
                else:
                    self.cookies[key] = morsel.value
        return answer

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def post(self, path: str, form: dict[str, str], origin: str | None = None) -> Answer:
        return self.request("POST", path, form, Origin=origin or self.origin)

    def login(self, user: str, password: str | None = None) -> Answer:
        page = self.get("/login")
        return self.post(
            "/login", {"csrf": page.csrf(), "user": user, "password": password or PASSWORDS[user]}
        )

    def action(self, page: str, **form: str) -> Answer:
        """Post an action with the CSRF token of `page` (as a browser would from that page's form)."""
        token = self.get(page).csrf()
        return self.post("/action", {"csrf": token, "back": page, **form})


def depth(cb: ConsoleBroker, queue: str) -> int:
    """The queue's message count, asked over AMQP management (not through the console)."""
    from connections.cli import request

    count = request(cb.url, "countMessages", [], resource=f"queue.{queue}", user="admin", password="secret")
    return int(count)
