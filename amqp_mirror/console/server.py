"""The console's server: its acceptor, routes, logins and the checks before every page and action.

- Pages are GETs; anything that changes the broker is a POST to `/action` (or `/login`, `/logout`), taken
  only with the session's cookie, its CSRF token in the form, and, when the browser says where the form
  came from (`Origin`), this console's own origin.
- A user logs in with the broker's users (the users file, as AMQP clients do). Reading needs the `view`
  (or `manage`) permission on the management address, a queue's messages `browse` on that queue (or
  `manage`), an action `manage`: Artemis's roles, from `<security-settings>`, asked at every request. With
  `<security-enabled>false</security-enabled>` no login is asked, as no AMQP client is asked one.
- Log lines: AMQ951080 the console listens, AMQ951081 a login, AMQ951082 a refused login (once per user
  and host, then at most once a minute with the count), AMQ951083 an action done, AMQ951084 an action
  refused for want of `manage`, AMQ951086 an action that failed. No password is logged or shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from broker_core.acceptor import ssl_context
from broker_core.errors import BrokerError
from broker_core.failed_logins import FailedLogins
from broker_core.security.authorization import Permission

from . import frame, views
from .actions import ACTIONS, BadAction, Call, describe
from .http import Request, Response, redirect, serve, text
from .rates import INTERVAL, Rates
from .sessions import COOKIE, Session, Sessions, cleared_cookie, cookie_header

if TYPE_CHECKING:
    from ..ops.node import Node

log = logging.getLogger("amqp_mirror.console")

STATIC = Path(__file__).parent / "static"
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
LOGIN_FAILURE_DELAY = 0.5  # seconds before a refused login is answered: guessing costs time
PAGES = {
    "/": ("Overview", views.overview),
    "/addresses": ("Addresses", views.addresses),
    "/queues": ("Queues", views.queues),
    "/connections": ("Connections", views.connections),
    "/broker-connections": ("Broker connections and mirrors", views.broker_connections),
}


class Console:
    def __init__(self, node: Node, loop: asyncio.AbstractEventLoop) -> None:
        settings = node.config.console
        assert settings is not None, "a console is made for a configured console acceptor"
        self.node = node
        self.loop = loop
        self.settings = settings
        self.timeout = settings.session_timeout / 1000
        self.sessions = Sessions(self.timeout)
        self.rates = Rates()
        self.failed_logins = FailedLogins()
        self.started = time.time()
        self.static = {
            f"/static/{p.name}": p.read_bytes() for p in STATIC.iterdir() if p.suffix in STATIC_TYPES
        }
        self._server: asyncio.AbstractServer | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.port = 0

    # ------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        acceptor = self.settings.acceptor
        tls = ssl_context(acceptor)

        async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await serve(reader, writer, self.handle)

        self._server = await asyncio.start_server(client, acceptor.host, acceptor.port, ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]
        scheme = "https" if tls is not None else "http"
        log.info(
            "AMQ951080: %s: console on %s://%s:%d/ (acceptor %s)",
            self.node.name,
            scheme,
            acceptor.host,
            self.port,
            acceptor.name,
        )
        if not self.node.config.security_enabled:
            log.warning(
                "AMQ951080: %s: security is disabled: whoever reaches the console may manage the "
                "broker without logging in",
                self.node.name,
            )
        self._sample()

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()

    def _sample(self) -> None:
        if self.node.active():
            self.rates.sample(self.node.broker.server.queues.values())
        self._timer = self.loop.call_later(INTERVAL, self._sample)

    # ------------------------------------------------------------------------------- requests

    async def handle(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except Exception:  # a bug must cost one page, not the console
            log.exception("%s: console: %s %s failed", self.node.name, request.method, request.path)
            return text(500, "the console failed to answer; see the broker's log")

    async def _route(self, request: Request) -> Response:
        path, method = request.path, request.method
        if path in self.static and method == "GET":
            kind = STATIC_TYPES[Path(path).suffix]
            return Response(200, self.static[path], kind, cache="max-age=300")
        if path == "/favicon.ico":
            return Response(204, b"", cache="max-age=86400")  # none: the browser asks all the same
        if method == "POST" and not self._same_origin(request):
            return text(403, "refused: the form does not come from this console")
        if path == "/login":
            return await self._login(request) if method == "POST" else self._login_page(request)
        session = self._session(request)
        if method == "POST" and path == "/logout":
            return self._logout(request, session)
        if session is None or not session.logged_in:
            if method == "POST":
                return text(403, "refused: not logged in (or the session expired)")
            return redirect("/login")
        if method == "POST" and path == "/action":
            return self._action(request, session)
        if method != "GET":
            return text(405, "GET for pages, POST for actions")
        return self._page(request, session)

    def _same_origin(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        return origin is None or origin == request.origin()

    def _session(self, request: Request) -> Session | None:
        session = self.sessions.get(request.cookie(COOKIE))
        if session is None and not self.node.config.security_enabled:
            session = self.sessions.new(anonymous=True)
        return session

    def _cookie(self, session: Session, request: Request) -> tuple[str, str]:
        return cookie_header(session, self.timeout, request.secure)

    # ------------------------------------------------------------------------------- pages

    def _page(self, request: Request, session: Session) -> Response:
        user = session.user
        server = self.node.broker.server
        may_manage = self._allowed(user, Permission.MANAGE)
        view = frame.View(self.node, session, self.rates, self.started, may_manage, _back(request))
        headers = [self._cookie(session, request)]
        if not (may_manage or self._allowed(user, Permission.VIEW)):
            content = frame.not_allowed(
                f"User {user} may not see the console: that needs the view (or manage) permission on the "
                f"management address {server.config.management_address}."
            )
            return Response(403, frame.layout("Not allowed", content, view), headers=headers)
        if request.path == "/queue":
            name = request.query.get("name", "")
            page = max(1, _int(request.query.get("page"), 1))
            q = server.queues.get(name)
            may_browse = may_manage or (
                q is not None and server.authorizer.allowed(user, q.address, Permission.BROWSE, q.name)
            )
            content = views.queue(view, name, page, may_browse)
            return Response(200, frame.layout(f"Queue {name}", content, view, refresh=True), headers=headers)
        found = PAGES.get(request.path)
        if found is None:
            return Response(
                404, frame.layout("Not found", frame.not_allowed("No such page."), view), headers=headers
            )
        title, render = found
        return Response(200, frame.layout(title, render(view), view, refresh=True), headers=headers)

    def _allowed(self, user: str | None, permission: Permission) -> bool:
        server = self.node.broker.server
        return server.authorizer.allowed(user, server.config.management_address, permission)

    # ------------------------------------------------------------------------------- login

    def _login_page(self, request: Request, failed: bool = False, user: str = "") -> Response:
        session = self.sessions.get(request.cookie(COOKIE))
        if session is not None and session.logged_in and not failed:
            return redirect("/")
        if session is None:
            session = self.sessions.new()
        body = frame.layout(f"Log in to {self.node.name}", frame.login(session, failed, user), None)
        return Response(401 if failed else 200, body, headers=[self._cookie(session, request)])

    async def _login(self, request: Request) -> Response:
        session = self.sessions.get(request.cookie(COOKIE))
        if session is None or not session.csrf_matches(request.form.get("csrf")):
            return text(403, "refused: the login form expired; load it again")
        user, password = request.form.get("user", ""), request.form.get("password", "")
        if not user or not self.node.broker.server.user_store.check_plain(user, password):
            self._refused_login(user, request.peer)
            await asyncio.sleep(LOGIN_FAILURE_DELAY)
            return self._login_page(request, failed=True, user=user)
        self.sessions.end(session)  # a new id: one known before the login is worth nothing after it
        fresh = self.sessions.new(user)
        log.info(
            "AMQ951081: %s: console: user %s logged in from %s",
            self.node.name,
            _printable(user),
            request.peer,
        )
        return redirect("/", [self._cookie(fresh, request)])

    def _refused_login(self, user: str, host: str) -> None:
        unsaid = self.failed_logins.due(user, host)
        if unsaid is None:
            return
        why = self.node.broker.server.user_store.why_refused(user) if user else "no user name"
        repeats = f" ({unsaid} more since the last line)" if unsaid else ""
        log.warning(
            "AMQ951082: %s: console: login refused for user %s from %s: %s%s",
            self.node.name,
            _printable(user),
            host,
            why,
            repeats,
        )

    def _logout(self, request: Request, session: Session | None) -> Response:
        if session is not None and session.csrf_matches(request.form.get("csrf")):
            self.sessions.end(session)
        return redirect("/login", [cleared_cookie(request.secure)])

    # ------------------------------------------------------------------------------- actions

    def _action(self, request: Request, session: Session) -> Response:
        form = request.form
        if not session.csrf_matches(form.get("csrf")):
            return text(
                403, "refused: the form's CSRF token does not match this session; load the page again"
            )
        user = session.user
        who = _printable(user or "anonymous")
        back = _local(form.get("back", "/"))
        if not self._allowed(user, Permission.MANAGE):
            log.warning(
                "AMQ951084: %s: console: user %s may not %s: that needs the manage permission; refused",
                self.node.name,
                who,
                _printable(describe(form)),
            )
            content = frame.not_allowed(
                f"User {user} may not do this: actions need the manage permission on the management address."
            )
            return Response(
                403, frame.layout("Not allowed", content, None), headers=[self._cookie(session, request)]
            )
        run = ACTIONS.get(form.get("do", ""))
        try:
            if run is None or not self.node.active():
                raise BadAction("no such action here" if run is None else "this server is not active")
            done = run(Call(self.node.broker, user), form)
        except (BadAction, BrokerError, KeyError, ValueError, TypeError) as exc:
            reason = str(exc.description if isinstance(exc, BrokerError) else exc)
            log.info(
                "AMQ951086: %s: console: user %s: %s failed: %s",
                self.node.name,
                who,
                _printable(describe(form)),
                _printable(reason),
            )
            session.flash.append(("error", f"{describe(form)}: {reason}"))
            return redirect(back)
        log.info("AMQ951083: %s: console: user %s: %s", self.node.name, who, _printable(done))
        session.flash.append(("done", done))
        return redirect(back)


def _back(request: Request) -> str:
    return request.path + (f"?{urlencode(request.query)}" if request.query else "")


def _local(path: str) -> str:
    """A path on this console to go back to: never another site's (`//host`, `https:`)."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _printable(value: str) -> str:
    """A name from a client, safe in one log line: control characters (a newline) as escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)
